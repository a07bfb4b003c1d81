//! Malleable jobs in the simulator: resizes carried out as pcmd and the job carry them out
//! (docs/malleability.md), and the oracle's choice of a malleable job's width.
//!
//! # What a resize does here
//!
//! An agent's [`crate::agent::Action::Resize`] (or [`Sim::request_resize`], or the
//! oracle's resize) is judged as the daemon of the node that asks and the job judge it, in
//! this order; a refusal reaches the agent at once with its reason, and nothing changes:
//!
//! 1. the job runs a rank on the asking node (the daemon knows no other job);
//! 2. that daemon has no request of the job in flight (busy, as for moves);
//! 3. every host named is a node of the pool;
//! 4. the job is malleable, and the new width is within its limits and rule;
//! 5. the request was made for the job's width now (`from`): a resize completed since
//!    supersedes it;
//! 6. growing, the hosts are alive (none named: the job's own hosts in turn, the
//!    launcher's choice); shrinking, every host named runs ranks of the job, no more than
//!    the shrink removes (the ranks on them leave first, then the highest others).
//!
//! A request made while the job reconfigures (a move or a resize under way or waiting)
//! is refused as superseded when that reconfiguration ends (pcm agrees on it at the next
//! status check, after a reconfiguration completed since it was made); a move asked while
//! a resize is under way is refused the same way ([`super::Sim`]'s moves).
//!
//! A resize accepted stops the whole job for its cost, [`ResizeCostModel::cost`]: the
//! fixed part (a spawn when it grows, the shrink's agreement and split otherwise) plus the
//! rows that change owner ([`crate::resize::moved_fraction`] of the job's state) over the
//! bandwidth. Then the ranks that stay keep their order and are numbered 0.., the added
//! ones come last (new entities, resident since the resize), the departing ones leave
//! their nodes; the job's state spreads evenly over its new width, its work divides among
//! the new width ([`Sim::rank_work`]) and its exchanges follow its pattern at the
//! new width. A grow whose host died meanwhile fails and nothing changes (pcm would end
//! the job and pcmrun relaunch it: not modelled).
//!
//! # The oracle's resizes
//!
//! For a malleable job not resized within a hold-down, the oracle also weighs, beside its
//! moves ([`super::Balancer::Oracle`]):
//!
//! - growing: one rank at a time (at most [`ORACLE_MOST_STEPS`]) onto the node with room
//!   (its background and ranks leave a core free) among the 32 nearest the job and the 8
//!   fastest of its candidates, the one that shortens the job's iteration most;
//! - shrinking: one rank at a time (at most [`ORACLE_MOST_STEPS`], not under the job's
//!   minimum), the rank whose leaving shortens the job's iteration most (a rank on a
//!   leaving or loaded node first);
//!
//! and at each width the job's limits and rule allow, what the resize adds to the pool's
//! iterations per second (the job's, and those of the jobs sharing the nodes it joins or
//! leaves). The best width is carried out instead of the job's moves when it adds more
//! than they do, under the moves' rule: at least a tenth of the job's rate, and over 10
//! minutes more than the job loses standing still. A resize counts its added or removed
//! ranks in the period's budget of moves.

use std::time::{Duration, Instant};

use pcm_proto::{HostName, JobId, Rank};

use super::{Entity, EventKind, Node, Pattern, Sim, WhileMoving};
use crate::agent::{MigrationOutcome, ResizeReason};
use crate::message::MigrationId;
use crate::model::EntityId;
use crate::resize::ResizeCostModel;

/// Most ranks the oracle adds or removes in one resize.
pub const ORACLE_MOST_STEPS: u32 = 8;
/// Nodes near a job, and fastest, the oracle tries to grow it onto.
const ORACLE_GROW_NEAR: usize = 32;
const ORACLE_GROW_FAST: usize = 8;

/// Whether a resize grows or shrinks its job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeKind {
    /// More ranks.
    Grow,
    /// Fewer ranks.
    Shrink,
}

/// One resize asked for (by an agent, the oracle or [`Sim::request_resize`]), carried out
/// or refused.
#[derive(Debug, Clone, PartialEq)]
pub struct ResizeRecord {
    /// Simulated time since the start when it was asked.
    pub asked: Duration,
    /// When it ended: completed, or refused.
    pub at: Duration,
    /// The job.
    pub job: JobId,
    /// The node whose agent asked (the oracle's: the node of the job's rank 0).
    pub node: usize,
    /// The agent's reason; `None` for the oracle's and [`Sim::request_resize`]'s.
    pub reason: Option<ResizeReason>,
    /// Whether an agent (or [`Sim::request_resize`]) asked, and got the outcome; the
    /// oracle's resizes are not.
    pub by_agent: bool,
    /// Width asked from.
    pub from: u32,
    /// Width asked for.
    pub to: u32,
    /// Growing, the nodes of the added ranks in order; shrinking, the nodes of the
    /// departing ranks (empty when refused before they were known).
    pub nodes: Vec<usize>,
    /// A shrink whose departing ranks were all on nodes leaving the pool or dead when it
    /// was asked: forced, as moves off a leaving node are.
    pub forced: bool,
    /// Completed, or why nothing changed.
    pub outcome: Result<(), String>,
}

impl ResizeRecord {
    /// Grow or shrink, by the widths asked.
    pub fn kind(&self) -> ResizeKind {
        if self.to > self.from {
            ResizeKind::Grow
        } else {
            ResizeKind::Shrink
        }
    }

    /// Whether the job changed width.
    pub fn completed(&self) -> bool {
        self.outcome.is_ok()
    }
}

/// A resize as asked ([`crate::agent::Action::Resize`], with hosts resolved to nodes).
pub(super) struct Request {
    pub(super) id: MigrationId,
    pub(super) node: usize,
    pub(super) job: JobId,
    pub(super) from: u32,
    pub(super) to: u32,
    /// The hosts named, as nodes; `Err` names the first host that is no node of the pool.
    pub(super) hosts: Result<Vec<usize>, HostName>,
    pub(super) reason: Option<ResizeReason>,
}

/// A resize under way, or one refused when the reconfiguration under way ends: the event's
/// payload.
pub(super) struct Pending {
    id: MigrationId,
    node: usize,
    job: usize,
    from: u32,
    to: u32,
    asked: Instant,
    by_agent: bool,
    reason: Option<ResizeReason>,
    /// Nodes of the added ranks (growing).
    added: Vec<usize>,
    /// Entities that leave (shrinking).
    departing: Vec<usize>,
    forced: bool,
    /// Refused as superseded (when the reconfiguration under way ends).
    refusal: Option<String>,
}

/// What the judge of a request says.
enum Verdict {
    /// Refused now.
    Refused(String),
    /// Refused when the reconfiguration under way ends.
    Superseded(Instant, String),
    /// Carried out: the ranks added (their nodes) or leaving (entities).
    Accepted {
        added: Vec<usize>,
        departing: Vec<usize>,
    },
}

/// The oracle's best resize of one job.
pub(super) struct OracleResize {
    /// Added iterations per second of the pool.
    pub(super) gain: f64,
    /// Seconds the job stands still.
    pub(super) pause: f64,
    /// New width.
    pub(super) to: u32,
    /// Nodes of the added ranks (growing).
    pub(super) added: Vec<usize>,
    /// Entities leaving (shrinking).
    pub(super) departing: Vec<usize>,
}

impl Sim {
    /// Makes `job` malleable within `limits` (after its ranks were added): its profiles
    /// carry the limits, the agents may resize it and the oracle too, and its work (one
    /// [`super::WORK_PER_ITERATION`] per rank now) divides among its ranks at any width.
    pub fn set_malleable(&mut self, job: &str, limits: pcm_proto::Malleability) {
        let id = JobId::new(job).expect("valid job id");
        if let Some(&j) = self.by_job.get(&id) {
            self.jobs[j].malleable = Some(limits);
        }
    }

    /// How resizes are charged (default [`ResizeCostModel::default`]).
    pub fn with_resize_cost(mut self, model: ResizeCostModel) -> Self {
        self.resize_cost = model;
        self
    }

    /// Every resize asked for so far, carried out or refused, in the order they ended.
    pub fn resizes(&self) -> &[ResizeRecord] {
        &self.resizes
    }

    /// The ranks of `job` now, in rank order: each one's id and node.
    pub fn job_ranks(&self, job: &str) -> Vec<(EntityId, usize)> {
        let Some(&j) = JobId::new(job).ok().and_then(|id| self.by_job.get(&id)) else {
            return Vec::new();
        };
        self.jobs[j]
            .ranks
            .iter()
            .map(|&e| (self.entities[e].id.clone(), self.entities[e].node))
            .collect()
    }

    /// Seconds of compute each rank of `job` does per iteration on a reference core (its
    /// work divided by its width).
    pub fn rank_work(&self, job: &str) -> Option<f64> {
        let id = JobId::new(job).ok()?;
        self.by_job.get(&id).map(|&j| self.jobs[j].rank_work)
    }

    /// Asks for a resize of `job` from `from` to `ranks` ranks as the agent of `node`
    /// would ([`crate::agent::Action::Resize`]), the hosts being those of the nodes
    /// `hosts`; returns its id. The outcome goes to that agent (which ignores an id it did not make) and into
    /// [`Sim::resizes`]. For tests of the mechanics without the agents' decisions.
    pub fn request_resize(
        &mut self,
        node: usize,
        job: &str,
        from: u32,
        ranks: u32,
        hosts: &[usize],
    ) -> MigrationId {
        self.hook_ids += 1;
        let id = MigrationId(self.hook_ids);
        self.begin_resize(
            Request {
                id,
                node,
                job: JobId::new(job).expect("valid job id"),
                from,
                to: ranks,
                hosts: Ok(hosts.to_vec()),
                reason: None,
            },
            true,
            None,
        );
        self.mark(node);
        self.rearm();
        id
    }

    /// Starts a resize asked by `req.node`'s agent (`by_agent`), or by the oracle, which
    /// names the departing entities of a shrink itself (`departing`).
    pub(super) fn begin_resize(
        &mut self,
        req: Request,
        by_agent: bool,
        departing: Option<Vec<usize>>,
    ) {
        let now = self.now;
        let j = self.by_job.get(&req.job).copied();
        let verdict = match j {
            None => Verdict::Refused(format!("no job {} runs on this node", req.job)),
            Some(j) => self.judge(j, &req, by_agent, departing),
        };
        let forced = match &verdict {
            Verdict::Accepted { departing, .. } => {
                !departing.is_empty()
                    && departing.iter().all(|&e| {
                        let n = self.entities[e].node;
                        !self.alive[n] || self.nodes[n].leaving
                    })
            }
            _ => false,
        };
        let pending = |refusal, added, departing| Pending {
            id: req.id,
            node: req.node,
            job: j.unwrap_or(usize::MAX),
            from: req.from,
            to: req.to,
            asked: now,
            by_agent,
            reason: req.reason,
            added,
            departing,
            forced,
            refusal,
        };
        match verdict {
            Verdict::Refused(reason) => {
                // Called from the agent's drain: the drain goes on with what the outcome
                // makes it do.
                self.end_resize(pending(Some(reason), Vec::new(), Vec::new()), false);
            }
            Verdict::Superseded(end, reason) => {
                self.push(
                    end,
                    EventKind::ResizeDone(pending(Some(reason), Vec::new(), Vec::new())),
                );
            }
            Verdict::Accepted { added, departing } => {
                let j = j.unwrap_or_default();
                let total: u64 = self.jobs[j]
                    .ranks
                    .iter()
                    .map(|&e| self.entities[e].state_bytes)
                    .sum();
                let cost = self
                    .resize_cost
                    .cost(total, req.from, req.to, self.bandwidth);
                let at = now + Duration::from_secs_f64(cost.max(0.0));
                self.jobs[j].resizing = Some(at);
                self.stand_still(j, at);
                if by_agent && self.while_moving != WhileMoving::Refused {
                    self.jobs[j].requests_in_flight.push((req.node, at));
                }
                self.push(at, EventKind::ResizeDone(pending(None, added, departing)));
            }
        }
    }

    /// Judges a request of job `j` as its daemon and the job would (see the module docs).
    fn judge(
        &mut self,
        j: usize,
        req: &Request,
        by_agent: bool,
        departing: Option<Vec<usize>>,
    ) -> Verdict {
        let now = self.now;
        let host = |sim: &Sim, n: usize| sim.nodes[n].host.to_string();
        if !self.jobs[j]
            .ranks
            .iter()
            .any(|&e| self.entities[e].node == req.node)
        {
            return Verdict::Refused(format!(
                "no rank of job {} runs on {}",
                req.job,
                host(self, req.node)
            ));
        }
        if by_agent && self.while_moving != WhileMoving::Refused && self.daemon_busy(&[j], req.node)
        {
            return Verdict::Refused(format!(
                "busy: a request of job {} is in flight here",
                req.job
            ));
        }
        let hosts = match &req.hosts {
            Ok(h) => h.clone(),
            Err(name) => return Verdict::Refused(format!("{name} is no host of the pool")),
        };
        let job = &self.jobs[j];
        let Some(limits) = job.malleable else {
            return Verdict::Refused(format!("the job is not malleable: {}", req.job));
        };
        if let Some(why) = limits.refusal(req.to) {
            return Verdict::Refused(why);
        }
        let width = job.ranks.len() as u32;
        if req.from != width {
            return Verdict::Refused(format!(
                "superseded: the job has {width} ranks now, the request was made for {}",
                req.from
            ));
        }
        if req.to == width {
            return Verdict::Refused(format!("the job already has {width} ranks"));
        }
        let (added, departing) = if req.to > width {
            let hosts = if hosts.is_empty() {
                // The launcher's choice: the job's own hosts in turn.
                let mut own: Vec<usize> = Vec::new();
                for &e in &job.ranks {
                    if !own.contains(&self.entities[e].node) {
                        own.push(self.entities[e].node);
                    }
                }
                own
            } else {
                hosts
            };
            if let Some(&dead) = hosts.iter().find(|&&n| !self.alive[n]) {
                return Verdict::Refused(format!(
                    "cannot spawn on {}: it does not answer",
                    host(self, dead)
                ));
            }
            let extra = (req.to - width) as usize;
            let added: Vec<usize> = (0..extra).map(|k| hosts[k % hosts.len()]).collect();
            (added, Vec::new())
        } else if let Some(departing) = departing {
            (Vec::new(), departing)
        } else {
            let fewer = (width - req.to) as usize;
            let mut leaving: Vec<usize> = Vec::new();
            let mut named: Vec<usize> = hosts.clone();
            named.sort_unstable();
            named.dedup();
            for &n in &named {
                let on: Vec<usize> = job
                    .ranks
                    .iter()
                    .copied()
                    .filter(|&e| self.entities[e].node == n)
                    .collect();
                if on.is_empty() {
                    return Verdict::Refused(format!(
                        "no rank of the job runs on {}",
                        host(self, n)
                    ));
                }
                leaving.extend(on);
            }
            if leaving.len() > fewer {
                return Verdict::Refused(format!(
                    "{} ranks run on {}, more than the shrink removes ({fewer})",
                    leaving.len(),
                    named
                        .iter()
                        .map(|&n| host(self, n))
                        .collect::<Vec<_>>()
                        .join("+")
                ));
            }
            // Then the highest others.
            let mut others: Vec<usize> = job
                .ranks
                .iter()
                .copied()
                .filter(|e| !leaving.contains(e))
                .collect();
            others.sort_by_key(|&e| std::cmp::Reverse(self.entities[e].id.rank.0));
            let more = fewer - leaving.len();
            leaving.extend(others.into_iter().take(more));
            (Vec::new(), leaving)
        };
        // One reconfiguration at a time: a request made while another is under way or
        // waiting is superseded by it.
        let job = &self.jobs[j];
        let under_way = [
            job.pause.map(|(_, end)| end),
            job.resizing,
            job.next.as_ref().map(|(start, _)| *start),
        ]
        .into_iter()
        .flatten()
        .filter(|end| *end > now)
        .max();
        let moving = job
            .ranks
            .iter()
            .any(|&e| self.entities[e].moving_to.is_some());
        if let Some(end) = under_way {
            return Verdict::Superseded(
                end,
                format!(
                    "superseded: job {} reconfigured while the request waited",
                    req.job
                ),
            );
        }
        if moving {
            return Verdict::Refused(format!("superseded: job {} is moving", req.job));
        }
        Verdict::Accepted { added, departing }
    }

    /// The end of a resize under way (or of the wait of a refused one).
    pub(super) fn finish_resize(&mut self, p: Pending) {
        self.end_resize(p, true);
    }

    /// Carries out `p` (unless refused), records it and tells the agent that asked;
    /// `drain`: then runs what the agent does next (not from inside its own drain).
    fn end_resize(&mut self, mut p: Pending, drain: bool) {
        let now = self.now;
        if p.refusal.is_none() && p.job < self.jobs.len() {
            self.jobs[p.job].resizing = None;
            if let Some(&dead) = p.added.iter().find(|&&n| !self.alive[n]) {
                p.refusal = Some(format!(
                    "an added process on {} died: nothing changed",
                    self.nodes[dead].host
                ));
            } else if self.jobs[p.job].ranks.len() as u32 != p.from {
                p.refusal = Some("superseded: the job changed width".to_owned());
            } else {
                self.apply_resize(&p);
            }
        }
        let nodes = if p.added.is_empty() {
            p.departing.iter().map(|&e| self.entities[e].node).collect()
        } else {
            p.added.clone()
        };
        let outcome = match p.refusal.take() {
            None => Ok(()),
            Some(reason) => Err(reason),
        };
        let job = self
            .jobs
            .get(p.job)
            .map_or_else(|| JobId::new("unknown").expect("valid"), |j| j.id.clone());
        self.resizes.push(ResizeRecord {
            asked: p.asked - self.epoch,
            at: now - self.epoch,
            job,
            node: p.node,
            reason: p.reason,
            by_agent: p.by_agent,
            from: p.from,
            to: p.to,
            nodes,
            forced: p.forced,
            outcome: outcome.clone(),
        });
        if p.by_agent && self.alive[p.node] {
            let outcome = match outcome {
                Ok(()) => MigrationOutcome::Completed,
                Err(reason) => MigrationOutcome::Failed { reason },
            };
            self.nodes[p.node]
                .agent
                .handle_migration_outcome(now, p.id, outcome);
            if drain {
                self.drain(p.node);
            }
        }
    }

    /// The job of `p` at its new width: the ranks that stay keep their order and are
    /// numbered 0.., the added ones come last.
    fn apply_resize(&mut self, p: &Pending) {
        let now = self.now;
        let j = p.job;
        let old = self.jobs[j].ranks.clone();
        let total: u64 = old.iter().map(|&e| self.entities[e].state_bytes).sum();
        let mut ranks: Vec<usize> = old
            .iter()
            .copied()
            .filter(|e| !p.departing.contains(e))
            .collect();
        ranks.sort_by_key(|&e| self.entities[e].id.rank.0);
        for &e in &old {
            self.by_entity.remove(&self.entities[e].id);
        }
        for &e in &p.departing {
            let n = self.entities[e].node;
            self.nodes[n].entities.retain(|&x| x != e);
            self.entities[e].gone = true;
            self.gone += 1;
        }
        let job_id = self.jobs[j].id.clone();
        for &n in &p.added {
            let e = self.entities.len();
            self.entities.push(Entity {
                id: EntityId {
                    job: job_id.clone(),
                    rank: Rank(0),
                },
                job: j,
                node: n,
                state_bytes: 0,
                arrived: Some(now),
                moving_to: None,
                gone: false,
            });
            self.nodes[n].entities.push(e);
            ranks.push(e);
        }
        let width = ranks.len() as u64;
        for (r, &e) in ranks.iter().enumerate() {
            let id = EntityId {
                job: job_id.clone(),
                rank: Rank(r as u32),
            };
            let entity = &mut self.entities[e];
            entity.id = id.clone();
            entity.state_bytes = total / width + u64::from((r as u64) < total % width);
            self.by_entity.insert(id, e);
        }
        let job = &mut self.jobs[j];
        job.rank_work = job.rank_work * f64::from(p.from) / f64::from(p.to);
        job.ranks = ranks;
        job.last_resize = Some(now);
        self.rebuild_exchanges(j);
    }

    /// Seconds of one iteration of a job of `pattern` whose ranks are on `place` (by rank)
    /// and compute `rank_work` each, with `eff(node)` the speed a rank gets there.
    fn placed_iteration(
        &self,
        pattern: Pattern,
        rank_work: f64,
        place: &[usize],
        eff: impl Fn(usize) -> f64,
    ) -> f64 {
        let slowest = place
            .iter()
            .map(|&n| rank_work / eff(n))
            .fold(0.0, f64::max);
        let exchanges = pattern.exchanges(place.len());
        slowest
            + exchanges.seconds(|i| {
                let (a, b) = exchanges.pairs[i];
                (self.rtt_between(place[a], place[b]) / 2).as_secs_f64()
            })
    }

    /// Iterations per second of the jobs other than `j` with ranks on `touched`, their
    /// ranks sharing each node `i` with `counts[i]` in all.
    fn others_rate(
        &self,
        j: usize,
        touched: &[usize],
        counts: &[usize],
        eff: &impl Fn(&[Node], usize, usize) -> f64,
    ) -> f64 {
        let mut jobs: Vec<usize> = touched
            .iter()
            .flat_map(|&n| self.nodes[n].entities.iter().map(|&e| self.entities[e].job))
            .filter(|&o| o != j)
            .collect();
        jobs.sort_unstable();
        jobs.dedup();
        jobs.iter()
            .map(|&o| {
                let job = &self.jobs[o];
                let t = self.job_iteration(
                    job,
                    |e| {
                        let n = self.entities[e].node;
                        job.rank_work / eff(&self.nodes, n, counts[n])
                    },
                    |e| self.entities[e].node,
                );
                1.0 / t
            })
            .sum()
    }

    /// What job `j` resized adds to the pool's iterations per second: its own rate (one
    /// iteration in `iterations.0` seconds before, `iterations.1` after) and that of the
    /// jobs sharing the nodes `touched`, each of which holds `change` ranks more in
    /// `counts` (as they are after) than before.
    fn pool_gain(
        &self,
        j: usize,
        touched: &[usize],
        change: isize,
        counts: &mut [usize],
        iterations: (f64, f64),
        eff: &impl Fn(&[Node], usize, usize) -> f64,
    ) -> f64 {
        let shift = |counts: &mut [usize], by: isize| {
            for &n in touched {
                counts[n] = counts[n].wrapping_add_signed(by);
            }
        };
        let after = self.others_rate(j, touched, counts, eff) + 1.0 / iterations.1;
        shift(counts, -change);
        let before = self.others_rate(j, touched, counts, eff) + 1.0 / iterations.0;
        shift(counts, change);
        after - before
    }

    /// The oracle's best resize of malleable job `j` (see the module docs), its ranks on
    /// `start` (by rank), `current` seconds per iteration now; `options` the nodes it
    /// may grow onto (those with room are tried), `counts` the ranks on each node (left
    /// as they were), `eff(nodes, node, count)` the speed a rank gets on `node` among
    /// `count`, `room(node, count)` whether `count` ranks leave a core of `node` free.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn oracle_resize(
        &self,
        j: usize,
        start: &[usize],
        current: f64,
        options: &[usize],
        fastest: &[usize],
        counts: &mut [usize],
        eff: &impl Fn(&[Node], usize, usize) -> f64,
        room: &impl Fn(usize, usize) -> bool,
    ) -> Option<OracleResize> {
        let job = &self.jobs[j];
        let limits = job.malleable?;
        let from = start.len() as u32;
        let work = job.rank_work * f64::from(from);
        let pattern = job.pattern;
        let mut best: Option<OracleResize> = None;
        let mut consider = |gain: f64, to: u32, added: Vec<usize>, departing: Vec<usize>| {
            if best.as_ref().is_none_or(|b| gain > b.gain) {
                let total: u64 = job
                    .ranks
                    .iter()
                    .map(|&e| self.entities[e].state_bytes)
                    .sum();
                best = Some(OracleResize {
                    gain,
                    pause: self.resize_cost.cost(total, from, to, self.bandwidth),
                    to,
                    added,
                    departing,
                });
            }
        };
        // Growing: the nodes with room nearest the job, and the fastest.
        let extra = limits.max().saturating_sub(from).min(ORACLE_MOST_STEPS);
        if extra > 0 {
            let mut near: Vec<(Duration, usize)> = options
                .iter()
                .copied()
                .filter(|&m| room(m, counts[m] + 1))
                .map(|m| {
                    let d = start.iter().map(|&n| self.rtt_between(n, m)).sum();
                    (d, m)
                })
                .collect();
            near.sort_unstable();
            let mut tries: Vec<usize> = near
                .into_iter()
                .take(ORACLE_GROW_NEAR)
                .map(|(_, m)| m)
                .collect();
            tries.extend(
                fastest
                    .iter()
                    .copied()
                    .filter(|&m| room(m, counts[m] + 1))
                    .take(ORACLE_GROW_FAST),
            );
            tries.sort_unstable();
            tries.dedup();
            let mut place = start.to_vec();
            let mut added: Vec<usize> = Vec::new();
            let mut fastest_seen = current;
            for _ in 0..extra {
                let width = place.len() + 1;
                let mut step: Option<(f64, usize)> = None;
                for &m in &tries {
                    if !room(m, counts[m] + 1) {
                        continue;
                    }
                    counts[m] += 1;
                    place.push(m);
                    let t = self.placed_iteration(pattern, work / width as f64, &place, |n| {
                        eff(&self.nodes, n, counts[n])
                    });
                    place.pop();
                    counts[m] -= 1;
                    if step.is_none_or(|(b, _)| t < b) {
                        step = Some((t, m));
                    }
                }
                let Some((t, m)) = step else {
                    break;
                };
                if t > 1.5 * fastest_seen {
                    break;
                }
                fastest_seen = fastest_seen.min(t);
                counts[m] += 1;
                place.push(m);
                added.push(m);
                if limits.allows(width as u32) {
                    let gain = self.pool_gain(j, &added, 1, counts, (current, t), eff);
                    consider(gain, width as u32, added.clone(), Vec::new());
                }
            }
            for &n in &added {
                counts[n] -= 1;
            }
        }
        // Shrinking.
        let fewer = from.saturating_sub(limits.min()).min(ORACLE_MOST_STEPS);
        if fewer > 0 {
            let mut left: Vec<usize> = (0..start.len()).collect();
            let mut removed: Vec<usize> = Vec::new();
            let mut fastest_seen = current;
            for _ in 0..fewer {
                let width = left.len() - 1;
                let mut step: Option<(f64, usize)> = None;
                for i in 0..left.len() {
                    let k = left[i];
                    counts[start[k]] -= 1;
                    let place: Vec<usize> = left
                        .iter()
                        .filter(|&&x| x != k)
                        .map(|&x| start[x])
                        .collect();
                    let t = self.placed_iteration(pattern, work / width as f64, &place, |n| {
                        eff(&self.nodes, n, counts[n])
                    });
                    counts[start[k]] += 1;
                    if step.is_none_or(|(b, _)| t < b) {
                        step = Some((t, i));
                    }
                }
                let Some((t, i)) = step else {
                    break;
                };
                if t > 1.5 * fastest_seen {
                    break;
                }
                fastest_seen = fastest_seen.min(t);
                let k = left.remove(i);
                counts[start[k]] -= 1;
                removed.push(k);
                if limits.allows(width as u32) {
                    let touched: Vec<usize> = removed.iter().map(|&k| start[k]).collect();
                    let gain = self.pool_gain(j, &touched, -1, counts, (current, t), eff);
                    let departing = removed.iter().map(|&k| job.ranks[k]).collect();
                    consider(gain, width as u32, Vec::new(), departing);
                }
            }
            for &k in &removed {
                counts[start[k]] += 1;
            }
        }
        best
    }

    /// Starts the oracle's resize `r` of job `j` (asked from the node of its rank 0), and
    /// counts its ranks where they go.
    pub(super) fn begin_oracle_resize(&mut self, j: usize, r: OracleResize, counts: &mut [usize]) {
        self.oracle_ids += 1;
        let node = self.entities[self.jobs[j].ranks[0]].node;
        for &n in &r.added {
            counts[n] += 1;
        }
        for &e in &r.departing {
            counts[self.entities[e].node] -= 1;
        }
        let req = Request {
            id: MigrationId(self.oracle_ids),
            node,
            job: self.jobs[j].id.clone(),
            from: self.jobs[j].ranks.len() as u32,
            to: r.to,
            hosts: Ok(r.added.clone()),
            reason: None,
        };
        let departing = (!r.departing.is_empty()).then_some(r.departing);
        self.begin_resize(req, false, departing);
    }
}

#[cfg(test)]
mod tests;
