//! The NSc2c election and succession of the module docs of [`super`]: seniority first, then
//! votes, then a peer over self, then the lowest id; a dead manager's named successor takes
//! over. Run only when its result could differ from the manager an agent has ([`Standing`]).

use std::time::{Duration, Instant};

use super::{Cluster, Heard, Standing};
use crate::agent::shared::Shared;
use crate::tier::PeerId;

impl Cluster {
    /// A local peer heard within the gossip timeout: a candidate, and its vote counts.
    pub(super) fn alive(&self, s: &Shared, now: Instant, h: &Heard) -> bool {
        now < h.at + self.gossip_timeout(s) && h.local
    }

    /// A local peer heard within the member timeout: what a manager and its members expect
    /// of each other, as they send to each other every heartbeat period.
    pub(super) fn linked(&self, s: &Shared, now: Instant, h: &Heard) -> bool {
        now < h.at + s.config.member_timeout && h.local
    }

    /// NSc2c: how far apart two agents' first sightings may be for both to count as
    /// equally senior: discovery, the first RTT samples and the first heartbeat take a few
    /// seconds, so a peer heard that soon after this agent started was there before it.
    /// Twice the member timeout.
    pub(crate) fn seniority_grace(&self, s: &Shared) -> Duration {
        s.config.member_timeout * 2
    }

    /// Whether this agent's manager is alive: itself, or heard within the member timeout
    /// (counted from when this agent took it, for a manager so far heard only in gossip).
    pub(super) fn manager_alive(&self, s: &Shared, now: Instant) -> bool {
        let m = &self.manager;
        *m == s.me
            || self.heard.get(m).is_some_and(|h| {
                now < h.at.max(self.manager_since) + s.config.member_timeout && h.local
            })
    }

    /// The election of the module docs: seniority first, then votes, then a peer over self,
    /// then the lowest id. It is called on every heartbeat, and re-running it over up to 64
    /// peers each time was most of the simulator's time with NSc2c at 10,000 nodes; so it
    /// runs only when its result could differ from the manager this agent has ([`Standing`]).
    /// When it could not, a run would change nothing: skipping it decides exactly the same.
    pub(super) fn elect(&mut self, s: &mut Shared, now: Instant) {
        if self.election_stands(s, now) {
            // Every simulation in this crate's tests checks that claim.
            #[cfg(test)]
            assert!(
                self.manager_alive(s, now) && self.winner(s, now) == self.manager,
                "{}: a stale election at {now:?}",
                s.me
            );
            return;
        }
        if self.run_election(s, now) {
            self.standing = self.standing(s, now);
        } else {
            self.standing.stale = true;
        }
    }

    /// Whether the last election still holds at `now` (see [`Standing`]): no input changed
    /// since, and no alive peer nor the manager timed out. The agent is fed instants that
    /// never go back; one that does re-runs the election.
    pub(super) fn election_stands(&mut self, s: &mut Shared, now: Instant) -> bool {
        let last = &self.standing;
        if last.stale || now < last.at {
            return false;
        }
        if last.until.is_none_or(|until| now < until) {
            return true;
        }
        // Someone may have timed out. A peer alive then but silent since may be gone now,
        // and none can have come back to life (that sets `stale`), so the same count of
        // alive peers means the same peers: then the election still holds until the next
        // time-out.
        let next = self.standing(s, now);
        if next.alive != last.alive || !self.manager_alive(s, now) {
            return false;
        }
        self.standing = next;
        true
    }

    /// The standing of an election that holds at `now`.
    pub(super) fn standing(&self, s: &Shared, now: Instant) -> Standing {
        let timeout = self.gossip_timeout(s);
        let mut alive = 0;
        let mut until: Option<Instant> = None;
        let mut earlier = |t: Instant| until = Some(until.map_or(t, |u| u.min(t)));
        for h in self.heard.values().filter(|h| self.alive(s, now, h)) {
            alive += 1;
            earlier(h.at + timeout);
        }
        if self.manager != s.me {
            if let Some(h) = self.heard.get(&self.manager) {
                earlier(h.at.max(self.manager_since) + s.config.member_timeout);
            }
        }
        Standing {
            stale: false,
            at: now,
            alive,
            until,
        }
    }

    /// Runs the election. Returns whether it kept the manager, alive, and changed nothing:
    /// then a run with the same inputs would keep it too.
    pub(super) fn run_election(&mut self, s: &mut Shared, now: Instant) -> bool {
        let mut kept = true;
        if !self.manager_alive(s, now) {
            kept = false;
            // The manager died (or left the local tier, or no longer answers): it is gone
            // for this agent, with its seniority, and its named successor takes over, if
            // alive. Everyone that followed it agrees, whatever they saw of the members'
            // seniority themselves.
            let dead = self.manager.clone();
            let gone = self.heard.remove(&dead);
            self.heard_changed(s, gone.map(|h| h.vote).as_ref(), None);
            if let Some(next) = self.successor.take() {
                let alive =
                    next == s.me || self.heard.get(&next).is_some_and(|h| self.alive(s, now, h));
                if alive {
                    self.set_manager(s, now, next);
                    return false;
                }
            }
        }
        let manager = self.winner(s, now);
        kept &= manager == self.manager;
        self.set_manager(s, now, manager);
        kept
    }

    /// The candidate the election rules choose, the manager being alive (or gone and
    /// forgotten).
    pub(super) fn winner(&self, s: &Shared, now: Instant) -> PeerId {
        // (candidate, first seen, votes, votes for itself, its vote): this agent and the
        // alive peers, each checked once. When an election ran on every heartbeat, in the
        // scale runs the checks and cloned ids were most of the simulator's time with NSc2c
        // (hence also `Heard::local`, and the candidates' self-votes taken with them rather
        // than looked up in every comparison). One vector, sorted by id, in which each vote
        // finds its candidate by bisection: the vector of alive peers and the map of votes
        // that were built for it as well were a third of the election's time (allocations,
        // 1.5% of the simulator's at 10,000 nodes). Only candidates' votes are read, so
        // votes for anyone else need not be counted.
        //
        // A peer that votes for itself although it hears this agent does not take this
        // agent as its senior: on equal votes it goes first (it may have been there first;
        // this agent cannot tell, having heard it from its own first moment). This agent
        // never counts as such (it is never among the peers it heard).
        struct Candidate<'a> {
            id: &'a PeerId,
            first: Instant,
            /// Votes of the candidates (this agent and its alive local peers) for it.
            votes: usize,
            /// A peer that votes for itself.
            self_vote: bool,
            vote: &'a PeerId,
            /// How many peers vote for it, near this agent or not, as it said.
            members: u32,
        }
        let mut candidates: Vec<Candidate<'_>> = Vec::with_capacity(self.heard.len() + 1);
        candidates.push(Candidate {
            id: &s.me,
            first: self.joined,
            votes: 0,
            self_vote: false,
            vote: &self.manager,
            members: 0,
        });
        candidates.extend(
            self.heard
                .iter()
                .filter(|(_, h)| self.alive(s, now, h))
                .map(|(p, h)| Candidate {
                    id: p,
                    first: h.first,
                    votes: 0,
                    self_vote: h.vote == *p && *p != s.me,
                    vote: &h.vote,
                    members: h.members,
                }),
        );
        // Ids are unique: this agent is never among the peers it heard.
        candidates.sort_unstable_by(|a, b| a.id.cmp(b.id));
        // Every candidate's vote: the alive peers' and this agent's own (its manager).
        for k in 0..candidates.len() {
            let vote = candidates[k].vote;
            if let Ok(c) = candidates.binary_search_by(|c| c.id.cmp(vote)) {
                candidates[c].votes += 1;
            }
        }
        let oldest = candidates.iter().map(|c| c.first).min().unwrap_or(now);
        let senior_until = oldest + self.seniority_grace(s);
        // Greater is better: votes, then a self-voting peer, then the lower id.
        let better = |a: &&Candidate<'_>, b: &&Candidate<'_>| {
            (a.votes.cmp(&b.votes))
                .then(a.self_vote.cmp(&b.self_vote))
                .then(b.id.cmp(a.id))
        };
        let senior = candidates
            .iter()
            .filter(|c| c.first <= senior_until)
            .max_by(better);
        let junior = candidates
            .iter()
            .filter(|c| c.first > senior_until)
            .max_by(better);
        // Two agents alone pair up: this agent, alone (it manages nobody, and no senior peer
        // beats it), follows the junior with the lowest id below its own among those alone
        // too (they vote for themselves and say nobody votes for them). Agents that meet
        // after their first seconds all count each other as junior and each vote for
        // themselves: on strictly more votes alone none would ever follow another
        // (docs/results-log.md, "Scale", 2026-11-29: at 1,000 simulated nodes 355 of 404
        // clusters stayed one node for the hour). Once paired, clusters grow by the votes.
        // Why not any junior with as many votes: a junior whose members this agent does not
        // hear has them elsewhere, and on a network with no structure (two peers near an
        // agent are seldom near each other) clusters then grew by members far from each
        // other, which cost NSc2c 7% of its throughput on the Internet-like pools of 100
        // nodes (16 seeds, 2026-11-29 morning). A running cluster is not taken over this
        // way: its manager has members.
        let lone_junior = || {
            candidates
                .iter()
                .filter(|c| c.first > senior_until && c.self_vote && c.members == 0)
                .map(|c| c.id)
                .min()
        };
        match (senior, junior) {
            (Some(c), Some(j)) if j.votes > c.votes => j.id.clone(),
            (Some(c), _) if *c.id == s.me && self.voters == 0 => match lone_junior() {
                Some(j) if *j < s.me => j.clone(),
                _ => s.me.clone(),
            },
            (Some(c), _) => c.id.clone(),
            (None, _) => s.me.clone(),
        }
    }

    /// A manager's successor: among its members of the senior generation (first heard
    /// within `Agent::seniority_grace` of the earliest), the lowest id. Members that came
    /// later cannot be named while a senior one is alive.
    pub(super) fn successor(&self, s: &Shared, now: Instant) -> Option<PeerId> {
        self.check_voters(s);
        if self.voters == 0 {
            return None;
        }
        let members = || {
            self.heard
                .iter()
                .filter(|(_, h)| h.vote == s.me && self.linked(s, now, h))
        };
        let oldest = members().map(|(_, h)| h.first).min()?;
        members()
            .filter(|(_, h)| h.first <= oldest + self.seniority_grace(s))
            .map(|(p, _)| p)
            .min()
            .cloned()
    }

    pub(super) fn set_manager(&mut self, s: &mut Shared, now: Instant, manager: PeerId) {
        if manager != self.manager {
            tracing::info!(agent = %s.me, old = %self.manager, new = %manager, "cluster manager changed");
            s.stats.manager_changes += 1;
            let old = std::mem::replace(&mut self.manager, manager.clone());
            self.manager_since = now;
            // The successor was the old manager's to name.
            self.successor = None;
            self.replied = None;
            self.views.clear();
            self.poll = None;
            self.pending_order = None;
            // Tell both at once: the new manager starts its heartbeats to this member, the
            // old one stops counting it, without waiting for their gossip turns.
            if manager != s.me {
                self.send_heartbeat(s, manager, None);
            }
            if old != s.me && self.heard.contains_key(&old) {
                self.send_heartbeat(s, old, None);
            }
        }
    }

    /// Keeps [`Cluster::voters`] as a heard peer's vote goes from `old` to `new` (`None`:
    /// the peer was not heard, or no longer is).
    pub(super) fn heard_changed(
        &mut self,
        s: &mut Shared,
        old: Option<&PeerId>,
        new: Option<&PeerId>,
    ) {
        if old == Some(&s.me) {
            self.voters -= 1;
        }
        if new == Some(&s.me) {
            self.voters += 1;
        }
    }

    /// In tests, that [`Cluster::voters`] counts what it says.
    #[cfg_attr(not(test), allow(unused_variables))]
    pub(super) fn check_voters(&self, s: &Shared) {
        #[cfg(test)]
        assert_eq!(
            self.voters,
            self.heard.values().filter(|h| h.vote == s.me).count(),
            "{}: heard peers voting for it miscounted",
            s.me
        );
    }
}
