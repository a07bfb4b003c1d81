//! Reading one callgrind output file (one thread of one process) for `overhead
//! --instructions`: its total, the part spent inside the MPI library, and the calls of a
//! few named functions with their inclusive cost.
//!
//! The MPI library's part is the inclusive cost of every call from an object outside the
//! MPI library (the program, libc, the dynamic loader running constructors and
//! destructors) into one of its objects ([`is_mpi_side`]), except the calls that only read
//! local state and cannot wait ([`is_local_query`]: `MPI_Type_size`, `MPI_Comm_rank`, ...),
//! which count with the program that makes them. A call from inside (MPI into
//! libc, which calls back into UCX's memory hooks) can make a part counted twice; that only
//! happens in MPI's own start-up and teardown and in its allocations, the same amount in
//! every run of a program, so it cancels in the difference of two iteration counts.
//!
//! The format (valgrind's "Callgrind Format Specification"): `ob=`, `fl=`/`fi=`/`fe=` and
//! `fn=` set the object, file and function of the cost lines that follow; a call is `cob=`
//! (only when the callee's object differs from the caller function's), `cfi=`/`cfl=`,
//! `cfn=`, then `calls=COUNT TARGET` and one cost line holding the call's inclusive cost.
//! Names may be compressed: `(7) /path` defines id 7, a later `(7)` refers to it, with one
//! id space for objects (`ob`, `cob`), one for files (`fl`, `fi`, `fe`, `cfi`, `cfl`) and
//! one for functions (`fn`, `cfn`). Positions may be relative (`+3`, `-2`, `*`); only the
//! costs are read here, so positions are skipped by count.

use std::collections::{BTreeMap, HashMap};

use anyhow::{bail, ensure, Context as _, Result};

/// Calls of one named function: how many, and their inclusive cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Calls {
    /// Number of calls.
    pub(crate) count: u64,
    /// Instructions executed inside them, callees included.
    pub(crate) inclusive: u64,
}

/// What [`parse`] reads from one file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Profile {
    /// Instructions of the thread (the `totals:` line; equal to the sum of the self costs).
    pub(crate) total: u64,
    /// Inclusive cost of the calls into the MPI library from outside it, local queries
    /// excepted: every instruction the MPI library (and what it calls: libc, the kernel
    /// interface) executed for them, the polling of a rank that waits for its peers
    /// included.
    pub(crate) into_mpi: u64,
    /// Calls of the watched functions (by exact name), from anywhere.
    pub(crate) watched: BTreeMap<String, Calls>,
}

/// Whether `object` belongs to the MPI library: `libmpi` (MPICH's `libmpi.so.12`, Open
/// MPI's `libmpi.so.40`, `libmpi_abi`), and what it loads under it: UCX (`libucp`, `libuct`,
/// `libucs`, `libucm` and its modules), libfabric, and Open MPI's runtime (`libopen-pal`,
/// `libopen-rte`, PMIx, hwloc, libevent, `mca_*` components).
pub(crate) fn is_mpi_side(object: &str) -> bool {
    const PREFIXES: [&str; 9] = [
        "libmpi.",
        "libmpi_",
        "libuc",
        "libfabric",
        "libopen-",
        "libpmix",
        "libhwloc",
        "libevent",
        "mca_",
    ];
    let name = file_name(object);
    PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Whether `function` is an MPI call that only reads local state and never waits or
/// drives communication (its cost is the same in every run): these count with the caller.
pub(crate) fn is_local_query(function: &str) -> bool {
    const LOCAL: [&str; 13] = [
        "MPI_Type_size",
        "MPI_Type_get_extent",
        "MPI_Type_get_true_extent",
        "MPI_Comm_rank",
        "MPI_Comm_size",
        "MPI_Comm_remote_size",
        "MPI_Comm_test_inter",
        "MPI_Get_count",
        "MPI_Group_size",
        "MPI_Group_rank",
        "MPI_Initialized",
        "MPI_Finalized",
        "MPI_Query_thread",
    ];
    let name = function.strip_prefix('P').unwrap_or(function);
    LOCAL.contains(&name)
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// One id space of compressed names.
#[derive(Debug, Default)]
struct Names(HashMap<u64, String>);

impl Names {
    /// `(id) name`, `(id)` or `name`.
    fn resolve(&mut self, text: &str) -> Result<String> {
        let text = text.trim();
        let Some(rest) = text.strip_prefix('(') else {
            return Ok(text.to_owned());
        };
        let (id, name) = rest
            .split_once(')')
            .with_context(|| format!("bad compressed name `{text}`"))?;
        let id: u64 = id
            .parse()
            .with_context(|| format!("bad name id in `{text}`"))?;
        let name = name.trim();
        if name.is_empty() {
            self.0
                .get(&id)
                .cloned()
                .with_context(|| format!("name id {id} used before its definition"))
        } else {
            self.0.insert(id, name.to_owned());
            Ok(name.to_owned())
        }
    }
}

/// Reads a callgrind file's text. `watched`: exact function names whose calls to count.
pub(crate) fn parse(text: &str, watched: &[&str]) -> Result<Profile> {
    let (mut obs, mut files, mut fns) = (Names::default(), Names::default(), Names::default());
    let mut positions = 1usize;
    let mut event = 0usize;
    let mut totals: Option<u64> = None;
    let mut self_sum = 0u64;
    let mut profile = Profile::default();
    for w in watched {
        profile.watched.insert((*w).to_owned(), Calls::default());
    }
    let mut object = String::new();
    let mut next_callee_object: Option<String> = None;
    let mut callee: Option<(String, String)> = None;
    let mut pending_calls: Option<u64> = None;
    for (number, line) in text.lines().enumerate() {
        let context = || format!("line {}: `{line}`", number + 1);
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let first = line.as_bytes()[0];
        if first.is_ascii_digit() || matches!(first, b'+' | b'-' | b'*') {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let cost = match fields.get(positions + event) {
                Some(c) => c.parse::<u64>().with_context(context)?,
                None => 0,
            };
            match pending_calls.take() {
                Some(count) => {
                    let (callee_object, callee_fn) = callee.take().with_context(context)?;
                    if !is_mpi_side(&object)
                        && is_mpi_side(&callee_object)
                        && !is_local_query(&callee_fn)
                    {
                        profile.into_mpi += cost;
                    }
                    if let Some(calls) = profile.watched.get_mut(&callee_fn) {
                        calls.count += count;
                        calls.inclusive += cost;
                    }
                }
                None => self_sum += cost,
            }
            continue;
        }
        if let Some((key, value)) = line.split_once('=') {
            match key {
                "ob" => object = obs.resolve(value).with_context(context)?,
                "cob" => next_callee_object = Some(obs.resolve(value).with_context(context)?),
                "fl" | "fi" | "fe" | "cfi" | "cfl" => {
                    files.resolve(value).with_context(context)?;
                }
                "fn" => {
                    fns.resolve(value).with_context(context)?;
                    next_callee_object = None;
                    callee = None;
                    pending_calls = None;
                }
                "cfn" => {
                    let name = fns.resolve(value).with_context(context)?;
                    let callee_object = next_callee_object.take().unwrap_or_else(|| object.clone());
                    callee = Some((callee_object, name));
                }
                "calls" => {
                    let count = value
                        .split_whitespace()
                        .next()
                        .and_then(|c| c.parse::<u64>().ok())
                        .with_context(context)?;
                    pending_calls = Some(count);
                }
                "jump" | "jcnd" => bail!(
                    "{}: jump records are not read here (run callgrind without --collect-jumps)",
                    context()
                ),
                _ => {}
            }
            continue;
        }
        if let Some((key, value)) = line.split_once(':') {
            let value = value.trim();
            match key {
                "positions" => positions = value.split_whitespace().count().max(1),
                "events" => {
                    event = value
                        .split_whitespace()
                        .position(|e| e == "Ir")
                        .context("the file counts no Ir (instructions) event")?;
                }
                "totals" => {
                    totals = Some(
                        value
                            .split_whitespace()
                            .nth(event)
                            .unwrap_or("0")
                            .parse()
                            .with_context(context)?,
                    );
                }
                _ => {}
            }
        }
    }
    let total = totals.context("no `totals:` line: the file is cut short")?;
    ensure!(
        total == self_sum,
        "the self costs add up to {self_sum}, the totals line says {total}: misread file"
    );
    profile.total = total;
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape callgrind 3.19 writes: compressed names, relative positions, a call
    /// into libmpi (with `cob=`), a call within the program (no `cob=`), a call from
    /// libmpi into UCX (inside the MPI library: not counted again), a constructor of UCX
    /// run by the dynamic loader, and a watched function.
    const SAMPLE: &str = "\
# callgrind format
version: 1
creator: callgrind-3.19.0
positions: line
events: Ir
summary: 185

ob=(1) /tmp/t/release/heat2d
fl=(1) /src/interpose.rs
fn=(1) MPI_Wait
10 5
cob=(2) /x/lib/libmpi.so.12
cfi=(2) ???
cfn=(2) PMPI_Wait
calls=2 0
+2 100
cob=(2)
cfn=(8) PMPI_Type_size
calls=2 0
* 6
* 3

fn=(3) main
20 7
cfn=(1)
calls=2 0
* 108
cfn=(4) pcm::handle::status::<impl pcm::handle::Pcm>::check
calls=3 0
+1 58
cfn=(4)
calls=1 0
* 10
-1 2

ob=(2)
fl=(2)
fn=(2)
0 40
cob=(3) /x/lib/mpich/libucp.so.0
cfn=(5) ucp_worker_progress
calls=7 0
0 60

ob=(3)
fn=(5)
0 60

ob=(1)
fl=(1)
fn=(4)
30 68

ob=(2)
fn=(8)
0 6

ob=(4) /lib/ld-linux-x86-64.so.2
fl=(3) dl-init.c
fn=(6) call_init
5 1
cob=(3)
cfn=(7) ucs_init
calls=1 0
* 9
ob=(3)
fn=(7)
0 9

totals: 201
";

    #[test]
    fn given_a_file_then_the_total_the_mpi_part_and_the_watched_calls_are_read() {
        let p = parse(
            SAMPLE,
            &["pcm::handle::status::<impl pcm::handle::Pcm>::check"],
        )
        .unwrap();
        assert_eq!(p.total, 5 + 3 + 7 + 2 + 40 + 60 + 68 + 1 + 9 + 6);
        // The program's call into libmpi and the loader's into UCX, not libmpi's own call
        // into UCX, nor the local query MPI_Type_size.
        assert_eq!(p.into_mpi, 100 + 9);
        let check = p.watched["pcm::handle::status::<impl pcm::handle::Pcm>::check"];
        assert_eq!(
            check,
            Calls {
                count: 4,
                inclusive: 68
            }
        );
    }

    #[test]
    fn given_a_cob_then_it_names_only_the_next_callee() {
        // A `cob=` belongs to the `cfn=` after it; the next call without one is a call
        // into the caller's own object.
        let text = "\
positions: line
events: Ir
ob=(1) /p/heat2d
fl=(1) a.rs
fn=(1) f
1 1
cob=(2) /l/libmpi.so.12
cfn=(2) PMPI_Isend
calls=1 0
1 10
cfn=(3) g
calls=1 0
1 20
fn=(3)
1 20
ob=(2)
fn=(2)
1 10
totals: 31
";
        let p = parse(text, &[]).unwrap();
        assert_eq!((p.total, p.into_mpi), (31, 10));
    }

    #[test]
    fn given_costs_that_disagree_with_the_totals_then_it_fails() {
        let text = "positions: line\nevents: Ir\nob=/p/heat2d\nfn=f\n1 5\ntotals: 6\n";
        assert!(parse(text, &[]).is_err());
        let cut = "positions: line\nevents: Ir\nob=/p/heat2d\nfn=f\n1 5\n";
        assert!(parse(cut, &[]).is_err());
    }

    #[test]
    fn local_queries_are_named_either_way() {
        assert!(is_local_query("PMPI_Type_size") && is_local_query("MPI_Comm_rank"));
        assert!(!is_local_query("PMPI_Wait") && !is_local_query("PMPI_Isend"));
        assert!(!is_local_query("PMPI_Allreduce") && !is_local_query("MPI_Barrier"));
    }

    #[test]
    fn the_mpi_side_is_mpi_and_what_it_loads() {
        for object in [
            "/venv/lib/libmpi.so.12",
            "/usr/lib/x86_64-linux-gnu/libmpi.so.40",
            "/venv/lib/libmpi_abi.so.1",
            "/venv/lib/mpich/libucp.so.0",
            "/venv/lib/mpich/ucx/libuct_cma.so.0",
            "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_btl_vader.so",
            "/usr/lib/x86_64-linux-gnu/libopen-pal.so.40",
        ] {
            assert!(is_mpi_side(object), "{object}");
        }
        for object in [
            "/tmp/t/release/heat2d",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/ld-linux-x86-64.so.2",
            "/usr/lib/x86_64-linux-gnu/libm.so.6",
        ] {
            assert!(!is_mpi_side(object), "{object}");
        }
    }
}
