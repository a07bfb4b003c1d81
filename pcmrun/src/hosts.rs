//! The hosts of a job: its hostfile read and rewritten, and the remote launcher through
//! which `pcmrun` reaches each host (to start a pcmd there, and to tell whether a host is
//! still alive before a relaunch).
//!
//! A relaunch after a lost host uses the hostfile minus the hosts that no longer answer, so
//! the file is kept as lines: the lines of the hosts still alive are written again as the
//! user wrote them (slots and all), in their order.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pcm_proto::HostName;

/// The remote launcher as a command line (`HOST COMMAND` is appended): `PCM_LAUNCHER`
/// (split at white space), else hydra's `HYDRA_LAUNCHER_EXEC`, else Open MPI's
/// `OMPI_MCA_plm_rsh_agent`, else `ssh` (both runtimes' default). PCM checks a new host with
/// the same setting.
pub const LAUNCHER_ENV: &str = "PCM_LAUNCHER";

/// How long a host may take to run `true` through the launcher before it counts as lost.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// One host line of a hostfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLine {
    /// The host it names.
    pub host: HostName,
    /// The line as written.
    pub line: String,
}

impl HostLine {
    /// The slots the line gives its host (1 if it gives none).
    pub fn slots(&self) -> u32 {
        let mut words = self.line.split_whitespace();
        let first = words.next().unwrap_or("");
        let hydra = first.split_once(':').and_then(|(_, n)| n.parse().ok());
        let open_mpi = words.find_map(|w| w.strip_prefix("slots=")?.parse().ok());
        hydra.or(open_mpi).unwrap_or(1)
    }
}

/// A hostfile's host lines, in order (comments and blank lines dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hostfile {
    /// Its lines.
    pub lines: Vec<HostLine>,
}

/// A hostfile that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HostfileError {
    /// It could not be read.
    #[error("cannot read the hostfile {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line names no usable host.
    #[error("hostfile {path}, line {line}: {reason}: {text:?}")]
    Line {
        /// The file.
        path: PathBuf,
        /// Line number, from 1.
        line: usize,
        /// The line.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// It names no host.
    #[error("hostfile {0} names no host")]
    Empty(PathBuf),
}

impl Hostfile {
    /// Reads `path`: hydra's `host[:slots]` lines or Open MPI's `host [slots=N ...]` lines,
    /// `#` comments.
    pub fn read(path: &Path) -> Result<Hostfile, HostfileError> {
        let text = std::fs::read_to_string(path).map_err(|source| HostfileError::Read {
            path: path.to_owned(),
            source,
        })?;
        Hostfile::parse(&text, path)
    }

    /// Parses the text of the hostfile `path` (named in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Hostfile, HostfileError> {
        let mut lines = Vec::new();
        for (number, raw) in text.lines().enumerate() {
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let bad = |reason: String| HostfileError::Line {
                path: path.to_owned(),
                line: number + 1,
                text: raw.to_owned(),
                reason,
            };
            let first = content.split_whitespace().next().unwrap_or(content);
            // hydra: `host:slots`; Open MPI: `host slots=N`.
            let name = first.split(':').next().unwrap_or(first);
            let host = HostName::new(name).map_err(|e| bad(e.to_string()))?;
            lines.push(HostLine {
                host,
                line: content.to_owned(),
            });
        }
        if lines.is_empty() {
            return Err(HostfileError::Empty(path.to_owned()));
        }
        Ok(Hostfile { lines })
    }

    /// The hosts, each once, in order of first appearance.
    pub fn hosts(&self) -> Vec<HostName> {
        let mut hosts: Vec<HostName> = Vec::new();
        for line in &self.lines {
            if !hosts.contains(&line.host) {
                hosts.push(line.host.clone());
            }
        }
        hosts
    }

    /// The same file without the lines of `lost`.
    pub fn without(&self, lost: &[HostName]) -> Hostfile {
        Hostfile {
            lines: self
                .lines
                .iter()
                .filter(|l| !lost.contains(&l.host))
                .cloned()
                .collect(),
        }
    }

    /// The slots of all its lines: `host:N` (hydra) or `slots=N` (Open MPI), 1 for a line
    /// that gives none. How many ranks the hosts take without doubling up.
    pub fn slots(&self) -> u32 {
        self.lines.iter().map(HostLine::slots).sum()
    }

    /// The file's text.
    pub fn text(&self) -> String {
        self.lines.iter().map(|l| format!("{}\n", l.line)).collect()
    }
}

/// The command that runs a command on another host, like ssh: `program args... HOST COMMAND`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteLauncher {
    /// The program and its leading arguments.
    pub words: Vec<String>,
    /// Whether it runs a program rather than a shell line (srun): the line then goes
    /// through `sh -c`.
    pub runs_programs: bool,
}

impl RemoteLauncher {
    /// The launcher the environment names (see [`LAUNCHER_ENV`]); `get` reads a variable.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> RemoteLauncher {
        let set = |key: &str| get(key).filter(|v| !v.trim().is_empty());
        let words = |line: String| line.split_whitespace().map(str::to_owned).collect();
        if let Some(line) = set(LAUNCHER_ENV) {
            return RemoteLauncher {
                words: words(line),
                runs_programs: false,
            };
        }
        if let Some(program) = set("HYDRA_LAUNCHER_EXEC").or_else(|| set("OMPI_MCA_plm_rsh_agent"))
        {
            return RemoteLauncher {
                words: vec![program],
                runs_programs: false,
            };
        }
        if set("SLURM_JOB_ID").is_some() {
            // Inside a Slurm allocation: one more step on that node, beside the job's.
            return RemoteLauncher {
                words: words("srun --overlap --nodes=1 --ntasks=1 --nodelist".to_owned()),
                runs_programs: true,
            };
        }
        RemoteLauncher {
            words: vec!["ssh".to_owned()],
            runs_programs: false,
        }
    }

    /// A command that runs the shell command line `line` on `host`.
    pub fn command(&self, host: &HostName, line: &str) -> Command {
        let mut command = Command::new(&self.words[0]);
        command.args(&self.words[1..]).arg(host.as_str());
        if self.runs_programs {
            command.args(["sh", "-c", line]);
        } else {
            command.arg(line);
        }
        command
    }

    /// Whether `host` runs `true` through the launcher within `timeout`; the error says why
    /// not.
    pub fn probe(&self, host: &HostName, timeout: Duration) -> Result<(), String> {
        let mut command = self.command(host, "true");
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.words[0]))?;
        let deadline = Instant::now() + timeout;
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    let mut text = String::new();
                    if let Some(mut stderr) = child.stderr.take() {
                        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
                    }
                    let text = text.trim();
                    return Err(if text.is_empty() {
                        format!("`{} {host} true` ended with {status}", self.line())
                    } else {
                        format!("`{} {host} true` ended with {status}: {text}", self.line())
                    });
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "`{} {host} true` did not end within {timeout:?}",
                        self.line()
                    ));
                }
                Err(e) => return Err(format!("cannot wait for the launcher: {e}")),
            }
        }
    }

    /// The launcher as one line, for messages.
    pub fn line(&self) -> String {
        self.words.join(" ")
    }
}

/// Which hosts to probe while a launch runs on several hosts, and when (pure: the caller
/// probes). A host whose pcmd (or the launcher command holding it) ended is probed once; when
/// the job has said nothing for `stall`, every host is probed, and again after each further
/// `stall` of silence. A job that is only slow is never stopped for it: a probe that finds
/// every host alive changes nothing.
#[derive(Debug, Clone)]
pub struct ProbePlan {
    hosts: Vec<HostName>,
    stall: Duration,
    next_quiet_probe: Option<Instant>,
    probed: Vec<HostName>,
}

impl ProbePlan {
    /// A plan for a launch on `hosts` (those other than pcmrun's own).
    pub fn new(hosts: Vec<HostName>, stall: Duration) -> ProbePlan {
        ProbePlan {
            hosts,
            stall,
            next_quiet_probe: None,
            probed: Vec::new(),
        }
    }

    /// Stops probing `host` (it left the launch: lost while it held no rank).
    pub fn forget(&mut self, host: &HostName) {
        self.hosts.retain(|h| h != host);
    }

    /// The hosts to probe now: `ended` lists the hosts whose pcmd has ended, `last_sign` is
    /// when the job last said anything.
    pub fn due(&mut self, ended: &[HostName], last_sign: Instant, now: Instant) -> Vec<HostName> {
        let quiet = now.saturating_duration_since(last_sign) >= self.stall
            && self.next_quiet_probe.is_none_or(|t| now >= t);
        if quiet {
            self.next_quiet_probe = Some(now + self.stall);
            return self.hosts.clone();
        }
        let suspects: Vec<HostName> = ended
            .iter()
            .filter(|h| self.hosts.contains(h) && !self.probed.contains(h))
            .cloned()
            .collect();
        self.probed.extend(suspects.iter().cloned());
        suspects
    }
}

/// Quotes `word` for a POSIX shell (the remote shell a launcher hands its command line to).
pub fn shell_quote(word: &OsString) -> String {
    let text = word.to_string_lossy();
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@{}".contains(c));
    if plain {
        text.into_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// Probes every host at once; returns the ones that did not answer, with why.
pub fn lost_hosts(
    launcher: &RemoteLauncher,
    hosts: &[HostName],
    timeout: Duration,
) -> Vec<(HostName, String)> {
    std::thread::scope(|scope| {
        let probes: Vec<_> = hosts
            .iter()
            .map(|host| (host, scope.spawn(move || launcher.probe(host, timeout))))
            .collect();
        probes
            .into_iter()
            .filter_map(|(host, probe)| match probe.join() {
                Ok(Ok(())) => None,
                Ok(Err(why)) => Some((host.clone(), why)),
                Err(_) => Some((host.clone(), "the probe panicked".to_owned())),
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str) -> HostName {
        HostName::new(name).unwrap()
    }

    #[test]
    fn given_hydra_and_open_mpi_lines_then_hosts_are_read_in_order_once_each() {
        let text = "# spare nodes\nnode-a:2\nnode-b slots=1 max_slots=4\n\n node-a:1 # again\n";
        let file = Hostfile::parse(text, Path::new("h")).unwrap();
        assert_eq!(file.hosts(), [host("node-a"), host("node-b")]);
        assert_eq!(file.lines.len(), 3);
        assert_eq!(file.lines[1].line, "node-b slots=1 max_slots=4");
    }

    #[test]
    fn given_lost_hosts_then_their_lines_go_and_the_others_stay_as_written() {
        let file = Hostfile::parse("a:1\nb:2\nc slots=3\n", Path::new("h")).unwrap();
        assert_eq!(file.slots(), 6);
        let file2 = Hostfile::parse("a\nb max_slots=4 slots=2\n", Path::new("h")).unwrap();
        assert_eq!(file2.slots(), 3);
        assert_eq!(file.without(&[host("b")]).text(), "a:1\nc slots=3\n");
        assert_eq!(file.without(&[host("a"), host("b"), host("c")]).lines, []);
    }

    #[test]
    fn given_a_bad_or_empty_hostfile_then_the_error_names_file_and_line() {
        let e = Hostfile::parse("a:1\nbad/host:2\n", Path::new("/x/hosts")).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("/x/hosts") && text.contains("line 2"),
            "{text}"
        );
        let e = Hostfile::parse("# nothing\n\n", Path::new("/x/hosts")).unwrap_err();
        assert!(e.to_string().contains("names no host"), "{e}");
    }

    #[test]
    fn given_the_environment_then_the_launcher_is_pcm_launcher_hydras_open_mpis_or_ssh() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |key: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let words = |l: RemoteLauncher| l.words;
        assert_eq!(
            words(RemoteLauncher::from_env(env(&[
                ("PCM_LAUNCHER", "/x/agent -q"),
                ("HYDRA_LAUNCHER_EXEC", "/y")
            ]))),
            ["/x/agent", "-q"]
        );
        assert_eq!(
            words(RemoteLauncher::from_env(env(&[(
                "HYDRA_LAUNCHER_EXEC",
                "/y"
            )]))),
            ["/y"]
        );
        assert_eq!(
            words(RemoteLauncher::from_env(env(&[(
                "OMPI_MCA_plm_rsh_agent",
                "/z"
            )]))),
            ["/z"]
        );
        assert_eq!(words(RemoteLauncher::from_env(env(&[]))), ["ssh"]);
        let srun = RemoteLauncher::from_env(env(&[("SLURM_JOB_ID", "42")]));
        assert!(srun.runs_programs && srun.words[0] == "srun", "{srun:?}");
        let line: Vec<String> = srun
            .command(&host("n1"), "true")
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(line[line.len() - 4..], ["n1", "sh", "-c", "true"]);
    }

    #[test]
    fn given_a_launcher_that_fails_or_hangs_then_the_host_counts_as_lost_with_why() {
        let failing = RemoteLauncher {
            words: vec![
                "sh".into(),
                "-c".into(),
                "echo no route to $0 >&2; exit 255".into(),
            ],
            runs_programs: false,
        };
        let why = failing.probe(&host("node-b"), PROBE_TIMEOUT).unwrap_err();
        assert!(why.contains("no route to node-b"), "{why}");
        let hanging = RemoteLauncher {
            words: vec!["sh".into(), "-c".into(), "sleep 30".into()],
            runs_programs: false,
        };
        let started = Instant::now();
        let why = hanging
            .probe(&host("node-c"), Duration::from_millis(300))
            .unwrap_err();
        assert!(why.contains("did not end within"), "{why}");
        assert!(started.elapsed() < Duration::from_secs(10));
        let working = RemoteLauncher {
            words: vec!["sh".into(), "-c".into(), "exec $1".into()],
            runs_programs: false,
        };
        let lost = lost_hosts(&working, &[host("a"), host("b")], PROBE_TIMEOUT);
        assert_eq!(lost, []);
    }

    #[test]
    fn given_an_ended_pcmd_or_a_quiet_job_then_the_hosts_are_probed_once_per_reason() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut plan = ProbePlan::new(vec![host("a"), host("b")], s(30));
        assert_eq!(plan.due(&[], t0, t0 + s(5)), [] as [HostName; 0]);
        // b's pcmd ended: b once, not again at every look; a host of no concern is ignored.
        let ended = [host("b"), host("z")];
        assert_eq!(plan.due(&ended, t0, t0 + s(6)), [host("b")]);
        assert_eq!(plan.due(&ended, t0, t0 + s(7)), [] as [HostName; 0]);
        // Silence for the stall time: every host, then again only after another stall time.
        assert_eq!(plan.due(&ended, t0, t0 + s(30)), [host("a"), host("b")]);
        assert_eq!(plan.due(&ended, t0, t0 + s(40)), [] as [HostName; 0]);
        assert_eq!(plan.due(&ended, t0, t0 + s(60)), [host("a"), host("b")]);
        // A job that speaks again is not quiet.
        let spoke = t0 + s(70);
        assert_eq!(plan.due(&ended, spoke, t0 + s(95)), [] as [HostName; 0]);
    }

    #[test]
    fn given_words_with_spaces_or_quotes_then_they_are_quoted_for_the_remote_shell() {
        assert_eq!(shell_quote(&"/opt/pcmd".into()), "/opt/pcmd");
        assert_eq!(shell_quote(&"a b".into()), "'a b'");
        assert_eq!(shell_quote(&"it's".into()), r"'it'\''s'");
        assert_eq!(shell_quote(&"".into()), "''");
    }
}

/// The IOS agents' pool as the agent on this host knows it: the hosts a relaunch may use
/// in place of lost ones (`--hosts-from-pool`).
pub mod pool {
    use pcm_proto::HostName;
    use serde::Deserialize;
    use std::path::Path;

    /// One host of the pool, from `ios-agent status --json` (the fields pcmrun reads).
    #[derive(Debug, Clone, PartialEq, Deserialize)]
    pub struct PoolHost {
        /// Its MPI host name.
        pub host: String,
        /// Idle CPUs (speed-normalised) when the agent last heard, if it did.
        #[serde(default)]
        pub idle_cpus: Option<f64>,
        /// Whether it is leaving the pool.
        #[serde(default)]
        pub leaving: bool,
    }

    #[derive(Deserialize)]
    struct Status {
        #[serde(default)]
        pool: Vec<PoolHost>,
    }

    /// The pool's hosts the local agent knows (`IOS_AGENT status --json`), or why not.
    pub fn hosts(ios_agent: &Path) -> Result<Vec<PoolHost>, String> {
        let output = std::process::Command::new(ios_agent)
            .args(["status", "--json"])
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", ios_agent.display()))?;
        if !output.status.success() {
            let said = String::from_utf8_lossy(&output.stderr);
            return Err(format!(
                "`{} status` failed ({}): {}",
                ios_agent.display(),
                output.status,
                said.trim()
            ));
        }
        serde_json::from_slice::<Status>(&output.stdout)
            .map(|s| s.pool)
            .map_err(|e| {
                format!(
                    "`{} status --json` said something else: {e}",
                    ios_agent.display()
                )
            })
    }

    /// The hosts of `pool` to take `ranks` ranks, with how many each: none of `excluded`
    /// (the launch's hosts, and those lost or given back), none leaving the pool, none with
    /// no idle CPU; the most idle first (those whose load is unknown last), one rank each,
    /// the rest on the first. Empty when none fits.
    pub fn choose(pool: &[PoolHost], excluded: &[HostName], ranks: u32) -> Vec<(HostName, u32)> {
        let mut fit: Vec<(HostName, Option<f64>)> = pool
            .iter()
            .filter(|p| !p.leaving && p.idle_cpus.is_none_or(|idle| idle > 0.0))
            .filter_map(|p| {
                HostName::new(p.host.as_str())
                    .ok()
                    .map(|h| (h, p.idle_cpus))
            })
            .filter(|(h, _)| !excluded.contains(h))
            .collect();
        fit.dedup_by(|a, b| a.0 == b.0);
        fit.sort_by(|a, b| {
            let idle = |x: Option<f64>| x.unwrap_or(f64::NEG_INFINITY);
            idle(b.1).total_cmp(&idle(a.1))
        });
        let mut chosen: Vec<(HostName, u32)> = fit
            .into_iter()
            .take(ranks as usize)
            .map(|(h, _)| (h, 1))
            .collect();
        let placed = chosen.len() as u32;
        if let Some(first) = chosen.first_mut() {
            first.1 += ranks - placed;
        }
        chosen
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn at(host: &str, idle: Option<f64>, leaving: bool) -> PoolHost {
            PoolHost {
                host: host.into(),
                idle_cpus: idle,
                leaving,
            }
        }

        #[test]
        fn given_pool_hosts_then_the_most_idle_outside_the_launch_take_the_ranks() {
            let h = |n: &str| HostName::new(n).unwrap();
            let pool = [
                at("a", Some(1.9), false),
                at("c", Some(0.5), false),
                at("d", Some(1.5), false),
                at("e", None, false),
                at("f", Some(1.9), true),
                at("g", Some(0.0), false),
            ];
            let excluded = [h("a"), h("b")];
            assert_eq!(choose(&pool, &excluded, 1), [(h("d"), 1)]);
            assert_eq!(choose(&pool, &excluded, 2), [(h("d"), 1), (h("c"), 1)]);
            assert_eq!(
                choose(&pool, &excluded, 5),
                [(h("d"), 3), (h("c"), 1), (h("e"), 1)]
            );
            assert_eq!(choose(&[], &excluded, 1), []);
            let json =
                r#"{"host":"x","pool":[{"host":"d","peer":"p","idle_cpus":1.5,"leaving":false}]}"#;
            let status: Status = serde_json::from_str(json).unwrap();
            assert_eq!(status.pool, [at("d", Some(1.5), false)]);
            let old: Status = serde_json::from_str(r#"{"host":"x"}"#).unwrap();
            assert!(old.pool.is_empty());
        }
    }
}

/// Slurm allocations: the hosts of `SLURM_JOB_NODELIST` with the slots of
/// `SLURM_TASKS_PER_NODE`, for a job started inside `salloc` or `sbatch` without a hostfile.
pub mod slurm {
    use super::HostfileError;
    use std::path::Path;

    /// Variables that name the allocation's hosts (the first one set wins).
    pub const NODELIST_ENV: [&str; 2] = ["SLURM_JOB_NODELIST", "SLURM_NODELIST"];
    /// The variable that gives each host's task count (`2(x3),1`).
    pub const TASKS_ENV: &str = "SLURM_TASKS_PER_NODE";

    /// Expands a Slurm host list: `node[01-03,7],login` gives node01, node02, node03, node7,
    /// login (ranges keep their zero padding). The error names the bad part.
    pub fn expand_nodelist(list: &str) -> Result<Vec<String>, String> {
        let mut hosts = Vec::new();
        for item in split_top_level(list)? {
            match item.find('[') {
                None => hosts.push(item.to_owned()),
                Some(open) => {
                    let close = item
                        .rfind(']')
                        .filter(|&c| c > open)
                        .ok_or_else(|| format!("unbalanced brackets in {item:?}"))?;
                    let (prefix, suffix) = (&item[..open], &item[close + 1..]);
                    if suffix.contains('[') {
                        return Err(format!("{item:?}: more than one bracket group"));
                    }
                    for part in item[open + 1..close].split(',') {
                        let (low, high) = part.split_once('-').unwrap_or((part, part));
                        let bad = || format!("{item:?}: {part:?} is not a number or range");
                        let from: u64 = low.parse().map_err(|_| bad())?;
                        let to: u64 = high.parse().map_err(|_| bad())?;
                        if to < from || to - from > 100_000 {
                            return Err(bad());
                        }
                        let width = low.len();
                        for n in from..=to {
                            hosts.push(format!("{prefix}{n:0width$}{suffix}"));
                        }
                    }
                }
            }
        }
        if hosts.is_empty() {
            return Err("the host list is empty".into());
        }
        Ok(hosts)
    }

    /// Splits at the commas outside brackets.
    fn split_top_level(list: &str) -> Result<Vec<&str>, String> {
        let mut parts = Vec::new();
        let (mut depth, mut start) = (0i32, 0);
        for (i, c) in list.char_indices() {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&list[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
            if depth < 0 {
                return Err(format!("unbalanced brackets in {list:?}"));
            }
        }
        if depth != 0 {
            return Err(format!("unbalanced brackets in {list:?}"));
        }
        parts.push(&list[start..]);
        Ok(parts
            .into_iter()
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect())
    }

    /// Expands `SLURM_TASKS_PER_NODE` (`2(x3),1` gives 2, 2, 2, 1).
    pub fn expand_tasks(list: &str) -> Result<Vec<u32>, String> {
        let mut counts = Vec::new();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let bad = || format!("{item:?} is not N or N(xM)");
            let (count, times) = match item.split_once("(x") {
                Some((count, rest)) => (
                    count,
                    rest.strip_suffix(')')
                        .ok_or_else(bad)?
                        .parse::<u32>()
                        .map_err(|_| bad())?,
                ),
                None => (item, 1),
            };
            let count: u32 = count.parse().map_err(|_| bad())?;
            counts.extend(std::iter::repeat_n(count, times as usize));
        }
        Ok(counts)
    }

    /// The allocation as hostfile text in the runtime's form (`line(host, slots)`), if the
    /// environment (`get`) describes one.
    pub fn hostfile_text(
        get: impl Fn(&str) -> Option<String>,
        line: impl Fn(&str, u32) -> String,
    ) -> Option<Result<String, HostfileError>> {
        let (variable, list) = NODELIST_ENV
            .iter()
            .find_map(|v| get(v).filter(|l| !l.trim().is_empty()).map(|l| (*v, l)))?;
        let bad = |reason: String| HostfileError::Line {
            path: Path::new(variable).to_owned(),
            line: 1,
            text: list.clone(),
            reason,
        };
        let hosts = match expand_nodelist(&list) {
            Ok(hosts) => hosts,
            Err(e) => return Some(Err(bad(e))),
        };
        let tasks = match get(TASKS_ENV).map(|t| expand_tasks(&t)) {
            Some(Ok(tasks)) => tasks,
            Some(Err(e)) => return Some(Err(bad(format!("{TASKS_ENV}: {e}")))),
            None => Vec::new(),
        };
        let text = hosts
            .iter()
            .enumerate()
            .map(|(i, host)| format!("{}\n", line(host, tasks.get(i).copied().unwrap_or(1))))
            .collect();
        Some(Ok(text))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn given_slurm_host_lists_then_they_expand_with_their_padding() {
            assert_eq!(
                expand_nodelist("node[01-03,7],login").unwrap(),
                ["node01", "node02", "node03", "node7", "login"]
            );
            assert_eq!(
                expand_nodelist("a[8-10]-ib,b").unwrap(),
                ["a8-ib", "a9-ib", "a10-ib", "b"]
            );
            assert_eq!(expand_nodelist("solo").unwrap(), ["solo"]);
            for bad in ["n[1-", "n[3-1]", "n[x]", "", "n]1["] {
                assert!(expand_nodelist(bad).is_err(), "{bad:?} accepted");
            }
        }

        #[test]
        fn given_tasks_per_node_then_each_host_gets_its_slots() {
            assert_eq!(expand_tasks("2(x3),1").unwrap(), [2, 2, 2, 1]);
            assert!(expand_tasks("2(x").is_err());
            let env = |key: &str| match key {
                "SLURM_JOB_NODELIST" => Some("n[1-2]".to_owned()),
                "SLURM_TASKS_PER_NODE" => Some("3,1".to_owned()),
                _ => None,
            };
            let text = hostfile_text(env, |h, n| format!("{h}:{n}"))
                .unwrap()
                .unwrap();
            assert_eq!(text, "n1:3\nn2:1\n");
            assert!(hostfile_text(|_| None, |h, n| format!("{h}:{n}")).is_none());
            let bad = |key: &str| (key == "SLURM_NODELIST").then(|| "n[1-".to_owned());
            let e = hostfile_text(bad, |h, n| format!("{h}:{n}"))
                .unwrap()
                .unwrap_err();
            assert!(e.to_string().contains("SLURM_NODELIST"), "{e}");
        }
    }
}
