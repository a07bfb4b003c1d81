//! A one-node Slurm cluster for tests: munge, `slurmctld` and `slurmd` on this machine, with
//! a configuration, state and logs in a private temporary directory, so that `salloc` and
//! `srun` work as inside a real allocation. Needs root and Debian's `slurmctld`, `slurmd`,
//! `slurm-client` and `munge` (`scripts/test.sh` installs them); [`LocalSlurm::start`] says
//! why not otherwise. Dropping it stops the daemons it started and removes the directory.
//!
//! Measured on this machine kind: the packages install in about 9 s, and the node is idle
//! within a second of starting the daemons.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// How long the node may take to show up idle.
const READY: Duration = Duration::from_secs(20);

/// A running one-node Slurm cluster.
#[derive(Debug)]
pub struct LocalSlurm {
    dir: tempfile::TempDir,
    conf: PathBuf,
    /// Process ids of the daemons this started (munged only if it was not running).
    started: Vec<(String, PathBuf)>,
}

fn run(program: &str, args: &[&str], conf: Option<&Path>) -> Result<String, String> {
    // By the path `available` found it at: the daemons live in /usr/sbin, which a PATH
    // (a user's, or a clean `env -i` one) may lack.
    let path = locate(program).ok_or_else(|| format!("{program} is not installed"))?;
    let mut command = Command::new(path);
    command.args(args).stdin(Stdio::null());
    if let Some(conf) = conf {
        command.env("SLURM_CONF", conf);
    }
    let out = command
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {}: {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Where Debian's packages install `program`, if they did.
fn locate(program: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .map(|dir| Path::new(dir).join(program))
        .find(|path| path.exists())
}

impl LocalSlurm {
    /// Whether a one-node cluster can be started here; the error says why not.
    pub fn available() -> Result<(), String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("starting slurmctld and slurmd needs root".into());
        }
        for program in ["slurmctld", "slurmd", "salloc", "sinfo", "munged"] {
            if locate(program).is_none() {
                return Err(format!(
                    "{program} is not installed (apt-get install slurmctld slurmd slurm-client munge)"
                ));
            }
        }
        Ok(())
    }

    /// Starts munge (unless it runs), slurmctld and slurmd for this host, and waits until
    /// the node is idle.
    pub fn start() -> Result<LocalSlurm, String> {
        Self::available()?;
        let host = nix::unistd::gethostname()
            .map_err(|e| format!("host name: {e}"))?
            .to_string_lossy()
            .into_owned();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let dir = tempfile::Builder::new()
            .prefix("pcm-slurm-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let d = dir.path().display().to_string();
        for sub in ["slurmd", "state"] {
            std::fs::create_dir_all(dir.path().join(sub)).map_err(|e| e.to_string())?;
        }
        let conf = dir.path().join("slurm.conf");
        let text = format!(
            "ClusterName=pcmtest\n\
             SlurmctldHost={host}\n\
             AuthType=auth/munge\n\
             CredType=cred/munge\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd.pid\n\
             SlurmdSpoolDir={d}/slurmd\n\
             StateSaveLocation={d}/state\n\
             SlurmctldLogFile={d}/slurmctld.log\n\
             SlurmdLogFile={d}/slurmd.log\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             ReturnToService=2\n\
             MpiDefault=none\n\
             NodeName={host} CPUs={cpus} State=UNKNOWN\n\
             PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE\n"
        );
        std::fs::write(&conf, text).map_err(|e| e.to_string())?;
        let mut slurm = LocalSlurm {
            dir,
            conf,
            started: Vec::new(),
        };
        if !Path::new("/run/munge/munge.socket.2").exists() {
            std::fs::create_dir_all("/run/munge").map_err(|e| format!("/run/munge: {e}"))?;
            // munged refuses a socket directory others can write; as root, --force lets it
            // run with the package's key and log directory as they are.
            run("munged", &["--force"], None)?;
            slurm
                .started
                .push(("munged".into(), PathBuf::from("/run/munge/munged.pid")));
        }
        let conf = slurm.conf.clone();
        run("slurmctld", &[], Some(&conf))?;
        slurm
            .started
            .push(("slurmctld".into(), slurm.dir.path().join("slurmctld.pid")));
        run("slurmd", &[], Some(&conf))?;
        slurm
            .started
            .push(("slurmd".into(), slurm.dir.path().join("slurmd.pid")));
        let deadline = Instant::now() + READY;
        loop {
            let state = run("sinfo", &["-h", "-o", "%T"], Some(&conf)).unwrap_or_default();
            if state.contains("idle") {
                return Ok(slurm);
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(slurm.dir.path().join("slurmctld.log"))
                    .unwrap_or_default();
                return Err(format!(
                    "the node was not idle within {READY:?} (state {state:?}):\n{log}"
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The configuration file: `SLURM_CONF` for `salloc`, `srun` and `sinfo`.
    pub fn conf(&self) -> &Path {
        &self.conf
    }
}

impl Drop for LocalSlurm {
    fn drop(&mut self) {
        for (name, pid_file) in self.started.iter().rev() {
            let pid = std::fs::read_to_string(pid_file)
                .ok()
                .and_then(|t| t.trim().parse::<i32>().ok());
            match pid {
                Some(pid) => {
                    let pid = Pid::from_raw(pid);
                    let _ = kill(pid, Signal::SIGTERM);
                    let deadline = Instant::now() + Duration::from_secs(5);
                    while kill(pid, None).is_ok() && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    let _ = kill(pid, Signal::SIGKILL);
                }
                None => eprintln!(
                    "slurm cleanup: no pid file for {name} at {}",
                    pid_file.display()
                ),
            }
        }
    }
}
