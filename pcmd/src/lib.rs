//! `pcmd`: the per-node daemon of MPI/IOS, and its command-line controller.
//!
//! Every node runs one `pcmd serve` per user. PCM-enabled MPI ranks (the `pcm` crate)
//! register with the daemon of their node and report their progress; controllers (the
//! `pcmd` CLI, the IOS agents) ask it for status, migrations and resizes, which it pushes
//! to every rank of the job on its node. The wire protocol is [`pcm_proto`].
//!
//! The crate is layered like `quinn`:
//! - [`registry`]: the pure, synchronous state core (jobs, ranks, in-flight requests,
//!   deadlines). Inputs carry `now`, outputs are polled; no sockets, no clock.
//! - [`daemon`]: the tokio driver that moves bytes between Unix-socket clients and the core,
//!   plus the socket, lock-file and signal handling of `pcmd serve`.
//! - [`stats`]: the pure profile book (the ranks' reports, per-period rates) the registry
//!   keeps; [`node`]: the node's own load, sampled by the driver once per stats period.
//! - the blocking controller client the CLI uses is [`pcm_proto::client`], shared with the
//!   IOS agent and the tests.
//! - [`cli`]: the binary's options and output formatting; [`settings`]: the options, the
//!   environment read once, and the default places; [`commands`]: each subcommand, which
//!   the binary's `main` calls.
//! - [`checkpoint`]: the checkpoint service beside the driver (plain threads): receives
//!   ranks' checkpoint pieces on `<socket>.ckpt`, stores them atomically, serves restarts;
//!   [`checkpoint::buddy`]: the authenticated TCP link that copies checkpoints to another
//!   node's pcmd.
//!
//! # Usage
//!
//! ```text
//! pcmd serve &                           # on every node, as the job's user
//! pcmd status                            # jobs and ranks on this node
//! pcmd stats                             # per-rank profile and traffic matrix, node load
//! pcmd migrate --rank 3 --to node-b      # move rank 3, wait for the outcome
//! pcmd resize --ranks 6                  # grow or shrink a malleable job to 6 ranks
//! ```
//!
//! The socket is `--socket`, else `$PCM_DAEMON` (with `{host}` replaced by the host name),
//! else `$XDG_RUNTIME_DIR/pcmd/HOST.sock`, else `/tmp/pcmd-UID/HOST.sock`.
//!
//! # Supported
//! One daemon per node and user; migrations of ranks and resizes of jobs with ranks on this
//! node; one reconfiguration in flight per job. Not supported: forwarding requests between daemons
//! (run the command on a node of the job), authentication beyond the socket's file mode.

pub mod checkpoint;
pub mod cli;
pub mod commands;
pub mod daemon;
pub mod node;
pub mod registry;
pub mod session_sweep;
pub mod settings;
pub mod shm_sweep;
pub mod stats;
