//! Faults the end-to-end tests inject from outside, as an operator or a crash would: nothing
//! in PCM knows about them (production code has no test hooks).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::urgent::Urgent;
use crate::{program, Group};

/// How long to wait for the job's processes and its replacement to appear.
const WAIT: Duration = Duration::from_secs(60);

/// Parent pid of `pid`, if it still exists.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may contain spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    fields.get(1)?.parse().ok()
}

fn descends_from(mut pid: u32, root: u32) -> bool {
    for _ in 0..64 {
        if pid == root {
            return true;
        }
        match parent_of(pid) {
            Some(parent) if parent > 1 => pid = parent,
            _ => return false,
        }
    }
    false
}

/// Live (non-zombie) processes running this worktree's heat2d under the launcher `root`:
/// other engineers' jobs on the machine run their own heat2d and are never touched.
pub fn job_processes(root: u32) -> BTreeSet<u32> {
    let program = program("heat2d");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                cmdline.split(|&b| b == 0).next() == Some(program.as_os_str().as_encoded_bytes())
            })
        })
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
            })
        })
        .filter(|&pid| descends_from(pid, root))
        .collect()
}

/// The replacement the test stopped or killed; killed for good on drop, since a stopped
/// process the runtime did not clean up must not outlive the test.
pub struct Victim(pub u32);

impl Victim {
    /// Whether the runtime left the process behind (alive or stopped, not a zombie).
    pub fn left_behind(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.0)).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0 as i32), Signal::SIGKILL);
    }
}

/// Waits for the job's `ranks` original processes, then for the first process beyond them
/// (the replacement, which only the originals can spawn), and sends it `signal` at once.
pub fn hit_replacement(job: &mut Group, ranks: usize, signal: Signal) -> (Victim, Instant) {
    // The poll for a replacement must run within the tenth of a second the replacement
    // spends starting: on a loaded machine a poller at the default priority once missed
    // it, the move completed, and the fault came too late.
    let _urgent = Urgent::raise(-10);
    let root = job.pid();
    let deadline = Instant::now() + WAIT;
    let mut originals = BTreeSet::new();
    loop {
        assert!(
            Instant::now() < deadline,
            "no replacement appeared within {WAIT:?} (originals {originals:?})\n{}",
            job.stderr_so_far()
        );
        assert!(
            job.running(),
            "the job ended before a replacement appeared\n{}",
            job.stderr_so_far()
        );
        for pid in job_processes(root) {
            if originals.len() < ranks {
                originals.insert(pid);
            } else if !originals.contains(&pid) {
                kill(Pid::from_raw(pid as i32), signal).unwrap();
                eprintln!("sent {signal} to replacement {pid} (originals {originals:?})");
                return (Victim(pid), Instant::now());
            }
        }
        // Spawning takes 0.1 s and more; a millisecond's poll catches it in start-up.
        std::thread::sleep(Duration::from_millis(1));
    }
}
