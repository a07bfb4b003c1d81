//! Where a node's daemon socket lives. Ranks, the CLI and the daemon resolve it the same way.

use std::path::PathBuf;

use crate::HostName;

/// Environment variable naming the daemon socket. `{host}` in its value is replaced by the
/// host name, so one setting serves every node of a job (`/scratch/pcmd/{host}.sock`).
pub const DAEMON_ENV: &str = "PCM_DAEMON";

/// The socket path for `host`, from the value of [`DAEMON_ENV`] if set (`env_value`), else
/// the default: `$XDG_RUNTIME_DIR/pcmd/{host}.sock` when `runtime_dir` is given, otherwise
/// `/tmp/pcmd-{uid}/{host}.sock`. The directory is private to the user (the daemon creates
/// it with mode 0700).
pub fn socket_path(
    env_value: Option<&str>,
    runtime_dir: Option<&str>,
    uid: u32,
    host: &HostName,
) -> PathBuf {
    match env_value.filter(|v| !v.is_empty()) {
        Some(value) => PathBuf::from(value.replace("{host}", host.as_str())),
        None => {
            let dir = match runtime_dir.filter(|d| !d.is_empty()) {
                Some(runtime) => PathBuf::from(runtime).join("pcmd"),
                None => PathBuf::from(format!("/tmp/pcmd-{uid}")),
            };
            dir.join(format!("{host}.sock"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholder_and_defaults() {
        let host = HostName::new("node-b").unwrap();
        assert_eq!(
            socket_path(Some("/x/{host}.sock"), None, 0, &host),
            PathBuf::from("/x/node-b.sock")
        );
        assert_eq!(
            socket_path(None, Some("/run/user/7"), 7, &host),
            PathBuf::from("/run/user/7/pcmd/node-b.sock")
        );
        assert_eq!(
            socket_path(Some(""), None, 7, &host),
            PathBuf::from("/tmp/pcmd-7/node-b.sock")
        );
    }
}
