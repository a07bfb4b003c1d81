//! The simulator's fidelity: the emulated-node scenarios of Figures 13 to 16 replayed in
//! `ios_agent_core::sim` with the figures' settings, the simulator's first move set beside
//! the one the emulated run made (`mpi-ios-bench scale --fidelity`).

use std::time::Duration;

use ios_agent_core::sim::{NodeSpec, Pattern, Sim};
use ios_agent_core::Config;

use crate::Table;

/// One emulated-node scenario replayed in the simulator: two ranks of one job on node-a and node-b, CPU caps as the figures', a hog on
/// node-b and/or node-c joining, the figures' agent settings (profile period 1 s, hold-down
/// 0.6 x the first event's time, light threshold 0.3 as `ios-agent join`'s default).
#[derive(Debug, Clone, Copy)]
pub struct Replay {
    /// Name.
    pub name: &'static str,
    /// CPU caps of node-a, node-b, node-c.
    pub caps: [f64; 3],
    /// When the hog starts on node-b, seconds.
    pub hog_at: Option<f64>,
    /// When node-c joins, seconds (`None`: in the pool from the start).
    pub join_at: Option<f64>,
    /// Whether node-c exists at all.
    pub node_c: bool,
    /// What the emulated run did: when rank 1 moved (seconds since the start), and where
    /// (node index), from docs/results-log.md.
    pub measured: (f64, usize),
}

/// The three scenarios, with what docs/results-log.md measured on emulated nodes.
pub const REPLAYS: [Replay; 3] = [
    Replay {
        name: "Figures 13/14: hog on node-b at 5 s, node-c joins at 7 s",
        caps: [0.6, 0.6, 0.6],
        hog_at: Some(5.0),
        join_at: Some(7.0),
        node_c: true,
        measured: (8.1, 2),
    },
    Replay {
        name: "Figure 15: hog on node-b at 5 s, node-a has 1.2 cores",
        caps: [1.2, 0.6, 0.0],
        hog_at: Some(5.0),
        join_at: None,
        node_c: false,
        measured: (6.1, 0),
    },
    Replay {
        name: "Figure 16: slow node-b (0.2), fast node-c joins at 5 s",
        caps: [0.6, 0.2, 0.6],
        hog_at: None,
        join_at: Some(5.0),
        node_c: true,
        measured: (5.7, 2),
    },
];

/// Replays one scenario; returns the simulator's first move of a rank: (seconds since the
/// start, from, to), if any within 30 s.
pub fn replay(r: &Replay, waiting_as_idle: bool) -> Option<(f64, usize, usize)> {
    let first = match (r.hog_at, r.join_at) {
        (Some(h), Some(j)) => h.min(j),
        (Some(h), None) => h,
        (None, Some(j)) => j,
        (None, None) => 5.0,
    };
    let config = Config::default()
        .with_profile_period(Duration::from_secs(1))
        .with_hold_down(Duration::from_secs_f64((first * 0.6).clamp(1.0, 30.0)))
        .with_light_threshold(0.3);
    let mut sim = Sim::new(1, config);
    if waiting_as_idle {
        sim = sim.with_waiting_as_idle();
    }
    let hog = r.hog_at;
    sim.add_node(NodeSpec::new(r.caps[0]));
    sim.add_node(NodeSpec::new(r.caps[1]).with_background(move |t| {
        if hog.is_some_and(|h| t.as_secs_f64() >= h) {
            1.0
        } else {
            0.0
        }
    }));
    sim.add_entity(0, "heat2d", 0, 16 << 20);
    sim.add_entity(1, "heat2d", 1, 16 << 20);
    sim.set_pattern("heat2d", Pattern::Sparse);
    if r.node_c && r.join_at.is_none() {
        sim.add_node(NodeSpec::new(r.caps[2]));
    }
    if let (true, Some(j)) = (r.node_c, r.join_at) {
        sim.run_for(Duration::from_secs_f64(j));
        sim.add_node(NodeSpec::new(r.caps[2]));
    }
    let left = 30.0 - sim.elapsed().as_secs_f64();
    sim.run_for(Duration::from_secs_f64(left.max(0.0)));
    sim.migrations()
        .first()
        .map(|m| (m.at.as_secs_f64(), m.from, m.to))
}

/// Prints each scenario's measured move beside the simulator's (`scale --fidelity`).
pub fn fidelity() {
    let names = ["node-a", "node-b", "node-c"];
    let mut t = Table::new(&[
        "scenario",
        "measured: move at (s), to",
        "simulator",
        "simulator: move at (s), to",
        "difference (s)",
    ]);
    for r in &REPLAYS {
        for (label, idle) in [("ranks always runnable", false), ("waiting as idle", true)] {
            let sim = replay(r, idle);
            t.push(vec![
                r.name.to_owned(),
                format!("{:.1}, {}", r.measured.0, names[r.measured.1]),
                label.to_owned(),
                sim.map_or("none".to_owned(), |(at, _, to)| {
                    format!("{at:.1}, {}", names.get(to).copied().unwrap_or("?"))
                }),
                sim.map_or("-".to_owned(), |(at, _, _)| {
                    format!("{:+.1}", at - r.measured.0)
                }),
            ]);
        }
    }
    println!("{}", t.to_text());
}
