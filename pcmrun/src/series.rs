//! A job's checkpoint series, held by one `pcmrun` at a time.
//!
//! pcmd keeps one job's checkpoints per series (program, rank count, job name) in a
//! checkpoint directory: the first checkpoint a new job of the series commits retires those
//! of the job before it. Two jobs of one series running at once would delete each other's
//! checkpoints, and a rerun after a crash of `pcmrun` would start over and delete the
//! crashed job's. So `pcmrun` holds an exclusive `flock` on `DIR/.SERIES.pcmrun-lock` for
//! the job's life (the kernel drops it however `pcmrun` ends, SIGKILL included): a second
//! `pcmrun` of the series stops at once, naming the one that holds it. The lock file also
//! records the run that holds it (pid, host, command) and how it ended, so that a rerun
//! of the same command after a crash resumes from the newest complete checkpoint
//! ([`decide_first_start`]).

use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::supervisor::Start;

/// The series' directory name as pcmd writes it (`APP-Pr`, `APP-Pr-NAME` with a job name)
/// for the program line `program` (the program, then its arguments). pcmrun takes the
/// program's file name for the application's name (what it passes to `Pcm::init` is
/// usually the same); for a Python interpreter, the script's, as PCM's Python package
/// names a job by default.
pub fn series_name(program: &[String], ranks: u32, job_name: Option<&str>) -> String {
    pcm_proto::checkpoint::series_dir_name(&app_name(program), ranks, job_name)
}

/// The application's name pcmrun expects the job to give `Pcm::init`: the program's file
/// name, or for `python3 [OPTIONS] SCRIPT.py ...` the script's without `.py`, in the
/// characters pcmd accepts (python/pcm/__init__.py, `_default_app_name`).
fn app_name(program: &[String]) -> String {
    let file_name = |path: &str| {
        Path::new(path)
            .file_name()
            .map_or_else(|| path.to_owned(), |n| n.to_string_lossy().into_owned())
    };
    let Some(first) = program.first() else {
        return String::new();
    };
    let interpreter = file_name(first);
    if !is_python(&interpreter) {
        return interpreter;
    }
    // `-m MODULE` and `-c CODE` run no script file: the package then names the job after
    // what Python puts in argv[0], which pcmrun does not try to guess.
    let mut args = program[1..].iter();
    let script = loop {
        match args.next().map(String::as_str) {
            Some("-m" | "-c") | None => return interpreter,
            // Options that take a value (python3 --help): skip the value too.
            Some("-W" | "-X" | "--check-hash-based-pycs") => {
                args.next();
            }
            Some(option) if option.starts_with('-') => {}
            Some(script) => break file_name(script),
        }
    };
    let stem = script.strip_suffix(".py").unwrap_or(&script);
    let name: String = stem
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() || "._-".contains(c) {
            true => c,
            false => '-',
        })
        .collect();
    match name.trim_matches('-') {
        "" => "python-program".to_owned(),
        name => name.to_owned(),
    }
}

/// `python`, `python3`, `python3.11`, `pypy3`: a file name that runs Python scripts.
fn is_python(file_name: &str) -> bool {
    ["python", "pypy"].iter().any(|prefix| {
        file_name
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit() || c == '.'))
    })
}

/// The run that holds (or last held) a series, as its lock file records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Holder {
    /// pcmrun's process id.
    pub pid: u32,
    /// The host pcmrun ran on.
    pub host: String,
    /// The application and its arguments.
    pub command: Vec<String>,
    /// When pcmrun started, seconds since the Unix epoch.
    pub started_unix_s: f64,
    /// How it ended; `None` while it runs, and after a crash of pcmrun.
    pub ended: Option<Ended>,
}

/// How a run that held the series ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ended {
    /// pcmrun's exit status.
    pub code: i32,
    /// Whether the job can be resumed from its checkpoints (it neither finished nor failed
    /// by itself: interrupted, or it gave up after lost processes).
    pub resumable: bool,
}

impl Holder {
    /// The command as a shell line, for people.
    pub fn command_line(&self) -> String {
        self.command.join(" ")
    }
}

/// How the first launch starts, and what to tell the user about it.
#[derive(Debug, Clone, PartialEq)]
pub struct FirstStart {
    /// How.
    pub start: Start,
    /// For people, when there is something to say.
    pub note: Option<String>,
}

/// Decides how the first launch of `command` starts in `series`, given the run that last
/// held it (`previous`), the newest complete checkpoint found there (`newest`), `--restart`
/// and `--fresh`. A run of the same command that did not finish (pcmrun crashed or was
/// killed, interrupted, or gave up after lost processes) is resumed from its newest complete
/// checkpoint; another command's unfinished checkpoints are named, since this run's first
/// checkpoint retires them.
pub fn decide_first_start(
    series: &str,
    previous: Option<&Holder>,
    newest: Option<u64>,
    command: &[String],
    restart: bool,
    fresh: bool,
) -> FirstStart {
    if restart {
        return FirstStart {
            start: Start::FromCheckpoint,
            note: None,
        };
    }
    let unfinished = previous.filter(|p| p.ended.as_ref().is_none_or(|e| e.resumable));
    let (Some(previous), Some(newest)) = (unfinished, newest) else {
        return FirstStart {
            start: Start::Fresh,
            note: None,
        };
    };
    let how = match &previous.ended {
        None => "pcmrun ended without a word: killed, or its host went down".to_owned(),
        Some(e) => format!("pcmrun exited with {}", e.code),
    };
    let who = format!("pcmrun pid {} on {}", previous.pid, previous.host);
    if fresh {
        return FirstStart {
            start: Start::Fresh,
            note: Some(format!(
                "--fresh: starting from iteration 0; the checkpoints of the unfinished run of `{}` ({who}; {how}) in series {series}, newest at iteration {newest}, are deleted at this run's first checkpoint",
                previous.command_line()
            )),
        };
    }
    if previous.command == command {
        return FirstStart {
            start: Start::IfAny,
            note: Some(format!(
                "an earlier run of this command did not finish ({who}; {how}): resuming it from its newest complete checkpoint in series {series} (iteration {newest}); --fresh starts from iteration 0 instead"
            )),
        };
    }
    FirstStart {
        start: Start::Fresh,
        note: Some(format!(
            "warning: series {series} holds the checkpoints of an unfinished run of another command, `{}` ({who}; {how}), newest at iteration {newest}; this run starts from iteration 0 and its first checkpoint deletes them (to keep them, stop this run and give it --job-name NAME, or rerun that command to resume it)",
            previous.command_line()
        )),
    }
}

/// The lock on a series, held for the life of the `pcmrun` that took it.
#[derive(Debug)]
pub struct SeriesLock {
    file: Flock<File>,
    /// The lock file.
    pub path: PathBuf,
    /// The series' name.
    pub series: String,
    /// The checkpoint directory.
    pub dir: PathBuf,
    /// The run that held it before this one, as its record says.
    pub previous: Option<Holder>,
    holder: Holder,
}

impl SeriesLock {
    /// Takes the lock of `series` in the checkpoint directory `dir` (created if missing) for
    /// `holder`; fails at once, naming the `pcmrun` that holds it, if another one does.
    pub fn take(dir: &Path, series: &str, holder: Holder) -> anyhow::Result<SeriesLock> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("cannot create the checkpoint directory {}", dir.display()))?;
        let path = dir.join(format!(".{series}.pcmrun-lock"));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("cannot open the series lock {}", path.display()))?;
        let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => locked,
            Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
                let other = read_holder(&mut file);
                let who = match &other {
                    Some(h) => format!(
                        "pcmrun pid {} on {}, running `{}`",
                        h.pid,
                        h.host,
                        h.command_line()
                    ),
                    None => "another pcmrun".to_owned(),
                };
                anyhow::bail!(
                    "the checkpoint series {series} in {} is in use by {who} (lock {}): a second job in one series would delete the other's checkpoints. Give this job a series of its own with --job-name NAME (or another --checkpoint-dir), or wait until that job ends",
                    dir.display(),
                    path.display()
                );
            }
            Err((_, errno)) => {
                return Err(anyhow::Error::from(errno))
                    .with_context(|| format!("cannot lock {}", path.display()));
            }
        };
        let previous = read_holder(&mut file);
        let mut lock = SeriesLock {
            file,
            path,
            series: series.to_owned(),
            dir: dir.to_owned(),
            previous,
            holder,
        };
        lock.write()?;
        Ok(lock)
    }

    /// The newest complete checkpoint of the series on this host's view of the directory
    /// (the newest `ITERATION/manifest`).
    pub fn newest_complete(&self) -> Option<u64> {
        std::fs::read_dir(self.dir.join(&self.series))
            .ok()?
            .flatten()
            .filter(|e| e.path().join("manifest").is_file())
            .filter_map(|e| e.file_name().to_str()?.parse::<u64>().ok())
            .max()
    }

    /// Records how this run ended (the lock itself goes with the process).
    pub fn ended(&mut self, ended: Ended) -> anyhow::Result<()> {
        self.holder.ended = Some(ended);
        self.write()
    }

    fn write(&mut self) -> anyhow::Result<()> {
        let text = serde_json::to_string(&self.holder)? + "\n";
        let file: &mut File = &mut self.file;
        file.set_len(0)?;
        file.rewind()?;
        file.write_all(text.as_bytes())?;
        file.sync_data()
            .with_context(|| format!("cannot write {}", self.path.display()))
    }
}

fn read_holder(file: &mut File) -> Option<Holder> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(command: &[&str], ended: Option<Ended>) -> Holder {
        Holder {
            pid: 42,
            host: "a".into(),
            command: command.iter().map(|s| s.to_string()).collect(),
            started_unix_s: 0.0,
            ended,
        }
    }

    fn cmd(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn given_a_program_path_then_the_series_is_named_as_pcmd_names_it() {
        assert_eq!(
            series_name(&cmd(&["/x/heat2d", "--iters", "5"]), 2, None),
            "heat2d-2r"
        );
        assert_eq!(
            series_name(&cmd(&["heat2d"]), 4, Some("big")),
            "heat2d-4r-big"
        );
    }

    /// A Python job checkpoints in the series of its script's name (python/pcm's default
    /// name): pcmrun's lock was named `python3-2r` while the job wrote `heat2d-py-2r`.
    #[test]
    fn given_a_python_script_then_the_series_is_named_after_the_script() {
        let name = |line: &[&str]| series_name(&cmd(line), 2, None);
        assert_eq!(
            name(&["python3", "examples/heat2d-py/heat2d.py", "--iters", "9"]),
            "heat2d-2r"
        );
        assert_eq!(
            name(&["/usr/bin/python3.11", "-u", "-W", "ignore", "my job.py"]),
            "my-job-2r"
        );
        assert_eq!(name(&["python", "run"]), "run-2r");
        // No script file: the interpreter's name, as before.
        assert_eq!(name(&["python3", "-m", "mpi4py", "x.py"]), "python3-2r");
        assert_eq!(name(&["python3"]), "python3-2r");
        // Not an interpreter.
        assert_eq!(name(&["pythonic", "x.py"]), "pythonic-2r");
    }

    #[test]
    fn given_a_crashed_run_of_the_same_command_then_resume_and_say_so() {
        let me = cmd(&["heat2d", "--rows", "8"]);
        let previous = holder(&["heat2d", "--rows", "8"], None);
        let first = decide_first_start("heat2d-2r", Some(&previous), Some(900), &me, false, false);
        assert_eq!(first.start, Start::IfAny);
        let note = first.note.unwrap();
        assert!(
            note.contains("pcmrun pid 42 on a") && note.contains("iteration 900"),
            "{note}"
        );
        // Interrupted or gave up: resumable too; finished or failed by itself: fresh.
        let stopped = holder(
            &["heat2d", "--rows", "8"],
            Some(Ended {
                code: 130,
                resumable: true,
            }),
        );
        let first = decide_first_start("s", Some(&stopped), Some(900), &me, false, false);
        assert_eq!(first.start, Start::IfAny);
        let done = holder(
            &["heat2d", "--rows", "8"],
            Some(Ended {
                code: 0,
                resumable: false,
            }),
        );
        let first = decide_first_start("s", Some(&done), Some(900), &me, false, false);
        assert_eq!(
            first,
            FirstStart {
                start: Start::Fresh,
                note: None
            }
        );
    }

    #[test]
    fn given_nothing_to_resume_or_fresh_or_another_command_then_fresh_and_named() {
        let me = cmd(&["heat2d", "--rows", "8"]);
        let previous = holder(&["heat2d", "--rows", "8"], None);
        let first = decide_first_start("s", Some(&previous), None, &me, false, false);
        assert_eq!(
            first,
            FirstStart {
                start: Start::Fresh,
                note: None
            }
        );
        let first = decide_first_start("s", Some(&previous), Some(5), &me, false, true);
        assert_eq!(first.start, Start::Fresh);
        assert!(first
            .note
            .unwrap()
            .contains("deleted at this run's first checkpoint"));
        let other = holder(&["heat2d", "--rows", "16"], None);
        let first = decide_first_start("s", Some(&other), Some(5), &me, false, false);
        assert_eq!(first.start, Start::Fresh);
        let note = first.note.unwrap();
        assert!(
            note.contains("heat2d --rows 16") && note.contains("--job-name"),
            "{note}"
        );
        let first = decide_first_start("s", None, Some(5), &me, true, false);
        assert_eq!(first.start, Start::FromCheckpoint);
    }

    #[test]
    fn given_a_held_lock_then_a_second_take_fails_naming_the_holder_and_a_later_one_resumes() {
        let dir = tempfile::tempdir().unwrap();
        let mut first =
            SeriesLock::take(dir.path(), "heat2d-2r", holder(&["heat2d", "-x"], None)).unwrap();
        let err = SeriesLock::take(dir.path(), "heat2d-2r", holder(&["heat2d"], None))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("in use by pcmrun pid 42 on a, running `heat2d -x`")
                && err.contains("--job-name"),
            "{err}"
        );
        // Another series is free.
        SeriesLock::take(dir.path(), "heat2d-3r", holder(&["heat2d"], None)).unwrap();
        first
            .ended(Ended {
                code: 130,
                resumable: true,
            })
            .unwrap();
        drop(first);
        let again = SeriesLock::take(dir.path(), "heat2d-2r", holder(&["heat2d"], None)).unwrap();
        assert_eq!(
            again.previous.and_then(|p| p.ended),
            Some(Ended {
                code: 130,
                resumable: true
            })
        );
    }
}
