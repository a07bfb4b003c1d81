//! A TCP relay that delays each direction by a fixed time, to emulate distance between
//! agents on one machine (there is no netem here): a connection through a relay of delay `D`
//! has an RTT of about `2 D` more than a direct one.
//!
//! Bytes are forwarded as they arrive, each chunk released `D` after it was read, so the
//! relay adds latency but does not limit bandwidth (within a bounded queue per direction).

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Most chunks in flight per direction; a full queue slows the reader (backpressure).
const QUEUE: usize = 256;
/// Largest chunk read at once.
const CHUNK: usize = 16 * 1024;

/// A running relay; stops (and drops its connections) when dropped.
#[derive(Debug)]
pub struct DelayRelay {
    local: SocketAddr,
    task: JoinHandle<()>,
}

impl DelayRelay {
    /// Listens on `listen` (port 0 picks one) and forwards every connection to `target`,
    /// delaying each direction by `delay`. Must be called inside a tokio runtime.
    pub async fn start(
        listen: SocketAddr,
        target: SocketAddr,
        delay: Duration,
    ) -> io::Result<DelayRelay> {
        let listener = TcpListener::bind(listen).await?;
        let local = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((inbound, _)) => {
                            conns.spawn(async move {
                                if let Err(e) = relay_one(inbound, target, delay).await {
                                    tracing::debug!("relay connection to {target}: {e}");
                                }
                            });
                        }
                        Err(e) => {
                            tracing::warn!("relay accept: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    },
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        });
        Ok(DelayRelay { local, task })
    }

    /// The address the relay listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for DelayRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay_one(inbound: TcpStream, target: SocketAddr, delay: Duration) -> io::Result<()> {
    let outbound = TcpStream::connect(target).await?;
    inbound.set_nodelay(true)?;
    outbound.set_nodelay(true)?;
    let (ir, iw) = inbound.into_split();
    let (or, ow) = outbound.into_split();
    // When either direction ends, the other is ended too: a closed peer closes both ways.
    tokio::select! {
        r = pipe(ir, ow, delay) => r,
        r = pipe(or, iw, delay) => r,
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) -> io::Result<()> {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(QUEUE);
    let reader = async move {
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = from.read(&mut buf).await?;
            let due = Instant::now() + delay;
            // An empty chunk carries the end of stream, delayed like data.
            if tx.send((due, buf[..n].to_vec())).await.is_err() || n == 0 {
                return Ok::<(), io::Error>(());
            }
        }
    };
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if chunk.is_empty() {
                to.shutdown().await?;
                return Ok(());
            }
            to.write_all(&chunk).await?;
        }
        Ok::<(), io::Error>(())
    };
    let (r, w) = tokio::join!(reader, writer);
    r.and(w)
}

/// Runs a relay until the process is killed (for scripts: `ios-net-relay`).
pub async fn run_forever(
    listen: SocketAddr,
    target: SocketAddr,
    delay: Duration,
) -> io::Result<()> {
    let relay = DelayRelay::start(listen, target, delay).await?;
    println!(
        "{{\"event\":\"relay\",\"listen\":\"{}\",\"target\":\"{target}\",\"delay_ms\":{}}}",
        relay.local_addr(),
        delay.as_secs_f64() * 1000.0
    );
    std::future::pending::<()>().await;
    Ok(())
}
