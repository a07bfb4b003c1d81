//! The checkpoint files of one node: pieces and manifests on local disk.
//!
//! Layout under the root directory:
//! ```text
//! <app>-<size>r[-<job name>]/<iteration, 20 digits>/rank-<rank, 6 digits>.piece
//! <app>-<size>r[-<job name>]/<iteration>/manifest
//! <app>-<size>r[-<job name>]/finished
//! quarantine/<app>-<size>r-<iteration>-<what>-<unix time>
//! ```
//! A series holds the checkpoints of one job: the first checkpoint a later job (a fresh
//! start, or a restart) commits retires those of the jobs before it, and the `finished` mark
//! a job leaves when it ends by itself.
//! Every file is written to a temporary name in its final directory, synced, renamed into
//! place, and the directory synced: a crash leaves either the old state or the new one, never
//! half a file under a final name. A checkpoint directory without a manifest is incomplete
//! and never used; one whose manifest or piece fails its digest is moved to `quarantine/`
//! with a log line saying why, so that the previous complete checkpoint is used instead.
//!
//! **A full disk.** A piece whose write fails with "no space left" does not fail at once:
//! the store makes room in the piece's series ([`Store::put`]) and carries on writing. It
//! removes incomplete checkpoints of other iterations (abandoned: a coordinated checkpoint
//! starts only after the one before ended) and every complete checkpoint older than the
//! newest one whose pieces here verify; that one is always kept, so a restart stays
//! possible. Only when nothing is left to remove does the piece fail.
//!
//! **Leftovers.** A failed piece leaves no temporary file and no empty directory; a job that
//! finishes removes its incomplete checkpoints, and a pcmd that starts, or opens a job's
//! directory for the first time, sweeps what writers that are gone left ([`Store::sweep`]).
//!
//! **Shared directories.** Several pcmds (one per host) may keep one job's checkpoints in
//! one directory that every host sees, and one of them may restart while the others write.
//! A sweep therefore removes only what it can tell is abandoned: temporary files of this
//! host's pcmds that are gone (temporary names carry the writer's host and pid), and
//! anything else only once it has been left untouched for [`STALE_AFTER`].

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use pcm_proto::checkpoint::{
    copy_hashed, read_hashed, Available, Digest, Error, Finished, Hasher, Manifest, PieceId,
    Rejected, Series,
};
use pcm_proto::{AppName, HostName, JobId, Rank};

/// Complete checkpoints kept per series: the newest and the one before it.
pub const KEEP: usize = 2;
/// Bytes of a piece written at a time (256 KiB).
const WRITE_CHUNK: usize = 256 << 10;
/// How long a temporary file of another writer, or an incomplete checkpoint, must have been
/// left untouched before [`Store::sweep`] takes it for abandoned (1 h). A live writer
/// touches its files all the time: a piece streams in (an idle connection is closed after
/// 120 s, and its writer removes its temporary file), and the ranks of one checkpoint
/// write their pieces within seconds of each other. The margin is wide because the times
/// compared may come from different clocks (hosts, file server).
pub const STALE_AFTER: Duration = Duration::from_secs(3600);

/// A checkpoint directory: a node's own, or a job's (`PCM_CHECKPOINT_DIR`).
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    /// This pcmd's host, in the names of its temporary files (see [`Store::sweep`]).
    host: HostName,
    /// Serialises commits, pruning, listing and quarantining: they read and move whole
    /// directories. Piece writes go to their own temporary files and need no lock.
    lock: Mutex<()>,
    temp_counter: AtomicU64,
    /// Bumped each time [`Store::make_room`] frees something, so that a writer that ran out
    /// of space while another was freeing it retries instead of failing.
    room_epoch: AtomicU64,
}

/// Where a manifest came from, for [`Store::commit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committed {
    /// It was new here.
    New,
    /// The same manifest was already here (another rank of the node sent it first).
    Already,
}

impl Store {
    /// A store rooted at `root` (created on first write, mode 0700), written by the pcmd of
    /// `host`.
    pub fn new(root: PathBuf, host: HostName) -> Self {
        Store {
            root,
            host,
            lock: Mutex::new(()),
            temp_counter: AtomicU64::new(0),
            room_epoch: AtomicU64::new(0),
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn series_dir(&self, series: &Series) -> PathBuf {
        self.root.join(series.dir_name())
    }

    fn finished_path(&self, series: &Series) -> PathBuf {
        self.series_dir(series).join("finished")
    }

    /// Directory of one checkpoint.
    pub fn checkpoint_dir(&self, series: &Series, iteration: u64) -> PathBuf {
        self.series_dir(series).join(format!("{iteration:020}"))
    }

    /// File of one piece.
    pub fn piece_path(&self, piece: &PieceId) -> PathBuf {
        self.checkpoint_dir(&piece.series, piece.iteration)
            .join(format!("rank-{:06}.piece", piece.rank.0))
    }

    /// File of one manifest.
    pub fn manifest_path(&self, series: &Series, iteration: u64) -> PathBuf {
        self.checkpoint_dir(series, iteration).join("manifest")
    }

    fn guard(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A temporary name in `dir`: `.NAME.tmp-HOST-PID-N`, so that a sweep can tell whose it
    /// is ([`temp_writer`]).
    fn temp_path(&self, dir: &Path, name: &str) -> PathBuf {
        let n = self.temp_counter.fetch_add(1, Ordering::Relaxed);
        dir.join(format!(
            ".{name}.tmp-{}-{}-{n}",
            self.host,
            std::process::id()
        ))
    }

    fn create_dir(dir: &Path) -> io::Result<()> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
    }

    /// Writes `len` bytes from `reader` as the piece, if they have `digest`, making room on a
    /// full disk (see the module docs). The bytes are always consumed (so the stream stays
    /// in step) unless reading them fails.
    pub fn put(
        &self,
        piece: &PieceId,
        len: u64,
        digest: Digest,
        reader: &mut impl Read,
    ) -> Result<(), Error> {
        let path = self.piece_path(piece);
        let dir = path
            .parent()
            .ok_or_else(|| Error::Protocol("piece path has no directory".into()))?;
        let prepared = self.prepare_piece(piece, dir);
        let (temp, file) = match prepared {
            Ok(ok) => ok,
            Err(e) => {
                // Keep the stream in step so the client hears the reason.
                copy_hashed(reader, &mut io::sink(), len)?;
                self.remove_if_empty(dir);
                return Err(Error::Io(io::Error::new(
                    e.kind(),
                    format!("cannot create a piece in {}: {e}", dir.display()),
                )));
            }
        };
        let result = self.write_piece(file, piece, reader, len, digest);
        let result = result.and_then(|()| {
            fs::rename(&temp, &path)?;
            sync_dir(dir)?;
            Ok(())
        });
        if result.is_err() {
            let _ = fs::remove_file(&temp);
            self.remove_if_empty(dir);
        }
        result
    }

    /// Creates the piece's directory and temporary file, under the lock so that no
    /// cleanup removes the directory in between.
    fn prepare_piece(&self, piece: &PieceId, dir: &Path) -> io::Result<(PathBuf, File)> {
        let mut epoch = self.room_epoch.load(Ordering::Acquire);
        loop {
            let attempt = {
                let _guard = self.guard();
                Self::create_dir(dir).and_then(|()| {
                    let temp = self.temp_path(dir, "piece");
                    let file = OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(&temp)?;
                    Ok((temp, file))
                })
            };
            match attempt {
                Err(e) if e.kind() == io::ErrorKind::StorageFull => {
                    if !self.make_room(&piece.series, piece.iteration, &mut epoch) {
                        return Err(e);
                    }
                }
                other => return other,
            }
        }
    }

    /// Removes `dir` if it is empty (a checkpoint directory a failed piece left behind).
    fn remove_if_empty(&self, dir: &Path) {
        let _guard = self.guard();
        // Fails harmlessly when another piece is there.
        let _ = fs::remove_dir(dir);
    }

    /// Streams the piece's bytes into `file`, hashing them; on a full disk makes room and
    /// goes on. After a failed write the rest of the bytes are drained, so that the client
    /// hears the reason.
    fn write_piece(
        &self,
        mut file: File,
        piece: &PieceId,
        reader: &mut impl Read,
        len: u64,
        digest: Digest,
    ) -> Result<(), Error> {
        let mut epoch = self.room_epoch.load(Ordering::Acquire);
        let computed = read_hashed(reader, len, WRITE_CHUNK, |block| {
            self.write_making_room(&mut file, block, piece, &mut epoch)
        })?;
        if computed != digest {
            return Err(Error::Format(format!(
                "piece bytes have digest {computed}, but the sender announced {digest}"
            )));
        }
        file.sync_all()?;
        Ok(())
    }

    fn write_making_room(
        &self,
        file: &mut File,
        mut bytes: &[u8],
        piece: &PieceId,
        epoch: &mut u64,
    ) -> Result<(), Error> {
        while !bytes.is_empty() {
            match file.write(bytes) {
                Ok(0) => return Err(Error::Io(io::ErrorKind::WriteZero.into())),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::StorageFull => {
                    if !self.make_room(&piece.series, piece.iteration, epoch) {
                        return Err(Error::Io(io::Error::new(
                            e.kind(),
                            format!(
                                "{e}: the disk is full and no older checkpoint of {} is left to remove",
                                piece.series
                            ),
                        )));
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Frees space for the checkpoint at `current` of `series`; `epoch` is the writer's last
    /// seen [`Store::room_epoch`]. True when the writer should try again: something was
    /// freed, now or by another writer since `epoch`.
    fn make_room(&self, series: &Series, current: u64, epoch: &mut u64) -> bool {
        let _guard = self.guard();
        let now = self.room_epoch.load(Ordering::Acquire);
        if now != *epoch {
            *epoch = now;
            return true;
        }
        let freed = self.make_room_locked(series, current);
        if freed {
            *epoch = self.room_epoch.fetch_add(1, Ordering::AcqRel) + 1;
        }
        freed
    }

    /// [`Store::make_room`] with the lock held.
    fn make_room_locked(&self, series: &Series, current: u64) -> bool {
        let mut freed = false;
        let mut kept = None;
        for iteration in self.iterations(series) {
            if iteration == current {
                continue;
            }
            let why = match self.read_manifest(series, iteration) {
                Ok(Some(manifest)) if kept.is_none() => match self.verify_here(&manifest) {
                    Ok(()) => {
                        kept = Some(iteration);
                        continue;
                    }
                    Err(problem) => format!("it does not verify ({problem})"),
                },
                Ok(Some(_)) => format!(
                    "the newer complete checkpoint at iteration {} is kept",
                    kept.unwrap_or_default()
                ),
                Ok(None) => "it is incomplete (abandoned)".to_owned(),
                // Corrupt: already moved to quarantine by `read_manifest`.
                Err(_) => continue,
            };
            let dir = self.checkpoint_dir(series, iteration);
            match fs::remove_dir_all(&dir) {
                Ok(()) => {
                    freed = true;
                    tracing::warn!(
                        "{series}: disk full while writing iteration {current}: removed the checkpoint at iteration {iteration} to make room, as {why}"
                    );
                }
                Err(e) => tracing::warn!("cannot remove {}: {e}", dir.display()),
            }
        }
        freed
    }

    /// Whether every piece of `manifest` held here matches it, and at least one is here.
    fn verify_here(&self, manifest: &Manifest) -> Result<(), String> {
        let mut found = 0;
        for (rank, (&digest, &len)) in manifest.digests.iter().zip(&manifest.lens).enumerate() {
            let piece = PieceId {
                series: manifest.series.clone(),
                iteration: manifest.iteration,
                rank: Rank(u32::try_from(rank).map_err(|e| e.to_string())?),
            };
            if verify_file(&self.piece_path(&piece), len, digest)? {
                found += 1;
            }
        }
        if found == 0 {
            return Err("no piece of it is here".into());
        }
        Ok(())
    }

    /// Removes what writers that are gone left behind: temporary files, and incomplete
    /// checkpoints. Call it before serving this directory (a pcmd that starts, a job
    /// directory opened for the first time).
    ///
    /// The directory may be shared: other hosts' pcmds may be writing a checkpoint in it
    /// right now (pcmrun's jobs on several hosts keep one directory; a job directory is
    /// often in a home directory every host sees). Deleting their temporary files or their
    /// checkpoint directory would make their pieces fail, and with them the checkpoint. So
    /// only what is known to be abandoned goes:
    /// - a temporary file named by this host's pcmd whose process is gone (its pid is not a
    ///   running process here): removed at once, as a restarted pcmd always did;
    /// - any other temporary file (another host's, or one named the way older pcmds named
    ///   them, without the host) once it has not changed for [`STALE_AFTER`];
    /// - an incomplete checkpoint (a directory without a manifest) once neither it nor
    ///   anything in it, the temporary files just removed aside, has changed for
    ///   [`STALE_AFTER`]: a checkpoint being written always has a fresh piece or temporary
    ///   file, and its directory changes with each of them.
    ///
    /// An incomplete checkpoint younger than that stays, and is harmless: it is never
    /// listed, the next commit in its series prunes it when it is older than the newest
    /// complete one, a job's end removes its own, and a full disk makes room from it.
    /// Host names must differ between the pcmds that share a directory (they do: they
    /// name the hosts the job runs on).
    pub fn sweep(&self) {
        self.sweep_at(SystemTime::now());
    }

    /// [`Store::sweep`] as if it were `now`.
    fn sweep_at(&self, now: SystemTime) {
        let _guard = self.guard();
        let sweeper = Sweeper {
            host: self.host.as_str(),
            now,
        };
        let series_dirs = fs::read_dir(&self.root).into_iter().flatten().flatten();
        for series_dir in series_dirs {
            if series_dir.file_name() == "quarantine" || !series_dir.path().is_dir() {
                continue;
            }
            for entry in fs::read_dir(series_dir.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let path = entry.path();
                if is_temp(&path) {
                    sweeper.temp(&path);
                    continue;
                }
                let is_checkpoint = entry
                    .file_name()
                    .to_str()
                    .is_some_and(|n| n.parse::<u64>().is_ok());
                if !is_checkpoint || !path.is_dir() {
                    continue;
                }
                // Before anything in it is removed, which changes it.
                let dir_changed = modified(&path);
                let mut fresh = sweeper.is_fresh(dir_changed);
                for file in fs::read_dir(&path).into_iter().flatten().flatten() {
                    let file = file.path();
                    if is_temp(&file) {
                        if sweeper.temp(&file) {
                            continue;
                        }
                        fresh = true;
                    } else if sweeper.is_fresh(modified(&file)) {
                        fresh = true;
                    }
                }
                if path.join("manifest").exists() {
                    continue;
                }
                if fresh {
                    tracing::debug!(
                        "kept the incomplete checkpoint {}: it changed less than {} s ago, so a pcmd may still be writing it",
                        path.display(),
                        STALE_AFTER.as_secs()
                    );
                    continue;
                }
                match fs::remove_dir_all(&path) {
                    Ok(()) => tracing::info!(
                        "removed the incomplete checkpoint {}, unchanged for over {} s",
                        path.display(),
                        STALE_AFTER.as_secs()
                    ),
                    Err(e) => tracing::warn!("cannot remove {}: {e}", path.display()),
                }
            }
        }
    }

    /// Removes the incomplete checkpoints of `series` (with the lock held).
    fn remove_incomplete(&self, series: &Series) {
        for iteration in self.iterations(series) {
            if self.manifest_path(series, iteration).exists() {
                continue;
            }
            let dir = self.checkpoint_dir(series, iteration);
            match fs::remove_dir_all(&dir) {
                Ok(()) => tracing::info!(
                    "{series}: removed the abandoned checkpoint at iteration {iteration}"
                ),
                Err(e) => tracing::warn!("cannot remove {}: {e}", dir.display()),
            }
        }
    }

    /// Writes the manifest, making the checkpoint complete here, then prunes the series to
    /// the [`KEEP`] newest complete checkpoints.
    pub fn commit(&self, manifest: &Manifest) -> Result<Committed, Error> {
        manifest.check()?;
        let _guard = self.guard();
        let path = self.manifest_path(&manifest.series, manifest.iteration);
        let bytes = manifest.encode();
        if fs::read(&path).is_ok_and(|old| old == bytes) {
            return Ok(Committed::Already);
        }
        match self.write_atomically(&path, "manifest", &bytes) {
            Err(Error::Io(e)) if e.kind() == io::ErrorKind::StorageFull => {
                if !self.make_room_locked(&manifest.series, manifest.iteration) {
                    return Err(Error::Io(e));
                }
                self.room_epoch.fetch_add(1, Ordering::AcqRel);
                self.write_atomically(&path, "manifest", &bytes)?;
            }
            other => other?,
        }
        self.retire_jobs_other_than(&manifest.series, &manifest.job);
        self.prune(&manifest.series);
        Ok(Committed::New)
    }

    /// Writes `bytes` as `path` (mode 0600): to a temporary file in its directory, synced,
    /// renamed into place, the directory synced.
    fn write_atomically(&self, path: &Path, label: &str, bytes: &[u8]) -> Result<(), Error> {
        let dir = path
            .parent()
            .ok_or_else(|| Error::Protocol(format!("{} has no directory", path.display())))?;
        Self::create_dir(dir)?;
        let temp = self.temp_path(dir, label);
        let written = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&temp)?;
            file.write_all(bytes)?;
            file.sync_all()?;
            fs::rename(&temp, path)?;
            sync_dir(dir)
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&temp);
            return Err(e.into());
        }
        Ok(())
    }

    /// Once a job has a complete checkpoint, or has finished, the checkpoints of earlier jobs
    /// of the series and their `finished` mark are superseded: a restart must resume the
    /// newest job, whatever the iteration numbers say (a fresh start counts from 0 again).
    fn retire_jobs_other_than(&self, series: &Series, job: &JobId) {
        for iteration in self.iterations(series) {
            let other = match self.read_manifest(series, iteration) {
                Ok(Some(m)) if m.job != *job => m.job,
                _ => continue,
            };
            let dir = self.checkpoint_dir(series, iteration);
            match fs::remove_dir_all(&dir) {
                Ok(()) => tracing::info!(
                    "{series}: checkpoint at iteration {iteration} of job {other} retired: the later job {job} supersedes it"
                ),
                Err(e) => tracing::warn!("cannot remove {}: {e}", dir.display()),
            }
        }
        let mark = self.finished_path(series);
        if self.read_finished(series).is_some_and(|f| f.job != *job) {
            if let Err(e) = fs::remove_file(&mark) {
                tracing::warn!("cannot remove {}: {e}", mark.display());
            }
        }
    }

    /// Records that the job of `series` ended by itself. The checkpoints of other jobs go
    /// only if it resumed from one ([`Finished::resumed`]): a fresh job that took no
    /// checkpoint of its own does not supersede a killed job's (its first checkpoint would).
    pub fn finish(&self, series: &Series, finished: &Finished) -> Result<(), Error> {
        let _guard = self.guard();
        let path = self.finished_path(series);
        let mut bytes = Vec::new();
        ciborium::into_writer(finished, &mut bytes)
            .map_err(|e| Error::Format(format!("encoding the finished mark: {e}")))?;
        self.write_atomically(&path, "finished", &bytes)?;
        if finished.resumed {
            self.retire_jobs_other_than(series, &finished.job);
        }
        // The job has ended: a checkpoint it did not complete never will be.
        self.remove_incomplete(series);
        Ok(())
    }

    /// The `finished` mark of `series`, if there is a readable one (an unreadable one is
    /// logged and ignored: it only ever stops a restart).
    pub fn read_finished(&self, series: &Series) -> Option<Finished> {
        let path = self.finished_path(series);
        let bytes = fs::read(&path).ok()?;
        match ciborium::from_reader(bytes.as_slice()) {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::warn!("ignoring {}: {e}", path.display());
                None
            }
        }
    }

    /// The widths of the series of application `app` and job name `name` kept here,
    /// ascending.
    pub fn widths(&self, app: &AppName, name: Option<&AppName>) -> Vec<u32> {
        let mut sizes: Vec<u32> = fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                pcm_proto::checkpoint::series_width(
                    e.file_name().to_str()?,
                    app.as_str(),
                    name.map(AppName::as_str),
                )
            })
            .collect();
        sizes.sort_unstable();
        sizes
    }

    /// Iterations with a directory in the series, newest first.
    fn iterations(&self, series: &Series) -> Vec<u64> {
        let mut found: Vec<u64> = fs::read_dir(self.series_dir(series))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        found.sort_unstable_by(|a, b| b.cmp(a));
        found
    }

    /// Keeps the [`KEEP`] newest complete checkpoints, and incomplete ones newer than the
    /// newest complete one (they may be in progress).
    fn prune(&self, series: &Series) {
        let mut complete = 0;
        let mut newest_complete = None;
        for iteration in self.iterations(series) {
            let has_manifest = self.manifest_path(series, iteration).exists();
            let keep = if has_manifest {
                complete += 1;
                newest_complete.get_or_insert(iteration);
                complete <= KEEP
            } else {
                newest_complete.is_none()
            };
            if !keep {
                let dir = self.checkpoint_dir(series, iteration);
                match fs::remove_dir_all(&dir) {
                    Ok(()) => tracing::debug!("removed old checkpoint {}", dir.display()),
                    Err(e) => tracing::warn!("cannot remove {}: {e}", dir.display()),
                }
            }
        }
    }

    /// Moves `path` to the quarantine directory; returns where it went.
    fn quarantine(&self, path: &Path, label: &str) -> String {
        let stamp = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let target_dir = self.root.join("quarantine");
        let target = target_dir.join(format!("{label}-{stamp}"));
        let moved = Self::create_dir(&target_dir).and_then(|()| fs::rename(path, &target));
        match moved {
            Ok(()) => target.display().to_string(),
            Err(e) => {
                // Could not move it: delete it, so it is never read as good.
                let _ = fs::remove_dir_all(path).or_else(|_| fs::remove_file(path));
                format!("nowhere ({e}); removed instead")
            }
        }
    }

    /// Reads and checks a manifest; a corrupt one is quarantined (with its directory).
    fn read_manifest(&self, series: &Series, iteration: u64) -> Result<Option<Manifest>, String> {
        let path = self.manifest_path(series, iteration);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let problem = match Manifest::decode(&bytes) {
            Ok(m) if m.series == *series && m.iteration == iteration => return Ok(Some(m)),
            Ok(m) => format!(
                "it describes {} iteration {}, not this directory",
                m.series, m.iteration
            ),
            Err(e) => e.to_string(),
        };
        let dir = self.checkpoint_dir(series, iteration);
        let label = format!("{}-{}r-{iteration}-checkpoint", series.app, series.size);
        let to = self.quarantine(&dir, &label);
        Err(format!(
            "manifest {} is corrupt ({problem}); checkpoint quarantined to {to}",
            path.display()
        ))
    }

    /// Checkpoints of `series` that hold a verified piece of `rank` here, newest first, and
    /// those found corrupt (now quarantined).
    pub fn list(&self, series: &Series, rank: Rank) -> (Vec<Available>, Vec<Rejected>) {
        let _guard = self.guard();
        let mut available = Vec::new();
        let mut rejected = Vec::new();
        for iteration in self.iterations(series) {
            let manifest = match self.read_manifest(series, iteration) {
                Ok(Some(m)) => m,
                Ok(None) => continue, // incomplete: never used
                Err(reason) => {
                    tracing::warn!("{series} iteration {iteration}: {reason}");
                    rejected.push(Rejected { iteration, reason });
                    continue;
                }
            };
            let Some((&digest, &len)) = manifest
                .digests
                .get(rank.0 as usize)
                .zip(manifest.lens.get(rank.0 as usize))
            else {
                continue;
            };
            let piece = PieceId {
                series: series.clone(),
                iteration,
                rank,
            };
            let path = self.piece_path(&piece);
            match verify_file(&path, len, digest) {
                Ok(true) => available.push(Available {
                    iteration,
                    digest,
                    len,
                    at_buddy: false,
                    job: manifest.job.clone(),
                    identity: manifest.identity.clone(),
                }),
                Ok(false) => {} // not here
                Err(problem) => {
                    let label = format!(
                        "{}-{}r-{iteration}-rank-{}",
                        series.app, series.size, rank.0
                    );
                    let to = self.quarantine(&path, &label);
                    let reason = format!(
                        "piece {} is corrupt ({problem}); quarantined to {to}",
                        path.display()
                    );
                    tracing::warn!("{piece}: {reason}; an older checkpoint will be used");
                    rejected.push(Rejected { iteration, reason });
                }
            }
        }
        (available, rejected)
    }

    /// The manifest of a checkpoint, if complete and sound here.
    pub fn manifest(&self, series: &Series, iteration: u64) -> Result<Manifest, Error> {
        let _guard = self.guard();
        match self.read_manifest(series, iteration) {
            Ok(Some(m)) => Ok(m),
            Ok(None) => Err(Error::Protocol(format!(
                "no complete checkpoint of {series} at iteration {iteration} here"
            ))),
            Err(reason) => Err(Error::Format(reason)),
        }
    }

    /// Opens a piece for sending, with its length and digest from the manifest.
    pub fn open_piece(&self, piece: &PieceId) -> Result<(File, u64, Digest), Error> {
        let manifest = self.manifest(&piece.series, piece.iteration)?;
        let index = piece.rank.0 as usize;
        let (digest, len) = manifest
            .digests
            .get(index)
            .zip(manifest.lens.get(index))
            .ok_or_else(|| Error::Protocol(format!("{piece}: rank outside the manifest")))?;
        let path = self.piece_path(piece);
        let file = File::open(&path).map_err(|e| {
            Error::Io(io::Error::new(
                e.kind(),
                format!("{piece}: cannot open {}: {e}", path.display()),
            ))
        })?;
        Ok((file, *len, *digest))
    }

    /// Pieces of one checkpoint held here (for copying to the buddy).
    pub fn local_pieces(&self, series: &Series, iteration: u64) -> Vec<PieceId> {
        let dir = self.checkpoint_dir(series, iteration);
        let mut pieces: Vec<PieceId> = fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let rank = name.strip_prefix("rank-")?.strip_suffix(".piece")?;
                Some(PieceId {
                    series: series.clone(),
                    iteration,
                    rank: Rank(rank.parse().ok()?),
                })
            })
            .collect();
        pieces.sort_by_key(|p| p.rank);
        pieces
    }
}

/// Whether `path` is one of the store's temporary files.
fn is_temp(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.') && n.contains(".tmp-"))
}

/// Who wrote a temporary file, from its name `.NAME.tmp-HOST-PID-N`: `None` for a name
/// without the host (older pcmds wrote `.NAME.tmp-PID-N`) or one that does not parse.
fn temp_writer(path: &Path) -> Option<(&str, u32)> {
    let name = path.file_name()?.to_str()?;
    let (_, rest) = name.split_once(".tmp-")?;
    let mut parts = rest.rsplitn(3, '-');
    let _counter: u64 = parts.next()?.parse().ok()?;
    let pid = parts.next()?.parse().ok()?;
    let host = parts.next().filter(|h| !h.is_empty())?;
    Some((host, pid))
}

/// When `path` last changed (`None` when it cannot be read: gone, say).
fn modified(path: &Path) -> Option<SystemTime> {
    fs::symlink_metadata(path).and_then(|m| m.modified()).ok()
}

/// The rule of [`Store::sweep`], for one sweep.
struct Sweeper<'a> {
    host: &'a str,
    now: SystemTime,
}

impl Sweeper<'_> {
    /// Whether something that changed at `changed` may still have a live writer: changed
    /// within [`STALE_AFTER`], or in the future (another clock). Unknown counts as fresh.
    fn is_fresh(&self, changed: Option<SystemTime>) -> bool {
        changed.is_none_or(|t| !matches!(self.now.duration_since(t), Ok(age) if age >= STALE_AFTER))
    }

    /// Removes the temporary file `path` if its writer is gone; true if it is gone now.
    fn temp(&self, path: &Path) -> bool {
        let abandoned = match temp_writer(path) {
            Some((host, pid)) if host == self.host && !process_alive(pid) => true,
            _ => !self.is_fresh(modified(path)),
        };
        if abandoned {
            match fs::remove_file(path) {
                Ok(()) => tracing::debug!("removed {}: its writer is gone", path.display()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!("cannot remove {}: {e}", path.display());
                    return false;
                }
            }
        }
        abandoned
    }
}

/// Whether `pid` is a process on this host (one of another user counts: it exists).
fn process_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().filter(|&p| p > 0) else {
        // Not a pid kill(2) takes as one process: not known to be gone.
        return true;
    };
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// `Ok(false)` when the file does not exist; `Err` with the problem when it is not the piece
/// the manifest describes.
fn verify_file(path: &Path, len: u64, digest: Digest) -> Result<bool, String> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(format!("cannot open it: {e}")),
    };
    let mut hasher = Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                total += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read failed: {e}")),
        }
    }
    if total != len {
        return Err(format!(
            "{total} bytes, the manifest says {len}: truncated or partial"
        ));
    }
    let computed = hasher.finish();
    if computed != digest {
        return Err(format!(
            "SHA-256 {computed} does not match the manifest's {digest}"
        ));
    }
    Ok(true)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pcm_proto::{AppName, JobId};

    fn series() -> Series {
        Series {
            app: AppName::new("app").unwrap(),
            size: 2,
            name: None,
        }
    }

    fn host(name: &str) -> HostName {
        HostName::new(name).unwrap()
    }

    /// The pid of a process that has ended (a child, waited for).
    fn gone_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    /// Sets the modification time of `path` (a file or a directory) to `at`.
    fn touch(path: &Path, at: SystemTime) {
        File::open(path).unwrap().set_modified(at).unwrap();
    }

    fn checkpoint(store: &Store, iteration: u64) -> Manifest {
        checkpoint_of(store, iteration, "job")
    }

    fn checkpoint_of(store: &Store, iteration: u64, job: &str) -> Manifest {
        let mut digests = Vec::new();
        let mut lens = Vec::new();
        for rank in 0..2u32 {
            let bytes = format!("rank {rank} at {iteration}").into_bytes();
            let digest = Digest::of(&bytes);
            let piece = PieceId {
                series: series(),
                iteration,
                rank: Rank(rank),
            };
            store
                .put(&piece, bytes.len() as u64, digest, &mut bytes.as_slice())
                .unwrap();
            digests.push(digest);
            lens.push(bytes.len() as u64);
        }
        let manifest = Manifest {
            format: pcm_proto::checkpoint::FORMAT_VERSION,
            series: series(),
            iteration,
            job: JobId::new(job).unwrap(),
            created_unix_s: 0,
            identity: Default::default(),
            digests,
            lens,
        };
        assert_eq!(store.commit(&manifest).unwrap(), Committed::New);
        assert_eq!(store.commit(&manifest).unwrap(), Committed::Already);
        manifest
    }

    #[test]
    fn a_later_job_retires_the_checkpoints_of_the_one_before_once_it_checkpoints_or_finishes_resumed(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().join("ckpt"), host("node-a"));
        for it in [900, 1000] {
            checkpoint_of(&store, it, "first");
        }
        let finished = Finished {
            job: JobId::new("first").unwrap(),
            iteration: 1000,
            unix_s: 7,
            resumed: false,
        };
        store.finish(&series(), &finished).unwrap();
        assert_eq!(store.read_finished(&series()), Some(finished));
        let (available, _) = store.list(&series(), Rank(0));
        assert_eq!(available.len(), 2);
        assert!(available.iter().all(|a| a.job.as_str() == "first"));
        // A fresh start counts from 0: its first complete checkpoint (iteration 10) is what a
        // restart must resume, not the finished job's 1000.
        checkpoint_of(&store, 10, "second");
        let (available, _) = store.list(&series(), Rank(0));
        let its: Vec<(u64, &str)> = available
            .iter()
            .map(|a| (a.iteration, a.job.as_str()))
            .collect();
        assert_eq!(its, [(10, "second")]);
        assert_eq!(store.read_finished(&series()), None);
        // A fresh job that finishes without a checkpoint of its own leaves the others alone:
        // "second" may have been killed, and a restart must still find its checkpoints (its
        // job is not the one the mark names).
        checkpoint_of(&store, 20, "second");
        let fresh = Finished {
            job: JobId::new("third").unwrap(),
            iteration: 5,
            unix_s: 8,
            resumed: false,
        };
        store.finish(&series(), &fresh).unwrap();
        let its: Vec<(u64, String)> = store
            .list(&series(), Rank(0))
            .0
            .iter()
            .map(|a| (a.iteration, a.job.as_str().to_owned()))
            .collect();
        assert_eq!(its, [(20, "second".into()), (10, "second".into())]);
        assert_eq!(store.read_finished(&series()), Some(fresh));
        // A job that resumed from them and finished has done their work: they go.
        let resumed = Finished {
            job: JobId::new("fourth").unwrap(),
            iteration: 30,
            unix_s: 9,
            resumed: true,
        };
        store.finish(&series(), &resumed).unwrap();
        assert!(store.list(&series(), Rank(0)).0.is_empty());
        assert_eq!(store.read_finished(&series()), Some(resumed));
        // Garbage in the mark is ignored, never trusted.
        std::fs::write(store.finished_path(&series()), b"\xff\x00garbage").unwrap();
        assert_eq!(store.read_finished(&series()), None);
    }

    #[test]
    fn keeps_two_newest_complete_and_lists_them_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().join("ckpt"), host("node-a"));
        for it in [10, 20, 30] {
            checkpoint(&store, it);
        }
        let (available, rejected) = store.list(&series(), Rank(1));
        let its: Vec<u64> = available.iter().map(|a| a.iteration).collect();
        assert_eq!(its, vec![30, 20]);
        assert!(rejected.is_empty());
        assert!(!store.checkpoint_dir(&series(), 10).exists());
    }

    #[test]
    fn wrong_digest_on_put_is_refused_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().to_owned(), host("node-a"));
        let piece = PieceId {
            series: series(),
            iteration: 1,
            rank: Rank(0),
        };
        let err = store
            .put(&piece, 3, Digest::of(b"xyz"), &mut &b"abc"[..])
            .unwrap_err();
        assert!(err.to_string().contains("announced"), "{err}");
        assert!(!store.piece_path(&piece).exists());
        // Not even the directory the piece would have gone to.
        assert!(!store.checkpoint_dir(&series(), 1).exists());
    }

    #[test]
    fn given_an_abandoned_checkpoint_then_finish_and_a_new_pcmd_remove_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().to_owned(), host("node-a"));
        checkpoint(&store, 5);
        let dead = gone_pid();
        let abandoned = |iteration| {
            let piece = PieceId {
                series: series(),
                iteration,
                rank: Rank(0),
            };
            store
                .put(&piece, 1, Digest::of(b"x"), &mut &b"x"[..])
                .unwrap();
            // A temporary file left by this host's pcmd that died.
            let temp = store
                .checkpoint_dir(&series(), iteration)
                .join(format!(".piece.tmp-node-a-{dead}-0"));
            fs::write(&temp, b"x").unwrap();
            temp
        };
        abandoned(9);
        store
            .finish(
                &series(),
                &Finished {
                    job: JobId::new("job").unwrap(),
                    iteration: 10,
                    unix_s: 1,
                    resumed: false,
                },
            )
            .unwrap();
        assert!(!store.checkpoint_dir(&series(), 9).exists());
        assert!(store.manifest_path(&series(), 5).exists());
        let temp_in_abandoned = abandoned(12);
        let temp_in_complete = store
            .checkpoint_dir(&series(), 5)
            .join(format!(".manifest.tmp-node-a-{dead}-1"));
        fs::write(&temp_in_complete, b"x").unwrap();
        // The next pcmd of this host: its predecessor's temporary files go at once. The
        // abandoned checkpoint holds a piece written just now, which might be another
        // host's in a shared directory: it stays until it is stale.
        let next = Store::new(dir.path().to_owned(), host("node-a"));
        next.sweep();
        assert!(!temp_in_complete.exists());
        assert!(!temp_in_abandoned.exists());
        assert!(store
            .piece_path(&PieceId {
                series: series(),
                iteration: 12,
                rank: Rank(0)
            })
            .exists());
        next.sweep_at(SystemTime::now() + STALE_AFTER + Duration::from_secs(60));
        assert!(!store.checkpoint_dir(&series(), 12).exists());
        assert_eq!(store.list(&series(), Rank(0)).0.len(), 1);
    }

    /// Two hosts' pcmds keep one job's checkpoints in one directory; node-a's pcmd restarts
    /// while node-b's writes its pieces of the checkpoint at iteration 40. The sweep of the
    /// new pcmd used to delete node-b's temporary file (the piece being written) and the
    /// whole incomplete checkpoint (node-b's pieces already written).
    #[test]
    fn given_a_shared_directory_when_a_pcmd_restarts_then_other_hosts_work_in_progress_stays() {
        let dir = tempfile::tempdir().unwrap();
        let a = Store::new(dir.path().to_owned(), host("node-a"));
        let b = Store::new(dir.path().to_owned(), host("node-b"));
        checkpoint(&a, 30);
        let piece = |rank| PieceId {
            series: series(),
            iteration: 40,
            rank: Rank(rank),
        };
        // node-b: rank 1's piece is written, rank 0's streams in right now.
        b.put(&piece(1), 1, Digest::of(b"y"), &mut &b"y"[..])
            .unwrap();
        let checkpoint_dir = b.checkpoint_dir(&series(), 40);
        let streaming = b.temp_path(&checkpoint_dir, "piece");
        fs::write(&streaming, b"half a piece").unwrap();
        // node-a's dead predecessor left a temporary file in the same checkpoint, and one
        // named the way older pcmds named them (no host: whose, nobody can tell).
        let dead = checkpoint_dir.join(format!(".piece.tmp-node-a-{}-3", gone_pid()));
        fs::write(&dead, b"x").unwrap();
        let unnamed = checkpoint_dir.join(".piece.tmp-1-0");
        fs::write(&unnamed, b"x").unwrap();

        let restarted = Store::new(dir.path().to_owned(), host("node-a"));
        restarted.sweep();
        assert!(streaming.exists(), "node-b's piece in progress was deleted");
        assert!(
            b.piece_path(&piece(1)).exists(),
            "node-b's piece was deleted"
        );
        assert!(
            unnamed.exists(),
            "a fresh file of an unknown writer was deleted"
        );
        assert!(!dead.exists(), "this host's dead pcmd's file is left");
        // node-b finishes: the checkpoint completes in the shared directory.
        fs::remove_file(&streaming).unwrap();
        fs::remove_file(&unnamed).unwrap();
        b.put(&piece(0), 1, Digest::of(b"x"), &mut &b"x"[..])
            .unwrap();
        let manifest = Manifest {
            format: pcm_proto::checkpoint::FORMAT_VERSION,
            series: series(),
            iteration: 40,
            job: JobId::new("job").unwrap(),
            created_unix_s: 0,
            identity: Default::default(),
            digests: vec![Digest::of(b"x"), Digest::of(b"y")],
            lens: vec![1, 1],
        };
        assert_eq!(b.commit(&manifest).unwrap(), Committed::New);
        let listed: Vec<u64> = a
            .list(&series(), Rank(0))
            .0
            .iter()
            .map(|c| c.iteration)
            .collect();
        assert_eq!(listed, [40, 30]);

        // A checkpoint nobody finished: swept once nothing in it changed for STALE_AFTER,
        // another host's temporary file with it.
        b.put(
            &PieceId {
                iteration: 50,
                ..piece(1)
            },
            1,
            Digest::of(b"z"),
            &mut &b"z"[..],
        )
        .unwrap();
        let left = b.checkpoint_dir(&series(), 50);
        let stuck = b.temp_path(&left, "piece");
        fs::write(&stuck, b"x").unwrap();
        let later = SystemTime::now() + STALE_AFTER + Duration::from_secs(60);
        restarted.sweep_at(SystemTime::now() + STALE_AFTER / 2);
        assert!(stuck.exists() && left.exists());
        restarted.sweep_at(later);
        assert!(!left.exists(), "an abandoned checkpoint stayed");
        // A stale file in a checkpoint with a fresh one keeps it: someone still writes.
        b.put(
            &PieceId {
                iteration: 60,
                ..piece(1)
            },
            1,
            Digest::of(b"z"),
            &mut &b"z"[..],
        )
        .unwrap();
        let busy = b.checkpoint_dir(&series(), 60);
        touch(
            &b.piece_path(&PieceId {
                iteration: 60,
                ..piece(1)
            }),
            SystemTime::UNIX_EPOCH,
        );
        touch(&busy, SystemTime::UNIX_EPOCH);
        let writing = b.temp_path(&busy, "piece");
        fs::write(&writing, b"x").unwrap();
        restarted.sweep();
        assert!(busy.exists() && writing.exists());
        // Complete checkpoints are never swept, however old.
        assert_eq!(a.list(&series(), Rank(0)).0.len(), 2);
        restarted.sweep_at(later);
        assert_eq!(a.list(&series(), Rank(0)).0.len(), 2);
    }

    #[test]
    fn given_no_room_then_the_newest_verified_checkpoint_is_kept_and_older_ones_go() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().to_owned(), host("node-a"));
        checkpoint(&store, 5);
        checkpoint(&store, 9);
        // An abandoned one, and the one being written.
        let piece = |iteration| PieceId {
            series: series(),
            iteration,
            rank: Rank(0),
        };
        store
            .put(&piece(10), 1, Digest::of(b"x"), &mut &b"x"[..])
            .unwrap();
        store
            .put(&piece(11), 1, Digest::of(b"y"), &mut &b"y"[..])
            .unwrap();
        // The newest complete one is corrupt here: the older one is what must stay.
        let path = store.piece_path(&piece(9));
        let mut bytes = fs::read(&path).unwrap();
        bytes[0] ^= 1;
        fs::write(&path, bytes).unwrap();
        let mut epoch = store.room_epoch.load(Ordering::Acquire);
        assert!(store.make_room(&series(), 11, &mut epoch));
        let left: Vec<u64> = store.iterations(&series());
        assert_eq!(left, [11, 5]);
        // Nothing more to free: the writer is told so instead of looping.
        assert!(!store.make_room(&series(), 11, &mut epoch));
        // A writer that saw an older epoch retries: someone freed space meanwhile.
        let mut stale = 0;
        assert!(store.make_room(&series(), 11, &mut stale));
    }

    #[test]
    fn flipped_byte_quarantines_the_newest_and_the_previous_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().to_owned(), host("node-a"));
        checkpoint(&store, 5);
        checkpoint(&store, 9);
        let piece = PieceId {
            series: series(),
            iteration: 9,
            rank: Rank(0),
        };
        let path = store.piece_path(&piece);
        let mut bytes = fs::read(&path).unwrap();
        bytes[2] ^= 1;
        fs::write(&path, bytes).unwrap();
        let (available, rejected) = store.list(&series(), Rank(0));
        assert_eq!(available.len(), 1);
        assert_eq!(available[0].iteration, 5);
        assert_eq!(rejected.len(), 1);
        assert!(
            rejected[0].reason.contains("does not match"),
            "{rejected:?}"
        );
        assert!(dir.path().join("quarantine").read_dir().unwrap().count() == 1);
        // Rank 1's piece of iteration 9 is intact and still listed.
        let (available, _) = store.list(&series(), Rank(1));
        assert_eq!(available[0].iteration, 9);
    }

    #[test]
    fn corrupt_manifest_and_missing_manifest_are_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().to_owned(), host("node-a"));
        checkpoint(&store, 5);
        checkpoint(&store, 9);
        let path = store.manifest_path(&series(), 9);
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x80;
        fs::write(&path, bytes).unwrap();
        // An incomplete newer checkpoint: a piece without a manifest.
        let piece = PieceId {
            series: series(),
            iteration: 12,
            rank: Rank(0),
        };
        store
            .put(&piece, 1, Digest::of(b"x"), &mut &b"x"[..])
            .unwrap();
        let (available, rejected) = store.list(&series(), Rank(0));
        assert_eq!(
            available.iter().map(|a| a.iteration).collect::<Vec<_>>(),
            [5]
        );
        assert_eq!(rejected.len(), 1);
        assert!(rejected[0].reason.contains("manifest"), "{rejected:?}");
    }
}
