//! Which MPI library PCM was built for, and the check that the one loaded at run time is
//! that one.
//!
//! rsmpi's build script drops the rpath that `mpicc -show` prints, so a binary can load
//! another MPI's `libmpi` than the one whose headers it was compiled with (measured: an
//! Open MPI 5 build silently ran on Debian's Open MPI 4 library). Handles, constants and
//! struct layouts then disagree, and the job misbehaves in ways that name no cause. So
//! [`check_mpi_library`] compares the library's own `MPI_Get_library_version` with what the
//! build script found in `mpi.h`, before MPI is initialised.

use crate::error::PcmError;
use crate::ffi;

/// An MPI implementation, as far as PCM needs to tell them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpiFamily {
    /// Open MPI (`OMPI_*_VERSION` in `mpi.h`; "Open MPI v..." at run time).
    OpenMpi,
    /// MPICH (`MPICH_VERSION` in `mpi.h`; "MPICH Version: ..." at run time).
    Mpich,
    /// Anything else: PCM cannot check it and treats it like Open MPI.
    Unknown,
}

impl MpiFamily {
    /// The family pcm was compiled against (found by `pcm/build.rs`).
    pub const BUILT_FOR: MpiFamily = match env!("PCM_MPI_FAMILY").as_bytes() {
        b"openmpi" => MpiFamily::OpenMpi,
        b"mpich" => MpiFamily::Mpich,
        _ => MpiFamily::Unknown,
    };

    pub(crate) fn name(self) -> &'static str {
        match self {
            MpiFamily::OpenMpi => "Open MPI",
            MpiFamily::Mpich => "MPICH",
            MpiFamily::Unknown => "an unknown MPI",
        }
    }
}

/// Whether a departed process leaves at once (MPICH) instead of waiting for the rest of its
/// launch (Open MPI 4; see the `launch` module). Decided by the library built against.
///
/// MPICH lets it go when the departing rank disconnects (rather than frees) the three
/// communicators it shares with the others (spawn intercommunicator, merged, old world) and
/// MPI_Finalize is not collective (`MPIR_CVAR_NO_COLLECTIVE_FINALIZE=1`, which
/// [`crate::Pcm::init`] sets unless the environment says otherwise). Measured: the process
/// is gone 0.05-0.18 s after the move, and killing everything on its host leaves the job
/// unharmed. Open MPI 4 hangs in those disconnects (a PMIx fence over the launch).
pub(crate) const PROMPT_DEPARTURE: bool = matches!(MpiFamily::BUILT_FOR, MpiFamily::Mpich);

/// MPICH's setting that makes `MPI_Finalize` local, so that a departed process can finalize
/// before the rest of its launch (without it, it blocks on hydra's PMI socket until the
/// job ends).
pub(crate) const MPICH_LOCAL_FINALIZE: &str = "MPIR_CVAR_NO_COLLECTIVE_FINALIZE";

/// An MPI library: family and version (`4.1.4`, `5.0.2`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpiLibrary {
    /// The implementation.
    pub family: MpiFamily,
    /// Its version as the implementation writes it, empty if unknown.
    pub version: String,
}

impl MpiLibrary {
    /// The library pcm was compiled against.
    pub fn built_for() -> MpiLibrary {
        MpiLibrary {
            family: MpiFamily::BUILT_FOR,
            version: env!("PCM_MPI_VERSION").to_owned(),
        }
    }

    /// Reads the text of `MPI_Get_library_version`: "Open MPI v4.1.4, package: ..." or
    /// "MPICH Version:      5.0.2\n...".
    pub fn from_version_text(text: &str) -> MpiLibrary {
        let first = text.lines().next().unwrap_or("").trim();
        if let Some(rest) = first.strip_prefix("Open MPI v") {
            let version = rest.split([',', ' ']).next().unwrap_or("");
            return MpiLibrary {
                family: MpiFamily::OpenMpi,
                version: version.to_owned(),
            };
        }
        if let Some(rest) = first.strip_prefix("MPICH Version:") {
            return MpiLibrary {
                family: MpiFamily::Mpich,
                version: rest.trim().to_owned(),
            };
        }
        MpiLibrary {
            family: MpiFamily::Unknown,
            version: String::new(),
        }
    }

    /// Whether a program built for `self` may run on `loaded`. An unknown build cannot be
    /// checked and is let through.
    fn accepts(&self, loaded: &MpiLibrary) -> bool {
        self.family == MpiFamily::Unknown || self == loaded
    }
}

impl std::fmt::Display for MpiLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.version.is_empty() {
            write!(f, "{}", self.family.name())
        } else {
            write!(f, "{} {}", self.family.name(), self.version)
        }
    }
}

/// The first line of the loaded library's `MPI_Get_library_version` (allowed before
/// `MPI_Init`), e.g. "Open MPI v4.1.4, package: Debian OpenMPI, ...".
pub fn mpi_library_version() -> String {
    ffi::library_version()
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_owned()
}

/// Fails if the MPI library loaded is not the one pcm was compiled against; returns the
/// first line of its version text. [`crate::Pcm::init`] calls it; a program that uses
/// MPI without PCM (`heat2d-plain`) calls it before `MPI_Init`.
pub fn check_mpi_library() -> Result<String, PcmError> {
    let text = ffi::library_version();
    let built_for = MpiLibrary::built_for();
    let loaded = MpiLibrary::from_version_text(&text);
    let first = text.lines().next().unwrap_or("").trim().to_owned();
    if built_for.accepts(&loaded) {
        Ok(first)
    } else {
        Err(PcmError::WrongMpiLibrary {
            built_for: built_for.to_string(),
            loaded: first,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OMPI: &str =
        "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022";
    const MPICH: &str = "MPICH Version:      5.0.2\nMPICH Release date: Fri Sep 25 2026\n";

    fn library(family: MpiFamily, version: &str) -> MpiLibrary {
        MpiLibrary {
            family,
            version: version.into(),
        }
    }

    #[test]
    fn version_texts_of_both_runtimes() {
        assert_eq!(
            MpiLibrary::from_version_text(OMPI),
            library(MpiFamily::OpenMpi, "4.1.4")
        );
        assert_eq!(
            MpiLibrary::from_version_text(MPICH),
            library(MpiFamily::Mpich, "5.0.2")
        );
        assert_eq!(
            MpiLibrary::from_version_text("Intel(R) MPI Library 2021").family,
            MpiFamily::Unknown
        );
    }

    #[test]
    fn another_family_or_version_is_refused() {
        let mpich = library(MpiFamily::Mpich, "5.0.2");
        assert!(mpich.accepts(&MpiLibrary::from_version_text(MPICH)));
        assert!(!mpich.accepts(&MpiLibrary::from_version_text(OMPI)));
        assert!(!mpich.accepts(&library(MpiFamily::Mpich, "4.0.2")));
        let ompi5 = library(MpiFamily::OpenMpi, "5.0.11");
        assert!(!ompi5.accepts(&MpiLibrary::from_version_text(OMPI)));
        assert!(library(MpiFamily::Unknown, "").accepts(&library(MpiFamily::Mpich, "5.0.2")));
        assert_eq!(mpich.to_string(), "MPICH 5.0.2");
    }

    #[test]
    fn the_library_loaded_by_this_test_is_the_one_built_for() {
        // Runs without MPI_Init: MPI_Get_library_version is allowed before it.
        let built_for = MpiLibrary::built_for();
        assert_ne!(
            built_for.family,
            MpiFamily::Unknown,
            "build.rs found no mpi.h"
        );
        assert_eq!(
            check_mpi_library().map(|_| ()).map_err(|e| e.to_string()),
            Ok(())
        );
    }
}
