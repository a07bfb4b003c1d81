//! The pool's synthetic load (issue 42, items 1 and 2): what the real agents decide when
//! nodes of an idle pool get loaded, and what the simulator says they decide.
//!
//! After the idle window, `--loaded` agents' nodes (spread over the sites) each get a
//! synthetic rank ([`crate::synthetic_rank`]: a one-rank job registered with the node's
//! pcmd, computing and reporting profiles as a PCM rank does, no MPI) and a CPU hog beside
//! it, both in the node's cgroup: two runnable threads on the node's one core, so the rank
//! runs at half speed where an idle node would give it all. The run reads the agents'
//! status every second until each loaded node's agent has asked its pcmd to move the rank
//! (the first `MigrationStarted` of the rank in its decisions), or `--load-timeout`; then
//! the loads stop (the rank refuses every move: it cannot leave). The same loads are then
//! given to the same pool in the simulator ([`crate::pool_sim::simulate_load`]), and the
//! summary sets the two side by side: how soon each node's agent decided, and where to.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use ios_agent_core::LatencyTier;
use ios_agent_proto::status::DecisionKind;
use mpi_ios_tests::cgroup::CpuCap;
use mpi_ios_tests::Group;
use serde::{Deserialize, Serialize};

use super::{round3, tier_name, true_tier, Run};
use crate::pool_sim::{load_job, simulate_load, Knowledge};
use crate::synthetic_rank::{unix_now_s, SyntheticEvent};

/// What the agent of one loaded node decided (or its twin in the simulator).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadedNode {
    /// The loaded node's host.
    pub host: String,
    /// Its site.
    pub site: usize,
    /// Seconds from the load's start until the node's agent asked its pcmd to move the
    /// synthetic rank (`None`: not within the timeout).
    pub first_move_s: Option<f64>,
    /// Where to.
    pub to_host: Option<String>,
    /// The destination's tier as seen from the loaded node, by the emulated truth.
    pub to_tier: Option<String>,
    /// Whether the destination was itself a loaded node.
    pub to_loaded: bool,
    /// Whether the request reached the synthetic rank through pcmd (the real pool only).
    pub delivered: bool,
}

/// The synthetic load and what the real and simulated agents decided for it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadSummary {
    /// Seconds from the first agent's start until the loads began.
    pub started_s: f64,
    /// The CPU cap of each loaded node, cores (a core shared among them, at most one
    /// each, so that the loads do not starve the rest of the pool on this machine).
    pub node_cores: f64,
    /// The longest wait for the decisions, s.
    pub timeout_s: f64,
    /// The real agents, one entry per loaded node.
    pub nodes: Vec<LoadedNode>,
    /// The simulator's agents, the same nodes with the same loads from the same time.
    pub simulated: Vec<LoadedNode>,
    /// Median of `first_move_s` over the nodes whose agent decided.
    pub first_move_median_s: Option<f64>,
    /// The same in the simulator.
    pub simulated_first_move_median_s: Option<f64>,
    /// Share of the first moves that went to a node of the loaded node's own site.
    pub local_share: Option<f64>,
    /// The same in the simulator.
    pub simulated_local_share: Option<f64>,
}

impl LoadSummary {
    /// Fills in the medians and shares from the nodes.
    fn aggregate(&mut self) {
        let (median, local) = aggregate(&self.nodes);
        self.first_move_median_s = median;
        self.local_share = local;
        let (median, local) = aggregate(&self.simulated);
        self.simulated_first_move_median_s = median;
        self.simulated_local_share = local;
    }
}

fn aggregate(nodes: &[LoadedNode]) -> (Option<f64>, Option<f64>) {
    let mut times: Vec<f64> = nodes.iter().filter_map(|n| n.first_move_s).collect();
    if times.is_empty() {
        return (None, None);
    }
    times.sort_by(f64::total_cmp);
    let median = if times.len() % 2 == 1 {
        times[times.len() / 2]
    } else {
        (times[times.len() / 2 - 1] + times[times.len() / 2]) / 2.0
    };
    let local = nodes
        .iter()
        .filter(|n| n.to_tier.as_deref() == Some(tier_name(LatencyTier::Local)))
        .count();
    (
        Some(round3(median)),
        Some(round3(local as f64 / times.len() as f64)),
    )
}

/// The CPU cap of each of `loaded` loaded nodes: a core shared among them (at most one
/// each), over the cgroups' 10 ms period, so that an agent beside its node's two busy
/// threads waits at most that long for its turn. At most [`MAX_LOADED`] nodes.
pub(super) fn loaded_node_cap(loaded: usize) -> Result<CpuCap> {
    let cores = (1.0 / loaded.max(1) as f64).min(1.0);
    CpuCap::try_cores(cores).with_context(|| {
        format!(
            "--loaded {loaded}: at most {MAX_LOADED} nodes share the core of the loads \
             (the smallest cap is a tenth of a core)"
        )
    })
}

/// Most nodes loaded at once: a core shared among them, at least the smallest cap each.
pub(super) const MAX_LOADED: usize = 10;

/// The agents to load: `count` of `agents`, spread evenly over the pool and its sites.
pub(super) fn loaded_agents(agents: usize, sites: usize, count: usize) -> Vec<usize> {
    let count = count.min(agents);
    let mut chosen: Vec<usize> = Vec::with_capacity(count);
    for j in 0..count {
        // Stepping by a share of the pool plus one moves each choice to the next site.
        let mut i = (j * (agents / count.max(1)) + j % sites.max(1)) % agents;
        while chosen.contains(&i) {
            i = (i + 1) % agents;
        }
        chosen.push(i);
    }
    chosen
}

/// Whether the synthetic rank `rank` reported a reconfiguration asked of it.
fn requested(rank: &Group) -> bool {
    std::fs::read_to_string(&rank.stdout)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<SyntheticEvent>(l).ok())
        .any(|e| matches!(e, SyntheticEvent::ReconfigurationRequested { .. }))
}

/// The processes loading one node.
struct Load {
    agent: usize,
    rank: Group,
    hog: Group,
}

impl Run {
    /// A command that runs `program` with `args` in agent `i`'s node cgroup.
    fn in_node(&self, i: usize, program: &str, args: &[&str]) -> Result<std::process::Command> {
        let node = self.agents[i]
            .node
            .as_ref()
            .context("the agent has no cgroup node to load")?;
        Ok(super::in_node(node, program.as_ref(), args))
    }

    /// Loads the nodes of [`Run::loaded`] and waits for their agents' decisions (see the
    /// module's doc); returns the summary without the simulated side.
    pub(super) fn load(&mut self, timeout: Duration) -> Result<LoadSummary> {
        let mut summary = LoadSummary {
            started_s: round3(self.started.elapsed().as_secs_f64()),
            node_cores: self.load_cap.as_cores(),
            timeout_s: timeout.as_secs_f64(),
            ..LoadSummary::default()
        };
        let since_unix = unix_now_s();
        let since = Instant::now();
        let me = std::env::current_exe().context("cannot find this program to run ranks")?;
        let me = me.to_str().context("this program's path is not UTF-8")?;
        let mut loads = Vec::new();
        for i in self.loaded.clone() {
            let a = &self.agents[i];
            let (host, socket) = (a.host.clone(), a.spec.pcmd_socket.display().to_string());
            let job = load_job(i);
            let rank = self.in_node(
                i,
                me,
                &[
                    "synthetic-rank",
                    "--socket",
                    &socket,
                    "--job",
                    &job,
                    "--host",
                    &host,
                ],
            )?;
            let hog = self.in_node(i, "sh", &["-c", "while :; do :; done"])?;
            loads.push(Load {
                agent: i,
                rank: Group::spawn(rank, self.dir.path(), &format!("load-rank-{host}"))?,
                hog: Group::spawn(hog, self.dir.path(), &format!("load-hog-{host}"))?,
            });
            summary.nodes.push(self.loaded_node(i, None, None));
        }
        eprintln!(
            "pool: {} nodes loaded (a synthetic rank and a CPU hog each); waiting up to {:.0} s for their agents to move the ranks",
            loads.len(),
            timeout.as_secs_f64()
        );
        // Until every agent decided and its request reached the rank (which reads pcmd's
        // messages once a report period).
        while since.elapsed() < timeout
            && summary
                .nodes
                .iter()
                .any(|n| n.first_move_s.is_none() || !n.delivered)
        {
            super::check_interrupt()?;
            std::thread::sleep(Duration::from_secs(1));
            for (k, load) in loads.iter_mut().enumerate() {
                summary.nodes[k].delivered = requested(&load.rank);
                if summary.nodes[k].first_move_s.is_some() {
                    continue;
                }
                if !load.rank.running() {
                    anyhow::bail!(
                        "the synthetic rank on {} exited:\n{}",
                        summary.nodes[k].host,
                        super::tail(&load.rank.stderr_so_far(), 20)
                    );
                }
                let Some(status) = self.agents[load.agent].status() else {
                    continue;
                };
                let job = load_job(load.agent);
                let first = status.decisions.iter().find_map(|d| match &d.what {
                    DecisionKind::MigrationStarted {
                        entities, to_host, ..
                    } if d.unix_time_s >= since_unix
                        && entities.iter().any(|e| e.job.as_str() == job) =>
                    {
                        Some((d.unix_time_s - since_unix, to_host.clone()))
                    }
                    _ => None,
                });
                if let Some((after, to_host)) = first {
                    let to = self.agents.iter().position(|a| a.host == to_host);
                    let delivered = summary.nodes[k].delivered;
                    summary.nodes[k] = LoadedNode {
                        delivered,
                        ..self.loaded_node(load.agent, Some(after), to)
                    };
                }
            }
        }
        for (k, load) in loads.iter_mut().enumerate() {
            load.rank.kill();
            load.hog.kill();
            summary.nodes[k].delivered = requested(&load.rank);
        }
        for n in &summary.nodes {
            eprintln!(
                "pool: load on {}: {}",
                n.host,
                match (&n.first_move_s, &n.to_host) {
                    (Some(t), Some(to)) => format!(
                        "moved to {to} ({}) after {t:.1} s{}",
                        n.to_tier.as_deref().unwrap_or("?"),
                        if n.delivered {
                            ""
                        } else {
                            ", NOT delivered to the rank"
                        }
                    ),
                    _ => "no move".to_owned(),
                }
            );
        }
        Ok(summary)
    }

    /// What agent `i` decided (after `after` seconds, to agent `to`), as the summary shows it.
    fn loaded_node(&self, i: usize, after: Option<f64>, to: Option<usize>) -> LoadedNode {
        let a = &self.agents[i];
        LoadedNode {
            host: a.host.clone(),
            site: a.site,
            first_move_s: after.map(round3),
            to_host: to.map(|j| self.agents[j].host.clone()),
            to_tier: to.map(|j| {
                tier_name(true_tier(&self.matrix, a.site, self.agents[j].site)).to_owned()
            }),
            to_loaded: to.is_some_and(|j| self.loaded.contains(&j)),
            delivered: false,
        }
    }

    /// The same loads in the simulator (after the real run, so that its CPU does not slow
    /// the delay router meanwhile).
    pub(super) fn simulate_load(&self, load: &mut LoadSummary, knowledge: Knowledge) -> Result<()> {
        let moves = simulate_load(
            self.args.agents,
            self.args.sites,
            knowledge,
            Duration::from_secs_f64(load.started_s),
            &self.loaded,
            load.node_cores,
            Duration::from_secs_f64(load.timeout_s),
            1,
        )?;
        load.simulated = self
            .loaded
            .iter()
            .map(|&i| {
                let m = moves.iter().find(|m| m.loaded == i);
                self.loaded_node(i, m.map(|m| m.after_s), m.map(|m| m.to))
            })
            .collect();
        load.aggregate();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loaded_agents_are_distinct_and_cover_the_sites() {
        let chosen = loaded_agents(300, 4, 6);
        assert_eq!(chosen.len(), 6);
        let mut unique = chosen.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 6, "{chosen:?}");
        let sites: std::collections::BTreeSet<usize> = chosen.iter().map(|i| i % 4).collect();
        assert_eq!(sites.len(), 4, "{chosen:?}");
        assert_eq!(loaded_agents(3, 2, 5).len(), 3);
    }

    #[test]
    fn loaded_nodes_share_one_core_and_too_many_are_refused() {
        assert_eq!(loaded_node_cap(1).unwrap().as_cores(), 1.0);
        assert!((loaded_node_cap(6).unwrap().as_cores() - 1.0 / 6.0).abs() < 1e-3);
        assert_eq!(loaded_node_cap(6).unwrap().period_us(), 10_000);
        assert!(loaded_node_cap(MAX_LOADED).is_ok());
        let e = loaded_node_cap(MAX_LOADED + 1).unwrap_err();
        assert!(format!("{e:#}").contains("--loaded 11"), "{e:#}");
    }

    #[test]
    fn the_medians_and_local_shares_count_only_the_nodes_that_decided() {
        let node = |t: Option<f64>, tier: &str| LoadedNode {
            first_move_s: t,
            to_tier: t.map(|_| tier.to_owned()),
            ..LoadedNode::default()
        };
        let (median, local) = aggregate(&[
            node(Some(40.0), "local"),
            node(Some(31.0), "regional"),
            node(None, ""),
            node(Some(35.0), "local"),
        ]);
        assert_eq!(median, Some(35.0));
        assert_eq!(local, Some(0.667));
        assert_eq!(aggregate(&[node(None, "")]), (None, None));
    }
}
