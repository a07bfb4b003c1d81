//! `mpi-ios-bench scale --seeds`: the scale experiment over many seeds, run side by side,
//! and each target of issue 15 summarised over them (mean, median, lowest seed, seeds that
//! miss it).
//!
//! Why: at 100 nodes a pool holds about nine jobs, and one seed's ratio to the oracle
//! moves by a tenth from one seed to the next (docs/results-log.md, "Scale"). A target is met
//! or missed by a configuration over many pools, not by one draw of it; the summaries in
//! docs/results-log.md were made so by scratch scripts until this command made them
//! reproducible.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::scale::{run_one, Network, Outcome, Pool, Strategy};
use crate::Table;

/// Seeds given on the command line: a list of seeds and ranges, `1-32` or `1,4,7-9`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seeds(pub Vec<u64>);

/// Parses `--seeds`: comma-separated seeds and inclusive ranges `a-b` (at most 10,000 seeds;
/// duplicates are dropped, the order kept).
pub fn parse_seeds(s: &str) -> Result<Seeds, String> {
    const MOST: u64 = 10_000;
    let number = |t: &str| {
        t.trim()
            .parse::<u64>()
            .map_err(|e| format!("{t:?} is not a seed: {e}"))
    };
    let mut seeds = Vec::new();
    for part in s.split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => {
                let a = number(part)?;
                (a, a)
            }
        };
        if b < a {
            return Err(format!(
                "{part:?}: a range goes from the lower seed to the higher"
            ));
        }
        if b - a >= MOST || seeds.len() as u64 + (b - a) >= MOST {
            return Err(format!("{s:?}: more than {MOST} seeds"));
        }
        for seed in a..=b {
            if !seeds.contains(&seed) {
                seeds.push(seed);
            }
        }
    }
    Ok(Seeds(seeds))
}

/// Runs every configuration, `jobs` at a time on threads of this process, and returns the
/// outcomes in the order of `configs`. `done` is called as each one ends (from the thread
/// that ran it), for progress. Each simulation is deterministic for its seed, so the
/// outcomes do not depend on `jobs` (the wall and CPU seconds and the peak RSS aside; the
/// peak RSS is the process's, over all the runs at once).
pub fn run_all(
    configs: &[(Pool, Strategy)],
    jobs: usize,
    done: impl Fn(&Outcome, usize, usize) + Sync,
) -> Vec<Outcome> {
    let next = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    let slots: Mutex<Vec<Option<Outcome>>> = Mutex::new(vec![None; configs.len()]);
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, configs.len().max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(pool, strategy)) = configs.get(i) else {
                    break;
                };
                let outcome = run_one(pool, strategy);
                let n = finished.fetch_add(1, Ordering::Relaxed) + 1;
                done(&outcome, n, configs.len());
                // A poisoned lock means another run panicked; that panic ends the scope.
                if let Ok(mut slots) = slots.lock() {
                    slots[i] = Some(outcome);
                }
            });
        }
    });
    slots
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .flatten()
        .collect()
}

/// A configuration over seeds: pool size, network, strategy and the share of malleable
/// jobs in thousandths (0: none).
type Config = (usize, Network, Strategy, u32);

/// The configuration of a run.
fn config(o: &Outcome) -> Config {
    (
        o.nodes,
        o.network,
        o.strategy,
        (o.malleable_share * 1000.0).round() as u32,
    )
}

/// A configuration's strategy, marked when the workload had malleable jobs.
fn label(c: Config) -> String {
    if c.3 > 0 {
        format!("{} (malleable)", c.2.name())
    } else {
        c.2.name().to_owned()
    }
}

/// The configurations among `outcomes`, in first-seen order.
fn configs(outcomes: &[Outcome]) -> Vec<Config> {
    let mut out: Vec<Config> = Vec::new();
    for o in outcomes {
        let c = config(o);
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// The run of `strategy` on the pool of `o` (same seed, size, network and workload).
fn sibling<'a>(outcomes: &'a [Outcome], o: &Outcome, strategy: Strategy) -> Option<&'a Outcome> {
    outcomes
        .iter()
        .find(|x| x.strategy == strategy && x.seed == o.seed && x.same_pool(o))
}

/// Per seed, a ratio of each run of `config` to the run of `against` on the same pool
/// (`value` of each), with the seed.
fn ratios(
    outcomes: &[Outcome],
    config: Config,
    against: Strategy,
    value: Measure,
) -> Vec<(u64, f64)> {
    ratios_to(outcomes, config, (against, config.3), value)
}

/// Mean, median, lowest (with its seed), highest, and how many fall under `target`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OverSeeds {
    /// Seeds.
    pub n: usize,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub median: f64,
    /// Lowest value and its seed.
    pub lowest: (f64, u64),
    /// Highest value.
    pub highest: f64,
    /// Seeds under the target.
    pub under: usize,
}

impl OverSeeds {
    /// The summary of `values` against `target`; `None` if there are none.
    pub fn of(values: &[(u64, f64)], target: f64) -> Option<OverSeeds> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        let mut sorted: Vec<f64> = values.iter().map(|(_, v)| *v).collect();
        sorted.sort_by(f64::total_cmp);
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        let lowest = values
            .iter()
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
            .map(|&(s, v)| (v, s))?;
        Some(OverSeeds {
            n,
            mean: sorted.iter().sum::<f64>() / n as f64,
            median,
            lowest,
            highest: sorted[n - 1],
            under: values.iter().filter(|(_, v)| *v < target).count(),
        })
    }

    fn cells(&self) -> [String; 5] {
        [
            format!("{:.3}", self.mean),
            format!("{:.3}", self.median),
            format!("{:.2} (seed {})", self.lowest.0, self.lowest.1),
            format!("{:.2}", self.highest),
            format!("{}/{}", self.under, self.n),
        ]
    }
}

/// Target of a strategy's throughput against the oracle's (issue 15).
pub const ORACLE_TARGET: f64 = 0.9;
/// Target of NSp2p's and NSc2c's hypercube and sparse throughput against random stealing's.
pub const RANDOM_TARGET: f64 = 2.0;

/// Each strategy's throughput relative to the oracle on the same pool, one row per seed,
/// one column per configuration.
pub fn per_seed_table(outcomes: &[Outcome]) -> Table {
    let columns: Vec<Config> = configs(outcomes)
        .into_iter()
        .filter(|c| c.2 != Strategy::Oracle)
        .collect();
    let headers: Vec<String> = std::iter::once("seed".to_owned())
        .chain(
            columns
                .iter()
                .map(|&c| format!("{} {} {}", c.0, c.1.name(), label(c))),
        )
        .collect();
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut t = Table::new(&headers);
    let mut seeds: Vec<u64> = outcomes.iter().map(|o| o.seed).collect();
    seeds.sort_unstable();
    seeds.dedup();
    for seed in seeds {
        let mut row = vec![seed.to_string()];
        for &c in &columns {
            let cell = ratios(outcomes, c, Strategy::Oracle, |o| o.iterations)
                .into_iter()
                .find(|(s, _)| *s == seed)
                .map_or("-".to_owned(), |(_, r)| format!("{r:.3}"));
            row.push(cell);
        }
        t.push(row);
    }
    t
}

/// Per configuration, throughput relative to the oracle over the seeds, and thrashing and
/// messages (means; the most moves of one rank in a hold-down and the ping-pongs over all
/// seeds).
pub fn summary_table(outcomes: &[Outcome]) -> Table {
    let mut t = Table::new(&[
        "nodes",
        "network",
        "strategy",
        "seeds",
        "thr/oracle mean",
        "median",
        "lowest",
        "highest",
        "under 0.90",
        "first 10 min",
        "after",
        "hypercube/oracle",
        "sparse/oracle",
        "moves/entity/h",
        "max moves in hold-down",
        "ping-pongs",
        "msgs/node/s",
    ]);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let shown = |v: &[f64]| {
        if v.is_empty() {
            "-".to_owned()
        } else {
            format!("{:.3}", mean(v))
        }
    };
    for c in configs(outcomes) {
        if c.2 == Strategy::Oracle {
            continue;
        }
        let runs: Vec<&Outcome> = outcomes.iter().filter(|o| config(o) == c).collect();
        let Some(thr) = OverSeeds::of(
            &ratios(outcomes, c, Strategy::Oracle, |o| o.iterations),
            ORACLE_TARGET,
        ) else {
            continue;
        };
        let pattern = |k: usize| {
            let r: Vec<f64> = runs
                .iter()
                .filter_map(|o| {
                    let b = sibling(outcomes, o, Strategy::Oracle)?.by_pattern[k];
                    (b > 0.0).then(|| o.by_pattern[k] / b)
                })
                .collect();
            format!("{:.3}", mean(&r))
        };
        let moves: Vec<f64> = runs
            .iter()
            .map(|o| o.migrations as f64 / o.entities.max(1) as f64 / (o.seconds / 3600.0))
            .collect();
        let messages: Vec<f64> = runs.iter().map(|o| o.messages_per_node_second()).collect();
        // The oracle places every job at its first period; the agents gather over minutes.
        let (early, late): (Vec<f64>, Vec<f64>) = runs
            .iter()
            .filter_map(|o| split(o, sibling(outcomes, o, Strategy::Oracle)?))
            .unzip();
        let [m, med, low, high, under] = thr.cells();
        t.push(vec![
            c.0.to_string(),
            c.1.name().to_owned(),
            label(c),
            thr.n.to_string(),
            m,
            med,
            low,
            high,
            under,
            shown(&early),
            shown(&late),
            pattern(0),
            pattern(2),
            format!("{:.2}", mean(&moves)),
            runs.iter()
                .map(|o| o.max_moves_per_hold_down)
                .max()
                .unwrap_or(0)
                .to_string(),
            runs.iter().map(|o| o.ping_pongs).sum::<usize>().to_string(),
            format!("{:.3}", mean(&messages)),
        ]);
    }
    t
}

/// Name of the typed summary `scale --seeds` writes in its `--out` directory.
pub const SUMMARY_FILE: &str = "scale.summary.json";

/// One seed's run of a configuration against the oracle on the same pool.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SeedSummary {
    /// Seed.
    pub seed: u64,
    /// Iterations over the run, relative to the oracle's.
    pub of_oracle: f64,
    /// The same in the first [`EARLY_MINUTES`] (`None`: the run is not longer).
    pub first_10_min: Option<f64>,
    /// Messages per node and second.
    pub msgs_per_node_s: f64,
}

/// A configuration over the seeds ([`summary_table`]'s row, typed).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ConfigSummary {
    /// Nodes at the start.
    pub nodes: usize,
    /// Network.
    pub network: String,
    /// Strategy (marked when the workload had malleable jobs).
    pub strategy: String,
    /// Mean over the seeds of `of_oracle`.
    pub of_oracle_mean: f64,
    /// Seeds whose `of_oracle` is under [`ORACLE_TARGET`].
    pub seeds_under_target: usize,
    /// Mean over the seeds of `first_10_min` (those that have one).
    pub first_10_min_mean: Option<f64>,
    /// Mean over the seeds of the messages per node and second.
    pub msgs_per_node_s: f64,
    /// Largest number of moves of one entity within one hold-down, over the seeds.
    pub max_moves_in_hold_down: usize,
    /// Ping-pongs over the seeds.
    pub ping_pongs: usize,
    /// Each seed.
    pub seeds: Vec<SeedSummary>,
}

/// The typed summary of a `scale --seeds` run, one entry per configuration but the oracle.
pub fn summary(outcomes: &[Outcome]) -> Vec<ConfigSummary> {
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let mut out = Vec::new();
    for c in configs(outcomes) {
        if c.2 == Strategy::Oracle {
            continue;
        }
        let seeds: Vec<SeedSummary> = outcomes
            .iter()
            .filter(|o| config(o) == c)
            .filter_map(|o| {
                let oracle = sibling(outcomes, o, Strategy::Oracle)?;
                (oracle.iterations > 0.0).then(|| SeedSummary {
                    seed: o.seed,
                    of_oracle: o.iterations / oracle.iterations,
                    first_10_min: split(o, oracle).map(|(early, _)| early),
                    msgs_per_node_s: o.messages_per_node_second(),
                })
            })
            .collect();
        if seeds.is_empty() {
            continue;
        }
        let runs = || outcomes.iter().filter(|o| config(o) == c);
        let ratios: Vec<f64> = seeds.iter().map(|s| s.of_oracle).collect();
        let early: Vec<f64> = seeds.iter().filter_map(|s| s.first_10_min).collect();
        let messages: Vec<f64> = seeds.iter().map(|s| s.msgs_per_node_s).collect();
        out.push(ConfigSummary {
            nodes: c.0,
            network: c.1.name().to_owned(),
            strategy: label(c),
            of_oracle_mean: mean(&ratios).unwrap_or(0.0),
            seeds_under_target: ratios.iter().filter(|r| **r < ORACLE_TARGET).count(),
            first_10_min_mean: mean(&early),
            msgs_per_node_s: mean(&messages).unwrap_or(0.0),
            max_moves_in_hold_down: runs().map(|o| o.max_moves_per_hold_down).max().unwrap_or(0),
            ping_pongs: runs().map(|o| o.ping_pongs).sum(),
            seeds,
        });
    }
    out
}

/// Minutes of a run the summary counts as its start ([`split`]).
const EARLY_MINUTES: usize = 10;

/// A run's iterations relative to the oracle's on the same pool in its first
/// [`EARLY_MINUTES`] and after them; `None` for a run not longer than that.
fn split(o: &Outcome, oracle: &Outcome) -> Option<(f64, f64)> {
    let at = |x: &Outcome, m: usize| x.iterations_by_minute.get(m.checked_sub(1)?).copied();
    let end = o
        .iterations_by_minute
        .len()
        .min(oracle.iterations_by_minute.len());
    if end <= EARLY_MINUTES {
        return None;
    }
    let (a10, b10) = (at(o, EARLY_MINUTES)?, at(oracle, EARLY_MINUTES)?);
    let (a, b) = (at(o, end)?, at(oracle, end)?);
    (b10 > 0.0 && b > b10).then(|| (a10 / b10, (a - a10) / (b - b10)))
}

/// The agents' strategies that the 2x-random target is about, and the random stealing
/// each is compared with.
const AGAINST_RANDOM: [(Strategy, Strategy); 3] = [
    (Strategy::NsP2p, Strategy::Random),
    (Strategy::NsC2c, Strategy::Random),
    (Strategy::Paper, Strategy::RandomPaper),
];

/// What a summary reads from a run.
type Measure = fn(&Outcome) -> f64;

/// The patterns the 2x-random target is about, and their iterations in a run.
const PATTERNS: [(&str, Measure); 2] = [
    ("hypercube", |o| o.by_pattern[0]),
    ("sparse", |o| o.by_pattern[2]),
];

/// Per configuration that has a random-stealing run beside it, the hypercube and sparse
/// jobs' throughput over random stealing's, over the seeds.
pub fn random_table(outcomes: &[Outcome]) -> Table {
    let mut t = Table::new(&[
        "nodes",
        "network",
        "strategy / random",
        "pattern",
        "mean",
        "median",
        "lowest",
        "highest",
        "under 2",
    ]);
    for c in configs(outcomes) {
        let Some(&(_, random)) = AGAINST_RANDOM.iter().find(|(s, _)| *s == c.2) else {
            continue;
        };
        for (name, value) in PATTERNS {
            let Some(s) = OverSeeds::of(&ratios(outcomes, c, random, value), RANDOM_TARGET) else {
                continue;
            };
            let [m, med, low, high, under] = s.cells();
            t.push(vec![
                c.0.to_string(),
                c.1.name().to_owned(),
                format!("{} / {}", label(c), random.name()),
                name.to_owned(),
                m,
                med,
                low,
                high,
                under,
            ]);
        }
    }
    t
}

/// The target ratios of issue 15 over the seeds, as lines: each target's mean, with the
/// median and the seeds that miss it.
pub fn targets(outcomes: &[Outcome]) -> Vec<String> {
    let mut out = Vec::new();
    let mut sizes: Vec<usize> = outcomes.iter().map(|o| o.nodes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let verdict = |s: &OverSeeds, target: f64| {
        if s.mean >= target {
            "met on the mean"
        } else {
            "missed on the mean"
        }
    };
    for &nodes in &sizes {
        for c in [
            (nodes, Network::Internet, Strategy::NsP2p, 0),
            (nodes, Network::Grid, Strategy::NsC2c, 0),
        ] {
            let r = ratios(outcomes, c, Strategy::Oracle, |o| o.iterations);
            if let Some(s) = OverSeeds::of(&r, ORACLE_TARGET) {
                out.push(format!(
                    "{nodes} nodes, {}: {} / oracle = {:.3} over {} seeds, median {:.3}, lowest {:.2} (seed {}), {} seeds under {ORACLE_TARGET:.2} (target >= {ORACLE_TARGET:.2}: {})",
                    c.1.name(),
                    c.2.name(),
                    s.mean,
                    s.n,
                    s.median,
                    s.lowest.0,
                    s.lowest.1,
                    s.under,
                    verdict(&s, ORACLE_TARGET)
                ));
            }
        }
        for network in [Network::Internet, Network::Grid] {
            for (strategy, random) in AGAINST_RANDOM {
                let c = (nodes, network, strategy, 0);
                for (name, value) in PATTERNS {
                    let r = ratios(outcomes, c, random, value);
                    if let Some(s) = OverSeeds::of(&r, RANDOM_TARGET) {
                        out.push(format!(
                            "{nodes} nodes, {}: {} / {} on {name} = {:.2} over {} seeds, lowest {:.2} (seed {}), {} seeds under {RANDOM_TARGET:.0} (target >= {RANDOM_TARGET:.0}: {})",
                            network.name(),
                            strategy.name(),
                            random.name(),
                            s.mean,
                            s.n,
                            s.lowest.0,
                            s.lowest.1,
                            s.under,
                            verdict(&s, RANDOM_TARGET)
                        ));
                    }
                }
            }
        }
    }
    out
}

/// Per seed, the ratio of each run of `config` to the run of `against` (a strategy and a
/// share of malleable jobs, in thousandths) on the same seed, size and network, with the
/// seed: [`ratios`] across workloads.
fn ratios_to(
    outcomes: &[Outcome],
    config: Config,
    against: (Strategy, u32),
    value: Measure,
) -> Vec<(u64, f64)> {
    outcomes
        .iter()
        .filter(|o| self::config(o) == config)
        .filter_map(|o| {
            let other = outcomes.iter().find(|x| {
                self::config(x) == (o.nodes, o.network, against.0, against.1) && x.seed == o.seed
            })?;
            let b = value(other);
            (b > 0.0).then(|| (o.seed, value(o) / b))
        })
        .collect()
}

/// With `--malleable`: per configuration run on the malleable workload, each strategy's
/// throughput against the oracle without malleable jobs and with them (each against the
/// oracle of its own workload), over the seeds, its throughput with them over its own
/// without, the resizes per malleable job and hour, ping-pongs of resizes and moves, and
/// the malleable jobs' mean width at the end, the mean speed of the nodes grows added
/// ranks onto, and the seconds per iteration the jobs wider than they started compute and
/// wait on latency after the tenth minute (where grown jobs lose against the oracle's).
pub fn malleable_table(outcomes: &[Outcome]) -> Table {
    let mut t = Table::new(&[
        "nodes",
        "network",
        "strategy",
        "seeds",
        "thr/oracle, fixed jobs",
        "thr/oracle, malleable",
        "lowest",
        "under 0.90",
        "malleable/fixed",
        "grows/job/h",
        "shrinks/job/h",
        "forced",
        "refused/run",
        "resize ping-pongs",
        "within 2 hold-downs",
        "move ping-pongs",
        "moves/entity/h",
        "width at end",
        "grown onto speed",
        "wider jobs compute s",
        "wider jobs exchange s",
    ]);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let mean_some = |v: Vec<f64>, digits: usize| {
        if v.is_empty() {
            "-".to_owned()
        } else {
            format!("{:.digits$}", v.iter().sum::<f64>() / v.len() as f64)
        }
    };
    let mean_of = |v: &[(u64, f64)]| {
        if v.is_empty() {
            "-".to_owned()
        } else {
            format!(
                "{:.3}",
                v.iter().map(|(_, x)| x).sum::<f64>() / v.len() as f64
            )
        }
    };
    for c in configs(outcomes).into_iter().filter(|c| c.3 > 0) {
        let runs: Vec<&Outcome> = outcomes.iter().filter(|o| config(o) == c).collect();
        let malleable = ratios(outcomes, c, Strategy::Oracle, |o| o.iterations);
        let Some(thr) = OverSeeds::of(&malleable, ORACLE_TARGET) else {
            continue;
        };
        // NSp2p without resizes is NSp2p on the workload without malleable jobs.
        let fixed_strategy = match c.2 {
            Strategy::NsP2pNoResize => Strategy::NsP2p,
            s => s,
        };
        let fixed = ratios(
            outcomes,
            (c.0, c.1, fixed_strategy, 0),
            Strategy::Oracle,
            |o| o.iterations,
        );
        let gain = ratios_to(outcomes, c, (fixed_strategy, 0), |o| o.iterations);
        let per_hour: Vec<(f64, f64)> = runs.iter().map(|o| o.resizes_per_job_hour()).collect();
        let grows: Vec<f64> = per_hour.iter().map(|p| p.0).collect();
        let shrinks: Vec<f64> = per_hour.iter().map(|p| p.1).collect();
        let refused: Vec<f64> = runs.iter().map(|o| o.resizes_refused as f64).collect();
        let moves: Vec<f64> = runs
            .iter()
            .map(|o| o.migrations as f64 / o.entities.max(1) as f64 / (o.seconds / 3600.0))
            .collect();
        let widths: Vec<f64> = runs.iter().map(|o| o.malleable_width).collect();
        let [_, _, low, _, under] = thr.cells();
        t.push(vec![
            c.0.to_string(),
            c.1.name().to_owned(),
            c.2.name().to_owned(),
            thr.n.to_string(),
            mean_of(&fixed),
            format!("{:.3}", thr.mean),
            low,
            under,
            mean_of(&gain),
            format!("{:.2}", mean(&grows)),
            format!("{:.2}", mean(&shrinks)),
            runs.iter()
                .map(|o| o.forced_shrinks)
                .sum::<usize>()
                .to_string(),
            format!("{:.1}", mean(&refused)),
            runs.iter()
                .map(|o| o.resize_ping_pongs)
                .sum::<usize>()
                .to_string(),
            runs.iter()
                .map(|o| o.resize_reversals)
                .sum::<usize>()
                .to_string(),
            runs.iter().map(|o| o.ping_pongs).sum::<usize>().to_string(),
            format!("{:.2}", mean(&moves)),
            format!("{:.2}", mean(&widths)),
            mean_some(runs.iter().filter_map(|o| o.grown_onto_speed).collect(), 2),
            mean_some(
                runs.iter()
                    .filter_map(|o| o.wider_jobs.map(|w| w.0))
                    .collect(),
                4,
            ),
            mean_some(
                runs.iter()
                    .filter_map(|o| o.wider_jobs.map(|w| w.1))
                    .collect(),
                4,
            ),
        ]);
    }
    t
}

/// With `--malleable`, issue 38's scale targets over the seeds, as lines: NSp2p (and
/// NSc2c, random) against the malleable oracle, NSp2p against itself without resizes, and
/// the resize ping-pongs.
pub fn malleable_targets(outcomes: &[Outcome]) -> Vec<String> {
    let mut out = Vec::new();
    let mut pools: Vec<(usize, Network, u32)> = Vec::new();
    for o in outcomes {
        let c = config(o);
        if c.3 > 0 && !pools.contains(&(c.0, c.1, c.3)) {
            pools.push((c.0, c.1, c.3));
        }
    }
    for (nodes, network, share) in pools {
        let net = network.name();
        for strategy in [Strategy::NsP2p, Strategy::NsC2c, Strategy::Random] {
            let c = (nodes, network, strategy, share);
            let r = ratios(outcomes, c, Strategy::Oracle, |o| o.iterations);
            let Some(s) = OverSeeds::of(&r, ORACLE_TARGET) else {
                continue;
            };
            let fixed = OverSeeds::of(
                &ratios(
                    outcomes,
                    (nodes, network, strategy, 0),
                    Strategy::Oracle,
                    |o| o.iterations,
                ),
                ORACLE_TARGET,
            );
            let target = if strategy == Strategy::NsP2p {
                format!(
                    " (target >= {ORACLE_TARGET:.2}: {})",
                    if s.mean >= ORACLE_TARGET {
                        "met on the mean"
                    } else {
                        "missed on the mean"
                    }
                )
            } else {
                String::new()
            };
            out.push(format!(
                "{nodes} nodes, {net}, malleable: {} / malleable oracle = {:.3} over {} seeds, lowest {:.2} (seed {}), {} seeds under {ORACLE_TARGET:.2}{target}; without malleable jobs {}",
                strategy.name(),
                s.mean,
                s.n,
                s.lowest.0,
                s.lowest.1,
                s.under,
                fixed.map_or("-".to_owned(), |f| format!("{:.3} against its oracle", f.mean)),
            ));
        }
        let c = (nodes, network, Strategy::NsP2p, share);
        let r = ratios_to(outcomes, c, (Strategy::NsP2pNoResize, share), |o| {
            o.iterations
        });
        if let Some(s) = OverSeeds::of(&r, 1.0) {
            out.push(format!(
                "{nodes} nodes, {net}, malleable: NSp2p / NSp2p-noresize (migration only) = {:.3} over {} seeds, lowest {:.3} (seed {}), highest {:.3}, {} seeds under 1",
                s.mean, s.n, s.lowest.0, s.lowest.1, s.highest, s.under
            ));
        }
        let agents: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| {
                let k = config(o);
                (k.0, k.1, k.3) == (nodes, network, share)
                    && !matches!(o.strategy, Strategy::Oracle | Strategy::None)
            })
            .collect();
        let pongs: usize = agents.iter().map(|o| o.resize_ping_pongs).sum();
        let reversals: usize = agents.iter().map(|o| o.resize_reversals).sum();
        out.push(format!(
            "{nodes} nodes, {net}, malleable: {pongs} resize ping-pongs (a job grown and shrunk back, or the reverse, within its hold-down) over {} runs of the agents (target 0); {reversals} within two hold-downs",
            agents.len()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::scale::SCALE_MAX_PEERS;

    #[test]
    fn seeds_parse_as_lists_and_ranges_and_bad_ones_are_named() {
        assert_eq!(parse_seeds("1-4"), Ok(Seeds(vec![1, 2, 3, 4])));
        assert_eq!(parse_seeds("7,1-2,2"), Ok(Seeds(vec![7, 1, 2])));
        assert_eq!(parse_seeds(" 5 "), Ok(Seeds(vec![5])));
        for bad in ["", "a", "3-1", "1-", "0-10000", "1,x-2"] {
            let e = parse_seeds(bad).expect_err(bad);
            assert!(!e.is_empty(), "{bad}");
        }
        assert!(parse_seeds("3-1").is_err_and(|e| e.contains("3-1")));
    }

    #[test]
    fn over_seeds_gives_the_mean_median_lowest_and_misses() {
        let s =
            OverSeeds::of(&[(1, 0.8), (2, 1.0), (3, 0.95), (4, 0.85)], 0.9).expect("four values");
        assert_eq!(s.n, 4);
        assert!((s.mean - 0.9).abs() < 1e-12);
        assert!((s.median - 0.9).abs() < 1e-12);
        assert_eq!(s.lowest, (0.8, 1));
        assert_eq!(s.highest, 1.0);
        assert_eq!(s.under, 2);
        assert_eq!(OverSeeds::of(&[], 0.9), None);
    }

    /// Runs side by side give what the same runs give one after the other: the simulations
    /// share nothing, and the summary does not depend on `--jobs`.
    #[test]
    fn given_seeds_run_side_by_side_then_each_outcome_is_the_one_run_alone() {
        let pool = |seed| Pool {
            nodes: 40,
            network: Network::Internet,
            seed,
            length: Duration::from_secs(12 * 60),
            waiting_as_idle: false,
            one_request_per_reconfiguration: false,
            refused_while_moving: false,
            trace_jobs: false,
            max_peers: SCALE_MAX_PEERS,
            malleable_share: 0.0,
        };
        let configs: Vec<(Pool, Strategy)> = [1, 2]
            .into_iter()
            .flat_map(|s| [(pool(s), Strategy::NsP2p), (pool(s), Strategy::Oracle)])
            .collect();
        let calls = AtomicUsize::new(0);
        let together = run_all(&configs, 3, |_, n, total| {
            assert!(n <= total);
            calls.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(calls.into_inner(), configs.len());
        let alone = run_all(&configs, 1, |_, _, _| {});
        let key = |o: &Outcome| (o.seed, o.strategy, o.iterations, o.migrations, o.messages);
        assert_eq!(
            together.iter().map(key).collect::<Vec<_>>(),
            alone.iter().map(key).collect::<Vec<_>>()
        );
        assert_eq!(
            together
                .iter()
                .map(|o| (o.seed, o.strategy))
                .collect::<Vec<_>>(),
            configs
                .iter()
                .map(|(p, s)| (p.seed, *s))
                .collect::<Vec<_>>()
        );
        // Seeds differ: a summary over seeds is over different pools.
        assert_ne!(together[0].iterations, together[2].iterations);
        let t = per_seed_table(&together);
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.headers, vec!["seed", "40 Internet NSp2p"]);
        // The first 10 minutes and the 2 after them, each against the oracle's same span.
        let oracle = &together[1];
        assert_eq!(split(oracle, oracle), Some((1.0, 1.0)));
        let (early, late) = split(&together[0], oracle).expect("12 minutes");
        let whole = together[0].iterations / oracle.iterations;
        assert!(
            early.min(late) <= whole && whole <= early.max(late),
            "{early} {late} {whole}"
        );
        let summary = summary_table(&together);
        let column = |name: &str| summary.headers.iter().position(|h| h == name);
        let first = column("first 10 min").expect("a column of the first 10 minutes");
        assert_ne!(summary.rows[0][first], "-");
        // The typed summary: NSp2p's two seeds, each against its own oracle run.
        let typed = super::summary(&together);
        assert_eq!(typed.len(), 1);
        assert_eq!(typed[0].strategy, "NSp2p");
        assert_eq!(
            typed[0].seeds.iter().map(|s| s.seed).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert!((typed[0].seeds[0].of_oracle - whole).abs() < 1e-12);
        assert_eq!(typed[0].seeds[0].first_10_min, Some(early));
        let text = serde_json::to_string(&typed).expect("serialises");
        let back: Vec<ConfigSummary> = serde_json::from_str(&text).expect("reads back");
        assert_eq!(back, typed);
        let lines = targets(&together);
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("40 nodes, Internet: NSp2p / oracle")
                    && l.contains("over 2 seeds")),
            "{lines:?}"
        );
    }
}
