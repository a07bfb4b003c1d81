//! [`NetHandle`]: the driver's side of the network task, and the bounded send queue.
//!
//! Commands (list peers, dial, shut down) and agent messages travel on two channels, so that a
//! full send queue never holds up a command.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ios_agent_core::tier::PeerId as CorePeerId;
use ios_agent_core::Message;
use libp2p::{Multiaddr, PeerId};
use pcm_proto::HostName;
use tokio::sync::{mpsc, oneshot};

use crate::codec::Request;
use crate::event::PeerSummary;
use crate::NetError;

#[cfg(doc)]
use crate::{NetConfig, NetEvent};

/// A request to the network task, answered on its oneshot channel.
pub(crate) enum Command {
    Peers(oneshot::Sender<Vec<PeerSummary>>),
    ListenAddrs(oneshot::Sender<Vec<Multiaddr>>),
    Dial(Multiaddr, oneshot::Sender<Result<(), NetError>>),
    /// Close every connection to this agent, to make room for others.
    Drop(PeerId),
    /// Connect to the agent of this host ([`crate::by_host`]).
    DialHost(HostName),
    Shutdown(oneshot::Sender<()>),
}

/// An agent message on its way to the network task.
pub(crate) struct Outgoing {
    pub(crate) to: CorePeerId,
    pub(crate) request: Request,
    pub(crate) kind: &'static str,
    /// Where to say whether it was queued on the connection; `None` for
    /// [`NetHandle::try_send`], whose failures come as [`NetEvent::SendFailed`].
    pub(crate) reply: Option<oneshot::Sender<Result<(), NetError>>>,
}

/// Messages [`NetHandle::try_send`] dropped because the send queue was full.
#[derive(Debug)]
struct Drops {
    count: AtomicU64,
    /// One warning per window, saying how many more were dropped since the last one.
    log: Mutex<pcm_proto::log_limit::LogLimit>,
}

impl Drops {
    fn new() -> Self {
        Drops {
            count: AtomicU64::new(0),
            log: Mutex::new(pcm_proto::log_limit::LogLimit::new(DROP_WARNING_WINDOW, 1)),
        }
    }

    fn note(&self, to: &CorePeerId, kind: &'static str) {
        self.count.fetch_add(1, Ordering::Relaxed);
        // A panic elsewhere while holding the lock leaves a rate limiter, still usable.
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(suppressed) = log.check("send queue full", Instant::now()) {
            tracing::warn!(
                %to,
                kind,
                "send queue full: message dropped{}",
                pcm_proto::log_limit::suffix(suppressed)
            );
        }
    }
}

/// At most one "send queue full" warning per this window.
const DROP_WARNING_WINDOW: Duration = Duration::from_secs(10);

/// The driver's handle on a running network. Cheap to clone; the network stops when
/// [`NetHandle::shutdown`] is called or every handle is dropped.
#[derive(Clone)]
pub struct NetHandle {
    commands: mpsc::Sender<Command>,
    /// The send queue ([`NetConfig::send_queue`] messages), apart from the commands so that a
    /// full queue does not hold up `peers` or `shutdown`.
    outbox: mpsc::Sender<Outgoing>,
    drops: Arc<Drops>,
    local: CorePeerId,
    local_libp2p: PeerId,
}

impl std::fmt::Debug for NetHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NetHandle({})", self.local_libp2p)
    }
}

impl NetHandle {
    /// A handle on the task that reads `commands` and `outbox`.
    pub(crate) fn new(
        commands: mpsc::Sender<Command>,
        outbox: mpsc::Sender<Outgoing>,
        local: CorePeerId,
        local_libp2p: PeerId,
    ) -> Self {
        NetHandle {
            commands,
            outbox,
            drops: Arc::new(Drops::new()),
            local,
            local_libp2p,
        }
    }

    /// This node's id as the agent core names it.
    pub fn local_peer_id(&self) -> CorePeerId {
        self.local.clone()
    }

    /// This node's libp2p peer id.
    pub fn local_libp2p_id(&self) -> PeerId {
        self.local_libp2p
    }

    async fn command<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, NetError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(make(tx))
            .await
            .map_err(|_| NetError::Stopped)?;
        rx.await.map_err(|_| NetError::Stopped)
    }

    /// Sends an agent message to a connected agent, waiting for room in the send queue.
    /// Returns once it is queued on the connection; delivery failures come later as
    /// [`NetEvent::SendFailed`].
    /// Errors: [`NetError::NotConnected`], [`NetError::InvalidPeer`],
    /// [`NetError::TooLarge`], [`NetError::Stopped`].
    pub async fn send(&self, to: &CorePeerId, message: Message) -> Result<(), NetError> {
        let kind = message.kind();
        let bytes = encode(kind, &message)?;
        self.send_bytes(to, bytes, kind).await
    }

    /// Queues an agent message without waiting, for callers that must not block (the
    /// agent's event loop). An agent not connected is dialed on request
    /// ([`crate::on_request`]: a known address, within the connection cap and the rate
    /// limit, not backing off) and the message waits for the connection. Every failure after
    /// queueing (not dialed, not connected in time, not delivered, refused) comes as
    /// [`NetEvent::SendFailed`], its reason an [`Undelivered`](crate::on_request::Undelivered)
    /// when the agent was not connected.
    ///
    /// When the send queue ([`NetConfig::send_queue`]) is full the message is dropped:
    /// counted ([`NetHandle::dropped_messages`]), logged in one warning per 10 s at most, and
    /// refused with [`NetError::QueueFull`]. Dropping rather than waiting because the agent
    /// protocol tolerates loss (a lost steal request times out and is retried) while a
    /// blocked event loop stalls the agent's timers and control requests behind a slow
    /// network. Errors: [`NetError::QueueFull`], [`NetError::TooLarge`],
    /// [`NetError::Stopped`].
    pub fn try_send(&self, to: &CorePeerId, message: Message) -> Result<(), NetError> {
        let kind = message.kind();
        let bytes = encode(kind, &message)?;
        let out = Outgoing {
            to: to.clone(),
            request: Request::Raw(bytes),
            kind,
            reply: None,
        };
        match self.outbox.try_send(out) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(out)) => {
                self.drops.note(&out.to, kind);
                Err(NetError::QueueFull { peer: out.to, kind })
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(NetError::Stopped),
        }
    }

    /// How many messages [`NetHandle::try_send`] dropped because the send queue was full.
    pub fn dropped_messages(&self) -> u64 {
        self.drops.count.load(Ordering::Relaxed)
    }

    /// Sends bytes as they are on the agent protocol. Only for tests of peers' handling of
    /// hostile input.
    #[doc(hidden)]
    pub async fn send_raw(&self, to: &CorePeerId, bytes: Vec<u8>) -> Result<(), NetError> {
        self.send_bytes(to, bytes, "raw").await
    }

    async fn send_bytes(
        &self,
        to: &CorePeerId,
        bytes: Vec<u8>,
        kind: &'static str,
    ) -> Result<(), NetError> {
        let (reply, answer) = oneshot::channel();
        self.outbox
            .send(Outgoing {
                to: to.clone(),
                request: Request::Raw(bytes),
                kind,
                reply: Some(reply),
            })
            .await
            .map_err(|_| NetError::Stopped)?;
        answer.await.map_err(|_| NetError::Stopped)?
    }

    /// The agents connected now, with their latest RTT.
    pub async fn peers(&self) -> Result<Vec<PeerSummary>, NetError> {
        self.command(Command::Peers).await
    }

    /// The addresses this node listens on.
    pub async fn listen_addrs(&self) -> Result<Vec<Multiaddr>, NetError> {
        self.command(Command::ListenAddrs).await
    }

    /// Dials an address once (no redial), for example an agent named on a command line after
    /// start. Failures come as [`NetEvent::DialError`].
    pub async fn dial(&self, addr: Multiaddr) -> Result<(), NetError> {
        self.command(|reply| Command::Dial(addr, reply)).await?
    }

    /// Closes the connections to an agent to make room for others, without waiting: the
    /// agent is not dialed again, when discovered anew, for the longest redial wait
    /// ([`NetConfig::max_redial_interval`](crate::NetConfig::max_redial_interval)). Peer
    /// servers and direct peers stay connected (the request is ignored, with a debug line).
    /// Errors: [`NetError::InvalidPeer`], [`NetError::Busy`] when the command queue is full
    /// (try again later), [`NetError::Stopped`].
    pub fn try_disconnect(&self, peer: &CorePeerId) -> Result<(), NetError> {
        let Some(p) = crate::id::libp2p_id(peer) else {
            return Err(NetError::InvalidPeer { peer: peer.clone() });
        };
        self.commands
            .try_send(Command::Drop(p))
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => NetError::Busy { what: "disconnect" },
                mpsc::error::TrySendError::Closed(_) => NetError::Stopped,
            })
    }

    /// Connects, without waiting, to the agent of `host` if this node is not connected to
    /// it: looks it up at a peer server ([`crate::by_host`]: bounded, a host looked up lately
    /// is not looked up again yet) and dials it as on request ([`crate::on_request`]: rate,
    /// cap, backoff). Its connection comes as [`NetEvent::PeerUp`] with that host; a host
    /// with no agent found, or whose agent is not dialed, as [`NetEvent::HostUnknown`].
    /// Meant to be called as often as the agent wants the host: the bounds make repeated
    /// calls cheap. Errors: [`NetError::Busy`] when the command queue is full (try again
    /// later), [`NetError::Stopped`].
    pub fn try_dial_host(&self, host: &HostName) -> Result<(), NetError> {
        self.commands
            .try_send(Command::DialHost(host.clone()))
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => NetError::Busy { what: "host dial" },
                mpsc::error::TrySendError::Closed(_) => NetError::Stopped,
            })
    }

    /// Unregisters from the peer servers, closes every connection and ends the task.
    pub async fn shutdown(&self) -> Result<(), NetError> {
        self.command(Command::Shutdown).await
    }
}

/// Encodes a message on the caller's task, so an oversized one fails at once.
fn encode(kind: &'static str, message: &Message) -> Result<Vec<u8>, NetError> {
    crate::codec::encode_message(message).map_err(|e| NetError::TooLarge {
        kind,
        reason: e.to_string(),
    })
}
