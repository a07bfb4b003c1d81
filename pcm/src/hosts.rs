//! Which hosts a replacement may be spawned on.
//!
//! Open MPI can only spawn onto hosts of the job's allocation, and a spawn onto any other
//! host does not fail cleanly: it hangs the job. MPICH's hydra does start a host outside
//! its list, but a spawn onto a host it cannot reach kills the whole job, with no error
//! returned to the caller. So PCM refuses such moves itself. The allocation it knows is the
//! hosts of the job's ranks plus the hostfile given to the launcher, which ranks cannot see
//! unless it is named in the environment: `PCM_HOSTFILE`, or the launcher's own environment
//! form of its hostfile option (Open MPI's `OMPI_MCA_orte_default_hostfile`, hydra's
//! `HYDRA_HOST_FILE`).

use std::collections::BTreeSet;

use pcm_proto::HostName;

use crate::error::PcmError;

/// Environment variable naming the hostfile given to `mpirun`.
pub const HOSTFILE_ENV: &str = "PCM_HOSTFILE";
/// The launchers' environment forms of their hostfile option: Open MPI's `mpirun
/// --hostfile`, hydra's `mpiexec -f`.
const LAUNCHER_HOSTFILE_ENVS: [&str; 2] = ["OMPI_MCA_orte_default_hostfile", "HYDRA_HOST_FILE"];

/// Reads the hostfile named in the environment, if any: `(variable, hosts)`.
pub(crate) fn hostfile_from_env() -> Result<BTreeSet<HostName>, PcmError> {
    let Some((variable, path)) = [HOSTFILE_ENV]
        .into_iter()
        .chain(LAUNCHER_HOSTFILE_ENVS)
        .find_map(|v| {
            std::env::var(v)
                .ok()
                .filter(|p| !p.is_empty())
                .map(|p| (v, p))
        })
    else {
        return Ok(BTreeSet::new());
    };
    let text = std::fs::read_to_string(&path).map_err(|e| PcmError::Config {
        variable,
        value: path.clone(),
        reason: format!("cannot read the hostfile: {e}"),
    })?;
    parse_hostfile(&text).map_err(|reason| PcmError::Config {
        variable,
        value: path,
        reason,
    })
}

/// Parses a hostfile of either launcher: one host per line, then Open MPI's options such as
/// `slots=4`, or hydra's `host:4` form; `#` starts a comment.
pub(crate) fn parse_hostfile(text: &str) -> Result<BTreeSet<HostName>, String> {
    let mut hosts = BTreeSet::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        // hydra's `host:N` (N processes); a host name has no colon.
        let name = match name.rsplit_once(':') {
            Some((host, count)) if count.chars().all(|c| c.is_ascii_digit()) => host,
            _ => name,
        };
        let host = HostName::new(name).map_err(|e| format!("line {}: {e}", number + 1))?;
        hosts.insert(host);
    }
    Ok(hosts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostfile_syntax() {
        let hosts =
            parse_hostfile("# pool\nnode-a slots=2\n\n  node-b   max_slots=4 # fast\nnode-a\n")
                .unwrap();
        let names: Vec<&str> = hosts.iter().map(HostName::as_str).collect();
        assert_eq!(names, ["node-a", "node-b"]);
        let hydra = parse_hostfile("node-a:2\nnode-b\nnode-c:1 # spare\n").unwrap();
        let names: Vec<&str> = hydra.iter().map(HostName::as_str).collect();
        assert_eq!(names, ["node-a", "node-b", "node-c"]);
        assert!(parse_hostfile("node-a:x").is_err());
        assert!(parse_hostfile("bad/host slots=1")
            .unwrap_err()
            .contains("line 1"));
    }
}
