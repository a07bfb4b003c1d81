//! 2-D heat diffusion: the test application of the MPI/IOS paper (section 5.3, Figures 10-11).
//!
//! A `rows` x `cols` grid is relaxed by Jacobi iterations. The grid is split into contiguous
//! blocks of rows, one per rank in rank order ([`decomp`]); each rank keeps its rows plus one
//! halo row above and below in a plain `Vec<f64>` ([`Block::data`]). Every iteration
//! ([`Block::step`]) exchanges halo rows with the ranks above and below and updates each interior
//! point from its four neighbours. The row above the grid is fixed at [`TOP_BOUNDARY`], the row
//! below and both side columns at [`OTHER_BOUNDARY`]; the initial interior is a deterministic
//! integer pattern ([`initial_value`]).
//!
//! Results are bit-for-bit reproducible and independent of the number of ranks and of which
//! process computes a block: each new value is one fixed `f64` expression of five old values,
//! with no floating-point reductions. [`checksum()`] hashes the gathered grid, so runs on 1, 2
//! or 3 ranks (or with migrations) can be compared by one string.
//!
//! Two binaries drive this library: `heat2d-plain` (plain MPI, Figure 10) and the PCM-instrumented
//! `heat2d` (Figure 11). Everything a migrated replacement needs to rebuild its block is
//! [`Meta`] (as [`Meta::to_words`]) plus [`Block::data`]; see [`Block::from_parts`].
//!
//! # Usage
//!
//! ```no_run
//! use heat2d::{checksum, Args, Block, Report};
//! use mpi::traits::*;
//!
//! let universe = mpi::initialize().expect("MPI");
//! let world = universe.world();
//! let args = Args { rows: 64, cols: 64, iters: 10, report_every: 0 };
//! args.validate(world.size() as usize).expect("valid options");
//! let mut block = Block::new(args.rows, args.cols, world.rank() as usize, world.size() as usize)
//!     .expect("valid block");
//! for _ in 0..args.iters {
//!     block.step(&world);
//! }
//! if let Some(checksum) = checksum(&world, &block) {
//!     let report = Report {
//!         checksum,
//!         iterations: args.iters,
//!         seconds: 0.0,
//!         ranks: world.size() as usize,
//!         rows: args.rows,
//!         cols: args.cols,
//!         migrations: None,
//!         resizes: None,
//!         hosts: None,
//!         mpi_library: pcm::mpi_library_version(),
//!     };
//!     report.print().expect("stdout");
//! }
//! ```

pub mod block;
pub mod checksum;
pub mod cli;
pub mod decomp;
pub mod report;
pub mod settling;
pub mod state;

pub use block::{initial_value, Block, BlockError, Grid, Meta, OTHER_BOUNDARY, TOP_BOUNDARY};
pub use checksum::{checksum, hash_grid};
pub use cli::{
    parse_on_all_ranks, Args, ArgsError, Progress, DEFAULT_COLS, DEFAULT_ITERS, DEFAULT_ROWS,
};
pub use report::{PlainReport, Report};
pub use settling::Settling;
pub use state::{unix_seconds, Heat};
