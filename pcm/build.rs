//! Records which MPI library pcm is compiled against, for the check at start
//! (`runtime::check_mpi_library`) and for choosing how departed processes leave.
//!
//! It probes MPI the way rsmpi's build script does (`build-probe-mpi`: `$MPI_PKG_CONFIG`,
//! then `$MPICC -show`, then pkg-config), reads the `mpi.h` found there, and passes
//! `PCM_MPI_FAMILY` (`openmpi`, `mpich` or `unknown`) and `PCM_MPI_VERSION` to the crate.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=MPICC");
    println!("cargo:rerun-if-env-changed=MPI_PKG_CONFIG");
    let library = match build_probe_mpi::probe() {
        Ok(library) => library,
        Err(errors) => {
            // rsmpi fails the build just as well; say why here too.
            for e in errors {
                println!("cargo:warning=pcm: no MPI library found: {e}");
            }
            println!("cargo:rustc-env=PCM_MPI_FAMILY=unknown");
            println!("cargo:rustc-env=PCM_MPI_VERSION=");
            return;
        }
    };
    let header = library
        .include_paths
        .iter()
        .cloned()
        .chain([PathBuf::from("/usr/include")])
        .map(|dir| dir.join("mpi.h"))
        .find(|path| path.exists());
    let (family, version) = match &header {
        Some(path) => {
            println!("cargo:rerun-if-changed={}", path.display());
            match std::fs::read_to_string(path) {
                Ok(text) => identify(&text),
                Err(_) => ("unknown", String::new()),
            }
        }
        None => ("unknown", String::new()),
    };
    println!("cargo:rustc-env=PCM_MPI_FAMILY={family}");
    println!("cargo:rustc-env=PCM_MPI_VERSION={version}");
    warn_without_rpath(&library.lib_paths);
}

/// The library family and version that an `mpi.h` declares.
fn identify(header: &str) -> (&'static str, String) {
    let define = |name: &str| -> Option<String> {
        header.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("#define") && words.next() == Some(name))
                .then(|| words.next().unwrap_or("").trim_matches('"').to_owned())
        })
    };
    if let (Some(major), Some(minor), Some(release)) = (
        define("OMPI_MAJOR_VERSION"),
        define("OMPI_MINOR_VERSION"),
        define("OMPI_RELEASE_VERSION"),
    ) {
        return ("openmpi", format!("{major}.{minor}.{release}"));
    }
    if let Some(version) = define("MPICH_VERSION") {
        return ("mpich", version);
    }
    ("unknown", String::new())
}

/// rsmpi links with `-L` but drops the rpath that `mpicc -show` prints: a library outside
/// the loader's default path is then not found at run time (or, worse, another MPI's is).
fn warn_without_rpath(lib_paths: &[PathBuf]) {
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    for dir in lib_paths {
        let dir = dir.display().to_string();
        let system = ["/usr/lib", "/lib", "/usr/lib64", "/lib64"]
            .iter()
            .any(|d| dir == *d || dir.starts_with(&format!("{d}/x86_64-linux-gnu")));
        let has_rpath = flags
            .split('\x1f')
            .any(|flag| flag.contains("-rpath") && flag.contains(dir.as_str()));
        if !system && !has_rpath {
            println!(
                "cargo:warning=pcm: the MPI library in {dir} is not on the loader's path and no rpath to it is set: binaries will not find it (source scripts/setup.sh, which sets RUSTFLAGS)"
            );
        }
    }
}
