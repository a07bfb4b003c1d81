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

/// MPICH's setting that decides whether its device layer (ch4, with the shared-memory
/// "release_gather" collectives) may replace MPICH's generic (MPIR) collective algorithms.
pub(crate) const MPICH_DEVICE_COLLECTIVES: &str = "MPIR_CVAR_DEVICE_COLLECTIVES";

/// The environment setting `MPI_Init` must find for a job's reductions to round the same
/// before and after a reconfiguration, or `None` where the runtime needs none.
///
/// MPICH: `MPIR_CVAR_DEVICE_COLLECTIVES=none`. With its default (`percoll`), an all-reduce
/// on a communicator whose ranks all sit on one node goes to the shared-memory
/// `release_gather` algorithm (a gather up a tree, summing in the tree's order), but only
/// from that communicator's 5th collective on (`MPIR_CVAR_POSIX_NUM_COLLS_THRESHOLD`; the
/// first ones use MPIR's recursive doubling). A replacement comes from another launch, and
/// MPICH never counts it on its node (its address-table entry has no node id), so after a
/// move the same call goes to a node-aware composition instead. Each adds the ranks'
/// partial sums in another order: at 4 ranks the bits differ. With `none`, every collective
/// runs MPIR's algorithms, chosen by communicator size and message size only (8-byte
/// all-reduce: recursive doubling; long vectors: reduce-scatter + all-gather), so the sums
/// depend on the ranks' order alone, which PCM keeps. Open MPI 4's `tuned` component
/// chooses by communicator and message size too, with no setting.
pub(crate) const DETERMINISTIC_REDUCTIONS: Option<(&str, &str)> = match MpiFamily::BUILT_FOR {
    MpiFamily::Mpich => Some((MPICH_DEVICE_COLLECTIVES, "none")),
    MpiFamily::OpenMpi | MpiFamily::Unknown => None,
};

/// Open MPI 4 collective components that choose by node topology, off by default (priority
/// 0): raising one's priority gives reductions whose order changes when a move changes
/// the communicator's node layout.
const OPEN_MPI_TOPOLOGY_COLLECTIVES: [&str; 2] =
    ["OMPI_MCA_coll_han_priority", "OMPI_MCA_coll_sm_priority"];

/// What PCM can promise about the rounding of collective reductions in this process (read
/// from the environment after `MPI_Init`), for the start-up log: `Ok` a promise (logged as
/// information), `Err` a reason it cannot be kept (logged as a warning).
pub(crate) fn reductions_promise(
    family: MpiFamily,
    var: impl Fn(&str) -> Option<String>,
) -> Result<String, String> {
    match family {
        MpiFamily::Mpich => match var(MPICH_DEVICE_COLLECTIVES).as_deref() {
            Some("none") => Ok(format!(
                "reductions: MPICH device collectives off ({MPICH_DEVICE_COLLECTIVES}=none): \
                 sums are added in an order set by rank order alone, the same before and \
                 after any move, and the same as a plain run's on MPI_COMM_WORLD with the \
                 same setting; MPICH cannot promise it against a plain run with its default \
                 (shared-memory collectives, which a replacement from another launch never \
                 joins)"
            )),
            other => Err(format!(
                "reductions: {MPICH_DEVICE_COLLECTIVES}={}: MPICH's shared-memory collectives \
                 add in another order once a move has brought a replacement in, so \
                 MPI_Allreduce and MPI_Reduce results may differ in their last bits from a \
                 run without moves (set it to none for bit-identical reductions)",
                other.unwrap_or("(unset)")
            )),
        },
        MpiFamily::OpenMpi => {
            let raised: Vec<String> = OPEN_MPI_TOPOLOGY_COLLECTIVES
                .iter()
                .filter_map(|k| {
                    var(k)
                        .filter(|v| v.trim().parse::<i64>().map_or(true, |p| p > 0))
                        .map(|v| format!("{k}={v}"))
                })
                .collect();
            if raised.is_empty() {
                Ok(
                    "reductions: Open MPI's tuned collectives choose by communicator and \
                    message size only: sums are added in the same order before and after \
                    any move, and as a plain run's on MPI_COMM_WORLD"
                        .to_owned(),
                )
            } else {
                Err(format!(
                    "reductions: {}: a topology-aware collective component may add in \
                     another order once a move changes the ranks' hosts, so reductions may \
                     differ in their last bits from a run without moves",
                    raised.join(", ")
                ))
            }
        }
        MpiFamily::Unknown => Err("reductions: an MPI library PCM does not know: it cannot \
                                   promise that reductions round the same after a move"
            .to_owned()),
    }
}

/// Sets [`DETERMINISTIC_REDUCTIONS`] in the environment unless the user set the variable.
/// Call before `MPI_Init`, while the process is single-threaded.
pub(crate) fn prepare_reductions_env() {
    if let Some((key, value)) = DETERMINISTIC_REDUCTIONS {
        if std::env::var_os(key).is_none() {
            std::env::set_var(key, value);
        }
    }
}

/// Logs [`reductions_promise`] for this process's environment.
pub(crate) fn log_reductions() {
    match reductions_promise(MpiFamily::BUILT_FOR, |k| std::env::var(k).ok()) {
        Ok(promise) => tracing::info!("{promise}"),
        Err(warning) => tracing::warn!("{warning}"),
    }
}

/// A hint for a job whose replacements could start faster, or `None`. UCX (MPICH's
/// transport layer) installs memory hooks when it is loaded, before `main`: about 40 ms of
/// every process start on this project's machines, spawned replacements included, and
/// needed only by RDMA transports' registration caches. The setting must be in the
/// launcher's environment (hydra gives a replacement that environment, not the spawning
/// rank's), so PCM cannot set it itself; pcmrun and `scripts/setup.sh` do.
pub(crate) fn spawn_speed_hint(
    family: MpiFamily,
    var: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let (key, value) = pcm_proto::run::UCX_MEM_EVENTS_OFF;
    (family == MpiFamily::Mpich && var(key).is_none()).then(|| {
        format!(
            "{key} is not set: each replacement spends about 40 ms installing UCX's memory \
             hooks before it starts; with {key}={value} in the launcher's environment (pcmrun \
             and scripts/setup.sh set it) a move is that much shorter. Leave it unset on \
             InfiniBand or other RDMA networks, whose registration cache needs the hooks"
        )
    })
}

/// Logs [`spawn_speed_hint`] for this process's environment, if there is one.
pub(crate) fn log_spawn_speed_hint() {
    if let Some(hint) = spawn_speed_hint(MpiFamily::BUILT_FOR, |k| std::env::var(k).ok()) {
        tracing::info!("{hint}");
    }
}

/// MPICH's setting that makes a process waiting inside MPI sleep between polls
/// (`nanosleep`, tens of microseconds) instead of calling `sched_yield`.
pub(crate) const MPICH_HEAVY_YIELD: &str = "MPIR_CVAR_ENABLE_HEAVY_YIELD";

/// Whether PCM's parents wait asleep while new processes start and join them (the spawn
/// and the merge of a reconfiguration): on MPICH, unless the user set
/// [`MPICH_HEAVY_YIELD`] either way, which PCM then leaves alone.
///
/// Every parent waits inside `MPI_Comm_spawn` while the new process starts, and MPICH's
/// waits spin with `sched_yield`, which on Linux gives the CPU to a process of the same
/// priority hardly at all. Where ranks share cores (emulated nodes, a node with more ranks
/// than cores, the departing rank's own host) the parents so took most of the CPU the
/// child needs for its `MPI_Init`, which grew with the number of parents: a bare 1-child
/// spawn from 4 ranks on 2 cores took 64-143 ms spinning against 23-64 ms asleep
/// (`bench/spikes/spawn-yield.c`; docs/benchmarks.md, "Towards a 50 ms move").
pub(crate) fn sleep_while_spawning(family: MpiFamily, var: impl Fn(&str) -> bool) -> bool {
    family == MpiFamily::Mpich && !var(MPICH_HEAVY_YIELD)
}

/// While the returned guard lives, this process's waits inside MPI sleep instead of
/// spinning (see [`sleep_while_spawning`]); dropping it restores MPICH's setting. `None`
/// when that does not apply or the library does not offer the setting.
pub(crate) fn sleeping_waits() -> Option<crate::ffi::ControlVariableOverride> {
    sleep_while_spawning(MpiFamily::BUILT_FOR, |k| std::env::var_os(k).is_some())
        .then(|| crate::ffi::ControlVariableOverride::set(MPICH_HEAVY_YIELD, 1))
        .flatten()
}

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

/// The environment setting `MPI_Init` must find for a departed process to exit at once
/// (MPICH: `MPIR_CVAR_NO_COLLECTIVE_FINALIZE=1`, which makes `MPI_Finalize` local), or
/// `None` for an MPI library that cannot let a process leave early (Open MPI 4). For code
/// that calls `MPI_Init` itself before [`Pcm::attach`](crate::Pcm::attach); [`Pcm::init`](crate::Pcm::init) sets it.
pub fn prompt_departure_env() -> Option<(&'static str, &'static str)> {
    PROMPT_DEPARTURE.then_some((MPICH_LOCAL_FINALIZE, "1"))
}

/// The environment setting `MPI_Init` must find for collective reductions to round the same
/// before and after a reconfiguration, and the same as a plain run given the same setting
/// (MPICH: `MPIR_CVAR_DEVICE_COLLECTIVES=none`: MPICH's shared-memory collectives, its
/// default, add in another order once a replacement from another launch is in the
/// communicator), or `None` where the runtime needs none (Open MPI 4). For code that calls
/// `MPI_Init` itself before [`Pcm::attach`](crate::Pcm::attach); [`Pcm::init`](crate::Pcm::init) sets it unless the variable is
/// set, and rank 0 logs at start what the job's reductions promise. See
/// docs/architecture.md, "Reductions".
pub fn deterministic_reductions_env() -> Option<(&'static str, &'static str)> {
    DETERMINISTIC_REDUCTIONS
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
    fn given_mpich_without_device_collectives_off_then_reductions_are_not_promised() {
        let env = |value: Option<&'static str>| {
            move |k: &str| {
                (k == MPICH_DEVICE_COLLECTIVES)
                    .then_some(value)
                    .flatten()
                    .map(String::from)
            }
        };
        assert!(reductions_promise(MpiFamily::Mpich, env(Some("none"))).is_ok());
        let unset = reductions_promise(MpiFamily::Mpich, env(None));
        assert!(unset.is_err_and(|w| w.contains("(unset)")));
        let percoll = reductions_promise(MpiFamily::Mpich, env(Some("percoll")));
        assert!(percoll.is_err_and(|w| w.contains("=percoll")));
    }

    #[test]
    fn given_open_mpi_with_han_raised_then_reductions_are_not_promised() {
        assert!(reductions_promise(MpiFamily::OpenMpi, |_| None).is_ok());
        let off = |k: &str| (k == "OMPI_MCA_coll_han_priority").then(|| "0".to_owned());
        assert!(reductions_promise(MpiFamily::OpenMpi, off).is_ok());
        let han = |k: &str| (k == "OMPI_MCA_coll_han_priority").then(|| "35".to_owned());
        let warning = reductions_promise(MpiFamily::OpenMpi, han);
        assert!(warning.is_err_and(|w| w.contains("OMPI_MCA_coll_han_priority=35")));
        assert!(reductions_promise(MpiFamily::Unknown, |_| None).is_err());
    }

    #[test]
    fn given_mpich_without_ucx_mem_events_set_then_a_hint_names_the_setting_and_its_limit() {
        let unset = spawn_speed_hint(MpiFamily::Mpich, |_| None).expect("a hint");
        assert!(
            unset.contains("UCX_MEM_EVENTS=no") && unset.contains("RDMA"),
            "{unset}"
        );
        let set = |k: &str| (k == "UCX_MEM_EVENTS").then(|| "yes".to_owned());
        assert_eq!(spawn_speed_hint(MpiFamily::Mpich, set), None);
        assert_eq!(spawn_speed_hint(MpiFamily::OpenMpi, |_| None), None);
    }

    #[test]
    fn given_mpich_then_parents_sleep_through_a_spawn_unless_the_user_chose_the_setting() {
        assert!(sleep_while_spawning(MpiFamily::Mpich, |_| false));
        // Set either way by the user (0 or 1): PCM leaves it as it is.
        assert!(!sleep_while_spawning(MpiFamily::Mpich, |k| k == "MPIR_CVAR_ENABLE_HEAVY_YIELD"));
        assert!(!sleep_while_spawning(MpiFamily::OpenMpi, |_| false));
        assert!(!sleep_while_spawning(MpiFamily::Unknown, |_| false));
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
