//! pcmd's settings in one place: its flags ([`Cli`]; `--checkpoint-dir` also reads
//! `PCMD_CHECKPOINT_DIR`, `--pool-key` `PCM_POOL_KEY`), what it reads from its environment
//! (once, here), and the places worked out from both.

use std::path::PathBuf;

use pcm_proto::{HostName, UserDirs};

use crate::cli::Cli;

/// pcmd's settings: its command line and the places taken from its environment.
#[derive(Debug)]
pub struct Settings {
    /// The command line.
    pub cli: Cli,
    /// The user's XDG directories ([`UserDirs`]): the default socket and checkpoint
    /// directory.
    pub dirs: UserDirs,
    /// The inherited `PCM_DAEMON` ([`pcm_proto::DAEMON_ENV`]).
    pub daemon_setting: Option<String>,
}

impl Settings {
    /// The settings of this process, with its parsed command line `cli`.
    pub fn from_process(cli: Cli) -> Settings {
        Settings {
            cli,
            dirs: UserDirs::from_env(),
            daemon_setting: std::env::var(pcm_proto::DAEMON_ENV).ok(),
        }
    }

    /// The socket of the daemon of `host`: `--socket` if given, else
    /// [`UserDirs::pcmd_socket`] of `PCM_DAEMON` (as PCM's ranks find it).
    pub fn socket(&self, host: &HostName) -> PathBuf {
        match &self.cli.socket {
            Some(path) => path.clone(),
            None => self.dirs.pcmd_socket(self.daemon_setting.as_deref(), host),
        }
    }
}
