//! The agent program's settings in one place: its flags ([`Cli`]; `--control` also reads
//! [`CONTROL_ENV`]), what it reads from its environment (once, here), and the places worked
//! out from both: the control socket, the state directory, the node's pcmd socket and
//! program.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use pcm_proto::{HostName, UserDirs};

use crate::cli::Cli;
#[cfg(doc)]
use crate::control::CONTROL_ENV;

/// The agent program's settings: its command line and the places taken from its
/// environment.
#[derive(Debug)]
pub struct Settings {
    /// The command line.
    pub cli: Cli,
    /// The user's XDG directories ([`UserDirs`]).
    pub dirs: UserDirs,
    /// The inherited `PCM_DAEMON` ([`pcm_proto::DAEMON_ENV`]).
    pub pcmd_setting: Option<String>,
}

impl Settings {
    /// The settings of this process, with its parsed command line `cli`.
    pub fn from_process(cli: Cli) -> Settings {
        Settings {
            cli,
            dirs: UserDirs::from_env(),
            pcmd_setting: std::env::var(pcm_proto::DAEMON_ENV).ok(),
        }
    }

    /// The `--control` value (or [`CONTROL_ENV`]'s), unless empty.
    pub fn control_given(&self) -> Option<&str> {
        self.cli.control.as_deref().filter(|c| !c.is_empty())
    }

    /// The control socket of the agent of `host` (default: this machine's name):
    /// [`crate::control::control_path`] of `--control` (or [`CONTROL_ENV`]).
    pub fn control_socket(&self, host: Option<&HostName>) -> Result<PathBuf> {
        let host = match host {
            Some(h) => h.clone(),
            None => host_name(None)?,
        };
        Ok(crate::control::control_path(
            self.control_given(),
            &self.dirs,
            &host,
        ))
    }

    /// The node's pcmd socket: `given` (`--pcmd-socket`), else where pcmd and PCM look
    /// ([`UserDirs::pcmd_socket`] of `PCM_DAEMON`).
    pub fn pcmd_socket(&self, given: Option<&Path>, host: &HostName) -> PathBuf {
        match given {
            Some(s) => s.to_owned(),
            None => self.dirs.pcmd_socket(self.pcmd_setting.as_deref(), host),
        }
    }
}

/// The state directory of the agent of `host`: `given` (`--state-dir`), else `HOST.state`
/// beside its control socket `control_path`.
pub fn state_dir(given: Option<&Path>, control_path: &Path, host: &HostName) -> PathBuf {
    match given {
        Some(d) => d.to_owned(),
        None => control_path
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
            .join(format!("{host}.state")),
    }
}

/// This node's name: `given` (`--host`), else the machine's host name.
pub fn host_name(given: Option<&str>) -> Result<HostName> {
    let name = match given {
        Some(h) => h.to_owned(),
        None => nix::unistd::gethostname()
            .context("reading the host name")?
            .to_string_lossy()
            .into_owned(),
    };
    HostName::new(&name).with_context(|| format!("host name {name:?} (set --host)"))
}

/// The pcmd program to start: `given` (`--pcmd`), else `pcmd` next to this program, else
/// `pcmd` on PATH.
pub fn pcmd_program(given: Option<&Path>) -> PathBuf {
    if let Some(p) = given {
        return p.to_owned();
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("pcmd")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("pcmd"))
}
