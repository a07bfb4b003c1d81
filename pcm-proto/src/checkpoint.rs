//! Checkpoints: the on-disk format and the protocol of a pcmd's checkpoint channels.
//!
//! A *coordinated checkpoint* is one *piece* per rank, all taken at the same iteration, and
//! one *manifest* that names every piece's SHA-256 digest. Ranks stream their pieces to
//! their node's pcmd over the node-local socket `<pcmd socket>.ckpt`; each pcmd copies what
//! it holds to a *buddy* pcmd over TCP, after both prove they know the pool key
//! (HMAC-SHA-256 challenge-response, [`auth`]). A checkpoint is *complete* once its manifest
//! is written; at restart every rank looks for the newest complete checkpoint whose piece it
//! can verify against the manifest, locally or at the buddy.
//!
//! # Piece format (version [`FORMAT_VERSION`])
//! `PCMCKPT1` (8 bytes), the length of the header (4 bytes, big-endian), the header
//! ([`PieceHeader`], CBOR: provenance and the list of stored entries), then each entry's
//! bytes in the order of the header. The digest covers all of it.
//!
//! # Manifest format
//! [`Manifest`] in CBOR followed by the SHA-256 of that CBOR (32 bytes), so a flipped bit in
//! a manifest is detected as surely as one in a piece.
//!
//! # Channel protocol
//! Frames as in the main protocol (4-byte big-endian length, CBOR, at most
//! [`MAX_FRAME_LEN`]), carrying [`Request`] and [`Response`]. Two of
//! them are followed by raw bytes: [`Request::Put`] by the piece (its `len` bytes) and
//! [`Response::Piece`] likewise, so that gigabytes move without any encoding. The first
//! frame on a Unix socket is [`Request::Hello`]; on TCP it is [`auth::Hello`].
//!
//! The blocking helpers [`write_frame`] and [`read_frame`] work on any `Read`/`Write`; they
//! are the only decoder of this channel, and never panic on arbitrary input.

use std::fmt;
use std::io::{self, Read, Write};

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::{AppName, FrameError, HostName, JobId, Rank, MAX_FRAME_LEN};

pub mod auth;

/// Version of the piece and manifest formats and of this channel's protocol.
pub const FORMAT_VERSION: u32 = 2;
/// First bytes of every piece file.
pub const PIECE_MAGIC: &[u8; 8] = b"PCMCKPT1";
/// Largest piece header accepted, in bytes (16 MiB: about 100 000 entries).
pub const MAX_PIECE_HEADER: usize = 16 << 20;
/// Environment variable: seconds between two checkpoints (fractions allowed).
pub const INTERVAL_ENV: &str = "PCM_CHECKPOINT_INTERVAL";
/// Environment variable: `1` makes a job resume from its newest complete checkpoint (and
/// start from the beginning if there is none), `require` fails instead of starting from the
/// beginning, `force` also resumes a checkpoint of another computation or of a job that
/// finished.
pub const RESTART_ENV: &str = "PCM_RESTART";
/// Environment variable: the job's name, which keeps the checkpoints of two jobs of one
/// application and rank count apart (default: the application's name).
pub const JOB_NAME_ENV: &str = "PCM_JOB_NAME";
/// Environment variable: the job's own checkpoint directory, an absolute path. The node's
/// pcmd then keeps this job's checkpoints there ([`Request::Hello`]'s `dir`) instead of in
/// its own `--checkpoint-dir`. Unset: the pcmd's directory.
pub const DIR_ENV: &str = "PCM_CHECKPOINT_DIR";

/// The checkpoint socket of the pcmd listening on `socket`.
pub fn socket_path(socket: &std::path::Path) -> std::path::PathBuf {
    let mut name = socket.as_os_str().to_owned();
    name.push(".ckpt");
    std::path::PathBuf::from(name)
}

/// A SHA-256 digest. Written as hex for people.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Digest(Sha256::digest(bytes).into())
    }

    /// Packs the digest into four words (for MPI all-gathers).
    pub fn to_words(self) -> [u64; 4] {
        let mut words = [0u64; 4];
        for (i, w) in words.iter_mut().enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(&self.0[i * 8..i * 8 + 8]);
            *w = u64::from_be_bytes(b);
        }
        words
    }

    /// The inverse of [`Digest::to_words`].
    pub fn from_words(words: [u64; 4]) -> Self {
        let mut bytes = [0u8; 32];
        for (i, w) in words.iter().enumerate() {
            bytes[i * 8..i * 8 + 8].copy_from_slice(&w.to_be_bytes());
        }
        Digest(bytes)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

/// Incremental SHA-256, for streams.
#[derive(Clone, Default)]
pub struct Hasher(Sha256);

impl Hasher {
    /// A fresh hasher.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    /// The digest of everything added.
    pub fn finish(self) -> Digest {
        Digest(self.0.finalize().into())
    }
}

impl fmt::Debug for Hasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Hasher")
    }
}

/// Which checkpoint series a piece belongs to: an application run with a number of ranks,
/// under a job name. A restarted job finds its checkpoints by these, since its job id is
/// new. A series holds the checkpoints of one job at a time: the first checkpoint a new job
/// commits retires those of the jobs before it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Series {
    /// The application name given to `Pcm::init`.
    pub app: AppName,
    /// Number of ranks.
    pub size: u32,
    /// The job name (`PCM_JOB_NAME`), when it is not the application's name.
    #[serde(default)]
    pub name: Option<AppName>,
}

/// The directory name of a series: `APP-Pr`, or `APP-Pr-NAME` with a job name. pcmd keeps
/// a series' checkpoints under it, and `pcmrun` names its lock on the series after it.
pub fn series_dir_name(app: &str, size: u32, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{app}-{size}r-{name}"),
        None => format!("{app}-{size}r"),
    }
}

/// The variable through which `pcmrun` tells the ranks the series it holds the lock of
/// ([`series_dir_name`] of the program's file name, the rank count and the job name), so
/// that PCM can say when its own series (named after `Pcm::init`'s name) is another one,
/// which the lock then does not keep apart.
pub const LOCKED_SERIES_ENV: &str = "PCMRUN_SERIES";

/// The width of a series directory named `dir` if it is one of application `app` with job
/// name `name` ([`series_dir_name`]).
pub fn series_width(dir: &str, app: &str, name: Option<&str>) -> Option<u32> {
    let rest = dir.strip_prefix(app)?.strip_prefix('-')?;
    let (size, _) = rest.split_once('r')?;
    let size: u32 = size.parse().ok().filter(|&s| s > 0)?;
    (series_dir_name(app, size, name) == dir).then_some(size)
}

impl Series {
    /// Its directory name ([`series_dir_name`]).
    pub fn dir_name(&self) -> String {
        series_dir_name(
            self.app.as_str(),
            self.size,
            self.name.as_ref().map(AppName::as_str),
        )
    }
}

impl fmt::Display for Series {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{} ({} ranks, job name {name})", self.app, self.size),
            None => write!(f, "{} ({} ranks)", self.app, self.size),
        }
    }
}

/// What a checkpoint is a checkpoint of: the program and its arguments (the rank count is
/// in the [`Series`]). A restart with another identity would compute something other than
/// what the job that wrote the checkpoint computed, under that job's results.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Identity {
    /// The program's file name (its path without the directories).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
}

impl Identity {
    /// This process's program and arguments.
    pub fn of_this_process() -> Self {
        let mut args = std::env::args_os().map(|a| a.to_string_lossy().into_owned());
        let program = args
            .next()
            .map(|p| {
                std::path::Path::new(&p)
                    .file_name()
                    .map_or(p.clone(), |n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_default();
        Identity {
            program,
            args: args.collect(),
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.program)?;
        for a in &self.args {
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '\'') {
                write!(f, " '{}'", a.replace('\'', r"'\''"))?;
            } else {
                write!(f, " {a}")?;
            }
        }
        Ok(())
    }
}

/// A series whose job ended by itself (`Pcm::finalize`), with its last iteration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finished {
    /// The job.
    pub job: JobId,
    /// Status-call index when it ended.
    pub iteration: u64,
    /// Seconds since the Unix epoch when it ended (for people).
    pub unix_s: u64,
    /// Whether the job resumed from a checkpoint of the series: then the work of the job
    /// that wrote it is done, and its checkpoints go. A fresh job that ends before its
    /// first checkpoint leaves another job's checkpoints alone (that job may have been
    /// killed, and its user may still restart it).
    #[serde(default)]
    pub resumed: bool,
}

/// One rank's piece of one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PieceId {
    /// The series.
    pub series: Series,
    /// Status-call index at which the checkpoint was taken.
    pub iteration: u64,
    /// The rank.
    pub rank: Rank,
}

impl fmt::Display for PieceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} iteration {} rank {}",
            self.series, self.iteration, self.rank
        )
    }
}

/// One stored entry of a piece.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PieceEntry {
    /// Name given to `store`.
    pub name: String,
    /// `true`: a CBOR-encoded value; `false`: the raw bytes of an array.
    pub encoded: bool,
    /// Rust type it was stored as (checked again at load).
    pub type_name: String,
    /// Bytes.
    pub len: u64,
}

/// The provenance and table of contents at the start of a piece.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PieceHeader {
    /// [`FORMAT_VERSION`] of the writer.
    pub format: u32,
    /// Which piece this is.
    pub piece: PieceId,
    /// Job that wrote it.
    pub job: JobId,
    /// Host the rank ran on.
    pub host: HostName,
    /// The entries, in the order their bytes follow.
    pub entries: Vec<PieceEntry>,
    /// Reconfigurations the job had completed when it wrote the checkpoint: a restart
    /// resumes the count (`Pcm::migrations`) from here. Pieces written before this field
    /// existed read as 0.
    #[serde(default)]
    pub reconfigurations: u64,
}

impl PieceHeader {
    /// The piece's first bytes: magic, header length, header.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = PIECE_MAGIC.to_vec();
        out.extend([0u8; 4]);
        if let Err(e) = ciborium::into_writer(self, &mut out) {
            unreachable!("encoding a piece header into memory failed: {e}");
        }
        let len = (out.len() - 12) as u32;
        out[8..12].copy_from_slice(&len.to_be_bytes());
        out
    }

    /// Reads the header from the start of a piece, feeding what it reads to `hasher`.
    pub fn read(reader: &mut impl Read, hasher: &mut Hasher) -> Result<Self, Error> {
        let mut prefix = [0u8; 12];
        reader.read_exact(&mut prefix)?;
        hasher.update(&prefix);
        if &prefix[..8] != PIECE_MAGIC {
            return Err(Error::Format(
                "not a PCM checkpoint piece (bad magic)".into(),
            ));
        }
        let mut len = [0u8; 4];
        len.copy_from_slice(&prefix[8..]);
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_PIECE_HEADER {
            return Err(Error::Format(format!(
                "piece header of {len} bytes exceeds {MAX_PIECE_HEADER}"
            )));
        }
        let mut body = vec![0u8; len];
        reader.read_exact(&mut body)?;
        hasher.update(&body);
        let header: PieceHeader = ciborium::from_reader(body.as_slice())
            .map_err(|e| Error::Format(format!("piece header: {e}")))?;
        if header.format != FORMAT_VERSION {
            return Err(Error::Format(format!(
                "piece format {} (this build reads {FORMAT_VERSION})",
                header.format
            )));
        }
        Ok(header)
    }

    /// Bytes of the entries after the header.
    pub fn data_len(&self) -> u64 {
        self.entries.iter().map(|e| e.len).sum()
    }
}

/// What makes a checkpoint complete: every rank's digest, written once all ranks stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`FORMAT_VERSION`] of the writer.
    pub format: u32,
    /// The series.
    pub series: Series,
    /// Status-call index at which the checkpoint was taken.
    pub iteration: u64,
    /// Job that wrote it.
    pub job: JobId,
    /// Seconds since the Unix epoch when it was committed (for people).
    pub created_unix_s: u64,
    /// The program and arguments of the job that wrote it.
    pub identity: Identity,
    /// Digest of each rank's piece, by rank.
    pub digests: Vec<Digest>,
    /// Length of each rank's piece, by rank.
    pub lens: Vec<u64>,
}

impl Manifest {
    /// The manifest file: CBOR, then the SHA-256 of the CBOR.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if let Err(e) = ciborium::into_writer(self, &mut out) {
            unreachable!("encoding a manifest into memory failed: {e}");
        }
        let digest = Digest::of(&out);
        out.extend(digest.0);
        out
    }

    /// Reads a manifest file, checking its trailing digest and its consistency.
    pub fn decode(bytes: &[u8]) -> Result<Self, Error> {
        if bytes.len() < 32 {
            return Err(Error::Format(format!(
                "manifest of {} bytes is truncated",
                bytes.len()
            )));
        }
        let (body, trailer) = bytes.split_at(bytes.len() - 32);
        let computed = Digest::of(body);
        if computed.0 != trailer {
            return Err(Error::Format(format!(
                "manifest digest mismatch (computed {computed})"
            )));
        }
        let manifest: Manifest =
            ciborium::from_reader(body).map_err(|e| Error::Format(format!("manifest: {e}")))?;
        manifest.check()?;
        Ok(manifest)
    }

    /// Checks internal consistency (also done by [`Manifest::decode`]).
    pub fn check(&self) -> Result<(), Error> {
        if self.format != FORMAT_VERSION {
            return Err(Error::Format(format!(
                "manifest format {} (this build reads {FORMAT_VERSION})",
                self.format
            )));
        }
        let size = self.series.size as usize;
        if size == 0 || self.digests.len() != size || self.lens.len() != size {
            return Err(Error::Format(format!(
                "manifest for {size} ranks lists {} digests and {} lengths",
                self.digests.len(),
                self.lens.len()
            )));
        }
        Ok(())
    }
}

/// A checkpoint a rank can restart from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Available {
    /// Status-call index of the checkpoint.
    pub iteration: u64,
    /// Digest of this rank's piece (from the manifest, verified against the piece).
    pub digest: Digest,
    /// Length of this rank's piece.
    pub len: u64,
    /// Whether the piece is only at the buddy.
    pub at_buddy: bool,
    /// Job that wrote it.
    pub job: JobId,
    /// The program and arguments of that job.
    pub identity: Identity,
}

/// A checkpoint found unusable, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejected {
    /// Status-call index of the checkpoint.
    pub iteration: u64,
    /// Why it cannot be used, naming the file.
    pub reason: String,
}

/// Requests on a checkpoint channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// First frame on the Unix socket.
    Hello {
        /// The client's [`FORMAT_VERSION`].
        version: u32,
        /// The job's checkpoint directory ([`DIR_ENV`]), an absolute path: every request
        /// of this connection then works on the checkpoints there, which the pcmd creates
        /// (mode 0700) or refuses with an error naming the directory and why (not private
        /// to its user, say). `None` (and clients from before this field): the pcmd's own
        /// `--checkpoint-dir`. Left out of the frame when `None`, so that the frame stays
        /// what older pcmds read.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dir: Option<String>,
    },
    /// Store a piece; exactly `len` raw bytes follow this frame.
    Put {
        /// Which piece.
        piece: PieceId,
        /// Bytes that follow.
        len: u64,
        /// Their SHA-256, checked before the piece is kept.
        digest: Digest,
    },
    /// Mark a checkpoint complete (idempotent: every rank of a node sends the same one).
    Commit {
        /// The manifest.
        manifest: Manifest,
    },
    /// Which checkpoints of `series` hold a verified piece for `rank`, newest first.
    List {
        /// The series.
        series: Series,
        /// The rank.
        rank: Rank,
    },
    /// The widths (rank counts) of the series of application `app` with job name `name`
    /// this pcmd holds checkpoint directories of (answered by [`Response::Widths`]): a
    /// malleable job restarting with another number of ranks looks for its checkpoints there
    /// (docs/malleability.md).
    Widths {
        /// The application name given to `Pcm::init`.
        app: AppName,
        /// The job name, as in [`Series::name`].
        #[serde(default)]
        name: Option<AppName>,
    },
    /// Send a piece (answered by [`Response::Piece`] and its bytes).
    Get {
        /// Which piece.
        piece: PieceId,
    },
    /// Send a manifest (answered by [`Response::Manifest`]).
    GetManifest {
        /// The series.
        series: Series,
        /// Its iteration.
        iteration: u64,
    },
    /// The job of `series` ended by itself: a restart must not resume it unless forced
    /// (answered by [`Response::Marked`]). Cleared when a later job of the series commits.
    Finish {
        /// The series.
        series: Series,
        /// The job, and when it ended.
        finished: Finished,
    },
}

/// Answers on a checkpoint channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// Answer to `Hello` (and the end of a successful TCP authentication).
    Welcome {
        /// The daemon's [`FORMAT_VERSION`].
        version: u32,
        /// Its host.
        host: HostName,
        /// The directory this connection's checkpoints are kept in: the `dir` of the
        /// `Hello` as given, else the pcmd's own (for people; on TCP, `None`). A pcmd from
        /// before this field leaves it out: a client that asked for a directory must then
        /// stop, as that pcmd would keep the checkpoints in its own directory instead.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dir: Option<String>,
    },
    /// The piece is on disk (written, synced, renamed into place).
    Stored,
    /// The manifest is on disk.
    Committed,
    /// Answer to `List`.
    Listing {
        /// Usable checkpoints, newest first.
        available: Vec<Available>,
        /// Checkpoints found corrupt or partial, with the reason (they were quarantined).
        rejected: Vec<Rejected>,
        /// Whether the series' job finished (on this node's record).
        finished: Option<Finished>,
    },
    /// Answer to `Finish`: the mark is on disk.
    Marked,
    /// Answer to `Widths`: the rank counts, ascending.
    Widths {
        /// Rank counts of the series found.
        sizes: Vec<u32>,
    },
    /// A piece follows: exactly `len` raw bytes.
    Piece {
        /// Bytes that follow.
        len: u64,
        /// Their digest according to the manifest.
        digest: Digest,
    },
    /// Answer to `GetManifest`.
    Manifest(Manifest),
    /// The request failed; the text names the cause.
    Error {
        /// What went wrong.
        message: String,
    },
}

/// Errors on a checkpoint channel or in a checkpoint file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The stream failed or ended early.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// A frame could not be decoded.
    #[error("{0}")]
    Frame(#[from] FrameError),
    /// A piece or manifest is malformed.
    #[error("{0}")]
    Format(String),
    /// The peer answered something unexpected, or refused the request.
    #[error("{0}")]
    Protocol(String),
    /// Authentication between pcmds failed.
    #[error("{0}")]
    Auth(String),
}

/// Writes one frame.
pub fn write_frame<T: Serialize>(writer: &mut impl Write, message: &T) -> io::Result<()> {
    let frame = crate::encode(message);
    if frame.len() - 4 > MAX_FRAME_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "message larger than the frame limit",
        ));
    }
    writer.write_all(&frame)
}

/// Reads one frame: errors on a stream that ends inside it, an oversized length, or a body
/// that does not decode. `Ok(None)` when the stream ends cleanly before a frame.
pub fn read_frame<T: DeserializeOwned>(reader: &mut impl Read) -> Result<Option<T>, Error> {
    let mut prefix = [0u8; 4];
    let mut have = 0;
    while have < 4 {
        match reader.read(&mut prefix[have..]) {
            Ok(0) if have == 0 => return Ok(None),
            Ok(0) => return Err(FrameError::Truncated { have, want: 4 }.into()),
            Ok(n) => have += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let len = u32::from_be_bytes(prefix) as usize;
    if len > MAX_FRAME_LEN {
        return Err(FrameError::TooLong {
            len,
            max: MAX_FRAME_LEN,
        }
        .into());
    }
    // Decoded straight from the stream, never buffered whole: memory follows the bytes that
    // arrive and what they decode to, not the length the prefix announces, and garbage is
    // refused at its first bad byte. (A 1 MiB buffer per connection thread, left in glibc's
    // per-thread arenas, kept a flooded pcmd tens of MB larger for good.)
    let mut body = Read::take(&mut *reader, len as u64);
    let truncated = |left: u64| FrameError::Truncated {
        have: 4 + len - left as usize,
        want: 4 + len,
    };
    let message = match ciborium::from_reader(&mut body) {
        Ok(m) => m,
        Err(ciborium::de::Error::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
            return Err(truncated(body.limit()).into())
        }
        Err(ciborium::de::Error::Io(e)) => return Err(e.into()),
        Err(e) => return Err(FrameError::Malformed(e.to_string()).into()),
    };
    // Bytes after the message inside its frame are skipped, as a buffered decode would.
    io::copy(&mut body, &mut io::sink())?;
    if body.limit() > 0 {
        return Err(truncated(body.limit()).into());
    }
    Ok(Some(message))
}

/// Reads one frame that must be there.
pub fn expect_frame<T: DeserializeOwned>(reader: &mut impl Read) -> Result<T, Error> {
    read_frame(reader)?.ok_or_else(|| {
        Error::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed before the answer",
        ))
    })
}

/// Copies exactly `len` bytes from `reader` to `writer`, hashing them; returns the digest.
/// After a failed write the rest is still read, as [`read_hashed`] says.
pub fn copy_hashed(
    reader: &mut impl Read,
    writer: &mut impl Write,
    len: u64,
) -> Result<Digest, Error> {
    read_hashed(reader, len, 1 << 20, |block| Ok(writer.write_all(block)?))
}

/// Reads exactly `len` bytes from `reader`, at most `block` at a time, hashing them, and
/// hands each block to `write`; returns the digest. When `write` fails, the bytes left are
/// still read and dropped, so that the stream stays in step and the sender can hear why, and
/// `write`'s error is returned (a read error, when reading those fails).
pub fn read_hashed(
    reader: &mut impl Read,
    len: u64,
    block: usize,
    mut write: impl FnMut(&[u8]) -> Result<(), Error>,
) -> Result<Digest, Error> {
    let mut hasher = Hasher::new();
    let mut buf = vec![0u8; block];
    let mut left = len;
    while left > 0 {
        let want = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
        let n = match reader.read(&mut buf[..want]) {
            Ok(0) => {
                return Err(Error::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("stream ended {left} bytes short of {len}"),
                )))
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        hasher.update(&buf[..n]);
        left -= n as u64;
        if let Err(e) = write(&buf[..n]) {
            read_hashed(reader, left, block, discard)?;
            return Err(e);
        }
    }
    Ok(hasher.finish())
}

/// The `write` of [`read_hashed`] that keeps nothing (a named function, not a closure, so
/// that [`read_hashed`] calling itself with it is one instance).
fn discard(_: &[u8]) -> Result<(), Error> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn given_series_directories_then_their_widths_are_read_back_for_one_app_and_name() {
        assert_eq!(series_width("heat2d-4r", "heat2d", None), Some(4));
        assert_eq!(
            series_width("heat2d-12r-run1", "heat2d", Some("run1")),
            Some(12)
        );
        assert_eq!(series_width("heat2d-12r-run1", "heat2d", None), None);
        assert_eq!(series_width("heat2d-4r", "heat2d", Some("run1")), None);
        assert_eq!(series_width("heat2d-xr", "heat2d", None), None);
        assert_eq!(series_width("heat2d-0r", "heat2d", None), None);
        assert_eq!(series_width("cg-2r", "heat2d", None), None);
        assert_eq!(
            series_width("heat2d-2r-a-3r", "heat2d", Some("a-3r")),
            Some(2)
        );
    }

    fn series() -> Series {
        Series {
            app: AppName::new("heat2d").unwrap(),
            size: 2,
            name: None,
        }
    }

    fn manifest() -> Manifest {
        Manifest {
            format: FORMAT_VERSION,
            series: series(),
            iteration: 40,
            job: JobId::new("heat2d-1").unwrap(),
            created_unix_s: 1,
            identity: Default::default(),
            digests: vec![Digest::of(b"a"), Digest::of(b"b")],
            lens: vec![1, 1],
        }
    }

    #[test]
    fn manifest_round_trips_and_any_flipped_byte_is_detected() {
        let m = manifest();
        let bytes = m.encode();
        assert_eq!(Manifest::decode(&bytes).unwrap(), m);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(Manifest::decode(&bad).is_err(), "flip at {i} undetected");
        }
        assert!(Manifest::decode(&bytes[..bytes.len() - 1]).is_err());
        let mut wrong = m.clone();
        wrong.lens.pop();
        assert!(Manifest::decode(&wrong.encode())
            .unwrap_err()
            .to_string()
            .contains("2 ranks"));
    }

    #[test]
    fn piece_header_round_trips_and_digest_covers_it() {
        let header = PieceHeader {
            format: FORMAT_VERSION,
            piece: PieceId {
                series: series(),
                iteration: 3,
                rank: Rank(1),
            },
            job: JobId::new("j").unwrap(),
            host: HostName::new("h").unwrap(),
            entries: vec![PieceEntry {
                name: "grid".into(),
                encoded: false,
                type_name: "[f64]".into(),
                len: 16,
            }],
            reconfigurations: 2,
        };
        let bytes = header.encode();
        let mut hasher = Hasher::new();
        let back = PieceHeader::read(&mut bytes.as_slice(), &mut hasher).unwrap();
        assert_eq!(back, header);
        assert_eq!(hasher.finish(), Digest::of(&bytes));
        assert_eq!(back.data_len(), 16);
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert!(PieceHeader::read(&mut bad.as_slice(), &mut Hasher::new()).is_err());
    }

    #[test]
    fn digest_words_round_trip() {
        let d = Digest::of(b"xyz");
        assert_eq!(Digest::from_words(d.to_words()), d);
        assert_eq!(d.to_string().len(), 64);
    }

    #[test]
    fn frames_round_trip_and_bad_streams_are_errors() {
        let mut wire = Vec::new();
        write_frame(
            &mut wire,
            &Request::Commit {
                manifest: manifest(),
            },
        )
        .unwrap();
        let back: Request = expect_frame(&mut wire.as_slice()).unwrap();
        assert_eq!(
            back,
            Request::Commit {
                manifest: manifest()
            }
        );
        assert!(matches!(
            read_frame::<Request>(&mut &wire[..wire.len() - 1]),
            Err(Error::Frame(FrameError::Truncated { .. }))
        ));
        assert!(read_frame::<Request>(&mut &wire[..2]).is_err());
        // Bytes after the message inside its frame are skipped; the next frame is in step.
        let mut padded = wire.clone();
        let body_len = u32::from_be_bytes(padded[..4].try_into().unwrap()) + 3;
        padded[..4].copy_from_slice(&body_len.to_be_bytes());
        padded.extend_from_slice(&[0, 0, 0]);
        padded.extend_from_slice(&wire);
        let mut stream = padded.as_slice();
        for _ in 0..2 {
            assert!(matches!(
                expect_frame::<Request>(&mut stream),
                Ok(Request::Commit { .. })
            ));
        }
        // Garbage is refused at its first byte, whatever length the prefix announced.
        let mut liar = (MAX_FRAME_LEN as u32).to_be_bytes().to_vec();
        liar.extend_from_slice(&[0xff, 0xfe]);
        assert!(matches!(
            read_frame::<Request>(&mut liar.as_slice()),
            Err(Error::Frame(FrameError::Malformed(_)))
        ));
        assert!(read_frame::<Request>(&mut &[][..]).unwrap().is_none());
        let huge = ((MAX_FRAME_LEN + 1) as u32).to_be_bytes();
        assert!(matches!(
            read_frame::<Request>(&mut &huge[..]),
            Err(Error::Frame(FrameError::TooLong { .. }))
        ));
    }

    #[test]
    fn read_hashed_hands_on_blocks_and_after_a_failed_write_still_reads_the_rest() {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let mut copied = Vec::new();
        let mut stream = [&bytes[..], b"next"].concat();
        let mut reader = stream.as_slice();
        let digest = read_hashed(&mut reader, 1000, 64, |block| {
            assert!(block.len() <= 64);
            copied.extend_from_slice(block);
            Ok(())
        })
        .unwrap();
        assert_eq!((digest, &copied), (Digest::of(&bytes), &bytes));
        assert_eq!(reader, b"next");
        // A failed write: its error, and the stream in step after the bytes.
        let mut blocks = 0;
        let mut reader = stream.as_slice();
        let failed = read_hashed(&mut reader, 1000, 64, |_| {
            blocks += 1;
            Err(Error::Protocol("disk full".into()))
        });
        assert!(matches!(failed, Err(Error::Protocol(m)) if m == "disk full"));
        assert_eq!((blocks, reader), (1, &b"next"[..]));
        // A short stream, whether writing or draining.
        stream.truncate(500);
        for fail in [false, true] {
            let short = read_hashed(&mut stream.as_slice(), 1000, 64, |_| {
                if fail {
                    Err(Error::Protocol("disk full".into()))
                } else {
                    Ok(())
                }
            });
            assert!(
                matches!(&short, Err(Error::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof),
                "{short:?}"
            );
        }
        let mut out = Vec::new();
        assert_eq!(
            copy_hashed(&mut &bytes[..], &mut out, 1000).unwrap(),
            Digest::of(&bytes)
        );
        assert_eq!(out, bytes);
    }

    /// `Hello` and `Welcome` as they were before the directory field.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum OldRequest {
        Hello { version: u32 },
    }
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum OldResponse {
        Welcome { version: u32, host: HostName },
    }

    #[test]
    fn the_directory_field_is_optional_both_ways() {
        // An old client's Hello is a Hello without a directory: the pcmd's own.
        let old = crate::encode(&OldRequest::Hello { version: 2 });
        let back: Request = expect_frame(&mut old.as_slice()).unwrap();
        assert_eq!(
            back,
            Request::Hello {
                version: 2,
                dir: None
            }
        );
        // Without a directory, a new client's frame is byte for byte the old one.
        let new = crate::encode(&Request::Hello {
            version: 2,
            dir: None,
        });
        assert_eq!(new, old);
        // An old pcmd reads a Hello with a directory as a plain Hello, and its Welcome has
        // no directory: why the client checks the Welcome's (see `Response::Welcome`).
        let asked = crate::encode(&Request::Hello {
            version: 2,
            dir: Some("/job/ckpt".into()),
        });
        let seen: OldRequest = expect_frame(&mut asked.as_slice()).unwrap();
        assert_eq!(seen, OldRequest::Hello { version: 2 });
        let host = HostName::new("h").unwrap();
        let old_welcome = crate::encode(&OldResponse::Welcome {
            version: 2,
            host: host.clone(),
        });
        let back: Response = expect_frame(&mut old_welcome.as_slice()).unwrap();
        assert_eq!(
            back,
            Response::Welcome {
                version: 2,
                host,
                dir: None
            }
        );
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let mut r = bytes.as_slice();
            for _ in 0..4 {
                if !matches!(read_frame::<Request>(&mut r), Ok(Some(_))) { break; }
            }
            let _ = read_frame::<Response>(&mut bytes.as_slice());
            let _ = Manifest::decode(&bytes);
            let _ = PieceHeader::read(&mut bytes.as_slice(), &mut Hasher::new());
            let _ = read_frame::<auth::Hello>(&mut bytes.as_slice());
        }
    }
}
