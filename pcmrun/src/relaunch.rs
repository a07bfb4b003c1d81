//! What a relaunch runs on: the hosts still alive (and, with `--hosts-from-pool`, idle
//! hosts of the agents' pool in place of those lost), and how many ranks.

use std::path::PathBuf;

use pcm_proto::HostName;

use crate::cli::Options;
use crate::daemon::{self, HostDaemons};
use crate::hosts::{Hostfile, RemoteLauncher, PROBE_TIMEOUT};
use crate::supervisor::Supervisor;
use crate::{names, say, Runtime};

/// The width of a relaunch of a job last launched with `width` ranks: the same, unless the
/// job is malleable (`--np-min`): then the width it was resized to if any (at most
/// `--np-max`, default `--np`), and no more than the `slots` of the hosts left, never under
/// `--np-min`.
pub fn relaunch_width(
    options: &Options,
    width: u32,
    resized_to: Option<u32>,
    slots: Option<u32>,
) -> u32 {
    let Some(min) = options.np_min else {
        return width;
    };
    let max = options.np_max.unwrap_or(options.ranks);
    let wanted = resized_to.unwrap_or(width).min(max);
    slots.map_or(wanted, |slots| wanted.min(slots)).max(min)
}

/// The hostfile `file` without its hosts that no longer answer through the launcher (or,
/// with `daemons`, whose pcmd cannot be started again), each said and recorded in the
/// report; `None` when no host is left.
#[allow(clippy::too_many_arguments)]
pub fn hosts_still_alive(
    file: &Hostfile,
    local: &HostName,
    launcher: &RemoteLauncher,
    mut daemons: Option<&mut HostDaemons>,
    supervisor: &mut Supervisor,
    pool: Option<&FromPool>,
    node_template: &str,
) -> Option<Hostfile> {
    let remote: Vec<HostName> = file.hosts().into_iter().filter(|h| h != local).collect();
    let mut lost = crate::hosts::lost_hosts(launcher, &remote, PROBE_TIMEOUT);
    let answering: Vec<HostName> = file
        .hosts()
        .into_iter()
        .filter(|h| !lost.iter().any(|(l, _)| l == h))
        .collect();
    let given = daemon::given_back(&answering, local, launcher, node_template);
    for (host, why) in &given {
        say(&format!(
            "host {host} was {why}: the relaunch leaves it out"
        ));
    }
    let given: Vec<HostName> = given.into_iter().map(|(h, _)| h).collect();
    supervisor.hosts_given_back(given.iter().cloned());
    if let Some(daemons) = daemons.as_deref_mut() {
        let alive: Vec<HostName> = answering
            .into_iter()
            .filter(|h| !given.contains(h))
            .collect();
        let ensured = daemons.ensure(&alive);
        for host in &ensured.restarted {
            say(&format!(
                "the pcmd on {host} had ended; started it again (log {})",
                daemons
                    .log(host)
                    .map_or(String::new(), |l| l.display().to_string())
            ));
        }
        lost.extend(ensured.failed);
    }
    for (host, why) in &lost {
        say(&format!(
            "host {host} is lost ({why}): the relaunch leaves it out"
        ));
    }
    let lost: Vec<HostName> = lost.into_iter().map(|(h, _)| h).collect();
    let mut alive = file.without(&lost).without(&given);
    let left_out: Vec<HostName> = lost.iter().chain(&given).cloned().collect();
    supervisor.hosts_lost(lost);
    if let Some(pool) = pool {
        let ranks = supervisor.ranks_on(&left_out);
        if ranks > 0 {
            let added = pool.refill(&mut alive, file, &left_out, ranks, local, launcher, daemons);
            supervisor.hosts_added(added);
        }
    }
    if alive.lines.is_empty() {
        return None;
    }
    if alive.lines.len() < file.lines.len() {
        say(&format!("relaunching on {}", names(&alive.hosts())));
    }
    Some(alive)
}

/// `--hosts-from-pool`: idle hosts of the agents' pool take the ranks of hosts a relaunch
/// leaves out.
pub struct FromPool {
    /// The `ios-agent` program that asks the agent on this host.
    pub ios_agent: PathBuf,
    /// The runtime, whose hostfile lines the hosts added get.
    pub runtime: Runtime,
    /// Where the nodes' pcmds listen ([`crate::settings::Places::node_socket_template`]):
    /// beside each socket, the mark of a host given back to the pool.
    pub node_template: String,
}

impl FromPool {
    /// Adds to `alive` hosts of the pool for `ranks` ranks of the hosts `left_out` of
    /// `file`, each probed and given a pcmd first; returns those added. Says what it does,
    /// and why not when it cannot.
    #[allow(clippy::too_many_arguments)]
    fn refill(
        &self,
        alive: &mut Hostfile,
        file: &Hostfile,
        left_out: &[HostName],
        ranks: u32,
        local: &HostName,
        launcher: &RemoteLauncher,
        daemons: Option<&mut HostDaemons>,
    ) -> Vec<HostName> {
        let pool = match crate::hosts::pool::hosts(&self.ios_agent) {
            Ok(pool) => pool,
            Err(why) => {
                say(&format!(
                    "--hosts-from-pool: no host of the pool to use ({why}); relaunching on the hosts left"
                ));
                return Vec::new();
            }
        };
        let excluded: Vec<HostName> = file
            .hosts()
            .into_iter()
            .chain(left_out.iter().cloned())
            .collect();
        let chosen = crate::hosts::pool::choose(&pool, &excluded, ranks);
        let candidates: Vec<HostName> = chosen.iter().map(|(h, _)| h.clone()).collect();
        let remote: Vec<HostName> = candidates.iter().filter(|h| *h != local).cloned().collect();
        let mut refused = crate::hosts::lost_hosts(launcher, &remote, PROBE_TIMEOUT);
        refused.extend(daemon::given_back(
            &candidates,
            local,
            launcher,
            &self.node_template,
        ));
        if let Some(daemons) = daemons {
            let answering: Vec<HostName> = candidates
                .iter()
                .filter(|h| !refused.iter().any(|(r, _)| r == *h))
                .cloned()
                .collect();
            refused.extend(daemons.ensure(&answering).failed);
        }
        for (host, why) in &refused {
            say(&format!("--hosts-from-pool: not using {host} ({why})"));
        }
        let mut added = Vec::new();
        for (host, slots) in chosen {
            if refused.iter().any(|(r, _)| *r == host) {
                continue;
            }
            alive.lines.push(crate::hosts::HostLine {
                line: self.runtime.hostfile_line(host.as_str(), slots),
                host: host.clone(),
            });
            added.push(host);
        }
        if added.is_empty() {
            say(&format!(
                "--hosts-from-pool: the agent knows no idle host of the pool for the {ranks} rank(s) of {}; relaunching on the hosts left",
                names(left_out)
            ));
        } else {
            say(&format!(
                "--hosts-from-pool: the {ranks} rank(s) of {} go to {}, idle hosts of the pool",
                names(left_out),
                names(&added)
            ));
        }
        added
    }
}
