//! The buddy link: a pcmd copies every checkpoint it completes to one other pcmd (its
//! buddy), and at restart fetches from it what its own disk lacks, so that a job survives
//! the loss of a node together with its disk.
//!
//! Every TCP connection starts with mutual authentication by the pool key (see
//! [`pcm_proto::checkpoint::auth`]); a peer without the key learns nothing and is told so.
//! Copies run on one worker thread fed by a bounded queue, so a slow or absent buddy never
//! delays the ranks: when the queue is full the copy is skipped with a log line, and the
//! next checkpoint is copied as usual.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use pcm_proto::checkpoint::{
    self as ckpt,
    auth::{Challenge, Hello, PoolKey, Proof},
    expect_frame, write_frame, Available, Manifest, PieceId, Rejected, Request, Response, Series,
    FORMAT_VERSION,
};
use pcm_proto::{HostName, Rank};

use super::store::Store;

/// Time allowed to connect and to complete the authentication (10 s).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed for any one read or write once connected (120 s).
pub const IO_TIMEOUT: Duration = Duration::from_secs(120);
/// Checkpoints waiting to be copied at most (4).
pub const COPY_QUEUE: usize = 4;

/// Server side of the handshake: proves the key, checks the client's proof, answers
/// `Welcome` or an error naming the problem.
pub fn accept<W: Write>(
    reader: &mut impl Read,
    writer: &mut W,
    key: &PoolKey,
    host: &HostName,
) -> Result<(), ckpt::Error> {
    let fail = |writer: &mut W, message: String| {
        let _ = write_frame(
            &mut *writer,
            &Response::Error {
                message: message.clone(),
            },
        );
        let _ = writer.flush();
        Err(ckpt::Error::Auth(message))
    };
    let hello: Hello = match expect_frame(reader) {
        Ok(h) => h,
        Err(e) => return fail(writer, format!("expected an authentication hello: {e}")),
    };
    if hello.version != FORMAT_VERSION {
        return fail(
            writer,
            format!(
                "checkpoint protocol version {} is not supported (this pcmd speaks {FORMAT_VERSION})",
                hello.version
            ),
        );
    }
    let server_nonce: [u8; 32] = rand::random();
    write_frame(
        writer,
        &Challenge {
            version: FORMAT_VERSION,
            server_nonce,
            server_proof: key.server_proof(&hello.client_nonce, &server_nonce),
        },
    )?;
    writer.flush()?;
    let proof: Proof = match expect_frame(reader) {
        Ok(p) => p,
        Err(e) => return fail(writer, format!("expected an authentication proof: {e}")),
    };
    let expected = key.client_proof(&server_nonce, &hello.client_nonce);
    if !PoolKey::verify(&expected, &proof.client_proof) {
        return fail(
            writer,
            format!(
                "wrong pool key: the proof does not match this pcmd's key (fingerprint {})",
                key.fingerprint()
            ),
        );
    }
    write_frame(
        writer,
        &Response::Welcome {
            version: FORMAT_VERSION,
            host: host.clone(),
            dir: None,
        },
    )?;
    writer.flush()?;
    Ok(())
}

/// An authenticated connection to a buddy pcmd.
#[derive(Debug)]
pub struct Client {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
    host: HostName,
}

impl Client {
    /// Connects to `addr` and authenticates both ways.
    pub fn connect(addr: &str, key: &PoolKey) -> Result<Client, ckpt::Error> {
        let target = addr
            .to_socket_addrs()
            .map_err(|e| ckpt::Error::Protocol(format!("bad buddy address {addr:?}: {e}")))?
            .next()
            .ok_or_else(|| {
                ckpt::Error::Protocol(format!("buddy address {addr:?} resolves to nothing"))
            })?;
        let stream = TcpStream::connect_timeout(&target, HANDSHAKE_TIMEOUT)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        let mut reader = BufReader::with_capacity(1 << 20, stream.try_clone()?);
        let mut writer = BufWriter::with_capacity(1 << 20, stream.try_clone()?);
        let client_nonce: [u8; 32] = rand::random();
        write_frame(
            &mut writer,
            &Hello {
                version: FORMAT_VERSION,
                client_nonce,
            },
        )?;
        writer.flush()?;
        let challenge: Challenge = match expect_frame::<Challenge>(&mut reader) {
            Ok(c) => c,
            Err(ckpt::Error::Frame(e)) => {
                return Err(ckpt::Error::Auth(format!(
                    "{addr} did not answer the authentication (is it a pcmd with --listen?): {e}"
                )))
            }
            Err(e) => return Err(e),
        };
        let expected = key.server_proof(&client_nonce, &challenge.server_nonce);
        if !PoolKey::verify(&expected, &challenge.server_proof) {
            return Err(ckpt::Error::Auth(format!(
                "buddy {addr} does not hold our pool key (fingerprint {}): wrong or missing pool key",
                key.fingerprint()
            )));
        }
        write_frame(
            &mut writer,
            &Proof {
                client_proof: key.client_proof(&challenge.server_nonce, &client_nonce),
            },
        )?;
        writer.flush()?;
        let host = match expect_frame::<Response>(&mut reader)? {
            Response::Welcome { host, .. } => host,
            Response::Error { message } => {
                return Err(ckpt::Error::Auth(format!(
                    "buddy {addr} refused us: {message}"
                )))
            }
            other => {
                return Err(ckpt::Error::Protocol(format!(
                    "buddy {addr} answered {other:?} to the authentication"
                )))
            }
        };
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        Ok(Client {
            reader,
            writer,
            host,
        })
    }

    /// The buddy's host name.
    pub fn host(&self) -> &HostName {
        &self.host
    }

    fn call(&mut self, request: &Request) -> Result<Response, ckpt::Error> {
        write_frame(&mut self.writer, request)?;
        self.writer.flush()?;
        match expect_frame(&mut self.reader)? {
            Response::Error { message } => Err(ckpt::Error::Protocol(message)),
            other => Ok(other),
        }
    }

    /// The checkpoints of `series` the buddy holds a verified piece of `rank` for.
    pub fn list(
        &mut self,
        series: &Series,
        rank: Rank,
    ) -> Result<(Vec<Available>, Vec<Rejected>), ckpt::Error> {
        match self.call(&Request::List {
            series: series.clone(),
            rank,
        })? {
            Response::Listing {
                available,
                rejected,
                ..
            } => Ok((available, rejected)),
            other => Err(unexpected(&other)),
        }
    }

    /// A manifest held by the buddy.
    pub fn manifest(&mut self, series: &Series, iteration: u64) -> Result<Manifest, ckpt::Error> {
        match self.call(&Request::GetManifest {
            series: series.clone(),
            iteration,
        })? {
            Response::Manifest(m) => Ok(m),
            other => Err(unexpected(&other)),
        }
    }

    /// Sends `len` bytes of `source` as `piece`.
    pub fn put(
        &mut self,
        piece: &PieceId,
        source: &mut impl Read,
        len: u64,
        digest: ckpt::Digest,
    ) -> Result<(), ckpt::Error> {
        write_frame(
            &mut self.writer,
            &Request::Put {
                piece: piece.clone(),
                len,
                digest,
            },
        )?;
        let copied = io::copy(&mut source.take(len), &mut self.writer)?;
        if copied != len {
            return Err(ckpt::Error::Protocol(format!(
                "{piece}: source held {copied} of {len} bytes"
            )));
        }
        self.writer.flush()?;
        match expect_frame(&mut self.reader)? {
            Response::Stored => Ok(()),
            Response::Error { message } => Err(ckpt::Error::Protocol(message)),
            other => Err(unexpected(&other)),
        }
    }

    /// Marks a checkpoint complete at the buddy.
    pub fn commit(&mut self, manifest: &Manifest) -> Result<(), ckpt::Error> {
        match self.call(&Request::Commit {
            manifest: manifest.clone(),
        })? {
            Response::Committed => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Asks for a piece; returns its length and digest, with the bytes left to read from
    /// [`Client::reader`].
    pub fn get(&mut self, piece: &PieceId) -> Result<(u64, ckpt::Digest), ckpt::Error> {
        match self.call(&Request::Get {
            piece: piece.clone(),
        })? {
            Response::Piece { len, digest } => Ok((len, digest)),
            other => Err(unexpected(&other)),
        }
    }

    /// The stream the bytes of a piece are read from after [`Client::get`].
    pub fn reader(&mut self) -> &mut impl Read {
        &mut self.reader
    }
}

fn unexpected(response: &Response) -> ckpt::Error {
    ckpt::Error::Protocol(format!("unexpected answer from buddy: {response:?}"))
}

/// One checkpoint to copy: its manifest and the files of the pieces this node holds.
#[derive(Debug)]
struct CopyJob {
    manifest: Manifest,
    pieces: Vec<(PieceId, PathBuf)>,
}

/// This pcmd's buddy: its address, the key, and the copy worker.
#[derive(Debug)]
pub struct Buddy {
    addr: String,
    key: PoolKey,
    queue: SyncSender<CopyJob>,
}

impl Buddy {
    /// Starts the copy worker for the buddy at `addr`.
    pub fn start(addr: String, key: PoolKey) -> Buddy {
        let (queue, jobs) = mpsc::sync_channel(COPY_QUEUE);
        let worker_addr = addr.clone();
        let worker_key = key;
        let started = std::thread::Builder::new()
            .name("pcmd-buddy-copy".into())
            .spawn(move || copy_worker(&worker_addr, &worker_key, jobs));
        if let Err(e) = started {
            tracing::warn!("cannot start the buddy copy thread ({e}); checkpoints stay local");
        }
        Buddy { addr, key, queue }
    }

    /// The buddy's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Queues a copy of a complete checkpoint; never waits.
    pub fn copy(&self, store: &Store, manifest: Manifest, pieces: Vec<PieceId>) {
        let pieces = pieces
            .into_iter()
            .map(|p| {
                let path = store.piece_path(&p);
                (p, path)
            })
            .collect();
        let what = format!("{} iteration {}", manifest.series, manifest.iteration);
        match self.queue.try_send(CopyJob { manifest, pieces }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => tracing::warn!(
                "buddy {} is {COPY_QUEUE} checkpoints behind; not copying {what}",
                self.addr
            ),
            Err(TrySendError::Disconnected(_)) => {
                tracing::warn!("buddy copy worker is gone; not copying {what}")
            }
        }
    }

    /// The buddy's verified checkpoints of `series` for `rank`.
    pub fn list(
        &self,
        series: &Series,
        rank: Rank,
    ) -> Result<(Vec<Available>, Vec<Rejected>), ckpt::Error> {
        Client::connect(&self.addr, &self.key)?.list(series, rank)
    }

    /// Fetches a piece and its manifest from the buddy into `store`, verifying the digest.
    pub fn fetch(&self, store: &Store, piece: &PieceId) -> Result<(), ckpt::Error> {
        let mut client = Client::connect(&self.addr, &self.key)?;
        let manifest = client.manifest(&piece.series, piece.iteration)?;
        let expected = manifest
            .digests
            .get(piece.rank.0 as usize)
            .copied()
            .ok_or_else(|| ckpt::Error::Protocol(format!("{piece}: rank outside the manifest")))?;
        let (len, digest) = client.get(piece)?;
        if digest != expected {
            return Err(ckpt::Error::Format(format!(
                "{piece}: buddy announced digest {digest}, its manifest says {expected}"
            )));
        }
        store.put(piece, len, digest, client.reader())?;
        store.commit(&manifest)?;
        Ok(())
    }
}

fn copy_worker(addr: &str, key: &PoolKey, jobs: Receiver<CopyJob>) {
    for job in jobs {
        let started = Instant::now();
        let what = format!(
            "{} iteration {}",
            job.manifest.series, job.manifest.iteration
        );
        match copy_one(addr, key, &job) {
            Ok(bytes) => {
                let seconds = started.elapsed().as_secs_f64();
                tracing::info!(
                    "copied checkpoint {what} ({} pieces, {bytes} bytes) to buddy {addr} in {seconds:.3} s ({:.1} MB/s)",
                    job.pieces.len(),
                    bytes as f64 / 1e6 / seconds.max(1e-9)
                );
            }
            Err(e) => tracing::warn!("could not copy checkpoint {what} to buddy {addr}: {e}"),
        }
    }
}

fn copy_one(addr: &str, key: &PoolKey, job: &CopyJob) -> Result<u64, ckpt::Error> {
    let mut client = Client::connect(addr, key)?;
    let mut bytes = 0;
    for (piece, path) in &job.pieces {
        let index = piece.rank.0 as usize;
        let (Some(&digest), Some(&len)) = (
            job.manifest.digests.get(index),
            job.manifest.lens.get(index),
        ) else {
            continue;
        };
        let mut file = File::open(path)?;
        client.put(piece, &mut file, len, digest)?;
        bytes += len;
    }
    client.commit(&job.manifest)?;
    Ok(bytes)
}
