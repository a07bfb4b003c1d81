//! Conjugate gradient on a 2-D Poisson problem: the test application for reductions.
//!
//! The system is the 5-point Laplacian on an `n` x `n` grid of unknowns (zero Dirichlet
//! boundary), `A x = b` with a deterministic right-hand side ([`rhs`]), started from
//! `x = 0`. The grid's rows are split into contiguous blocks, one per rank in rank order
//! ([`block_rows`]). Every iteration ([`Cg::step`]) exchanges the halo rows of the search
//! direction `p` with the ranks above and below, computes `q = A p` locally, and makes two
//! `f64` sum all-reduces: `p.q` and `r.r`. It runs a fixed number of iterations, converged or
//! not.
//!
//! Unlike heat2d, the result depends on the number of ranks (each rank sums its own rows,
//! then the all-reduce sums the ranks' partial sums) and on the order in which the MPI
//! library adds those partial sums. Compare runs at one rank count: a PCM run (`cg`) must
//! give the same checksum as the plain run (`cg-plain`) at the same rank count, moves or
//! not (see docs/architecture.md, "Reductions").
//!
//! ```text
//! mpiexec -n 4 cg-plain 240 300    # N (grid side) and ITERS
//! mpiexec -n 4 cg 240 300          # the same with PCM: PCM_SCHEDULE=100:3 moves rank 3
//! ```
//!
//! Rank 0 prints a JSON [`Report`] as its last stdout line.

use std::io::Write as _;
use std::ops::Range;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Parser;
use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::request;
use mpi::topology::Communicator;
use mpi::traits::{CommunicatorCollectives, Destination, Root, Source};
use mpi::Count;
use pcm::{Pcm, PcmError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Tag of a row sent to the rank above.
const TAG_UP: i32 = 21;
/// Tag of a row sent to the rank below.
const TAG_DOWN: i32 = 22;

/// Command line of `cg` and `cg-plain`.
#[derive(Debug, Clone, Parser)]
#[command(about = "Conjugate gradient on the 2-D Poisson problem (row blocks)")]
pub struct Args {
    /// Grid side: the system has N x N unknowns.
    pub n: usize,
    /// Iterations to run (the solver does not stop when converged).
    pub iters: u64,
}

impl Args {
    /// Checks the options for `size` ranks: every rank reaches the same verdict.
    ///
    /// # Errors
    /// A message naming the bad option.
    pub fn validate(&self, size: usize) -> Result<(), String> {
        if self.n < size {
            return Err(format!(
                "N ({}) must be at least the rank count ({size})",
                self.n
            ));
        }
        if self
            .n
            .checked_mul(self.n)
            .is_none_or(|c| c > i32::MAX as usize)
        {
            return Err(format!("N ({}) exceeds the MPI count limit", self.n));
        }
        Ok(())
    }
}

/// The rows of the grid owned by `rank` of `size` (the first `n % size` ranks get one more).
#[must_use]
pub fn block_rows(n: usize, rank: usize, size: usize) -> Range<usize> {
    let (base, extra) = (n / size, n % size);
    let start = rank * base + rank.min(extra);
    start..start + base + usize::from(rank < extra)
}

/// Right-hand side at grid point (`row`, `col`): a small integer pattern, exact in `f64`.
#[must_use]
pub fn rhs(row: usize, col: usize) -> f64 {
    ((row * 7 + col * 13) % 17) as f64 + 1.0
}

/// One rank's part of the solver: its rows of `x`, `r` and `p`, and the scalars.
#[derive(Debug, Clone)]
pub struct Cg {
    /// Grid side.
    pub n: usize,
    /// First global row owned.
    pub start: usize,
    /// Rows owned.
    pub rows: usize,
    /// Solution, owned rows (`rows * n`).
    pub x: Vec<f64>,
    /// Residual `b - A x`, owned rows.
    pub r: Vec<f64>,
    /// Search direction with one halo row above and below (`(rows + 2) * n`).
    pub p: Vec<f64>,
    /// `r.r` of the current residual (all ranks hold the same value).
    pub rr: f64,
    /// Wall-clock start of the run, in Unix seconds (travels with a moved rank 0).
    pub started: f64,
    /// Scratch: `A p` on the owned rows (not stored).
    q: Vec<f64>,
}

impl Cg {
    /// The initial state of `rank` of `size` (`x = 0`, `r = p = b`) and `r.r`, which takes
    /// one all-reduce over `comm`: a fresh start only (a replacement loads `rr`).
    pub fn new(comm: &impl Communicator, n: usize) -> Self {
        let (rank, size) = (comm.rank() as usize, comm.size() as usize);
        let range = block_rows(n, rank, size);
        let rows = range.len();
        let r: Vec<f64> = range
            .flat_map(|row| (0..n).map(move |col| rhs(row, col)))
            .collect();
        let mut p = vec![0.0; (rows + 2) * n];
        p[n..(rows + 1) * n].copy_from_slice(&r);
        let rr = sum_all(comm, dot(&r, &r));
        Cg {
            n,
            start: block_rows(n, rank, size).start,
            rows,
            x: vec![0.0; rows * n],
            r,
            p,
            rr,
            started: unix_seconds(),
            q: vec![0.0; rows * n],
        }
    }

    /// One CG iteration: halo exchange of `p`, `q = A p`, two all-reduces over `comm`.
    ///
    /// # Panics
    /// If the block does not fit `comm` (a decomposition bug).
    pub fn step(&mut self, comm: &impl Communicator) {
        let n = self.n;
        self.exchange(comm);
        self.apply();
        let pq = sum_all(comm, dot(&self.p[n..(self.rows + 1) * n], &self.q));
        let alpha = self.rr / pq;
        let owned = &self.p[n..(self.rows + 1) * n];
        for ((x, r), (p, q)) in self
            .x
            .iter_mut()
            .zip(self.r.iter_mut())
            .zip(owned.iter().zip(&self.q))
        {
            *x += alpha * p;
            *r -= alpha * q;
        }
        let rr = sum_all(comm, dot(&self.r, &self.r));
        let beta = rr / self.rr;
        self.rr = rr;
        for (p, r) in self.p[n..(self.rows + 1) * n].iter_mut().zip(&self.r) {
            *p = r + beta * *p;
        }
    }

    /// The residual norm `sqrt(r.r)`.
    #[must_use]
    pub fn residual(&self) -> f64 {
        self.rr.sqrt()
    }

    /// Wall-clock seconds since [`Cg::started`].
    #[must_use]
    pub fn seconds(&self) -> f64 {
        unix_seconds() - self.started
    }

    /// Fills the halo rows of `p` from the neighbours (zero at the grid's edges).
    fn exchange(&mut self, comm: &impl Communicator) {
        let (rank, size) = (comm.rank(), comm.size());
        let n = self.n;
        assert_eq!(
            block_rows(n, rank as usize, size as usize),
            self.start..self.start + self.rows,
            "block cannot be rank {rank} of {size}"
        );
        let (top, rest) = self.p.split_at_mut(n);
        let (owned, bottom) = rest.split_at_mut(self.rows * n);
        let owned: &[f64] = owned;
        let up = (rank > 0).then(|| comm.process_at_rank(rank - 1));
        let down = (rank + 1 < size).then(|| comm.process_at_rank(rank + 1));
        request::scope(|scope| {
            let recv_top = up
                .as_ref()
                .map(|p| p.immediate_receive_into_with_tag(scope, &mut *top, TAG_DOWN));
            let recv_bottom = down
                .as_ref()
                .map(|p| p.immediate_receive_into_with_tag(scope, &mut *bottom, TAG_UP));
            let send_up = up
                .as_ref()
                .map(|p| p.immediate_send_with_tag(scope, &owned[..n], TAG_UP));
            let send_down = down
                .as_ref()
                .map(|p| p.immediate_send_with_tag(scope, &owned[owned.len() - n..], TAG_DOWN));
            for req in [recv_top, recv_bottom, send_up, send_down]
                .into_iter()
                .flatten()
            {
                req.wait();
            }
        });
        if rank == 0 {
            top.fill(0.0);
        }
        if rank + 1 == size {
            bottom.fill(0.0);
        }
    }

    /// `q = A p` on the owned rows, in one fixed order of operations.
    fn apply(&mut self) {
        let n = self.n;
        let p = &self.p;
        for i in 0..self.rows {
            let (above, row, below) = (&p[i * n..], &p[(i + 1) * n..], &p[(i + 2) * n..]);
            for j in 0..n {
                let left = if j > 0 { row[j - 1] } else { 0.0 };
                let right = if j + 1 < n { row[j + 1] } else { 0.0 };
                self.q[i * n + j] = 4.0 * row[j] - ((above[j] + below[j]) + (left + right));
            }
        }
    }
}

/// Stored as `meta` (`[n, start, rows]`), `scalars` (`[rr, started]`), `x`, `r` and `p`.
impl pcm::State for Cg {
    fn store(&self, pcm: &mut Pcm) -> Result<(), PcmError> {
        pcm.store_array(
            "meta",
            &[self.n as u64, self.start as u64, self.rows as u64],
        )?;
        pcm.store_array("scalars", &[self.rr, self.started])?;
        pcm.store_array("x", &self.x)?;
        pcm.store_array("r", &self.r)?;
        pcm.store_array("p", &self.p)
    }

    fn load(pcm: &mut Pcm) -> Result<Self, PcmError> {
        let mut meta = [0u64; 3];
        pcm.load_array_into("meta", &mut meta)?;
        let [n, start, rows] = meta.map(|v| v as usize);
        let mut scalars = [0.0f64; 2];
        pcm.load_array_into("scalars", &mut scalars)?;
        let (x, r, p) = (
            pcm.take_array::<f64>("x")?,
            pcm.take_array::<f64>("r")?,
            pcm.take_array::<f64>("p")?,
        );
        if x.len() != rows * n || r.len() != rows * n || p.len() != (rows + 2) * n {
            return Err(PcmError::Handover(format!(
                "cg block of {rows} rows of {n}: arrays of {}, {} and {} values",
                x.len(),
                r.len(),
                p.len()
            )));
        }
        Ok(Cg {
            n,
            start,
            rows,
            x,
            r,
            p,
            rr: scalars[0],
            started: scalars[1],
            q: vec![0.0; rows * n],
        })
    }

    fn release(&mut self) {
        for v in [&mut self.x, &mut self.r, &mut self.p, &mut self.q] {
            *v = Vec::new();
        }
    }
}

/// Local dot product, summed in index order.
fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).fold(0.0, |s, (a, b)| s + a * b)
}

/// The `MPI_SUM` all-reduce of one `f64`: the reduction this example is about.
fn sum_all(comm: &impl Communicator, local: f64) -> f64 {
    let mut global = 0.0;
    comm.all_reduce_into(&local, &mut global, SystemOperation::sum());
    global
}

/// Gathers `x` at rank 0 and returns, there only, the hex SHA-256 of the `n * n` values in
/// global row order as `f64` little-endian bytes. Collective over `comm`.
pub fn checksum(comm: &impl Communicator, cg: &Cg) -> Option<String> {
    let root = comm.process_at_rank(0);
    if comm.rank() != 0 {
        root.gather_varcount_into(&cg.x[..]);
        return None;
    }
    let size = comm.size() as usize;
    let (counts, displs): (Vec<Count>, Vec<Count>) = (0..size)
        .map(|rank| {
            let rows = block_rows(cg.n, rank, size);
            ((rows.len() * cg.n) as Count, (rows.start * cg.n) as Count)
        })
        .unzip();
    let mut all = vec![0.0_f64; cg.n * cg.n];
    let mut partition = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
    root.gather_varcount_into_root(&cg.x[..], &mut partition);
    let mut hasher = Sha256::new();
    for v in &all {
        hasher.update(v.to_le_bytes());
    }
    Some(
        hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    )
}

/// Result of a run, printed by rank 0 as its last stdout line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Hex SHA-256 of the final `x` (see [`checksum`]).
    pub checksum: String,
    /// Residual norm `sqrt(r.r)` at the end: far from zero means the state still changed.
    pub residual: f64,
    /// Iterations computed.
    pub iterations: u64,
    /// Wall-clock seconds of the iteration loop.
    pub seconds: f64,
    /// Ranks at the end of the run.
    pub ranks: usize,
    /// Grid side.
    pub n: usize,
    /// Migrations performed (PCM runs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrations: Option<u64>,
    /// The MPI library the run used (`pcm::mpi_library_version`).
    pub mpi_library: String,
}

impl Report {
    /// Writes the report as one JSON line to stdout.
    ///
    /// # Errors
    /// An I/O error writing stdout.
    pub fn print(&self) -> std::io::Result<()> {
        let json = serde_json::to_string(self).map_err(std::io::Error::other)?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{json}")?;
        out.flush()
    }
}

/// Wall-clock seconds since the Unix epoch.
#[must_use]
pub fn unix_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_shapes_then_blocks_tile_the_grid_in_rank_order() {
        for n in 1..40 {
            for size in 1..=n.min(8) {
                let mut next = 0;
                for rank in 0..size {
                    let rows = block_rows(n, rank, size);
                    assert_eq!(rows.start, next);
                    assert!(!rows.is_empty());
                    next = rows.end;
                }
                assert_eq!(next, n);
            }
        }
    }

    #[test]
    fn given_too_many_ranks_then_validate_names_n() {
        let args = Args { n: 3, iters: 1 };
        assert!(args.validate(4).is_err_and(|e| e.contains("N (3)")));
        assert!(args.validate(3).is_ok());
    }
}
