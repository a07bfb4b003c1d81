//! Coordinated checkpoints and restart, on the rank's side.
//!
//! With `PCM_CHECKPOINT_INTERVAL=SECS`, rank 0 notes when a checkpoint is due and says so
//! in the status check's all-reduce (a third word beside the request id and the check
//! interval), so every rank learns it at the same iteration and gets
//! [`Status::Checkpoint`](crate::Status::Checkpoint). The application stores its state
//! with the same calls as for a migration (`status.stores_state()`), then calls
//! `reconfigure`, which here only commits the checkpoint and hands the `Pcm` back:
//!
//! 1. each rank encodes its stored entries as one *piece* (provenance header, then the raw
//!    bytes; [`pcm_proto::checkpoint`]), hashes it with SHA-256 and streams it to its node's
//!    pcmd (`<daemon socket>.ckpt`), which writes it atomically and answers once it is on disk;
//! 2. the ranks all-gather (ok, length, digest); if every rank succeeded, each sends the
//!    same manifest (every rank's digest) to its pcmd, which makes the checkpoint complete
//!    there and copies it to its buddy. If any rank failed, no manifest is written, the
//!    checkpoint is never used, and the job carries on (a log line says why).
//!
//! With `PCM_RESTART=1`, `Pcm::init` asks the node's pcmd which checkpoints of this
//! application and rank count hold a verified piece of this rank (locally or at the
//! buddy), and the ranks agree on the newest one every rank has. Each rank fetches its
//! piece, checks its digest and provenance again, and loads the entries into the store, so
//! the application reads them like a replacement does. If any rank fails to load, the ranks
//! fall back to the next older common checkpoint; if there is none, the job starts fresh
//! and says so.
//!
//! With `PCM_CHECKPOINT_DIR=/abs/dir` (the same on every rank, checked at init) every
//! checkpoint connection names that directory in its `Hello`, and the pcmd keeps the job's
//! checkpoints there instead of in its own directory. A pcmd that does not confirm the
//! directory in its `Welcome` (one from before the field) is not used: it would write
//! elsewhere than asked.

use std::collections::BTreeSet;
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use mpi::collective::SystemOperation;
use mpi::traits::*;
use pcm_proto::checkpoint::{
    self as ckpt, expect_frame, write_frame, Available, Digest, Finished, Hasher, Identity,
    Manifest, PieceEntry, PieceHeader, PieceId, Request, Response, Series, DIR_ENV, FORMAT_VERSION,
    JOB_NAME_ENV, RESTART_ENV,
};
use pcm_proto::{AppName, JobId, Rank};

mod width;

use super::Pcm;
use crate::config::Restart;
use crate::error::PcmError;
use crate::status::ProcessStatus;
use crate::store::{Blob, Data, Entry, Kind, Store};
use crate::wire::{broadcast_bytes, encode_cbor};

/// How long the pcmd may take to answer one checkpoint request (it syncs to disk, and at
/// restart may fetch from the buddy).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(600);
/// Newest checkpoints each rank offers in the restart agreement.
const OFFERED: usize = 8;
/// Older checkpoints tried at restart when a newer one fails to load somewhere.
const ATTEMPTS: usize = 4;

/// The job name and the program with its arguments, as rank 0 sees them (broadcast, so that
/// every rank writes the same manifest). Collective.
pub(crate) fn agree_on_identity(
    world: &mpi::topology::SimpleCommunicator,
    job_name: Option<&str>,
) -> Result<(Option<AppName>, Identity), PcmError> {
    let mine = (world.rank() == 0).then(|| {
        let name = match job_name {
            Some(v) => AppName::new(v)
                .map(Some)
                .map_err(|e| format!("invalid {JOB_NAME_ENV}={v:?}: {e}")),
            None => Ok(None),
        };
        encode_cbor(&name.map(|n| (n, Identity::of_this_process())))
    });
    let bytes = broadcast_bytes(world, 0, mine);
    let agreed: Result<(Option<AppName>, Identity), String> =
        ciborium::from_reader(bytes.as_slice()).map_err(|e| PcmError::Handover(e.to_string()))?;
    agreed.map_err(|reason| PcmError::Config {
        variable: JOB_NAME_ENV,
        value: job_name.unwrap_or_default().to_owned(),
        reason,
    })
}

/// The job's checkpoint directory (`PCM_CHECKPOINT_DIR`): rank 0's, which every rank must
/// have given too. A rank whose value differs (or that has none where rank 0 has one, or
/// the other way round) would keep its pieces elsewhere than the others, so the job does
/// not start: every rank fails, naming the values. Collective.
pub(crate) fn agree_on_dir(
    world: &mpi::topology::SimpleCommunicator,
    mine: Option<&Path>,
) -> Result<Option<String>, PcmError> {
    let mine = mine.map(|d| d.to_string_lossy().into_owned());
    let root = (world.rank() == 0).then(|| encode_cbor(&mine));
    let bytes = broadcast_bytes(world, 0, root);
    let rank0: Option<String> =
        ciborium::from_reader(bytes.as_slice()).map_err(|e| PcmError::Handover(e.to_string()))?;
    let differs = mine != rank0;
    // The highest rank that differs, plus one (0: none).
    let mut worst = 0u64;
    world.all_reduce_into(
        &if differs { world.rank() as u64 + 1 } else { 0 },
        &mut worst,
        SystemOperation::max(),
    );
    if worst == 0 {
        return Ok(rank0);
    }
    let show = |v: &Option<String>| v.as_ref().map_or("unset".to_owned(), |d| format!("{d:?}"));
    let reason = if differs {
        format!(
            "rank 0 has {} here: every rank of a job must name the same checkpoint directory",
            show(&rank0)
        )
    } else {
        format!(
            "rank {} (perhaps others too) names another checkpoint directory than rank 0's {}: \
             every rank of a job must name the same one (see that rank's message)",
            worst - 1,
            show(&rank0)
        )
    };
    Err(PcmError::Config {
        variable: DIR_ENV,
        value: mine.unwrap_or_default(),
        reason,
    })
}

/// Says (rank 0 of a fresh job with checkpoints) when pcmrun holds the lock of another
/// series than the one this job checkpoints in: pcmrun names its lock after the program's
/// file name, the job's series is named after `Pcm::init`'s name, and a second pcmrun of
/// the same program would not be stopped. Returns the warning, for tests.
pub(crate) fn warn_other_series(pcm: &Pcm, locked: Option<&str>) -> Option<String> {
    let warning = other_series(locked, &series(pcm).dir_name())?;
    tracing::warn!("{warning}");
    Some(warning)
}

fn other_series(locked: Option<&str>, actual: &str) -> Option<String> {
    let locked = locked.filter(|l| !l.is_empty() && *l != actual)?;
    Some(format!(
        "pcmrun holds the checkpoint series {locked} (named after the program's file), but \
         this job checkpoints in series {actual} (named after the application's name given \
         to Pcm::init): a second pcmrun of this program in the same checkpoint directory \
         would not be stopped and would retire this job's checkpoints; give both the same \
         name, or each run its own --job-name"
    ))
}

fn series(pcm: &Pcm) -> Series {
    Series {
        app: pcm.job.app.clone(),
        size: pcm.size,
        name: pcm.job.job_name.clone(),
    }
}

/// Says, on a fresh start with checkpoints on (rank 0, from `Pcm::init`), which pcmd and
/// directory this job's checkpoints go to, and warns when the series holds checkpoints of
/// another job that did not finish: this job's first checkpoint will retire them, and their
/// job (killed, perhaps) could then no longer be restarted. Returns the warning.
pub(crate) fn announce(pcm: &Pcm) -> Option<String> {
    let series = series(pcm);
    let listing = match open(pcm) {
        Ok((_, _, socket, dir)) => {
            tracing::info!(
                "checkpoints of {series} go to the pcmd at {} (directory {})",
                socket.display(),
                dir.as_deref().unwrap_or("not said")
            );
            list(pcm, &series, Rank(pcm.rank))
        }
        Err(reason) => Err(reason),
    };
    let listing = match listing {
        Ok(listing) => listing,
        Err(reason) => {
            tracing::warn!("checkpoints are on, but: {reason}");
            return None;
        }
    };
    let warning = superseded(&listing, &pcm.job.job, &series)?;
    tracing::warn!("{warning}");
    Some(warning)
}

/// The warning of [`announce`] for a fresh job `job` of `series` whose pcmd lists `listing`.
fn superseded(listing: &Listing, job: &JobId, series: &Series) -> Option<String> {
    let newest = listing.available.first()?;
    let finished = listing
        .finished
        .as_ref()
        .is_some_and(|f| f.job == newest.job);
    if newest.job == *job || finished {
        return None;
    }
    Some(format!(
        "{series} holds checkpoints of job {} (newest at iteration {}, of `{}`), which did not \
         finish: this run's first checkpoint will retire them, and that job could no longer \
         be restarted. To keep them, stop this run and give it its own {JOB_NAME_ENV} (or \
         resume that job with {RESTART_ENV}=1)",
        newest.job, newest.iteration, newest.identity
    ))
}

/// Opens the checkpoint channel of this node's pcmd.
fn connect(pcm: &Pcm) -> Result<(BufReader<UnixStream>, BufWriter<UnixStream>), String> {
    open(pcm).map(|(reader, writer, _, _)| (reader, writer))
}

/// A checkpoint connection with the socket it reached and the directory the pcmd keeps
/// this job's checkpoints in (as its `Welcome` says).
type Opened = (
    BufReader<UnixStream>,
    BufWriter<UnixStream>,
    PathBuf,
    Option<String>,
);

/// [`connect`], also returning the socket and the pcmd's directory.
fn open(pcm: &Pcm) -> Result<Opened, String> {
    let socket: PathBuf = pcm
        .daemon_socket()
        .map(|s| ckpt::socket_path(&s))
        .ok_or_else(|| format!("no pcmd to write to ({}=none)", pcm_proto::DAEMON_ENV))?;
    let stream = UnixStream::connect(&socket)
        .map_err(|e| format!("no pcmd checkpoint socket at {}: {e}", socket.display()))?;
    let io = |e: std::io::Error| format!("pcmd checkpoint socket {}: {e}", socket.display());
    stream.set_read_timeout(Some(ANSWER_TIMEOUT)).map_err(io)?;
    let mut reader = BufReader::new(stream.try_clone().map_err(io)?);
    let mut writer = BufWriter::with_capacity(1 << 20, stream);
    let asked = pcm.job.checkpoint_dir.clone();
    let hello = Request::Hello {
        version: FORMAT_VERSION,
        dir: asked.clone(),
    };
    write_frame(&mut writer, &hello).map_err(io)?;
    writer.flush().map_err(io)?;
    match expect_frame(&mut reader).map_err(|e| e.to_string())? {
        Response::Welcome { dir, .. } => match asked {
            Some(asked) if dir.as_ref() != Some(&asked) => Err(format!(
                "the pcmd at {} did not confirm {DIR_ENV}={asked} (it answered {}): a pcmd \
                 from before {DIR_ENV} would keep the checkpoints in its own directory \
                 instead; update it",
                socket.display(),
                dir.map_or("without a directory".to_owned(), |d| format!("with {d}"))
            )),
            _ => Ok((reader, writer, socket, dir)),
        },
        other => Err(answer(other)),
    }
}

fn answer(response: Response) -> String {
    match response {
        Response::Error { message } => format!("pcmd refused: {message}"),
        other => format!("unexpected answer from pcmd: {other:?}"),
    }
}

/// The piece header of this rank's stored entries.
fn piece_header(pcm: &Pcm, iteration: u64) -> PieceHeader {
    PieceHeader {
        format: FORMAT_VERSION,
        piece: PieceId {
            series: series(pcm),
            iteration,
            rank: Rank(pcm.rank),
        },
        job: pcm.job.job.clone(),
        host: pcm.host.clone(),
        entries: pcm
            .store
            .headers()
            .into_iter()
            .map(|h| PieceEntry {
                name: h.name,
                encoded: h.kind == Kind::Value,
                type_name: h.type_name,
                len: h.len,
            })
            .collect(),
        reconfigurations: pcm.job.migrations,
    }
}

type Channel = (BufReader<UnixStream>, BufWriter<UnixStream>);

/// Step 1: this rank's piece to its pcmd. Returns the channel (for the commit), the
/// digest and the length.
fn put_piece(pcm: &Pcm, iteration: u64) -> Result<(Channel, Digest, u64), String> {
    if pcm.store.total_bytes() == 0 && pcm.store.headers().is_empty() {
        return Err("nothing was stored: store the state when status.stores_state()".into());
    }
    let header = piece_header(pcm, iteration);
    let header_bytes = header.encode();
    let mut hasher = Hasher::new();
    hasher.update(&header_bytes);
    for entry in pcm.store.entries() {
        hasher.update(entry.data.bytes());
    }
    let digest = hasher.finish();
    let len = header_bytes.len() as u64 + header.data_len();
    let (mut reader, mut writer) = connect(pcm)?;
    let put = Request::Put {
        piece: header.piece.clone(),
        len,
        digest,
    };
    let sent = (|| {
        write_frame(&mut writer, &put)?;
        writer.write_all(&header_bytes)?;
        for entry in pcm.store.entries() {
            writer.write_all(entry.data.bytes())?;
        }
        writer.flush()
    })();
    if let Err(e) = sent {
        // pcmd may have refused the piece (over its --max-piece-mib, say) and closed the
        // connection before reading it: its answer, already sent, names the reason, where
        // the broken pipe alone would not.
        return Err(match expect_frame::<Response>(&mut reader) {
            Ok(Response::Error { message }) => format!("pcmd refused the piece: {message}"),
            _ => format!("sending the piece to pcmd: {e}"),
        });
    }
    match expect_frame(&mut reader).map_err(|e| e.to_string())? {
        Response::Stored => Ok(((reader, writer), digest, len)),
        other => Err(answer(other)),
    }
}

/// Commits the agreed checkpoint at `iteration` (inside `reconfigure`). Collective. A
/// failure is logged and the job carries on: a checkpoint is insurance, not a result.
pub(crate) fn commit(pcm: &mut Pcm, iteration: u64) {
    let started = Instant::now();
    width::mark_block_form(pcm);
    let put = put_piece(pcm, iteration);
    if let Err(reason) = &put {
        tracing::warn!(
            "rank {}: checkpoint at iteration {iteration} not written: {reason}",
            pcm.rank
        );
    }
    let mine = match &put {
        Ok((_, digest, len)) => {
            let d = digest.to_words();
            [1, *len, d[0], d[1], d[2], d[3]]
        }
        Err(_) => [0; 6],
    };
    let mut all = vec![0u64; 6 * pcm.size as usize];
    pcm.world.all_gather_into(&mine[..], &mut all[..]);
    pcm.store.clear();
    pcm.checkpoints.taken(Instant::now());
    let failed: Vec<usize> = all
        .chunks(6)
        .enumerate()
        .filter(|(_, w)| w[0] == 0)
        .map(|(r, _)| r)
        .collect();
    if !failed.is_empty() {
        if pcm.rank == 0 {
            tracing::warn!(
                "checkpoint at iteration {iteration} abandoned: rank(s) {failed:?} could not write their piece; the previous checkpoint stays the newest"
            );
        }
        return;
    }
    let manifest = Manifest {
        format: FORMAT_VERSION,
        series: series(pcm),
        iteration,
        job: pcm.job.job.clone(),
        created_unix_s: unix_now(),
        identity: pcm.job.identity.clone(),
        digests: all
            .chunks(6)
            .map(|w| Digest::from_words([w[2], w[3], w[4], w[5]]))
            .collect(),
        lens: all.chunks(6).map(|w| w[1]).collect(),
    };
    let Ok(((mut reader, mut writer), _, _)) = put else {
        return;
    };
    let committed = write_frame(&mut writer, &Request::Commit { manifest })
        .and_then(|()| writer.flush())
        .map_err(|e| e.to_string())
        .and_then(|()| match expect_frame(&mut reader) {
            Ok(Response::Committed) => Ok(()),
            Ok(other) => Err(answer(other)),
            Err(e) => Err(e.to_string()),
        });
    match committed {
        Ok(()) if pcm.rank == 0 => {
            let bytes: u64 = all.chunks(6).map(|w| w[1]).sum();
            let seconds = started.elapsed().as_secs_f64();
            tracing::info!(
                "checkpoint at iteration {iteration} committed: {bytes} bytes from {} ranks in {seconds:.3} s",
                pcm.size
            );
            crate::events::emit(pcm_proto::run::RunEvent::Checkpointed { iteration });
        }
        Ok(()) => {}
        Err(reason) => tracing::warn!(
            "rank {}: checkpoint at iteration {iteration} not marked complete on this node: {reason}",
            pcm.rank
        ),
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Tells the node's pcmd that this job ended by itself, so that a later `PCM_RESTART=1`
/// says so instead of resuming it (rank 0, from `Pcm::finalize`, when checkpoints are on or
/// the job was resumed from one). A failure is only logged: the job's result stands.
pub(crate) fn mark_finished(pcm: &Pcm) {
    let finished = Finished {
        job: pcm.job.job.clone(),
        iteration: pcm.job.iteration,
        unix_s: unix_now(),
        resumed: pcm.job.resumed,
    };
    let request = Request::Finish {
        series: series(pcm),
        finished,
    };
    let result = connect(pcm).and_then(|(mut reader, mut writer)| {
        write_frame(&mut writer, &request)
            .and_then(|()| writer.flush())
            .map_err(|e| e.to_string())?;
        match expect_frame(&mut reader).map_err(|e| e.to_string())? {
            Response::Marked => Ok(()),
            other => Err(answer(other)),
        }
    });
    if let Err(reason) = result {
        tracing::warn!(
            "could not record that {} finished (a later {RESTART_ENV}=1 would not know): {reason}",
            series(pcm)
        );
    }
}

/// A node's answer to `List`.
struct Listing {
    available: Vec<Available>,
    finished: Option<Finished>,
}

/// What this rank can restart from, as its pcmd reports it (rejected ones are logged).
fn list(pcm: &Pcm, series: &Series, rank: Rank) -> Result<Listing, String> {
    let (mut reader, mut writer) = connect(pcm)?;
    let request = Request::List {
        series: series.clone(),
        rank,
    };
    write_frame(&mut writer, &request)
        .and_then(|()| writer.flush())
        .map_err(|e| e.to_string())?;
    match expect_frame(&mut reader).map_err(|e| e.to_string())? {
        Response::Listing {
            available,
            rejected,
            finished,
        } => {
            for r in rejected {
                tracing::warn!(
                    "rank {}: checkpoint at iteration {} is not usable ({series}): {}",
                    pcm.rank,
                    r.iteration,
                    r.reason
                );
            }
            Ok(Listing {
                available,
                finished,
            })
        }
        other => Err(answer(other)),
    }
}

/// Fetches and checks this rank's piece of `available`, returning the entries.
/// Returns the piece's stored state and the job's reconfiguration count when it was written.
fn fetch(
    pcm: &Pcm,
    series: &Series,
    rank: Rank,
    available: &Available,
) -> Result<(Store, u64), String> {
    let piece = PieceId {
        series: series.clone(),
        iteration: available.iteration,
        rank,
    };
    let (mut reader, mut writer) = connect(pcm)?;
    write_frame(
        &mut writer,
        &Request::Get {
            piece: piece.clone(),
        },
    )
    .and_then(|()| writer.flush())
    .map_err(|e| e.to_string())?;
    let (len, digest) = match expect_frame(&mut reader).map_err(|e| e.to_string())? {
        Response::Piece { len, digest } => (len, digest),
        other => return Err(answer(other)),
    };
    if digest != available.digest || len != available.len {
        return Err(format!(
            "{piece}: pcmd sends digest {digest} ({len} bytes), the listing said {} ({} bytes)",
            available.digest, available.len
        ));
    }
    let mut hasher = Hasher::new();
    let mut limited = (&mut reader).take(len);
    let header =
        PieceHeader::read(&mut limited, &mut hasher).map_err(|e| format!("{piece}: {e}"))?;
    if header.piece != piece {
        return Err(format!("{piece}: the piece says it is {}", header.piece));
    }
    let mut store = Store::default();
    for e in &header.entries {
        let size = usize::try_from(e.len).map_err(|_| format!("{piece}: entry too large"))?;
        let mut blob = Blob::zeroed(size);
        limited
            .read_exact(blob.bytes_mut())
            .map_err(|err| format!("{piece}: reading entry {:?}: {err}", e.name))?;
        hasher.update(blob.bytes());
        let kind = if e.encoded { Kind::Value } else { Kind::Array };
        store.insert_entry(
            e.name.clone(),
            Entry {
                kind,
                type_name: e.type_name.clone(),
                data: Data::Blob(blob),
            },
        );
    }
    if limited.limit() != 0 {
        return Err(format!(
            "{piece}: {} bytes after the entries the header lists",
            limited.limit()
        ));
    }
    let computed = hasher.finish();
    if computed != digest {
        return Err(format!(
            "{piece}: received bytes have SHA-256 {computed}, the manifest says {digest}"
        ));
    }
    tracing::debug!(
        "{piece}: loaded {} entries written by job {} on {}",
        header.entries.len(),
        header.job,
        header.host
    );
    Ok((store, header.reconfigurations))
}

/// Why resuming the newest checkpoint in `listing` would not compute what this run asks for,
/// if it would not.
fn refusal(pcm: &Pcm, listing: &Listing, series: &Series) -> Option<String> {
    let newest = listing.available.first()?;
    let how = format!(
        "run it without {RESTART_ENV} to start from the beginning, give this job its own \
         {JOB_NAME_ENV}, or set {RESTART_ENV}=force to resume that checkpoint anyway"
    );
    if newest.identity != pcm.job.identity {
        return Some(format!(
            "the newest checkpoint of {series} (iteration {}, job {}) was written by `{}`, \
             not by this run's `{}`: resuming it would compute something other than what \
             was asked; {how}",
            newest.iteration, newest.job, newest.identity, pcm.job.identity
        ));
    }
    if let Some(f) = listing.finished.as_ref().filter(|f| f.job == newest.job) {
        let ago = unix_now().saturating_sub(f.unix_s);
        return Some(format!(
            "that job already finished: job {} of {series} ended by itself at iteration {} \
             ({ago} s ago), and its newest checkpoint is at iteration {}; {how}",
            f.job, f.iteration, newest.iteration
        ));
    }
    None
}

/// Restores the newest checkpoint every rank can load (inside `Pcm::init` with
/// `PCM_RESTART`). Collective. Refuses, on every rank, a checkpoint of another computation
/// or of a job that finished unless `mode` is `Force`; leaves the process fresh when there
/// is none, unless `mode` is `Require`.
pub(crate) fn restore(pcm: &mut Pcm, mode: Restart) -> Result<(), PcmError> {
    let listing = match list(pcm, &series(pcm), Rank(pcm.rank)) {
        Ok(l) => l,
        Err(reason) => {
            tracing::warn!("rank {}: cannot look for checkpoints: {reason}", pcm.rank);
            Listing {
                available: Vec::new(),
                finished: None,
            }
        }
    };
    let refused = if mode == Restart::Force {
        None
    } else {
        refusal(pcm, &listing, &series(pcm))
    };
    let mut any_refused = 0u64;
    pcm.world.all_reduce_into(
        &u64::from(refused.is_some()),
        &mut any_refused,
        SystemOperation::max(),
    );
    if any_refused != 0 {
        return Err(PcmError::Restart(refused.unwrap_or_else(|| {
            "another rank's node holds a checkpoint this run must not resume (see its message)"
                .into()
        })));
    }
    if mode == Restart::Force {
        if let Some(newest) = listing.available.first() {
            if pcm.rank == 0 && newest.identity != pcm.job.identity {
                tracing::warn!(
                    "{RESTART_ENV}=force: resuming a checkpoint written by `{}`, not by this run's `{}`",
                    newest.identity,
                    pcm.job.identity
                );
            }
        }
    }
    // No rank has a checkpoint at this width: a malleable job's taken at another width may
    // be spread over this one.
    let mut anywhere = 0u64;
    pcm.world.all_reduce_into(
        &u64::from(!listing.available.is_empty()),
        &mut anywhere,
        SystemOperation::max(),
    );
    if anywhere == 0 {
        if let Some((iteration, reconfigurations, store)) =
            width::restore(pcm, mode == Restart::Force)?
        {
            install(pcm, store, iteration, false);
            pcm.job.migrations = reconfigurations;
            return Ok(());
        }
    }
    let offered = listing.available;
    let mut excluded = BTreeSet::new();
    for _ in 0..ATTEMPTS {
        let mut mine = [0u64; OFFERED];
        for (slot, a) in mine
            .iter_mut()
            .zip(offered.iter().filter(|a| !excluded.contains(&a.iteration)))
        {
            *slot = a.iteration + 1;
        }
        let mut all = vec![0u64; OFFERED * pcm.size as usize];
        pcm.world.all_gather_into(&mine[..], &mut all[..]);
        let common = mine
            .iter()
            .filter(|&&c| c != 0)
            .filter(|c| all.chunks(OFFERED).all(|other| other.contains(c)))
            .max()
            .map(|c| c - 1);
        let Some(iteration) = common else {
            return nothing_to_resume(
                pcm,
                mode,
                "no checkpoint is complete and intact for every rank",
            );
        };
        let chosen =
            offered
                .iter()
                .find(|a| a.iteration == iteration)
                .ok_or(PcmError::internal(
                    "agreed checkpoint missing from the offer",
                ))?;
        let loaded = fetch(pcm, &series(pcm), Rank(pcm.rank), chosen);
        if let Err(reason) = &loaded {
            tracing::warn!("rank {}: cannot load checkpoint: {reason}", pcm.rank);
        }
        let ok = u64::from(loaded.is_ok());
        let mut all_ok = 0u64;
        pcm.world
            .all_reduce_into(&ok, &mut all_ok, SystemOperation::min());
        if let (1, Ok((store, reconfigurations))) = (all_ok, loaded) {
            install(pcm, store, iteration, chosen.at_buddy);
            // Every rank's piece of one checkpoint carries the same count; agree anyway
            // (max), so that a piece written before the count existed cannot split them.
            let mut agreed = 0u64;
            pcm.world
                .all_reduce_into(&reconfigurations, &mut agreed, SystemOperation::max());
            pcm.job.migrations = agreed;
            return Ok(());
        }
        if pcm.rank == 0 {
            tracing::warn!(
                "checkpoint at iteration {iteration} could not be loaded on every rank; trying an older one"
            );
        }
        excluded.insert(iteration);
    }
    nothing_to_resume(
        pcm,
        mode,
        &format!("no checkpoint could be loaded after {ATTEMPTS} attempts"),
    )
}

/// The end of a restart that found nothing to resume: the job starts from the beginning,
/// or with `require` fails on every rank.
fn nothing_to_resume(pcm: &Pcm, mode: Restart, why: &str) -> Result<(), PcmError> {
    if mode == Restart::Require {
        return Err(PcmError::Restart(format!(
            "{RESTART_ENV}=require, but {why} for {}",
            series(pcm)
        )));
    }
    if pcm.rank == 0 {
        tracing::warn!(
            "{RESTART_ENV}: {why} for {}; starting from the beginning",
            series(pcm)
        );
    }
    Ok(())
}

fn install(pcm: &mut Pcm, store: Store, iteration: u64, at_buddy: bool) {
    let now = Instant::now();
    // A block-form checkpoint loads as after a resize, and names the job's arrays (which
    // the application's own declarations must then match).
    if let Some(blocks) = width::block_form(&store) {
        pcm.job.blocks = blocks;
        pcm.resizing = true;
    }
    pcm.store = store;
    pcm.origin = ProcessStatus::Restarted { iteration };
    pcm.job.iteration = iteration;
    pcm.job.next_check = iteration + 1;
    pcm.job.resumed = true;
    pcm.resume_pending = true;
    if let Some(cadence) = &mut pcm.cadence {
        *cadence = crate::schedule::Cadence::new(pcm.job.check_period, now, iteration);
    }
    pcm.checkpoints.taken(now);
    if at_buddy {
        tracing::info!(
            "rank {}: state fetched from the buddy pcmd (no local copy)",
            pcm.rank
        );
    }
    if pcm.rank == 0 {
        tracing::info!(
            "restarted from the checkpoint at iteration {iteration} of {}",
            series(pcm)
        );
        crate::events::emit(pcm_proto::run::RunEvent::Restarted { iteration });
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn given_pcmrun_locked_another_series_then_it_is_said_and_the_same_one_is_not() {
        assert!(other_series(Some("heat2d-2r"), "heat2d-2r").is_none());
        assert!(other_series(None, "heat2d-2r").is_none());
        assert!(other_series(Some(""), "heat2d-2r").is_none());
        let said = other_series(Some("solver-4r"), "heat2d-4r").unwrap();
        assert!(
            said.contains("solver-4r") && said.contains("heat2d-4r") && said.contains("--job-name")
        );
    }

    use super::*;

    #[test]
    fn given_another_jobs_unfinished_checkpoints_then_a_fresh_job_is_warned_before_retiring_them() {
        let job = |name: &str| JobId::new(name).unwrap();
        let series = Series {
            app: AppName::new("heat2d").unwrap(),
            size: 2,
            name: None,
        };
        let available = |job_name: &str, iteration: u64| Available {
            iteration,
            digest: Digest::of(b"piece"),
            len: 5,
            at_buddy: false,
            job: job(job_name),
            identity: Identity {
                program: "heat2d".into(),
                args: vec!["--rows".into(), "4096".into()],
            },
        };
        let listing = |finished: Option<&str>| Listing {
            available: vec![available("killed", 9000), available("killed", 8000)],
            finished: finished.map(|name| Finished {
                job: job(name),
                iteration: 500,
                unix_s: 1,
                resumed: false,
            }),
        };
        let said = superseded(&listing(None), &job("fresh"), &series).unwrap();
        assert!(
            said.contains("job killed")
                && said.contains("iteration 9000")
                && said.contains("heat2d --rows 4096")
                && said.contains(JOB_NAME_ENV)
                && said.contains(RESTART_ENV),
            "{said}"
        );
        // A finished mark of another job (a short run that took no checkpoint) changes
        // nothing; one of the job that wrote them means they are done with.
        assert!(superseded(&listing(Some("short")), &job("fresh"), &series).is_some());
        assert!(superseded(&listing(Some("killed")), &job("fresh"), &series).is_none());
        // Nothing to say with no checkpoint, or with this job's own.
        let empty = Listing {
            available: Vec::new(),
            finished: None,
        };
        assert!(superseded(&empty, &job("fresh"), &series).is_none());
        assert!(superseded(&listing(None), &job("killed"), &series).is_none());
    }
}
