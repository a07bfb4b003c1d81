//! The capacity and load of the node a process is on, read cheaply from `/proc` and `/sys`.
//!
//! - [`NodeSensor`] samples the node: the CPUs it may use (the cap of the cgroup that bounds
//!   the process, cgroup v1 or v2, else the machine's CPUs), the CPU used and the runnable
//!   demand inside it over the last period, throttling, CPU pressure, memory limit and free
//!   memory, and optionally the CPU use of given processes. A [`NodeSample`] converts to
//!   pcmd's wire form ([`NodeSample::load`], a [`pcm_proto::NodeLoad`]). When cgroups cannot
//!   be read the sensor reads the whole machine and its [`Scope`] says why.
//! - [`SpeedProbe`]: tens of milliseconds of fixed work timed in thread CPU time, giving the
//!   per-core speed relative to a reference core. A cgroup cap is capacity (`cores`), not
//!   speed: see [`speed`] for the reasoning.
//! - [`cgroup`] and [`procfs`]: the parsers, pure functions over the kernel's text.
//!
//! This crate sits low in the crate graph, beside `pcm-proto`: pcmd samples its node with it
//! for `pcmd stats`, and the IOS agent's profiling component (`ios-agent-profile`) builds the
//! decision model's input from its samples. Neither depends on the other for it.
//!
//! ```no_run
//! use node_sensor::{NodeSensor, SensorConfig};
//! let mut sensor = NodeSensor::new(SensorConfig::default()).expect("own /proc is readable");
//! std::thread::sleep(std::time::Duration::from_secs(1));
//! let sample = sensor.sample().expect("sample");
//! let wire = sample.load(); // for pcmd's `Stats` answer
//! # let _ = wire;
//! ```

pub mod cgroup;
pub mod procfs;
pub mod sensor;
pub mod speed;

pub use cgroup::{NodeCgroupPath, NODE_CGROUP_ENV};
pub use sensor::{
    EntityUsage, MachineScan, NodeSample, NodeSensor, Scope, SensorConfig, SensorError, Target,
};
pub use speed::{SpeedProbe, SpeedSample};
