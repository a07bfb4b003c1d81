//! The reconfiguration protocol (the paper's Figure 1): spawn, merge, hand over, split.
//!
//! Parents are the ranks of the current world (P of them, departing ones included);
//! children are the replacements, one per move, spawned in the order of the moves.
//!
//! 1. All parents spawn the children collectively (`MPI_Comm_spawn_multiple`, each child
//!    on the host its move names) and agree on whether that worked. If not, nothing has
//!    changed and everybody carries on.
//! 2. Parents and children merge the intercommunicator: parents keep ranks 0..P, child j
//!    becomes P + j.
//! 3. Rank 0 broadcasts the handover (job context, the plan); each departing rank sends its
//!    stored state straight to its child.
//! 4. Everyone shares where each process runs, and the slowest phase times.
//! 5. Everyone but the departing ranks splits out the new world, ordered so that child j
//!    takes rank `moves[j].rank` and every other rank keeps its own.
//! 6. The merged and spawn communicators are released (the intercommunicator disconnect is
//!    collective between parents and children), and the parents release the old world. On
//!    MPICH all three are disconnected, so that a departing process shares nothing with
//!    the job any more and can exit at once (see `runtime::PROMPT_DEPARTURE`).
//!
//! Steps 1 to 6 run under a deadline (`PCM_RECONFIGURE_TIMEOUT`) on every process, parents
//! and children alike: a process that never joins would otherwise leave the others blocked
//! in MPI forever (see the `deadline` module).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::time::Instant;

use mpi::collective::SystemOperation;
use mpi::topology::{Color, InterCommunicator, MergeOrder, SimpleCommunicator};
use mpi::traits::*;
use pcm_proto::{HostName, Outcome, PhaseTimings, Rank, RequestId};

use crate::malleable_store::redistribute;
use serde::{Deserialize, Serialize};

use super::checkpoint;
use super::finalize::{release, release_stand_in, Departed};
use super::state::State;
use super::{MpiOwner, Pcm};
use crate::deadline::{Context, Side, Watchdog};
use crate::error::{PcmError, Phase};
use crate::hosts::NewHosts;
use crate::interpose::WorldStandIn;
use crate::job::JobContext;
use crate::launch::Launch;
use crate::plan::Plan;
use crate::profile::Profiler;
use crate::schedule::Cadence;
use crate::schedule::CheckpointTimer;
use crate::shared::Segment;
use crate::status::{ProcessStatus, Status};
use crate::store::{Blob, Data, Entry, EntryHeader, Kind, Store};
use crate::wire::{broadcast_bytes, encode_cbor, exchange_hosts};
use crate::{ffi, interpose, malleable, malleable_store, runtime};

/// Result of [`Pcm::reconfigure`].
#[must_use]
#[derive(Debug)]
// Returned once per reconfiguration and moved straight into the caller's binding: boxing
// the `Pcm` would only add an allocation and a deref to every use of it.
#[allow(clippy::large_enum_variant)]
pub enum Reconfigured {
    /// This process goes on, with the new world ([`Pcm::world`]).
    Continue(Pcm),
    /// This process has been replaced: stop computing, release memory, and call
    /// [`Departed::finalize`].
    Departed(Departed),
}

/// An error from [`Pcm::reconfigure`], with the handle back when the job is still intact.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct ReconfigureError {
    /// What went wrong.
    pub error: PcmError,
    /// The handle, unchanged, when the error left the job intact (the reconfiguration did not
    /// start, for example [`PcmError::NothingPending`]); `None` when it broke the job halfway.
    pub pcm: Option<Box<Pcm>>,
}

impl From<ReconfigureError> for PcmError {
    fn from(e: ReconfigureError) -> Self {
        e.error
    }
}

impl Pcm {
    /// A reconfiguration point: call it once per iteration, first thing in the loop, on every
    /// rank. It asks [`Pcm::status`]; when a move or checkpoint is due it stores `state`
    /// ([`State::store`]) if this rank must, and calls [`Pcm::reconfigure`]. It returns on
    /// every rank that goes on (then take [`Pcm::world`] afresh); on a rank that moved
    /// away it releases `state` ([`State::release`]) and ends the process
    /// ([`Departed::finalize`]).
    pub fn reconfigure_point<S: State>(&mut self, state: &mut S) -> Result<(), PcmError> {
        let status = self.status()?;
        if status == Status::Continue {
            return Ok(());
        }
        if status.stores_state() {
            state.store(self)?;
        }
        if let Some(departed) = self.reconfigure_in_place()? {
            state.release();
            departed.finalize();
        }
        if status == Status::Resize && self.resizing {
            // This rank's block changed: its state is loaded again from the new rows.
            state.release();
            *state = S::load(self)?;
        }
        Ok(())
    }

    /// Carries out the reconfiguration the last status call announced (the paper's
    /// `PCM_Reconfigure`). Collective over the world.
    ///
    /// On the departing rank, call it after storing the state to hand over; it returns
    /// [`Reconfigured::Departed`] and the process must stop. Elsewhere it returns the
    /// updated `Pcm`. If the replacement processes cannot be started (an unknown host, say),
    /// every rank gets its `Pcm` back unchanged and the failure is logged and reported.
    ///
    /// After [`Status::Checkpoint`] it writes the coordinated checkpoint of what was stored
    /// (see the `checkpoint` module) and returns [`Reconfigured::Continue`] with this `Pcm`.
    ///
    /// An error that leaves the job intact (nothing pending, say) gives the handle back in
    /// [`ReconfigureError::pcm`]; one that broke the job halfway does not.
    pub fn reconfigure(mut self) -> Result<Reconfigured, ReconfigureError> {
        match self.reconfigure_in_place() {
            Ok(None) => Ok(Reconfigured::Continue(self)),
            Ok(Some(departed)) => Ok(Reconfigured::Departed(departed)),
            Err(error) => Err(ReconfigureError {
                error,
                pcm: (!self.broken).then(|| Box::new(self)),
            }),
        }
    }

    /// [`Pcm::reconfigure`] on a borrowed handle: `Some` on the departing rank, whose
    /// handle is then spent (dropping it does nothing more).
    fn reconfigure_in_place(&mut self) -> Result<Option<Departed>, PcmError> {
        if let Some(iteration) = self.checkpoints.pending.take() {
            checkpoint::commit(self, iteration);
            return Ok(None);
        }
        let plan = self.pending.take().ok_or(PcmError::NothingPending)?;
        let _internal = interpose::Internal::enter();
        let departed = run_as_parent(self, plan)?;
        if departed.is_none() {
            self.profiler.attach(&self.world);
        }
        Ok(departed)
    }

    /// Takes rank `rank` of a new world of `size` ranks after a resize at `iteration`: rank
    /// 0's duties (the check cadence, the checkpoint timer) move with the number, and the
    /// node's pcmd learns the new number and width (also when the number stays: the width
    /// changed), so that its status, profiles and later requests use them.
    pub(crate) fn renumber(&mut self, rank: u32, size: u32, iteration: u64) {
        let was = self.rank;
        self.rank = rank;
        self.size = size;
        if let Some(daemon) = &self.daemon {
            daemon.renumber(rank, size, self.job.migrations);
        }
        if was == rank {
            return;
        }
        let now = Instant::now();
        self.checkpoints = CheckpointTimer::new(rank, &self.job.checkpoint, now);
        self.cadence = match (rank, self.cadence.take()) {
            (0, Some(cadence)) => Some(cadence),
            (0, None) => Some(Cadence::new(self.job.check_period, now, iteration)),
            _ => None,
        };
    }
}

/// Largest piece of state sent in one MPI message, in u64 words (1 GiB): MPI counts are
/// 32-bit.
const CHUNK_WORDS: usize = 1 << 27;

/// What the children learn from rank 0 of the parents.
#[derive(Debug, Serialize, Deserialize)]
struct Handover {
    job: JobContext,
    parents: u32,
    plan: Plan,
}

/// Host of each rank of the new world: where the process taking it runs (`order`: its
/// merged rank, see [`malleable::new_world`]; `merged_hosts` lists the parents, then the
/// children).
fn new_placement(order: &[malleable::Merged], merged_hosts: &[HostName]) -> Vec<HostName> {
    order
        .iter()
        .map(|&m| merged_hosts[m as usize].clone())
        .collect()
}

/// The outcome of a completed reconfiguration of `plan`, as every member of the merged
/// communicator computes it from the same agreed inputs: the parents report it (and the
/// replacements too when no rank stays: see `report_for_departed`), and all of them, the
/// replacements included, remember it (see `JobContext::carried_out`). It places each moved
/// rank (by the number it was asked by) and each added rank (by its new number).
fn completed(
    plan: &Plan,
    parents: u32,
    order: &[malleable::Merged],
    merged_hosts: &[HostName],
    iteration: u64,
    timings: PhaseTimings,
) -> Outcome {
    let children = parents as usize;
    let first_added = parents + plan.moves.len() as u32;
    let moved = plan
        .moves
        .iter()
        .enumerate()
        .map(|(j, m)| (m.rank, merged_hosts[children + j].clone()));
    let added = order
        .iter()
        .enumerate()
        .filter(|(_, &m)| m >= first_added)
        .map(|(k, &m)| (Rank(k as u32), merged_hosts[m as usize].clone()));
    Outcome::Completed {
        iteration,
        timings,
        placed: moved.chain(added).collect(),
    }
}

/// Checks a plan against the job: returns it sorted with the target hosts outside the
/// allocation `hosts` (which [`crate::hosts::probe`] must check before the spawn), or the
/// reason to refuse it.
pub(crate) fn validate(
    mut plan: Plan,
    size: u32,
    hosts: &BTreeSet<HostName>,
    new_hosts: &NewHosts,
) -> Result<(Plan, BTreeSet<HostName>), (Plan, String)> {
    if plan.moves.is_empty() && plan.asked_resize.is_none() {
        return Err((plan, "the request moves no rank".into()));
    }
    if let Some(bad) = plan.moves.iter().find(|m| m.rank.0 >= size) {
        let reason = format!(
            "rank {} does not exist: the job has {size} ranks (0-{})",
            bad.rank,
            size - 1
        );
        return Err((plan, reason));
    }
    let distinct: BTreeSet<Rank> = plan.moves.iter().map(|m| m.rank).collect();
    if distinct.len() != plan.moves.len() {
        return Err((plan, "a rank appears more than once in the request".into()));
    }
    // Hosts of added processes too (a shrink's hosts are where ranks run already).
    let growing = plan.asked_resize.as_ref().filter(|r| r.ranks > size);
    let outside: BTreeSet<HostName> = plan
        .moves
        .iter()
        .filter_map(|m| m.to.as_ref())
        .chain(growing.into_iter().flat_map(|r| r.hosts.iter()))
        .filter(|h| !hosts.contains(*h))
        .cloned()
        .collect();
    if let Some(reason) = outside.iter().find_map(|h| new_hosts.refusal(h, hosts)) {
        return Err((plan, reason));
    }
    plan.moves.sort_by_key(|m| m.rank);
    Ok((plan, outside))
}

fn micros(since: Instant) -> u64 {
    since.elapsed().as_micros() as u64
}

/// Runs the protocol on a rank of the current world.
/// `Ok(None)` on a rank that stays (with the new world, or unchanged if the replacements
/// could not be started), `Ok(Some(departed))` on a departing one, whose `pcm` is then
/// spent. An error after the spawn marks `pcm` broken: the job cannot go on.
///
/// A plan with a resize (see the `malleable` module) adds processes to the spawn and
/// removes departing ranks from the new world, and moves the state differently: every
/// process of the new world receives its rows of each declared array from their old owners
/// and rank 0's replicated entries, instead of a replacement receiving its predecessor's
/// whole store. A pure shrink spawns nothing: it splits the old world itself.
pub(crate) fn run_as_parent(pcm: &mut Pcm, plan: Plan) -> Result<Option<Departed>, PcmError> {
    let iteration = pcm.job.iteration - 1;
    let size = pcm.size;
    let order = malleable::new_world(size, &plan.moves, plan.resize.as_deref());
    let new_rank = order.iter().position(|&m| m == pcm.rank).map(|k| k as u32);
    // The index of this rank's replacement among the children, if it moves.
    let moved = plan.moves.iter().position(|m| m.rank.0 == pcm.rank);
    let hosts: Vec<Option<String>> = plan
        .moves
        .iter()
        .map(|m| m.to.as_ref())
        .chain(
            plan.resize
                .iter()
                .flat_map(|r| r.added.iter().map(Option::as_ref)),
        )
        .map(|h| h.map(ToString::to_string))
        .collect();
    if pcm.rank == 0 {
        // Named before the spawn: if a replacement dies while starting, the runtime ends
        // the job before PCM can say more, and this is the line that tells which move it was.
        match plan.moves.is_empty() {
            true => tracing::info!("iteration {iteration}: {}", plan.describe()),
            false => tracing::info!(
                "iteration {iteration}: {}: moving {}",
                plan.describe(),
                crate::deadline::describe_moves(&plan.moves)
            ),
        }
    }

    // Only a rank that delivered a pcmd request reports its outcome, as `Pcm::report` does.
    let held_here: Vec<RequestId> = plan.held_here().map(|r| r.id).collect();
    let reporter = match (held_here.is_empty(), &pcm.daemon) {
        (false, Some(daemon)) => Some((daemon.reporter(), held_here)),
        _ => None,
    };
    let watchdog = Watchdog::arm(
        Context {
            side: Side::Parent,
            rank: Some(pcm.rank),
            host: pcm.host.clone(),
            requests: plan.requests.iter().map(|r| r.id).collect(),
            moves: plan.moves.clone(),
            iteration: Some(iteration),
        },
        pcm.job.reconfigure_timeout,
        reporter,
    );

    // A resize moves the rows every rank stored: all of them must fit the declarations
    // before anything changes.
    if plan.resize.is_some() {
        if let Some(reason) = blocks_refusal(pcm) {
            watchdog.disarm();
            return Ok(abandon(pcm, &plan, iteration, reason));
        }
    }

    // 1. Spawn, and agree on whether it worked. The ranks wait for each other first without
    // spinning: a departing rank may still be copying its state into the store, and ranks
    // polling MPI on the same cores slow that copy several times over.
    quiet_barrier(&pcm.world);
    let started = Instant::now();
    let agree_us = plan.agreed_at.map_or(0, micros);
    // The new processes start and join the merge on cores the parents may share: the
    // parents wait for them asleep (until the hand-over, before the state transfer).
    let sleeping = (!hosts.is_empty()).then(runtime::sleeping_waits).flatten();
    let inter = if hosts.is_empty() {
        None
    } else {
        let program = match &pcm.config.executable {
            Some(executable) => executable.clone(),
            None => std::env::current_exe()
                .map_err(|_| PcmError::internal("cannot find own executable"))?,
        };
        let args: Vec<OsString> = std::env::args_os().skip(1).collect();
        let spawned = ffi::spawn_on_hosts(&pcm.world, &program.into_os_string(), &args, &hosts);
        let ok_here = u64::from(spawned.is_ok());
        let mut ok_everywhere = 0u64;
        pcm.world
            .all_reduce_into(&ok_here, &mut ok_everywhere, SystemOperation::min());
        match (spawned, ok_everywhere) {
            (Ok(inter), 1) => Some(inter),
            (Err(error), 0) => {
                watchdog.disarm();
                return Ok(abandon(pcm, &plan, iteration, error.to_string()));
            }
            _ => {
                pcm.broken = true;
                return Err(PcmError::internal(
                    "spawn succeeded on some ranks and failed on others",
                ));
            }
        }
    };
    let spawn_us = micros(started);

    // 2. Merge; 3. hand over.
    let merge_started = Instant::now();
    watchdog.enter(Phase::Merge);
    let merged = inter.as_ref().map(|inter| inter.merge(MergeOrder::Low));
    // A pure shrink has no children: the old world is the communicator of the rest.
    let comm: &SimpleCommunicator = merged.as_ref().unwrap_or(&pcm.world);
    if merged.is_some() {
        let handover = (pcm.rank == 0).then(|| {
            let mut job = pcm.job.clone();
            job.iteration = iteration;
            job.next_check = iteration + 1;
            job.record_reconfiguration(&plan);
            encode_cbor(&Handover {
                job,
                parents: size,
                plan: plan.clone(),
            })
        });
        broadcast_bytes(comm, 0, handover);
    }
    let merge_us = micros(merge_started);
    drop(sleeping);

    let transfer_started = Instant::now();
    watchdog.enter(Phase::StateTransfer);
    let (state_bytes, resized_store) = if plan.resize.is_some() {
        let (store, sent) = match redistribute(comm, &pcm.store, &pcm.job.blocks, size, &order) {
            Ok(moved) => moved,
            Err(error) => {
                pcm.broken = true;
                return Err(error);
            }
        };
        (sent, store)
    } else if let Some(j) = moved {
        send_state(comm, (size as usize + j) as i32, &pcm.store, &pcm.host);
        (pcm.store.total_bytes(), None)
    } else {
        (0, None)
    };
    if let Some(j) = moved {
        pcm.profiler.note_state_bytes(state_bytes);
        pcm.profiler
            .hand_over(comm, (size as usize + j) as i32, iteration);
    }
    pcm.store.clear();
    let transfer_us = micros(transfer_started);

    // 4. Placement and timings, once every transfer is over (the ranks not in one wait
    // without spinning, leaving the cores to the copies).
    watchdog.enter(Phase::Placement);
    quiet_barrier(comm);
    let placed_hosts = exchange_hosts(comm, &pcm.host);
    let members = exchange_launches(comm, &pcm.launch);
    pcm.launch.record_departures(
        &members,
        (0..size).filter(|r| !order.contains(r)).map(|r| r as usize),
    );
    pcm.job.hosts.extend(placed_hosts.iter().cloned());
    let new_hosts = new_placement(&order, &placed_hosts);
    let timings = agree_on_timings(
        comm,
        [agree_us, spawn_us, merge_us, transfer_us],
        state_bytes,
    );

    // 5. Split; 6. release.
    let split_started = Instant::now();
    watchdog.enter(Phase::Split);
    let color = match new_rank {
        Some(_) => Color::with_value(0),
        None => Color::undefined(),
    };
    let new_world = comm.split_by_color_with_key(color, new_rank.unwrap_or(0) as i32);
    if let Some(merged) = merged {
        release(merged);
    }
    drop(inter);
    watchdog.disarm();
    let mut timings = timings;
    timings.merge_split_us += micros(split_started);

    let outcome = completed(&plan, size, &order, &placed_hosts, iteration, timings);
    if pcm.rank == 0 {
        emit_events(&plan, &outcome, &new_hosts);
    }
    pcm.report(&plan, outcome.clone());

    match (new_rank, new_world) {
        (None, None) => {
            let departed = pcm.depart();
            Ok(Some(departed))
        }
        (Some(rank), Some(world)) => {
            // The departing ranks release the old world (and its stand-in) at this point too.
            release_stand_in(std::mem::take(&mut pcm.world_stand_in));
            release(std::mem::replace(&mut pcm.world, world));
            // Collective over the new world, as in `join_as_replacement`.
            pcm.world_stand_in = match WorldStandIn::for_world(&pcm.world) {
                Ok(stand_in) => stand_in,
                Err(e) => {
                    pcm.broken = true;
                    return Err(e);
                }
            };
            pcm.job.record_reconfiguration(&plan);
            pcm.job.remember_completion(&plan, &outcome);
            pcm.rank_hosts = new_hosts;
            if let Some(store) = resized_store {
                pcm.store = store;
                pcm.renumber(rank, order.len() as u32, iteration);
                pcm.profiler.note_width_change();
            }
            if let Some(daemon) = &pcm.daemon {
                daemon.set_reconfigurations(pcm.job.migrations);
            }
            pcm.job.next_check = iteration + 1;
            if pcm.rank == 0 {
                log_reconfigured(iteration, &timings);
            }
            Ok(None)
        }
        _ => {
            pcm.broken = true;
            Err(PcmError::internal(
                "split gave a world to a departing rank, or none to a staying one",
            ))
        }
    }
}

/// The events of a completed reconfiguration, from rank 0 of the old world.
fn emit_events(plan: &Plan, outcome: &Outcome, new_hosts: &[HostName]) {
    let Outcome::Completed {
        iteration,
        placed,
        timings,
    } = outcome
    else {
        return;
    };
    if !plan.moves.is_empty() {
        let moved: Vec<(Rank, HostName)> = placed
            .iter()
            .filter(|(rank, _)| plan.moves.iter().any(|m| m.rank == *rank))
            .cloned()
            .collect();
        crate::events::emit(pcm_proto::run::RunEvent::Migrated {
            iteration: *iteration,
            placed: moved,
            timings: *timings,
        });
    }
    if let Some(resize) = &plan.resize {
        crate::events::emit(pcm_proto::run::RunEvent::Resized {
            iteration: *iteration,
            from: resize.from,
            to: resize.to(),
            hosts: new_hosts.to_vec(),
            timings: *timings,
        });
    }
}

/// Gives `plan` up before anything changed: every rank carries on unchanged at its width,
/// rank 0 says why, and the holders of its requests report it.
fn abandon(pcm: &mut Pcm, plan: &Plan, iteration: u64, reason: String) -> Option<Departed> {
    if pcm.rank == 0 {
        tracing::warn!("reconfiguration abandoned, the job carries on unchanged: {reason}");
    }
    pcm.store.clear();
    pcm.resizing = false;
    pcm.job.next_check = iteration + 1;
    pcm.report(plan, Outcome::Failed { reason });
    None
}

/// Checks every rank's stored rows against the declared arrays (collective over the
/// world): the first problem found, by the lowest rank that has one, told to every rank;
/// `None` when all fit.
fn blocks_refusal(pcm: &Pcm) -> Option<String> {
    let mine =
        malleable_store::stored_block_problem(&pcm.store, &pcm.job.blocks, pcm.rank, pcm.size);
    let candidate = if mine.is_some() { pcm.rank } else { u32::MAX };
    let mut first = u32::MAX;
    pcm.world
        .all_reduce_into(&candidate, &mut first, SystemOperation::min());
    if first == u32::MAX {
        return None;
    }
    let bytes = broadcast_bytes(&pcm.world, first as i32, mine.map(String::into_bytes));
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// Runs the protocol on a freshly spawned process, inside `Pcm::init`: a replacement of a
/// moved rank, or a process added by a resize.
pub(crate) fn join_as_replacement(
    universe: MpiOwner,
    parent: InterCommunicator,
    host: HostName,
    config: crate::config::Config,
) -> Result<Pcm, PcmError> {
    // Until the hand-over brings the job's own, the replacement's setting (the default if
    // its environment had a bad one: see `Pcm::init`).
    let timeout = config.reconfigure_timeout;
    let profiling = config.profiling;
    // Nothing is known of the reconfiguration until the hand-over; the pcmd link starts
    // only afterwards, so a replacement's watchdog never reports (its parents do).
    let watchdog = Watchdog::arm(
        Context {
            side: Side::Replacement,
            rank: None,
            host: host.clone(),
            requests: Vec::new(),
            moves: Vec::new(),
            iteration: None,
        },
        timeout,
        None,
    );
    watchdog.enter(Phase::Merge);
    let merged = parent.merge(MergeOrder::High);
    let bytes = broadcast_bytes(&merged, 0, None);
    let handover: Handover =
        ciborium::from_reader(bytes.as_slice()).map_err(|e| PcmError::Handover(e.to_string()))?;
    let parents = handover.parents as usize;
    let me = merged.rank() as u32;
    let index = (me as usize)
        .checked_sub(parents)
        .ok_or_else(|| PcmError::Handover("replacement merged among the parents".into()))?;
    let plan = &handover.plan;
    let order = malleable::new_world(handover.parents, &plan.moves, plan.resize.as_deref());
    let rank = order
        .iter()
        .position(|&m| m == me)
        .ok_or_else(|| PcmError::Handover(format!("no rank for spawned process {index}")))?
        as u32;
    // The rank this process replaces, if it is a replacement (not an added process).
    let predecessor = plan.moves.get(index).map(|m| m.rank.0);
    watchdog.update(|c| {
        c.rank = Some(rank);
        c.requests = plan.requests.iter().map(|r| r.id).collect();
        c.moves = plan.moves.clone();
        c.iteration = Some(handover.job.iteration);
    });
    watchdog.enter(Phase::StateTransfer);
    let store = match (&plan.resize, predecessor) {
        (Some(_), _) => redistribute(
            &merged,
            &Store::default(),
            &handover.job.blocks,
            handover.parents,
            &order,
        )?
        .0
        .ok_or(PcmError::internal(
            "spawned process got no state in a resize",
        ))?,
        (None, Some(from)) => {
            receive_state(&merged, from as i32, &host, handover.job.job.as_str())?
        }
        (None, None) => {
            return Err(PcmError::Handover(format!(
                "spawned process {index} has no move and the reconfiguration no resize"
            )))
        }
    };
    let mut profiler = match predecessor {
        Some(from) => Profiler::take_over(&merged, from as i32, profiling)?,
        None => Profiler::new(profiling, pcm_proto::RankProfile::default()),
    };
    if plan.resize.is_some() {
        profiler.note_width_change();
    }
    let mut job = handover.job;
    watchdog.enter(Phase::Placement);
    quiet_barrier(&merged);
    let merged_hosts = exchange_hosts(&merged, &host);
    // The handover counts this reconfiguration already: it names this launch.
    let launch = Launch::new(&universe.world(), job.migrations);
    exchange_launches(&merged, &launch);
    let rank_hosts = new_placement(&order, &merged_hosts);
    let timings = agree_on_timings(&merged, [0; 4], 0);
    let outcome = completed(
        &handover.plan,
        handover.parents,
        &order,
        &merged_hosts,
        job.iteration,
        timings,
    );
    job.remember_completion(&handover.plan, &outcome);
    job.hosts.extend(merged_hosts);
    watchdog.enter(Phase::Split);
    let world = merged
        .split_by_color_with_key(Color::with_value(0), rank as i32)
        .ok_or(PcmError::internal("replacement left out of the new world"))?;
    release(merged);
    drop(parent);
    watchdog.disarm();
    // Collective over the new world: the parents make theirs after releasing the old one.
    let world_stand_in = WorldStandIn::for_world(&world)?;

    let iteration = job.iteration;
    if rank == 0 {
        log_reconfigured(iteration, &timings);
    }
    let checkpoints = CheckpointTimer::new(rank, &job.checkpoint, Instant::now());
    let resizing = handover.plan.resize.is_some();
    let origin = match predecessor {
        Some(_) => ProcessStatus::Replacement {
            rank: Rank(rank),
            iteration,
        },
        None => ProcessStatus::Added { iteration },
    };
    let mut pcm = Pcm {
        size: world.size() as u32,
        world,
        world_stand_in,
        store,
        cadence: (rank == 0)
            .then(|| crate::schedule::Cadence::new(job.check_period, Instant::now(), iteration)),
        job,
        rank,
        checkpoints,
        origin,
        resume_pending: true,
        resizing,
        pending: None,
        daemon: None,
        host,
        rank_hosts,
        last_outcome: None,
        launch,
        profiler,
        universe,
        broken: false,
        spent: false,
        config,
    };
    pcm.connect_daemon();
    if !order.iter().any(|&m| (m as usize) < parents) {
        report_for_departed(&pcm, &handover.plan, &outcome);
    }
    tracing::debug!(
        "spawned process for rank {rank} running on {} from iteration {iteration}",
        pcm.host
    );
    Ok(pcm)
}

/// Tells a replacement's pcmd that the reconfiguration of `plan`, in which every rank
/// moved, completed with `outcome` (each request told of its own ranks).
///
/// The ranks that held its requests all departed. They report the outcome before they
/// leave (pcmd counts such a report even when the replacement registered first), but a
/// departed process leaves fast, and its last report may not get out; then the pcmd that
/// made a request would see all its ranks go and never hear whether the move was done. So
/// the replacements report it too, once registered: a pcmd with one of the requests in
/// flight counts the first report and ignores the others, and a pcmd that never made it
/// ignores it.
fn report_for_departed(pcm: &Pcm, plan: &Plan, outcome: &Outcome) {
    let Some(daemon) = &pcm.daemon else { return };
    for request in &plan.requests {
        daemon.send(pcm_proto::ToDaemon::ReconfigurationFinished {
            request: request.id,
            outcome: request.own_outcome(outcome),
        });
    }
}

/// A barrier that sleeps while it waits instead of polling MPI at full speed.
///
/// Ranks blocked in an MPI call spin on their core (MPICH's ch4:ucx and Open MPI alike).
/// Within a reconfiguration most ranks only wait for one departing rank to store and send
/// its state; on a host with fewer cores than ranks their spinning takes the CPU that the
/// copies need (measured: 256 MiB stored at 0.17 GB/s with three ranks spinning, against
/// 1.3-5.8 GB/s alone). Waking every 200 us costs at most that much latency.
fn quiet_barrier<C: Communicator>(comm: &C) {
    const NAP: std::time::Duration = std::time::Duration::from_micros(200);
    let mut request = comm.immediate_barrier();
    loop {
        match request.test() {
            Ok(_) => return,
            Err(pending) => {
                request = pending;
                std::thread::sleep(NAP);
            }
        }
    }
}

/// What a departing rank sends ahead of its state's bytes.
#[derive(Debug, Serialize, Deserialize)]
struct StateHeader {
    entries: Vec<EntryHeader>,
    /// For each entry, the descriptor of its shared-memory segment in the departing
    /// process (an array stored with `store_shared`), which a replacement on the same host
    /// may take over instead of receiving the bytes.
    segments: Vec<Option<i32>>,
    /// Where the departing process runs: host name, kernel boot id, process id.
    host: String,
    boot_id: String,
    pid: u32,
}

/// Sends the stored state to the replacement `to`. Shared arrays are offered first; the
/// replacement answers which ones it mapped (it has them mapped when it answers, so the
/// store may let go of them afterwards), and the bytes of the others follow.
fn send_state(comm: &SimpleCommunicator, to: i32, store: &Store, host: &HostName) {
    let started = Instant::now();
    let process = comm.process_at_rank(to);
    let segments: Vec<Option<i32>> = store
        .entries()
        .map(|e| match &e.data {
            Data::Shared(segment) => Some(segment.raw_fd()),
            Data::Blob(_) => None,
        })
        .collect();
    let offered = segments.iter().any(Option::is_some);
    let header = encode_cbor(&StateHeader {
        entries: store.headers(),
        segments,
        host: host.as_str().to_owned(),
        boot_id: crate::shared::boot_id(),
        pid: std::process::id(),
    });
    process.send(&(header.len() as u64));
    process.send(&header[..]);
    let mut taken = vec![0u8; store.entries().count()];
    if offered {
        // Waits without spinning: the replacement is mapping the pages on these cores.
        while process.immediate_probe().is_none() {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        process.receive_into(&mut taken[..]);
    }
    let mut sent = 0u64;
    for (entry, &took) in store.entries().zip(&taken) {
        if took == 1 {
            continue;
        }
        sent += entry.data.len() as u64;
        for chunk in entry.data.words().chunks(CHUNK_WORDS) {
            process.send(chunk);
        }
    }
    log_transfer("send_state", store.total_bytes(), started);
    tracing::debug!(
        target: crate::store::TIMING_TARGET,
        "{{\"event\":\"pcm_send_state_bytes\",\"sent\":{sent},\"handed_over\":{}}}",
        store.total_bytes() - sent
    );
}

/// One debug line per side of a state transfer, like `store::log_timing`.
fn log_transfer(op: &str, bytes: u64, started: Instant) {
    tracing::debug!(
        target: crate::store::TIMING_TARGET,
        "{{\"event\":\"pcm_{op}\",\"bytes\":{bytes},\"us\":{}}}",
        micros(started)
    );
}

/// Receives the state a departing rank sends with [`send_state`]: takes over the shared
/// segments it offers when it runs on this host (same host name and kernel), and receives
/// the bytes of everything else (those of an offered segment it could not take over into
/// a new shared segment of job `job`, so that the array stays shared).
fn receive_state(
    comm: &SimpleCommunicator,
    from: i32,
    host: &HostName,
    job: &str,
) -> Result<Store, PcmError> {
    let process = comm.process_at_rank(from);
    let (header_len, _) = process.receive::<u64>();
    let started = Instant::now();
    let mut header = vec![0u8; header_len as usize];
    process.receive_into(&mut header[..]);
    let header: StateHeader =
        ciborium::from_reader(header.as_slice()).map_err(|e| PcmError::Handover(e.to_string()))?;
    if header.segments.len() != header.entries.len() {
        return Err(PcmError::Handover(format!(
            "{} entries but {} segment slots",
            header.entries.len(),
            header.segments.len()
        )));
    }
    let entry_len = |h: &EntryHeader| {
        usize::try_from(h.len)
            .map_err(|_| PcmError::Handover(format!("entry {:?} too large", h.name)))
    };
    let mine = crate::shared::boot_id();
    let same_host = !mine.is_empty() && header.boot_id == mine && header.host == host.as_str();
    let mut taken = vec![0u8; header.entries.len()];
    let mut adopted: Vec<Option<Segment>> = Vec::with_capacity(header.entries.len());
    let mut offered = false;
    for ((h, segment), took) in header
        .entries
        .iter()
        .zip(&header.segments)
        .zip(taken.iter_mut())
    {
        let Some(fd) = *segment else {
            adopted.push(None);
            continue;
        };
        offered = true;
        if !same_host || h.kind != Kind::Array {
            adopted.push(None);
            continue;
        }
        match Segment::adopt(header.pid, fd, entry_len(h)?, job) {
            Ok(segment) => {
                *took = 1;
                adopted.push(Some(segment));
            }
            Err(error) => {
                tracing::warn!("{error}; its bytes come over MPI instead");
                adopted.push(None);
            }
        }
    }
    if offered {
        process.send(&taken[..]);
    }
    let mut store = Store::default();
    let mut receive_us = 0;
    for ((h, segment), adopted) in header.entries.into_iter().zip(header.segments).zip(adopted) {
        let data = match adopted {
            Some(segment) => Data::Shared(segment),
            None => {
                let len = entry_len(&h)?;
                let receiving = Instant::now();
                let data = if segment.is_some() {
                    let mut segment = Segment::create(job, &h.name, len)?;
                    let words = segment
                        .words_mut()
                        .ok_or(PcmError::internal("new segment not writable"))?;
                    for chunk in words.chunks_mut(CHUNK_WORDS) {
                        process.receive_into(chunk);
                    }
                    Data::Shared(segment.held_alone())
                } else {
                    let mut blob = Blob::zeroed(len);
                    for chunk in blob.words_mut().chunks_mut(CHUNK_WORDS) {
                        process.receive_into(chunk);
                    }
                    Data::Blob(blob)
                };
                receive_us += micros(receiving);
                data
            }
        };
        store.insert_entry(
            h.name,
            Entry {
                kind: h.kind,
                type_name: h.type_name,
                data,
            },
        );
    }
    log_transfer("receive_state", store.total_bytes(), started);
    tracing::debug!(
        target: crate::store::TIMING_TARGET,
        "{{\"event\":\"pcm_receive_state_calls\",\"us\":{receive_us}}}"
    );
    Ok(store)
}

/// The one line per reconfiguration, from rank 0 of the new world.
fn log_reconfigured(iteration: u64, t: &PhaseTimings) {
    let ms = |us: u64| us as f64 / 1e3;
    tracing::info!(
        "iteration {iteration}: reconfigured in {:.1} ms (agree {:.1}, spawn {:.1}, merge+split {:.1}, state {:.1} ms for {} bytes)",
        ms(t.agree_us + t.spawn_us + t.merge_split_us + t.state_transfer_us),
        ms(t.agree_us),
        ms(t.spawn_us),
        ms(t.merge_split_us),
        ms(t.state_transfer_us),
        t.state_bytes
    );
    // The same as JSON, for benchmarks (see `store::log_timing`).
    tracing::debug!(
        target: crate::store::TIMING_TARGET,
        "{{\"event\":\"pcm_reconfigured\",\"iteration\":{iteration},\"agree_us\":{},\"spawn_us\":{},\"merge_split_us\":{},\"state_transfer_us\":{},\"state_bytes\":{}}}",
        t.agree_us,
        t.spawn_us,
        t.merge_split_us,
        t.state_transfer_us,
        t.state_bytes
    );
}

/// Every process of `comm` learns every other's launch (generation, launch rank), in rank
/// order.
fn exchange_launches(comm: &SimpleCommunicator, launch: &Launch) -> Vec<[u64; 2]> {
    let mine = [launch.generation, launch.rank as u64];
    let mut all = vec![0u64; 2 * comm.size() as usize];
    comm.all_gather_into(&mine[..], &mut all[..]);
    all.chunks(2).map(|c| [c[0], c[1]]).collect()
}

/// The slowest rank's time for each phase and the total state moved, known to all.
/// `local` is `[agree, spawn, merge, transfer]` in microseconds.
fn agree_on_timings(comm: &SimpleCommunicator, local: [u64; 4], state_bytes: u64) -> PhaseTimings {
    let mut max = [0u64; 4];
    comm.all_reduce_into(&local[..], &mut max[..], SystemOperation::max());
    let mut total_bytes = 0u64;
    comm.all_reduce_into(&state_bytes, &mut total_bytes, SystemOperation::sum());
    PhaseTimings {
        agree_us: max[0],
        spawn_us: max[1],
        merge_split_us: max[2],
        state_transfer_us: max[3],
        state_bytes: total_bytes,
    }
}
