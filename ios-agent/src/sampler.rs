//! The agent's profiling loop: every profile period, on a thread of its own (reading
//! `/proc` and asking pcmd block), it samples the node ([`ios_agent_profile::NodeSensor`])
//! and the ranks registered with the node's pcmd ([`ios_agent_profile::entity_profiles`]),
//! and hands the result to the driver. A tick that finds no pcmd at the socket starts one
//! ([`NodeDaemon::stats`]).

use std::time::Duration;

use ios_agent_profile::{
    entity_pids, entity_profiles, load_without_waiting, stalled_entities, NodeCgroupPath,
    NodeSampleExt as _, NodeSensor, SensorConfig,
};
use pcm_proto::NodeStats;
use tokio::sync::mpsc;

use crate::driver::Sample;
use crate::node_daemon::NodeDaemon;

/// The node's sensor (its speed probed: tens of milliseconds). A node that cannot be
/// profiled leaves the agent a giver of work only, with an error logged; but a cgroup named
/// as the node (`--node-cgroup`) that cannot be sensed is an error: the operator asked for it.
pub fn node_sensor(node_cgroup: Option<NodeCgroupPath>) -> anyhow::Result<Option<NodeSensor>> {
    let named = node_cgroup.is_some();
    match NodeSensor::new(SensorConfig::default().with_node_cgroup(node_cgroup)) {
        Ok(s) => {
            tracing::info!(scope = ?s.scope(), "profiling the node");
            Ok(Some(s))
        }
        Err(e) if named => Err(anyhow::anyhow!("--node-cgroup: {e}")),
        Err(e) => {
            tracing::error!(
                "cannot profile this node ({e}); the agent will only give work, never ask for it"
            );
            Ok(None)
        }
    }
}

/// Starts the loop; it ends when the driver drops the receiver. Without `partners` the
/// entities' communication partners are left out of their profiles, and with them the
/// model's communication term (`ios-agent join --communication-term`).
pub fn spawn(
    sensor: Option<NodeSensor>,
    pcmd: NodeDaemon,
    period: Duration,
    partners: bool,
) -> mpsc::Receiver<Sample> {
    let (tx, rx) = mpsc::channel(2);
    std::thread::Builder::new()
        .name("ios-agent-profiler".to_owned())
        .spawn(move || run(sensor, &pcmd, period, partners, &tx))
        .map_err(|e| tracing::error!("cannot start the profiling thread: {e}"))
        .ok();
    rx
}

fn run(
    mut sensor: Option<NodeSensor>,
    pcmd: &NodeDaemon,
    period: Duration,
    partners: bool,
    tx: &mpsc::Sender<Sample>,
) {
    let mut previous: Option<NodeStats> = None;
    let mut pcmd_ok = true;
    loop {
        std::thread::sleep(period);
        if tx.is_closed() {
            // The agent is ending: no pcmd is to be started for it.
            return;
        }
        let stats = match pcmd.stats() {
            Ok(s) => {
                if !pcmd_ok {
                    tracing::info!("pcmd answers again");
                }
                pcmd_ok = true;
                Some(s)
            }
            Err(e) => {
                if pcmd_ok {
                    tracing::warn!("cannot read the node's ranks from pcmd: {e}");
                }
                pcmd_ok = false;
                None
            }
        };
        let pids = stats.as_ref().map(entity_pids).unwrap_or_default();
        let node = sensor.as_mut().and_then(|s| {
            s.sample_with(&pids)
                .map_err(|e| tracing::warn!("node sample: {e}"))
                .ok()
        });
        let mut entities = stats
            .as_ref()
            .map(|s| entity_profiles(s, previous.as_ref()));
        if !partners {
            for e in entities.iter_mut().flatten() {
                e.partners.clear();
            }
        }
        for e in entities.iter().flatten() {
            tracing::debug!(
                entity = %e.id,
                cpu = e.cpu,
                compute_ms = e.compute.as_secs_f64() * 1e3,
                mpi_ms = e.mpi_wait.as_secs_f64() * 1e3,
                rate = e.iteration_rate,
                resident_s = e.resident.as_secs_f64(),
                "entity sample"
            );
        }
        if let Some(n) = &node {
            tracing::debug!(cores = n.cores, used = n.used, demand = n.demand, competing = ?n.competing(), "node sample");
        }
        // Ranks that busy-poll while waiting must not make the node look busy, or a node
        // whose ranks wait for a slow peer would never offer to take work.
        let profile = node.map(|n| {
            load_without_waiting(
                &n.profile(),
                entities.as_deref().unwrap_or(&[]),
                n.entities.as_ref(),
            )
        });
        let rank_pids = stats
            .as_ref()
            .map(|s| {
                s.jobs
                    .iter()
                    .flat_map(|j| {
                        j.ranks.iter().map(|r| {
                            let id = ios_agent_core::EntityId {
                                job: j.job.clone(),
                                rank: r.rank,
                            };
                            (id, r.pid)
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let sample = Sample {
            node: profile,
            entities,
            rank_pids,
            stalled: stats.as_ref().map(stalled_entities).unwrap_or_default(),
        };
        previous = stats;
        if tx.blocking_send(sample).is_err() {
            return;
        }
    }
}
