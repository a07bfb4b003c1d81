//! The IOS agent's profiling component (paper 004, Figure 2): what the node offers and what
//! its application entities use.
//!
//! - [`NodeSensor`] samples the node a process is on: the CPUs it may use (the cap of the
//!   cgroup that bounds it, cgroup v1 or v2, else the machine's CPUs), the CPU used and the
//!   runnable demand inside it over the last period, throttling, CPU pressure, memory limit
//!   and free memory. A [`NodeSample`] converts to pcmd's wire form ([`NodeSample::load`],
//!   a [`pcm_proto::NodeLoad`]) and to the decision model's input ([`NodeSample::profile`], an
//!   [`ios_agent_core::model::NodeProfile`]). When cgroups cannot be read the sensor reads the
//!   whole machine and its [`Scope`] says why.
//! - [`SpeedProbe`]: tens of milliseconds of fixed work timed in thread CPU time, giving the
//!   per-core speed relative to a reference core. A cgroup cap is capacity (`cores`), not
//!   speed: see [`speed`] for the reasoning.
//! - [`entity_profiles`]: pcmd's [`pcm_proto::NodeStats`] turned into the model's
//!   [`ios_agent_core::model::EntityProfile`]s (compute vs MPI time per iteration, iteration
//!   rate, state size, memory, age, residence). Pure.
//! - [`CompetingLoad`]: how much of the node's capacity its own ranks get, and how much goes
//!   to something else in the same cgroup (a CPU hog).
//!
//! The binary `ios-sense` prints samples as JSON lines, for people and scripts.
//!
//! ```no_run
//! use ios_agent_profile::{NodeSensor, SensorConfig};
//! let mut sensor = NodeSensor::new(SensorConfig::default()).expect("own /proc is readable");
//! std::thread::sleep(std::time::Duration::from_secs(1));
//! let sample = sensor.sample().expect("sample");
//! let wire = sample.load();       // for pcmd's `Stats` answer
//! let model = sample.profile();   // for Agent::handle_node_profile
//! # let _ = (wire, model);
//! ```

pub mod cgroup;
pub mod entity;
pub mod procfs;
pub mod sensor;
pub mod speed;

pub use entity::{
    entity_pids, entity_profile, entity_profiles, load_without_waiting, stalled_entities,
    CompetingLoad,
};
pub use sensor::{EntityUsage, NodeSample, NodeSensor, Scope, SensorConfig, SensorError, Target};
pub use speed::{SpeedProbe, SpeedSample};
