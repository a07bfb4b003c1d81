//! Scratch driver of the simulator at scale (before/after measurements of the simulator's
//! own cost). `cargo run --release -p ios-agent-core --features sim --example sim_scale -- NODES SECONDS`
//!
//! Heterogeneous nodes, 25% with square-wave and 15% with step background load, 2N/3
//! entities in jobs of 8, RTTs in four tiers (drawn per pair from a hash of the pair).
//! `DISCOVERY=K` measures only each agent's table plus K random peers per 15 s round instead
//! of every pair every 5 s. Before and after figures: docs/results-log.md, "Scale".

use std::time::{Duration, Instant};

use ios_agent_core::sim::{NodeSpec, Sim};
use ios_agent_core::Config;

fn hash(a: u64, b: u64) -> u64 {
    let mut x = a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 29)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100);
    let secs: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(600);
    let discovery = std::env::var("DISCOVERY").ok().and_then(|s| s.parse().ok());
    let tiers = [2u64, 40, 180, 300];
    let mut sim = Sim::new(1, Config::default()).with_rtt_model(move |i, j| {
        Duration::from_millis(tiers[(hash(i as u64, j as u64) % 4) as usize])
    });
    if let Some(k) = discovery {
        sim = sim
            .with_discovery(k)
            .with_rtt_period(Duration::from_secs(15));
    }
    for i in 0..n {
        let h = hash(i as u64, 7);
        let cores = [1.0, 2.0, 4.0, 8.0][(h % 4) as usize];
        let speed = 0.5 + (h >> 8) as f64 % 100.0 / 66.0;
        let mut spec = NodeSpec::new(cores).with_speed(speed);
        let kind = (h >> 20) % 100;
        let phase = ((h >> 32) % 600) as f64;
        if kind < 25 {
            spec = spec.with_background(move |t| {
                if ((t.as_secs_f64() + phase) / 300.0) as u64 % 2 == 0 {
                    cores
                } else {
                    0.0
                }
            });
        } else if kind < 40 {
            spec = spec.with_background(move |t| if t.as_secs_f64() > phase { cores } else { 0.0 });
        }
        sim.add_node(spec);
    }
    let entities = 2 * n / 3;
    for e in 0..entities {
        let node = (hash(e as u64, 99) % n as u64) as usize;
        sim.add_entity(node, &format!("job{}", e / 8), (e % 8) as u32, 50 << 20);
    }
    let wall = Instant::now();
    sim.run_for(Duration::from_secs(secs));
    println!(
        "nodes {n} simulated {secs} s wall {:.1} s migrations {} messages {}",
        wall.elapsed().as_secs_f64(),
        sim.migrations().len(),
        sim.messages().messages
    );
    println!("steps {} iterations {:.0}", sim.steps(), sim.iterations());
}
