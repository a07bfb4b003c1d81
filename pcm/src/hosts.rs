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
//!
//! # Hosts that join late (MPICH only, opt-in)
//! On MPICH, a job launched with `PCM_ALLOW_NEW_HOSTS=1` may also move ranks to a host
//! outside that allocation, such as a machine whose IOS agent joined the pool after the job
//! started: hydra then starts a proxy there through its launcher (measured: checksums
//! equal). Since a spawn onto a host the launcher cannot reach kills the whole job, rank 0
//! first runs the launcher itself, `LAUNCHER HOST true`, and the move goes ahead only if
//! that exits with status 0 within [`PROBE_TIMEOUT`]; otherwise it is refused and the job
//! carries on. The launcher is `PCM_LAUNCHER` (a command line, split at white space), else
//! hydra's `HYDRA_LAUNCHER_EXEC`, else `ssh` (hydra's default launcher). Which hosts are
//! pool members is the IOS agents' business: an agent only asks its pcmd to move ranks to
//! a host whose agent proved the pool key and answered its offer (see `ios-agent`).
//!
//! On Open MPI 4 the setting is ignored (with a warning at start): a spawn outside the
//! allocation hangs, so the only way is to list spare hosts in the hostfile at launch.

use std::collections::BTreeSet;
use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pcm_proto::HostName;
use serde::{Deserialize, Serialize};

use crate::config::variables::{
    ALLOW_NEW_HOSTS_ENV, HOSTFILE_ENV, HYDRA_LAUNCHER_ENV, HYDRA_LAUNCHER_EXEC_ENV, LAUNCHER_ENV,
    LAUNCHER_HOSTFILE_ENVS,
};
use crate::config::Config;
use crate::error::PcmError;
use crate::runtime::MpiFamily;

/// How long the check of a new host may take before the host counts as unreachable.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether ranks may move to hosts outside the allocation: decided by rank 0 at start and
/// inherited by replacements.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum NewHosts {
    /// Only hosts of the allocation (the default, and always on Open MPI).
    #[default]
    Refused,
    /// Hosts the launcher reaches, checked with this command line before each spawn.
    Probed {
        /// The launcher: program, then its options; the host and `true` follow.
        launcher: Vec<String>,
    },
}

impl NewHosts {
    /// From `PCM_ALLOW_NEW_HOSTS` and the launcher settings, for the MPI built against.
    pub(crate) fn from_config(config: &Config) -> Result<NewHosts, PcmError> {
        Self::from_settings(MpiFamily::BUILT_FOR, |v| config.host_setting(v))
    }

    fn from_settings(
        family: MpiFamily,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<NewHosts, PcmError> {
        let allowed = match get(ALLOW_NEW_HOSTS_ENV).as_deref().map(str::trim) {
            None | Some("0") => false,
            Some("1") => true,
            Some(other) => {
                return Err(PcmError::Config {
                    variable: ALLOW_NEW_HOSTS_ENV,
                    value: other.to_owned(),
                    reason: "use 1 (allow hosts outside the launch's allocation) or 0".into(),
                })
            }
        };
        if !allowed {
            return Ok(NewHosts::Refused);
        }
        if family != MpiFamily::Mpich {
            tracing::warn!(
                "{ALLOW_NEW_HOSTS_ENV}=1 is ignored: {} can only spawn onto hosts of its allocation; list spare hosts in the hostfile at launch",
                family.name()
            );
            return Ok(NewHosts::Refused);
        }
        let launcher: Vec<String> = if let Some(command) = get(LAUNCHER_ENV) {
            command.split_whitespace().map(str::to_owned).collect()
        } else {
            match get(HYDRA_LAUNCHER_ENV).as_deref() {
                None | Some("ssh") | Some("rsh") => {}
                Some(other) => {
                    return Err(PcmError::Config {
                        variable: HYDRA_LAUNCHER_ENV,
                        value: other.to_owned(),
                        reason: format!(
                            "{ALLOW_NEW_HOSTS_ENV}=1 needs a launcher PCM can run to check a new host; name it in {LAUNCHER_ENV}"
                        ),
                    })
                }
            }
            let program = get(HYDRA_LAUNCHER_EXEC_ENV)
                .or_else(|| get(HYDRA_LAUNCHER_ENV))
                .unwrap_or_else(|| "ssh".into());
            vec![program]
        };
        Ok(NewHosts::Probed { launcher })
    }

    /// Why a move to `host`, outside the allocation `known`, is refused under this setting;
    /// `None` if it may go ahead once [`probe`] passes.
    pub(crate) fn refusal(&self, host: &HostName, known: &BTreeSet<HostName>) -> Option<String> {
        let known: Vec<&str> = known.iter().map(HostName::as_str).collect();
        let outside = format!(
            "host {host} is not in the job's allocation (known: {})",
            known.join(", ")
        );
        match (self, MpiFamily::BUILT_FOR) {
            (NewHosts::Probed { .. }, _) => None,
            (NewHosts::Refused, MpiFamily::Mpich) => Some(format!(
                "{outside}; hydra can start a host outside its host list: launch with {ALLOW_NEW_HOSTS_ENV}=1 (PCM then checks that the launcher reaches the host first), or list the host in the hostfile given to mpiexec and name that file in {HOSTFILE_ENV}"
            )),
            (NewHosts::Refused, family) => Some(format!(
                "{outside}; {} can only spawn onto hosts of its allocation (a spawn elsewhere hangs the job): list spare hosts in the hostfile given to mpirun at launch (slots=1 each, or --oversubscribe) and name that file in {HOSTFILE_ENV}",
                family.name()
            )),
        }
    }
}

/// Checks that the launcher starts a process on `host`: runs `LAUNCHER HOST true` and waits
/// at most `timeout`. Returns why not, in words naming the host and the command.
pub(crate) fn probe(launcher: &[String], host: &HostName, timeout: Duration) -> Result<(), String> {
    let unreachable = |why: String| {
        format!(
            "host {host} is not in the job's allocation and the launcher does not reach it ({} {host} true: {why}); a spawn there would kill the job",
            launcher.join(" ")
        )
    };
    // A host name is passed as one argument; one that looks like an option is not a host.
    if host.as_str().starts_with(['-', '.']) {
        return Err(unreachable("not a host name".into()));
    }
    let Some((program, options)) = launcher.split_first() else {
        return Err(unreachable("no launcher".into()));
    };
    let started = Instant::now();
    let mut child = Command::new(program)
        .args(options)
        .arg(host.as_str())
        .arg("true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| unreachable(format!("cannot run it: {e}")))?;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < timeout => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(unreachable(format!(
                    "no answer within {:.1} s",
                    timeout.as_secs_f64()
                )));
            }
            Err(e) => return Err(unreachable(format!("cannot wait for it: {e}"))),
        }
    };
    if status.success() {
        tracing::info!(
            "host {host} is outside the allocation; the launcher reached it in {:.1} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
        return Ok(());
    }
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.by_ref().take(4096).read_to_string(&mut stderr);
    }
    let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
    Err(unreachable(match last {
        Some(line) => format!("{status}: {}", line.trim()),
        None => status.to_string(),
    }))
}

/// Reads the hostfile the settings name (`PCM_HOSTFILE`, else the launcher's), if any.
pub(crate) fn hostfile_from_config(config: &Config) -> Result<BTreeSet<HostName>, PcmError> {
    let Some((variable, path)) = [HOSTFILE_ENV]
        .into_iter()
        .chain(LAUNCHER_HOSTFILE_ENVS)
        .find_map(|v| {
            config
                .hosts
                .get(v)
                .filter(|p| !p.is_empty())
                .map(|p| (v, p.clone()))
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

/// Names a host for each process the plan leaves to the runtime (a move naming no host, a
/// grow's added process with none): the host of the allocation `allocation` that runs the
/// fewest of the job's processes, counting the ones placed before it, ties in name order,
/// and for a move never the host the rank leaves. With no other host in the allocation (a
/// job on one machine), the process stays the runtime's to place.
///
/// Why PCM names it rather than the runtime: MPICH's hydra places an unnamed spawn by going
/// round its host list, and a third unnamed move in one run lands on a host whose proxy
/// ended with the rank that left it, which ends the whole job (`HYDU_sock_write ... Bad
/// file descriptor`, exit 255); a named host gets a new proxy. Every rank computes the same
/// answer from the same inputs, so the choice needs no communication.
pub(crate) fn place_unnamed(
    moves: &mut [pcm_proto::Move],
    added: &mut [Option<HostName>],
    rank_hosts: &[HostName],
    allocation: &BTreeSet<HostName>,
) {
    let mut load = HostLoad::default();
    for host in allocation {
        load.0.entry(host.clone()).or_default();
    }
    for host in rank_hosts {
        load.add(host);
    }
    // What the plan already places counts before anything is chosen.
    for m in moves.iter() {
        if let Some(to) = &m.to {
            load.take(rank_hosts.get(m.rank.0 as usize));
            load.add(to);
        }
    }
    for host in added.iter().flatten() {
        load.add(host);
    }
    if load.0.len() < 2 {
        return;
    }
    for m in moves.iter_mut().filter(|m| m.to.is_none()) {
        let from = rank_hosts.get(m.rank.0 as usize);
        if let Some(to) = load.least_loaded(from) {
            load.take(from);
            load.add(&to);
            m.to = Some(to);
        }
    }
    for host in added.iter_mut().filter(|h| h.is_none()) {
        if let Some(to) = load.least_loaded(None) {
            load.add(&to);
            *host = Some(to);
        }
    }
}

/// Processes of the job per host, for [`place_unnamed`].
#[derive(Default)]
struct HostLoad(std::collections::BTreeMap<HostName, usize>);

impl HostLoad {
    fn add(&mut self, host: &HostName) {
        *self.0.entry(host.clone()).or_default() += 1;
    }

    fn take(&mut self, host: Option<&HostName>) {
        if let Some(n) = host.and_then(|h| self.0.get_mut(h)) {
            *n = n.saturating_sub(1);
        }
    }

    /// The host with the fewest processes other than `except`, the first by name among
    /// equals; `None` when there is no other host.
    fn least_loaded(&self, except: Option<&HostName>) -> Option<HostName> {
        self.0
            .iter()
            .filter(|(h, _)| Some(*h) != except)
            .min_by_key(|(h, n)| (**n, *h))
            .map(|(h, _)| h.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcm_proto::{Move, Rank};

    fn host(name: &str) -> HostName {
        HostName::new(name).unwrap()
    }

    fn hosts(names: &[&str]) -> Vec<HostName> {
        names.iter().map(|n| host(n)).collect()
    }

    fn unnamed(rank: u32) -> Move {
        Move {
            rank: Rank(rank),
            to: None,
        }
    }

    /// The launch on node-b and node-c with node-a spare in the hostfile: rank 1 moved with
    /// no host three times goes a, c, a (the third went, on MPICH, to node-c's ended proxy
    /// and ended the job).
    #[test]
    fn given_moves_naming_no_host_then_each_goes_to_the_least_loaded_other_host() {
        let allocation: BTreeSet<HostName> =
            hosts(&["node-a", "node-b", "node-c"]).into_iter().collect();
        let mut placed = hosts(&["node-b", "node-c"]);
        for expected in ["node-a", "node-c", "node-a"] {
            let mut moves = [unnamed(1)];
            place_unnamed(&mut moves, &mut [], &placed, &allocation);
            assert_eq!(moves[0].to, Some(host(expected)));
            placed[1] = host(expected);
        }
    }

    #[test]
    fn given_a_job_on_one_host_then_unnamed_processes_stay_the_runtimes_to_place() {
        let allocation: BTreeSet<HostName> = hosts(&["here"]).into_iter().collect();
        let mut moves = [unnamed(0)];
        let mut added = [None, None];
        place_unnamed(
            &mut moves,
            &mut added,
            &hosts(&["here", "here"]),
            &allocation,
        );
        assert_eq!(moves[0].to, None);
        assert_eq!(added, [None, None]);
    }

    /// Named moves and added processes count before the unnamed ones are placed, and each
    /// placed one counts for the next.
    #[test]
    fn given_named_and_unnamed_processes_then_the_named_count_first() {
        let allocation: BTreeSet<HostName> =
            hosts(&["node-a", "node-b", "node-c"]).into_iter().collect();
        let placed = hosts(&["node-a", "node-b"]);
        let mut moves = [
            Move {
                rank: Rank(0),
                to: Some(host("node-c")),
            },
            unnamed(1),
        ];
        // After the named move: a 0, b 1, c 1. Rank 1 leaves b: a (0).
        let mut added = [Some(host("node-c")), None, None];
        // With the named added process: a 0, b 1, c 2 -> rank 1 to a (a 1, b 0, c 2);
        // then the unnamed added go to b (0), then a or b (1 each): a by name.
        place_unnamed(&mut moves, &mut added, &placed, &allocation);
        assert_eq!(moves[1].to, Some(host("node-a")));
        assert_eq!(
            added,
            [
                Some(host("node-c")),
                Some(host("node-b")),
                Some(host("node-a"))
            ]
        );
    }

    fn settings<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |key| {
            pairs
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn new_hosts_are_opt_in_and_mpich_only() {
        let mpich = MpiFamily::Mpich;
        assert_eq!(
            NewHosts::from_settings(mpich, settings(&[])).unwrap(),
            NewHosts::Refused
        );
        assert_eq!(
            NewHosts::from_settings(mpich, settings(&[(ALLOW_NEW_HOSTS_ENV, "0")])).unwrap(),
            NewHosts::Refused
        );
        assert!(
            NewHosts::from_settings(mpich, settings(&[(ALLOW_NEW_HOSTS_ENV, "yes")]))
                .unwrap_err()
                .to_string()
                .contains(ALLOW_NEW_HOSTS_ENV)
        );
        assert_eq!(
            NewHosts::from_settings(MpiFamily::OpenMpi, settings(&[(ALLOW_NEW_HOSTS_ENV, "1")]))
                .unwrap(),
            NewHosts::Refused
        );
        let launcher =
            |pairs: &[(&str, &str)]| match NewHosts::from_settings(mpich, settings(pairs)) {
                Ok(NewHosts::Probed { launcher }) => launcher,
                other => panic!("{other:?}"),
            };
        let allow = (ALLOW_NEW_HOSTS_ENV, "1");
        assert_eq!(launcher(&[allow]), ["ssh"]);
        assert_eq!(
            launcher(&[allow, (HYDRA_LAUNCHER_EXEC_ENV, "/x/agent.sh")]),
            ["/x/agent.sh"]
        );
        assert_eq!(
            launcher(&[
                allow,
                (HYDRA_LAUNCHER_EXEC_ENV, "/x/agent.sh"),
                (LAUNCHER_ENV, "ssh -o BatchMode=yes")
            ]),
            ["ssh", "-o", "BatchMode=yes"]
        );
        assert!(
            NewHosts::from_settings(mpich, settings(&[allow, (HYDRA_LAUNCHER_ENV, "slurm")]))
                .unwrap_err()
                .to_string()
                .contains(LAUNCHER_ENV)
        );
    }

    #[test]
    fn the_probe_tells_reachable_from_failing_and_silent_launchers() {
        let sh = |script: &str| {
            vec![
                "sh".to_owned(),
                "-c".to_owned(),
                script.to_owned(),
                "sh".to_owned(),
            ]
        };
        // `sh -c SCRIPT sh HOST true`: $1 is the host, $2 the command.
        probe(
            &sh("test \"$1\" = node-c && $2"),
            &host("node-c"),
            PROBE_TIMEOUT,
        )
        .unwrap();
        let failed = probe(
            &sh("echo \"no such host $1\" >&2; exit 255"),
            &host("node-z"),
            PROBE_TIMEOUT,
        )
        .unwrap_err();
        assert!(
            failed.contains("node-z") && failed.contains("no such host"),
            "{failed}"
        );
        let started = Instant::now();
        let silent =
            probe(&sh("sleep 5"), &host("node-y"), Duration::from_millis(200)).unwrap_err();
        assert!(
            silent.contains("node-y") && silent.contains("within"),
            "{silent}"
        );
        assert!(started.elapsed() < Duration::from_secs(3));
        let missing = probe(
            &["/nonexistent/launcher".to_owned()],
            &host("node-c"),
            PROBE_TIMEOUT,
        )
        .unwrap_err();
        assert!(missing.contains("cannot run"), "{missing}");
        assert!(probe(&sh("exit 0"), &host("-oProxy"), PROBE_TIMEOUT).is_err());
    }

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
