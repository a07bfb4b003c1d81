//! A short CPU speed probe: a fixed amount of work, timed in the calling thread's **CPU time**,
//! compared with the time the same work takes on a reference core.
//!
//! # What "speed" means (and what a cap means)
//!
//! The IOS agent's model (`ios_agent_core::model::NodeProfile`) splits a node's CPU into
//! `cores` (how many) and `speed` (how fast each is, relative to a reference core = 1.0); the
//! model's availability is
//! `free cores * speed`. A cgroup cap of 0.5 CPU is **not** a slow core: a thread in it runs at
//! full speed for 50 ms of every 100 ms period and is then throttled. So a cap goes into
//! `cores` (0.5), and the probe must not see it: it times the work in CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`), which stops while the thread is throttled or waits for a CPU
//! behind other threads. Only a core that really executes slower (a lower clock, an older
//! microarchitecture, a busy hyper-thread sibling) lowers `speed`. Both effects end up in
//! the model's `free cores * speed`, each counted once.
//!
//! Noise: an interrupt or a cache miss storm only makes one run slower, never faster, so the
//! probe repeats the work and keeps the fastest run.

use std::hint::black_box;
use std::time::{Duration, Instant};

use nix::time::{clock_gettime, ClockId};

/// CPU time of one [`DEFAULT_ROUNDS`]-round run on the reference core: the project's
/// development machine (Debian 12 VM, 2 cores), measured with `ios-sense --probe`
/// (fastest of 5 runs, several invocations). A node whose core does the work in half this
/// time has speed 2.0.
pub const REFERENCE_CPU_TIME: Duration = Duration::from_micros(18_000);
/// Work per run: rounds of the kernel below; about 18 ms on the reference core.
pub const DEFAULT_ROUNDS: u32 = 2000;
/// Runs per probe; the fastest counts.
pub const DEFAULT_REPEATS: u32 = 3;
/// Elements of the probe's working set (32 KiB of f64: stays in the L1/L2 cache, so the probe
/// measures the core, not the memory system, which other processes share).
const WORKING_SET: usize = 4096;

/// Settings of the probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpeedProbe {
    /// Rounds of work per run. Default [`DEFAULT_ROUNDS`].
    pub rounds: u32,
    /// Runs; the fastest counts. Default [`DEFAULT_REPEATS`].
    pub repeats: u32,
    /// CPU time of `rounds` rounds on the reference core. Default [`REFERENCE_CPU_TIME`]
    /// (scaled when `rounds` differs from [`DEFAULT_ROUNDS`]).
    pub reference: Duration,
}

impl Default for SpeedProbe {
    fn default() -> Self {
        SpeedProbe {
            rounds: DEFAULT_ROUNDS,
            repeats: DEFAULT_REPEATS,
            reference: REFERENCE_CPU_TIME,
        }
    }
}

/// Result of one probe.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SpeedSample {
    /// Speed relative to the reference core (`reference / cpu_time`).
    pub speed: f64,
    /// CPU time of the fastest run.
    pub cpu_time: Duration,
    /// Wall time of that run (larger than `cpu_time` when the thread was throttled or had to
    /// wait for a CPU).
    pub wall_time: Duration,
    /// Whether the thread CPU-time clock was unavailable and wall time was used instead (then
    /// a cap or competing load lowers the speed as well).
    pub wall_clock_fallback: bool,
}

impl SpeedProbe {
    /// Runs the probe in the calling thread (tens of milliseconds of CPU).
    pub fn run(&self) -> SpeedSample {
        let rounds = self.rounds.max(1);
        let mut best: Option<(Duration, Duration)> = None;
        let mut fallback = false;
        for _ in 0..self.repeats.max(1) {
            let cpu0 = thread_cpu_time();
            let wall0 = Instant::now();
            black_box(work(rounds));
            let wall = wall0.elapsed();
            let cpu = match (cpu0, thread_cpu_time()) {
                (Some(a), Some(b)) => b.saturating_sub(a),
                _ => {
                    fallback = true;
                    wall
                }
            };
            if best.is_none_or(|(c, _)| cpu < c) {
                best = Some((cpu, wall));
            }
        }
        let (cpu_time, wall_time) = best.unwrap_or_default();
        let reference =
            self.reference.as_secs_f64() * f64::from(rounds) / f64::from(DEFAULT_ROUNDS);
        // A clock that did not move (impossible for real work) must not give infinity.
        let speed = reference / cpu_time.as_secs_f64().max(1e-6);
        SpeedSample {
            speed,
            cpu_time,
            wall_time,
            wall_clock_fallback: fallback,
        }
    }
}

/// CPU time of the calling thread.
fn thread_cpu_time() -> Option<Duration> {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .ok()
        .map(Duration::from)
}

/// The fixed work: a Jacobi-style smoothing sweep over a small array (floating point, like the
/// stencils MPI applications run) and an integer hash chain (branches and multiplies).
fn work(rounds: u32) -> f64 {
    let mut a: Vec<f64> = (0..WORKING_SET).map(|i| (i % 17) as f64).collect();
    let mut b = vec![0.0; WORKING_SET];
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..rounds {
        for i in 1..WORKING_SET - 1 {
            b[i] = 0.25 * (a[i - 1] + 2.0 * a[i] + a[i + 1]);
        }
        std::mem::swap(&mut a, &mut b);
        for _ in 0..2048 {
            h ^= h << 13;
            h ^= h >> 7;
            h ^= h << 17;
            h = h.wrapping_mul(0x2545_f491_4f6c_dd1d);
        }
        a[0] = black_box((h & 0xff) as f64);
    }
    a.iter().sum::<f64>() + h as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_gives_a_positive_finite_speed_and_cpu_time_at_most_wall_time() {
        let sample = SpeedProbe {
            rounds: 20,
            repeats: 2,
            ..SpeedProbe::default()
        }
        .run();
        assert!(sample.speed.is_finite() && sample.speed > 0.0, "{sample:?}");
        assert!(!sample.wall_clock_fallback);
        // The thread clock and the monotonic clock are read in opposite order around the
        // work, so CPU time never exceeds wall time by more than clock granularity.
        assert!(
            sample.cpu_time <= sample.wall_time + Duration::from_millis(1),
            "{sample:?}"
        );
    }

    #[test]
    fn twice_the_work_counts_as_the_same_speed() {
        // The reference scales with the rounds, so the speed does not depend on them (within
        // noise: a generous factor, this is not a benchmark).
        let small = SpeedProbe {
            rounds: 25,
            repeats: 3,
            ..SpeedProbe::default()
        }
        .run();
        let large = SpeedProbe {
            rounds: 50,
            repeats: 3,
            ..SpeedProbe::default()
        }
        .run();
        let ratio = small.speed / large.speed;
        assert!((0.5..2.0).contains(&ratio), "{small:?} vs {large:?}");
    }
}
