//! pcmrun's settings in one place: its flags ([`Options`], which also read
//! `PCM_CHECKPOINT_INTERVAL`), what it takes from its environment (read once, here, when it
//! starts), and the places worked out from both.
//!
//! Nothing else in pcmrun reads the environment: the launcher passes its own environment on
//! to the ranks, and pcmrun adds what [`Environment::forwarded`] names.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use pcm_proto::{HostName, UserDirs};

use crate::cli::Options;
use crate::hosts::RemoteLauncher;

/// Settings pcmrun sets itself from its options, never taken from its environment.
pub const CONTROLLED: &[&str] = &[
    "PCM_RESTART",
    "PCM_DAEMON",
    "PCM_CHECKPOINT_INTERVAL",
    "PCM_CHECKPOINT_DIR",
    "PCM_JOB_NAME",
    pcm_proto::checkpoint::LOCKED_SERIES_ENV,
];

/// pcmrun's environment, as it was when pcmrun started.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    vars: BTreeMap<OsString, OsString>,
}

impl Environment {
    /// This process's environment.
    pub fn from_process() -> Environment {
        Environment::from_vars(std::env::vars_os())
    }

    /// The variables `vars` (for tests).
    pub fn from_vars(vars: impl IntoIterator<Item = (OsString, OsString)>) -> Environment {
        Environment {
            vars: vars.into_iter().collect(),
        }
    }

    /// The value of `key`, if set and UTF-8.
    pub fn get(&self, key: &str) -> Option<String> {
        self.vars
            .get(std::ffi::OsStr::new(key))
            .and_then(|v| v.to_str())
            .map(str::to_owned)
    }

    /// Whether `key` is set, to any value.
    pub fn is_set(&self, key: &str) -> bool {
        self.vars.contains_key(std::ffi::OsStr::new(key))
    }

    /// The user's PCM settings and log filter, which reach every rank on every runtime
    /// (Open MPI passes only what `-x` names): each `PCM_*` variable and `RUST_LOG`, but
    /// not those pcmrun sets itself ([`CONTROLLED`]). Variables that are not UTF-8 are
    /// left to the launcher, which passes its environment on.
    pub fn forwarded(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().filter_map(|(key, value)| {
            let (key, value) = (key.to_str()?, value.to_str()?);
            let forwarded =
                (key.starts_with("PCM_") || key == "RUST_LOG") && !CONTROLLED.contains(&key);
            forwarded.then_some((key, value))
        })
    }

    /// The inherited `PCM_DAEMON` ([`pcm_proto::DAEMON_ENV`]).
    pub fn daemon_setting(&self) -> Option<String> {
        self.get(pcm_proto::DAEMON_ENV)
    }

    /// The program that runs commands on other hosts ([`RemoteLauncher::from_env`]).
    pub fn remote_launcher(&self) -> RemoteLauncher {
        RemoteLauncher::from_env(|key| self.get(key))
    }
}

/// The places pcmrun uses, worked out once from its environment.
#[derive(Debug, Clone)]
pub struct Places {
    /// The user's XDG directories ([`UserDirs`]).
    pub dirs: UserDirs,
    /// The `PCM_DAEMON` value pcmrun inherited.
    pub daemon_setting: Option<String>,
    /// The `PCM_DAEMON` value of the nodes' own pcmds: the inherited setting, else the
    /// per-user default place, with `{host}` for each node's name.
    pub node_socket_template: String,
    /// Where pcmrun makes its private directories ([`crate::private_dir`]):
    /// `$XDG_RUNTIME_DIR` when it is a directory, else the temporary directory.
    pub private_dir_base: PathBuf,
    /// The checkpoint directory of jobs on several hosts when `--checkpoint-dir` is not
    /// given: `$XDG_STATE_HOME/pcmrun/checkpoints`, else `~/.local/state/pcmrun/checkpoints`
    /// (home directories are shared by the hosts of most clusters; pcmrun checks it), else
    /// under the temporary directory.
    pub shared_checkpoint_dir: PathBuf,
}

impl Places {
    /// The places for the environment `env` and this process's user.
    pub fn new(env: &Environment) -> Places {
        let dirs = UserDirs::from_vars(nix::unistd::getuid().as_raw(), |key| {
            env.vars.get(std::ffi::OsStr::new(key)).cloned()
        });
        Places::from_dirs(dirs, env.daemon_setting())
    }

    /// The places for the directories `dirs` and the inherited `PCM_DAEMON` value.
    pub fn from_dirs(dirs: UserDirs, daemon_setting: Option<String>) -> Places {
        let node_socket_template = dirs.pcmd_socket_template(daemon_setting.as_deref());
        let private_dir_base = dirs
            .runtime
            .clone()
            .filter(|d| d.is_dir())
            .unwrap_or_else(std::env::temp_dir);
        let shared_checkpoint_dir = dirs
            .state
            .clone()
            .unwrap_or_else(std::env::temp_dir)
            .join("pcmrun")
            .join("checkpoints");
        Places {
            dirs,
            daemon_setting,
            node_socket_template,
            private_dir_base,
            shared_checkpoint_dir,
        }
    }

    /// Whether the inherited setting turns pcmd off (`PCM_DAEMON=none`).
    pub fn daemon_off(&self) -> bool {
        self.daemon_setting.as_deref() == Some("none")
    }

    /// The socket of this user's pcmd on `host` for the `PCM_DAEMON` value `setting`
    /// (unset or empty: the default place).
    pub fn socket_for(&self, setting: Option<&str>, host: &HostName) -> PathBuf {
        self.dirs.pcmd_socket(setting, host)
    }
}

/// All of pcmrun's settings: its flags and its environment.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The command line.
    pub options: Options,
    /// The environment it started with.
    pub env: Environment,
    /// The places worked out from the environment.
    pub places: Places,
}

impl Settings {
    /// The settings of this process, with its parsed command line `options`.
    pub fn from_process(options: Options) -> Settings {
        let env = Environment::from_process();
        let places = Places::new(&env);
        Settings {
            options,
            env,
            places,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Environment {
        Environment::from_vars(vars.iter().map(|(k, v)| (k.into(), v.into())))
    }

    #[test]
    fn given_pcm_settings_then_those_pcmrun_does_not_set_are_forwarded() {
        let env = env(&[
            ("PCM_LOG", "1"),
            ("PCM_DAEMON", "/x/{host}.sock"),
            ("PCM_RESTART", "1"),
            ("RUST_LOG", "debug"),
            ("HOME", "/h"),
        ]);
        let forwarded: Vec<_> = env.forwarded().collect();
        assert_eq!(forwarded, [("PCM_LOG", "1"), ("RUST_LOG", "debug")]);
        assert_eq!(env.daemon_setting().as_deref(), Some("/x/{host}.sock"));
    }

    #[test]
    fn given_xdg_variables_then_the_places_follow_them() {
        let places = Places::new(&env(&[("XDG_STATE_HOME", "/s"), ("XDG_RUNTIME_DIR", "/r")]));
        assert_eq!(
            places.shared_checkpoint_dir,
            PathBuf::from("/s/pcmrun/checkpoints")
        );
        assert_eq!(places.node_socket_template, "/r/pcmd/{host}.sock");
        // No such directory: the private directories go to the temporary one.
        assert_eq!(places.private_dir_base, std::env::temp_dir());
        let none = Places::new(&env(&[("PCM_DAEMON", "none")]));
        assert!(none.daemon_off());
        assert_eq!(
            none.shared_checkpoint_dir,
            std::env::temp_dir().join("pcmrun/checkpoints")
        );
    }
}
