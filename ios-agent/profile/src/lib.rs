//! The IOS agent's profiling component (paper 004, Figure 2): what the node offers and what
//! its application entities use.
//!
//! - [`NodeSensor`] (from the `node-sensor` crate, re-exported here) samples the node a
//!   process is on: the CPUs it may use (the cap of the cgroup that bounds it, cgroup v1 or
//!   v2, else the machine's CPUs), the CPU used and the runnable demand inside it, memory.
//!   [`NodeSampleExt::profile`] turns a [`NodeSample`] into the decision model's input (an
//!   [`ios_agent_core::model::NodeProfile`]). pcmd samples its node with the same sensor,
//!   without depending on the agent.
//! - [`SpeedProbe`] (also from `node-sensor`): the per-core speed relative to a reference
//!   core.
//! - [`entity_profiles`]: pcmd's [`pcm_proto::NodeStats`] turned into the model's
//!   [`ios_agent_core::model::EntityProfile`]s (compute vs MPI time per iteration, iteration
//!   rate, state size, memory, age, residence). Pure.
//! - [`CompetingLoad`]: how much of the node's capacity its own ranks get, and how much goes
//!   to something else in the same cgroup (a CPU hog).
//!
//! The binary `ios-sense` prints samples as JSON lines, for people and scripts.
//!
//! ```no_run
//! use ios_agent_profile::{NodeSampleExt as _, NodeSensor, SensorConfig};
//! let mut sensor = NodeSensor::new(SensorConfig::default()).expect("own /proc is readable");
//! std::thread::sleep(std::time::Duration::from_secs(1));
//! let sample = sensor.sample().expect("sample");
//! let wire = sample.load();       // for pcmd's `Stats` answer
//! let model = sample.profile();   // for Agent::handle_node_profile
//! # let _ = (wire, model);
//! ```

pub mod entity;

pub use entity::{
    entity_pids, entity_profile, entity_profiles, load_without_waiting, stalled_entities,
    CompetingLoad, NodeSampleExt,
};
pub use node_sensor::{
    cgroup, procfs, sensor, speed, EntityUsage, NodeCgroupPath, NodeSample, NodeSensor, Scope,
    SensorConfig, SensorError, SpeedProbe, SpeedSample, Target, NODE_CGROUP_ENV,
};
