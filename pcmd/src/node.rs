//! The node's own load for `pcmd stats`, from the node sensor it shares with the IOS agent.
//!
//! [`node_sensor::NodeSensor`] knows what "the node" is (the cgroup that caps pcmd's
//! CPU, or the whole machine) and reads it cheaply from `/proc` and `/sys`. pcmd samples it
//! once per stats period and serves the result as [`NodeLoad`]. The sensor's CPU speed probe
//! is turned off: speed is not part of `NodeLoad`, and the probe would cost pcmd tens of
//! milliseconds of CPU.

use node_sensor::{NodeCgroupPath, NodeSensor, SensorConfig, SensorError};
use pcm_proto::NodeLoad;

/// Samples the node pcmd runs on; without a usable sensor every sample is `None`.
#[derive(Debug)]
pub struct Sensor {
    sensor: Option<NodeSensor>,
    warned: bool,
}

impl Sensor {
    /// Finds the node of this process, or the cgroup `node_cgroup` names as the node. A
    /// failure to find this process's node is logged and leaves the sensor off; a named
    /// cgroup that cannot be the node is an error.
    pub fn new(node_cgroup: Option<NodeCgroupPath>) -> Result<Self, SensorError> {
        let named = node_cgroup.is_some();
        let config = SensorConfig {
            probe_every: None,
            ..SensorConfig::default()
        }
        .with_fixed_speed(1.0)
        .with_node_cgroup(node_cgroup);
        let sensor = match NodeSensor::new(config) {
            Ok(sensor) => Some(sensor),
            Err(e) if named => return Err(e),
            Err(e) => {
                tracing::warn!("cannot sense this node's load ({e}); `pcmd stats` will show zeros");
                None
            }
        };
        if let Some(sensor) = &sensor {
            tracing::info!(scope = ?sensor.scope(), cores = sensor.cores(), "sensing the node's load");
        }
        Ok(Sensor {
            sensor,
            warned: false,
        })
    }

    /// The node's load since the previous sample, if it could be read.
    pub fn sample(&mut self) -> Option<NodeLoad> {
        let sensor = self.sensor.as_mut()?;
        match sensor.sample() {
            Ok(sample) => {
                self.warned = false;
                Some(sample.load())
            }
            Err(e) => {
                if !self.warned {
                    tracing::warn!("cannot sample this node's load: {e}");
                    self.warned = true;
                }
                None
            }
        }
    }
}
