//! What `ios-agent leave` reports while the agent drains its node, and the job processes it
//! waits to see gone.

use serde::{Deserialize, Serialize};

/// What a job process is to its job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Role {
    /// A rank (running, or departed after a move).
    Rank,
    /// The launcher's proxy that started ranks here.
    Launcher,
}

/// One process of a job on this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobProcess {
    /// Process id.
    pub pid: u32,
    /// Its command name.
    pub comm: String,
    /// Rank or launcher proxy.
    pub role: Role,
}

impl std::fmt::Display for JobProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let role = match self.role {
            Role::Rank => "rank",
            Role::Launcher => "launcher proxy",
        };
        write!(f, "{} {} ({role})", self.comm, self.pid)
    }
}

/// Where a drain stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaveReport {
    /// Seconds since the drain started.
    pub elapsed_s: f64,
    /// Registered ranks still on the node (`job/rank`).
    pub ranks_left: Vec<String>,
    /// The move under way, if any.
    pub moving: Option<String>,
    /// Moves completed since the drain started.
    pub moved: u64,
    /// Moves failed since the drain started.
    pub failed: u64,
    /// Processes of jobs still alive on the node (ranks, departed ranks, launcher proxies).
    pub processes: Vec<JobProcess>,
    /// Peers the agent knows (whom it can call to take the ranks).
    pub peers: usize,
}

impl LeaveReport {
    /// Whether the node runs nothing of any job.
    pub fn is_empty(&self) -> bool {
        self.ranks_left.is_empty() && self.moving.is_none() && self.processes.is_empty()
    }

    /// One line for people.
    pub fn summary(&self) -> String {
        let mut parts = vec![format!("{} moved, {} failed", self.moved, self.failed)];
        if !self.ranks_left.is_empty() {
            parts.push(format!("ranks here: {}", self.ranks_left.join(", ")));
        }
        if let Some(m) = &self.moving {
            parts.push(format!("moving {m}"));
        }
        if !self.processes.is_empty() {
            let names: Vec<String> = self.processes.iter().map(ToString::to_string).collect();
            parts.push(format!("job processes alive: {}", names.join(", ")));
        }
        format!("{:.1} s: {}", self.elapsed_s, parts.join("; "))
    }
}
