//! The network task: one libp2p swarm driven from a tokio task, a [`NetHandle`] to command it
//! and a channel of [`NetEvent`]s.
//!
//! What to dial, when to register and when to look for peers is decided by the
//! [`Discovery`] store; this task feeds it the swarm's events, carries out its
//! [`Action`]s, and sleeps until its [`Discovery::poll_timeout`] or the next event.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ios_agent_core::message::PROTOCOL_NAME;
use libp2p::core::ConnectedPoint;
use libp2p::futures::StreamExt;
use libp2p::identity::Keypair;
use libp2p::rendezvous::{self, Namespace};
use libp2p::request_response::{self, OutboundRequestId, ProtocolSupport};
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::swarm::{ConnectionId, DialError, ListenError, NetworkBehaviour, SwarmEvent};
use libp2p::{identify, Multiaddr, PeerId, StreamProtocol, Swarm};
use pcm_proto::HostName;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::by_host::{host_namespace, HostLookups, LookupPolicy};
use crate::codec::{Ack, AgentCodec, Request};
use crate::config::{NetConfig, DEFAULT_SLOW_SERVER_DIAL};
use crate::discovery::{Action, Discovery, Target, Timing};
pub use crate::event::{NetEvent, PeerSummary};
pub use crate::handle::NetHandle;
use crate::handle::{Command, Outgoing};
use crate::id::{core_id, libp2p_id};
use crate::on_request::{DialPolicy, OnRequest, Undelivered, Verdict};
use crate::transport::{build_transport, chain, describe_transport_error, listen_all};
use crate::NetError;

/// Identify's protocol version string of the pool.
pub const IDENTIFY_PROTOCOL: &str = "/mpi-ios/1.0.0";
/// How often a connection's identify exchange is repeated after the first. What it carries
/// (the peer's host and listen addresses) does not change while an agent runs, and libp2p's
/// five minutes cost an idle agent of 64 connections an exchange every 2.3 s (issue 42).
pub const IDENTIFY_INTERVAL: Duration = Duration::from_secs(30 * 60);
/// What precedes the host name in identify's agent version of an agent that announces one.
const HOST_MARK: &str = " host=";

/// The agent version identify announces: the crate and version, then the host if any.
fn agent_version(host: Option<&HostName>) -> String {
    let base = format!("ios-agent-net/{}", env!("CARGO_PKG_VERSION"));
    match host {
        Some(h) => format!("{base}{HOST_MARK}{h}"),
        None => base,
    }
}

/// The host an agent version announces, if it announces a valid one.
pub fn announced_host(agent_version: &str) -> Option<HostName> {
    let (_, host) = agent_version.rsplit_once(HOST_MARK)?;
    HostName::new(host).ok()
}

/// Agents of one host dialed after a lookup (one runs per node; more are a node's restart
/// whose old registration has not expired yet).
const MAX_AGENTS_PER_HOST: u64 = 2;

/// The rendezvous protocol a peer server speaks.
const RENDEZVOUS_PROTOCOL: &str = "/rendezvous/1.0.0";

#[derive(NetworkBehaviour)]
struct Behaviour {
    per_address: crate::limits::PendingPerAddress,
    limits: libp2p::connection_limits::Behaviour,
    identify: identify::Behaviour,
    ping: crate::probe::Probe,
    messages: request_response::Behaviour<AgentCodec>,
    rendezvous: rendezvous::client::Behaviour,
}

/// The agent's network; see [`Network::start`].
#[derive(Debug)]
pub struct Network {
    _private: (),
}

impl Network {
    /// Builds the swarm, starts listening and spawns the network task on the current tokio
    /// runtime. Returns once every listen address is bound (or with the error naming the
    /// one that failed). The task then dials the peer servers and direct peers, registers,
    /// discovers, and reports on the returned channel.
    pub async fn start(
        config: NetConfig,
    ) -> Result<(NetHandle, mpsc::Receiver<NetEvent>, JoinHandle<()>), NetError> {
        config.validate()?;
        let keypair = config.identity.load()?;
        let mut swarm = build_swarm(&keypair, &config)?;
        let local_libp2p = *swarm.local_peer_id();
        let local = core_id(&local_libp2p).ok_or_else(|| NetError::Config {
            field: "identity",
            reason: "peer id longer than the agent core accepts".into(),
        })?;

        for addr in &config.external_addrs {
            swarm.add_external_address(addr.clone());
        }
        // Every listener's address, so that `listen_addrs` is complete.
        let listening =
            listen_all(&mut swarm, &config.listen)
                .await
                .map_err(|f| NetError::Listen {
                    addr: f.addr,
                    reason: f.reason,
                })?;
        if config.external_addrs.is_empty() {
            for address in &listening {
                swarm.add_external_address(address.clone());
            }
        }

        let (events_tx, events_rx) = mpsc::channel(config.event_capacity);
        let (cmd_tx, cmd_rx) = mpsc::channel(64);
        let (outbox_tx, outbox_rx) = mpsc::channel(config.send_queue);
        let discovery = Discovery::new(
            Timing {
                discover_interval: config.discover_interval,
                max_discover_interval: config.max_discover_interval,
                redial_interval: config.redial_interval,
                max_redial_interval: config.max_redial_interval,
                slow_server_dial: (config.handshake_timeout > DEFAULT_SLOW_SERVER_DIAL)
                    .then_some(DEFAULT_SLOW_SERVER_DIAL),
            },
            local_libp2p,
            &config.peer_servers,
            &config.direct_peers,
            Instant::now(),
        )
        .with_dial_agents(config.dial_agents);
        // Under its host's name too, so that others can find it by host (crate::by_host).
        // A pool namespace so long that the host's cannot follow it: not findable by host.
        let host_ns = config.host.as_ref().and_then(|h| {
            let ns = host_namespace(&config.namespace, h);
            Namespace::new(ns.clone())
                .inspect_err(|e| {
                    tracing::warn!("not registering under the host's name {ns}: {e}");
                })
                .ok()
        });
        let mut task = Task {
            namespace: Namespace::new(config.namespace.clone()).map_err(|e| NetError::Config {
                field: "namespace",
                reason: e.to_string(),
            })?,
            host_namespace: host_ns,
            lookups: HostLookups::new(&config.namespace, LookupPolicy::default()),
            discovery,
            config,
            swarm,
            events: events_tx,
            peers: HashMap::new(),
            on_request: OnRequest::new(DialPolicy::default(), Instant::now()),
            pending_dials: HashMap::new(),
            outbound: HashMap::new(),
            listening,
            incoming_failures: pcm_proto::log_limit::LogLimit::default(),
        };
        for addr in task.listening.clone() {
            task.emit(NetEvent::Listening { addr });
        }
        let join = tokio::spawn(async move { task.run(cmd_rx, outbox_rx).await });
        Ok((
            NetHandle::new(cmd_tx, outbox_tx, local, local_libp2p),
            events_rx,
            join,
        ))
    }
}

fn build_swarm(keypair: &Keypair, config: &NetConfig) -> Result<Swarm<Behaviour>, NetError> {
    let transport =
        build_transport(keypair, &config.key, config.handshake_timeout).map_err(|e| {
            NetError::Config {
                field: "identity",
                reason: format!("noise: {e}"),
            }
        })?;
    let behaviour = Behaviour {
        per_address: crate::limits::PendingPerAddress::new(
            crate::limits::DEFAULT_MAX_PENDING_PER_ADDRESS,
        ),
        limits: crate::limits::connection_limits(
            config.max_connections,
            config.max_pending,
            crate::limits::DEFAULT_MAX_PER_PEER,
        ),
        identify: identify::Behaviour::new(
            identify::Config::new(IDENTIFY_PROTOCOL.into(), keypair.public())
                .with_agent_version(agent_version(config.host.as_ref()))
                .with_interval(IDENTIFY_INTERVAL),
        ),
        ping: crate::probe::Probe::new(config.ping_timing(), config.ping_timeout),
        messages: request_response::Behaviour::with_codec(
            AgentCodec,
            [(StreamProtocol::new(PROTOCOL_NAME), ProtocolSupport::Full)],
            request_response::Config::default()
                .with_request_timeout(config.request_timeout)
                .with_max_concurrent_streams(256),
        ),
        rendezvous: rendezvous::client::Behaviour::new(keypair.clone()),
    };
    // Connections stay open until a side closes them or pings time out: ping alone does not
    // keep a connection alive, and an agent needs its peers' RTTs continuously.
    let swarm_config = libp2p::swarm::Config::with_tokio_executor()
        .with_idle_connection_timeout(Duration::from_secs(365 * 24 * 3600))
        // One address at a time: concurrent attempts to one agent are aborted once one
        // succeeds, and the other side would see handshake failures that look like a key
        // problem.
        .with_dial_concurrency_factor(std::num::NonZeroU8::MIN)
        // Every agent message opens a stream of its own (request-response). Under
        // multistream-select's default (V1) the sender waits for the other side to confirm
        // the protocol before sending: a message took 1.5 round trips instead of half of
        // one (452 ms over a 300 ms link, tests/tests/wan_messages.rs), so each hop of a
        // work steal was three times what the simulator charges. V1Lazy sends the data
        // with the proposal. Every peer of a pool (agents and peer servers, admitted by
        // the pool key) speaks every protocol an agent opens to it; a peer that did not
        // would fail the stream at its first read instead of at negotiation.
        .with_substream_upgrade_protocol_override(libp2p::core::upgrade::Version::V1Lazy);
    Ok(Swarm::new(
        transport,
        behaviour,
        keypair.public().to_peer_id(),
        swarm_config,
    ))
}

/// What a dial was for.
#[derive(Debug, Clone)]
enum DialTarget {
    /// Asked by the discovery store.
    Store(Target),
    /// Asked with [`NetHandle::dial`].
    Manual(Multiaddr),
    /// A message for this agent, not connected ([`crate::on_request`]).
    Requested(PeerId),
}

#[derive(Debug)]
struct PeerState {
    /// Established connections, oldest first, with the address and who dialed.
    connections: Vec<(ConnectionId, Multiaddr, bool)>,
    is_agent: bool,
    rtt: Option<Duration>,
}

struct Task {
    config: NetConfig,
    namespace: Namespace,
    /// The namespace of this node's host, registered under too ([`crate::by_host`]).
    host_namespace: Option<Namespace>,
    /// Lookups of agents by their host's name.
    lookups: HostLookups,
    swarm: Swarm<Behaviour>,
    events: mpsc::Sender<NetEvent>,
    /// Peer servers, direct peers and discovered agents: what to dial, register, discover.
    discovery: Discovery,
    peers: HashMap<PeerId, PeerState>,
    /// Dials on request: the agents' addresses, and the messages waiting for a dial.
    on_request: OnRequest<Outgoing>,
    pending_dials: HashMap<ConnectionId, DialTarget>,
    outbound: HashMap<OutboundRequestId, (PeerId, &'static str)>,
    listening: Vec<Multiaddr>,
    /// Failed incoming connections are logged and reported at this rate at most: garbage
    /// connections must not fill the log or the event channel.
    incoming_failures: pcm_proto::log_limit::LogLimit,
}

impl Task {
    /// Reports an event; drops it (with a log) if the driver lags so far behind that the
    /// channel is full, so the swarm never stalls on a slow driver.
    fn emit(&self, ev: NetEvent) {
        match self.events.try_send(ev) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(ev)) => {
                tracing::warn!(?ev, "event channel full: event dropped");
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    async fn run(
        &mut self,
        mut commands: mpsc::Receiver<Command>,
        mut outbox: mpsc::Receiver<Outgoing>,
    ) {
        loop {
            // Whatever the last event or command made due, then sleep until the store's next
            // deadline (a redial, a renewal, a discovery round) or the next event.
            let now = Instant::now();
            self.poll_discovery(now);
            self.expire_requested(now);
            self.expire_lookups(now);
            let wake = [
                self.discovery.poll_timeout(),
                self.on_request.poll_timeout(),
                self.lookups.poll_timeout(),
            ]
            .into_iter()
            .flatten()
            .min()
            .map(tokio::time::Instant::from_std);
            tokio::select! {
                ev = self.swarm.select_next_some() => self.on_swarm_event(ev),
                cmd = commands.recv() => match cmd {
                    None => { self.close().await; return; }
                    Some(Command::Shutdown(done)) => {
                        self.close().await;
                        let _ = done.send(());
                        return;
                    }
                    Some(cmd) => self.on_command(cmd),
                },
                // `None` (every handle dropped) disables this branch; the commands branch
                // then ends the task.
                Some(out) = outbox.recv() => self.on_outgoing(out),
                () = async {
                    match wake {
                        Some(t) => tokio::time::sleep_until(t).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
        }
    }

    async fn close(&mut self) {
        let servers: Vec<PeerId> = self.discovery.connected_servers().collect();
        for peer in servers {
            let rendezvous = &mut self.swarm.behaviour_mut().rendezvous;
            rendezvous.unregister(self.namespace.clone(), peer);
            if let Some(ns) = &self.host_namespace {
                rendezvous.unregister(ns.clone(), peer);
            }
        }
        // Give the unregistrations a moment to leave.
        let until = tokio::time::Instant::now() + Duration::from_millis(200);
        while let Ok(ev) = tokio::time::timeout_at(until, self.swarm.select_next_some()).await {
            tracing::trace!(?ev, "event while closing");
        }
    }

    /// Hands an agent message to its connection, or says why not.
    fn on_outgoing(&mut self, out: Outgoing) {
        let Outgoing {
            to,
            request,
            kind,
            reply,
        } = out;
        let result = match libp2p_id(&to) {
            None => Err(NetError::InvalidPeer { peer: to.clone() }),
            // Queued without waiting (the driver's messages): dial the agent if it may be.
            Some(p) if !self.swarm.is_connected(&p) && reply.is_none() => {
                let out = Outgoing {
                    to,
                    request,
                    kind,
                    reply,
                };
                self.request_dial(p, out);
                return;
            }
            Some(p) if !self.swarm.is_connected(&p) => {
                Err(NetError::NotConnected { peer: to.clone() })
            }
            Some(p) => {
                let id = self
                    .swarm
                    .behaviour_mut()
                    .messages
                    .send_request(&p, request);
                self.outbound.insert(id, (p, kind));
                Ok(())
            }
        };
        match (reply, result) {
            (Some(reply), result) => {
                let _ = reply.send(result);
            }
            (None, Ok(())) => {}
            (None, Err(e)) => self.emit(NetEvent::SendFailed {
                to,
                kind,
                reason: e.to_string(),
            }),
        }
    }

    /// A message queued for `peer`, not connected: dial it on request, or wait for the dial
    /// under way, or report it undelivered ([`crate::on_request`]).
    fn request_dial(&mut self, peer: PeerId, out: Outgoing) {
        let now = Instant::now();
        let (established, cap) = self.connections_and_cap();
        let verdict = self.on_request.request(peer, out, established, cap, now);
        match verdict {
            Verdict::Waits => {}
            Verdict::Refused(out, why) => self.undelivered(out, &why),
            Verdict::Dial(addrs) => {
                tracing::debug!("dialing agent {peer} on request");
                self.dial_on_request(peer, addrs, now);
            }
        }
    }

    /// The connections established, and their cap, for [`OnRequest`].
    fn connections_and_cap(&self) -> (usize, usize) {
        let established = self
            .swarm
            .network_info()
            .connection_counters()
            .num_established();
        (
            usize::try_from(established).unwrap_or(usize::MAX),
            usize::try_from(self.config.max_connections).unwrap_or(usize::MAX),
        )
    }

    /// Dials `peer`, as [`OnRequest`] allowed, at `addrs`.
    fn dial_on_request(&mut self, peer: PeerId, addrs: Vec<Multiaddr>, now: Instant) {
        let opts = DialOpts::peer_id(peer)
            .condition(PeerCondition::DisconnectedAndNotDialing)
            .addresses(addrs)
            .allocate_new_port()
            .build();
        let id = opts.connection_id();
        match self.swarm.dial(opts) {
            Ok(()) => {
                self.pending_dials.insert(id, DialTarget::Requested(peer));
            }
            // Another dial to it is under way: the messages wait for that one.
            Err(DialError::DialPeerConditionFalse(_)) => {
                self.on_request.on_dial_skipped(&peer);
            }
            Err(e) => self.requested_dial_failed(peer, describe_dial_error(&e), now),
        }
    }

    /// A dial on request to `peer` failed: its messages are reported undelivered, and it
    /// backs off.
    fn requested_dial_failed(&mut self, peer: PeerId, reason: String, now: Instant) {
        let waited = self.on_request.on_dial_failed(&peer, &reason, now);
        if let Some(p) = core_id(&peer) {
            self.emit(NetEvent::DialError {
                addr: peer.to_string(),
                peer: Some(p),
                reason: reason.clone(),
            });
        }
        let why = Undelivered::DialFailed(reason);
        for out in waited {
            self.undelivered(out, &why);
        }
    }

    /// Reports the messages whose wait for a dial on request ended.
    fn expire_requested(&mut self, now: Instant) {
        let why = Undelivered::TimedOut(self.on_request.policy().max_wait);
        for (_, out) in self.on_request.expire(now) {
            self.undelivered(out, &why);
        }
    }

    /// Looks up the agent of `host` at a peer server, within the bounds of
    /// [`crate::by_host`]; its answer comes to [`Task::on_host_found`].
    fn look_up_host(&mut self, host: HostName, now: Instant) {
        if self.config.host.as_ref() == Some(&host) {
            return;
        }
        // Any server will do: every agent registers with every server it knows. The first
        // connected, so that one lost server costs a lookup or two, not every lookup.
        let Some(server) = self.discovery.connected_servers().next() else {
            tracing::debug!("not looking up {host}: no peer server connected");
            return;
        };
        let ns = match self.lookups.ask(&host, now) {
            Ok(ns) => ns,
            Err(why) => {
                tracing::trace!("not looking up {host}: {why}");
                return;
            }
        };
        match Namespace::new(ns) {
            Ok(ns) => {
                tracing::debug!("looking up the agent of {host} at {server}");
                self.swarm.behaviour_mut().rendezvous.discover(
                    Some(ns),
                    None,
                    Some(MAX_AGENTS_PER_HOST),
                    server,
                );
            }
            Err(e) => {
                self.lookups.on_failed(&host, now);
                self.emit(NetEvent::HostUnknown {
                    host,
                    reason: format!("no namespace for it: {e}"),
                });
            }
        }
    }

    /// The agents registered under `host`'s name: each not connected is dialed as on
    /// request (rate, cap, backoff: [`OnRequest::connect`]); none is reported.
    fn on_host_found(
        &mut self,
        host: HostName,
        registrations: Vec<rendezvous::Registration>,
        now: Instant,
    ) {
        let local = *self.swarm.local_peer_id();
        let agents: Vec<(PeerId, Vec<Multiaddr>)> = registrations
            .into_iter()
            .map(|r| (r.record.peer_id(), r.record.addresses().to_vec()))
            .filter(|(p, _)| *p != local)
            .take(usize::try_from(MAX_AGENTS_PER_HOST).unwrap_or(usize::MAX))
            .collect();
        self.lookups.on_answer(&host, agents.len(), now);
        if agents.is_empty() {
            self.emit(NetEvent::HostUnknown {
                host,
                reason: "no agent registered under its name".to_owned(),
            });
            return;
        }
        for (peer, addrs) in agents {
            self.on_request.learn(peer, addrs, now);
            if self.swarm.is_connected(&peer) {
                continue;
            }
            let (established, cap) = self.connections_and_cap();
            let verdict = self.on_request.connect(peer, established, cap, now);
            match verdict {
                Ok(None) => {}
                Ok(Some(addrs)) => {
                    tracing::debug!("dialing agent {peer} of {host}");
                    self.dial_on_request(peer, addrs, now);
                }
                Err(why) => {
                    tracing::debug!("not dialing agent {peer} of {host}: {why}");
                    self.emit(NetEvent::HostUnknown {
                        host: host.clone(),
                        reason: format!("its agent {peer} not dialed: {why}"),
                    });
                }
            }
        }
    }

    /// Reports the lookups that went unanswered.
    fn expire_lookups(&mut self, now: Instant) {
        for host in self.lookups.expire(now) {
            let timeout = self.lookups.policy().answer_timeout;
            self.emit(NetEvent::HostUnknown {
                host,
                reason: format!("no answer from the peer server in {timeout:?}"),
            });
        }
    }

    /// Reports a message for an agent not connected as not delivered.
    fn undelivered(&mut self, out: Outgoing, why: &Undelivered) {
        tracing::debug!(to = %out.to, kind = out.kind, "message not delivered: {why}");
        match out.reply {
            Some(reply) => {
                let _ = reply.send(Err(NetError::NotConnected { peer: out.to }));
            }
            None => self.emit(NetEvent::SendFailed {
                to: out.to,
                kind: out.kind,
                reason: why.to_string(),
            }),
        }
    }

    fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::Peers(reply) => {
                let list = self
                    .peers
                    .iter()
                    .filter(|(_, s)| s.is_agent && !s.connections.is_empty())
                    .filter_map(|(p, s)| {
                        Some(PeerSummary {
                            peer: core_id(p)?,
                            libp2p_id: *p,
                            addr: s.connections[0].1.clone(),
                            rtt: s.rtt,
                        })
                    })
                    .collect();
                let _ = reply.send(list);
            }
            Command::ListenAddrs(reply) => {
                let _ = reply.send(self.listening.clone());
            }
            Command::Dial(addr, reply) => {
                let r = self.dial(
                    DialOpts::unknown_peer_id()
                        .address(addr.clone())
                        .allocate_new_port()
                        .build(),
                    DialTarget::Manual(addr.clone()),
                );
                let _ = reply.send(
                    r.map(|_| ())
                        .map_err(|reason| NetError::Dial { addr, reason }),
                );
            }
            Command::DialHost(host) => self.look_up_host(host, Instant::now()),
            Command::Drop(peer) => {
                if self.discovery.on_dropped(peer, Instant::now()) {
                    tracing::debug!("closing the connection to agent {peer} to make room");
                    // Err: not connected any more, which is what was asked.
                    let _ = self.swarm.disconnect_peer_id(peer);
                } else {
                    tracing::debug!(
                        "not closing the connection to {peer}: a peer server or direct peer"
                    );
                }
            }
            Command::Shutdown(_) => unreachable!("handled by run"),
        }
    }

    /// Dials. Every dial takes a new local port (`allocate_new_port`), never the listening
    /// one (libp2p's default reuses it): two agents that find each other at once and dial
    /// each other from their listening ports make the same TCP 4-tuple, a TCP simultaneous
    /// open gives them ONE connection on which both are the dialer, and its handshake fails
    /// ("input error") on both sides at the same instant; their redials, equal backoffs from
    /// the same failure, met again every time. Seen in `mpi-ios-bench pool` (issue 42): with
    /// a 160 ms round trip between two sites that each had a peer server, no agent of one
    /// ever connected to one of the other. On loopback the window is microseconds wide.
    fn dial(&mut self, opts: DialOpts, target: DialTarget) -> Result<ConnectionId, String> {
        let id = opts.connection_id();
        match self.swarm.dial(opts) {
            Ok(()) => {
                self.pending_dials.insert(id, target);
                Ok(id)
            }
            Err(e) => Err(describe_dial_error(&e)),
        }
    }

    /// Carries out every action the discovery store has due at `now`.
    fn poll_discovery(&mut self, now: Instant) {
        while let Some(action) = self.discovery.poll_action(now) {
            self.execute(action, now);
        }
    }

    fn execute(&mut self, action: Action, now: Instant) {
        match action {
            Action::DialAddress { target, addr } => {
                let opts = DialOpts::unknown_peer_id()
                    .address(addr)
                    .allocate_new_port()
                    .build();
                if let Err(reason) = self.dial(opts, DialTarget::Store(target)) {
                    self.discovery.on_dial_failed(target, reason, now);
                }
            }
            Action::DialPeer { peer, addrs } => {
                let opts = DialOpts::peer_id(peer)
                    .condition(PeerCondition::DisconnectedAndNotDialing)
                    .addresses(addrs)
                    .allocate_new_port()
                    .build();
                if let Err(reason) = self.dial(opts, DialTarget::Store(Target::Discovered(peer))) {
                    // Already connected or dialing, or no usable address: nothing failed.
                    tracing::debug!("not dialing discovered {peer}: {reason}");
                    self.discovery.on_dial_skipped(peer);
                }
            }
            Action::Register { server, peer } => {
                let ttl = self.config.registration_ttl.as_secs();
                let rendezvous = &mut self.swarm.behaviour_mut().rendezvous;
                if let Err(e) = rendezvous.register(self.namespace.clone(), peer, Some(ttl)) {
                    // No external address yet: the store asks again shortly.
                    tracing::debug!("cannot register yet with {peer}: {e}");
                    self.discovery.on_register_not_sent(server, now);
                } else if let Some(ns) = &self.host_namespace {
                    // Renewed with the pool's registration; its answer is only logged.
                    if let Err(e) = rendezvous.register(ns.clone(), peer, Some(ttl)) {
                        tracing::debug!("cannot register under {ns} with {peer}: {e}");
                    }
                }
            }
            Action::Discover { peer, cookie, .. } => {
                self.swarm.behaviour_mut().rendezvous.discover(
                    Some(self.namespace.clone()),
                    cookie,
                    None,
                    peer,
                );
            }
            Action::ServerUp { addr, server, ttl } => {
                tracing::info!("registered with peer server {addr} for {ttl} s");
                self.emit(NetEvent::PeerServerUp { addr, server });
            }
            Action::ServerError { addr, reason } => {
                tracing::warn!("peer server {addr}: {reason}");
                self.emit(NetEvent::PeerServerError { addr, reason });
            }
            Action::DialError { addr, peer, reason } => self.emit(NetEvent::DialError {
                addr,
                peer: peer.as_ref().and_then(core_id),
                reason,
            }),
        }
    }

    fn on_swarm_event(&mut self, ev: SwarmEvent<BehaviourEvent>) {
        let now = Instant::now();
        match ev {
            SwarmEvent::NewListenAddr { address, .. } => {
                if self.config.external_addrs.is_empty() {
                    self.swarm.add_external_address(address.clone());
                }
                if !self.listening.contains(&address) {
                    self.listening.push(address.clone());
                }
                self.emit(NetEvent::Listening { addr: address });
            }
            SwarmEvent::ExpiredListenAddr { address, .. } => {
                self.listening.retain(|a| *a != address);
                if self.config.external_addrs.is_empty() {
                    self.swarm.remove_external_address(&address);
                }
            }
            SwarmEvent::ConnectionEstablished {
                peer_id,
                connection_id,
                endpoint,
                ..
            } => self.on_connection(peer_id, connection_id, endpoint, now),
            SwarmEvent::ConnectionClosed {
                peer_id,
                connection_id,
                num_established,
                cause,
                ..
            } => self.on_connection_closed(peer_id, connection_id, num_established, cause, now),
            SwarmEvent::OutgoingConnectionError {
                connection_id,
                peer_id,
                error,
            } => {
                let reason = describe_dial_error(&error);
                match self.pending_dials.remove(&connection_id) {
                    Some(DialTarget::Store(Target::Discovered(p)))
                        if matches!(error, DialError::DialPeerConditionFalse(_)) =>
                    {
                        self.discovery.on_dial_skipped(p);
                    }
                    Some(DialTarget::Store(target)) => {
                        // Messages waiting for this agent wait for no other dial.
                        if let Target::Discovered(p) = target {
                            if self.on_request.is_dialing(&p) {
                                self.requested_dial_failed(p, reason.clone(), now);
                            }
                        }
                        self.discovery.on_dial_failed(target, reason, now);
                    }
                    Some(DialTarget::Requested(p)) => self.requested_dial_failed(p, reason, now),
                    Some(DialTarget::Manual(addr)) => self.emit(NetEvent::DialError {
                        addr: addr.to_string(),
                        peer: peer_id.as_ref().and_then(core_id),
                        reason,
                    }),
                    None => tracing::debug!(?peer_id, "dial failed: {reason}"),
                }
            }
            SwarmEvent::IncomingConnectionError {
                send_back_addr,
                error,
                ..
            } => {
                let Some(suppressed) = self.incoming_failures.check("incoming", now) else {
                    return;
                };
                let reason = match &error {
                    ListenError::Transport(e) => describe_transport_error(e).message,
                    ListenError::Denied { .. } => "refused: too many connections".to_owned(),
                    other => chain(other),
                };
                let reason = format!("{reason}{}", pcm_proto::log_limit::suffix(suppressed));
                tracing::info!("incoming connection from {send_back_addr} failed: {reason}");
                self.emit(NetEvent::IncomingError {
                    from: send_back_addr,
                    reason,
                });
            }
            SwarmEvent::ListenerError { error, .. } => {
                tracing::warn!("listener error: {}", chain(&error));
            }
            SwarmEvent::Behaviour(ev) => self.on_behaviour(ev, now),
            _ => {}
        }
    }

    fn on_connection(
        &mut self,
        peer: PeerId,
        id: ConnectionId,
        endpoint: ConnectedPoint,
        now: Instant,
    ) {
        let we_dialed = endpoint.is_dialer();
        let addr = endpoint.get_remote_address().clone();
        let target = match self.pending_dials.remove(&id) {
            Some(DialTarget::Store(target)) => Some(target),
            Some(DialTarget::Manual(_) | DialTarget::Requested(_)) | None => None,
        };
        self.discovery.on_connected(target, peer, id, now);
        let state = self.peers.entry(peer).or_insert_with(|| PeerState {
            connections: Vec::new(),
            is_agent: false,
            rtt: None,
        });
        state.connections.push((id, addr, we_dialed));
        // Two agents that dial each other at once end up with two connections. Keep one,
        // chosen alike on both sides: the oldest one dialed by the smaller peer id.
        if state.connections.len() > 1 {
            let local = *self.swarm.local_peer_id();
            let smaller_is_local = local < peer;
            let keep = state
                .connections
                .iter()
                .find(|(_, _, dialed_by_us)| *dialed_by_us == smaller_is_local)
                .unwrap_or(&state.connections[0])
                .0;
            let close: Vec<ConnectionId> = state
                .connections
                .iter()
                .map(|c| c.0)
                .filter(|c| *c != keep)
                .collect();
            for c in close {
                self.swarm.close_connection(c);
            }
        }
        // Messages that waited for this agent go out now.
        for out in self.on_request.on_connected(&peer) {
            let id = self
                .swarm
                .behaviour_mut()
                .messages
                .send_request(&peer, out.request);
            self.outbound.insert(id, (peer, out.kind));
        }
    }

    fn on_connection_closed(
        &mut self,
        peer: PeerId,
        id: ConnectionId,
        remaining: u32,
        cause: Option<libp2p::swarm::ConnectionError>,
        now: Instant,
    ) {
        let cause = cause.map_or_else(|| "closed".to_owned(), |c| chain(&c));
        self.discovery
            .on_connection_closed(peer, id, remaining, &cause, now);
        let Some(state) = self.peers.get_mut(&peer) else {
            return;
        };
        state.connections.retain(|c| c.0 != id);
        if remaining == 0 || state.connections.is_empty() {
            let was_agent = state.is_agent;
            self.peers.remove(&peer);
            if was_agent {
                tracing::info!("agent {peer} gone: {cause}");
                if let Some(p) = core_id(&peer) {
                    self.emit(NetEvent::PeerGone { peer: p });
                }
            }
        }
    }

    fn on_behaviour(&mut self, ev: BehaviourEvent, now: Instant) {
        match ev {
            BehaviourEvent::Identify(identify::Event::Received { peer_id, info, .. }) => {
                let agent = info.protocols.iter().any(|p| p.as_ref() == PROTOCOL_NAME);
                if self.discovery.is_server(&peer_id)
                    && !info
                        .protocols
                        .iter()
                        .any(|p| p.as_ref() == RENDEZVOUS_PROTOCOL)
                {
                    self.discovery.on_server_error(
                        peer_id,
                        format!(
                            "not a peer server: {peer_id} ({}) does not speak {RENDEZVOUS_PROTOCOL}",
                            info.agent_version
                        ),
                    );
                }
                if !agent {
                    return;
                }
                let Some(state) = self.peers.get_mut(&peer_id) else {
                    return;
                };
                // How to reach it again if it did not register where we look: it dialed us
                // (from a port of no listener). Not for an agent we dialed: that address may
                // be a relay's, which its own listen addresses would bypass.
                let dialed_by_us = state.connections.iter().any(|c| c.2);
                if !dialed_by_us && self.on_request.addresses(&peer_id).is_none() {
                    self.on_request
                        .learn(peer_id, info.listen_addrs.iter().cloned(), now);
                }
                if state.is_agent || state.connections.is_empty() {
                    return;
                }
                state.is_agent = true;
                let addr = state.connections[0].1.clone();
                let rtt = state.rtt;
                if let Some(p) = core_id(&peer_id) {
                    tracing::info!("agent {peer_id} up at {addr}");
                    self.emit(NetEvent::PeerUp {
                        peer: p.clone(),
                        addr,
                        host: announced_host(&info.agent_version),
                    });
                    if let Some(rtt) = rtt {
                        self.emit(NetEvent::PeerRtt { peer: p, rtt });
                    }
                }
            }
            BehaviourEvent::Identify(_) => {}
            BehaviourEvent::Ping(crate::probe::ProbeEvent {
                peer,
                connection,
                result,
                answered,
            }) => match result {
                Ok(rtt) => {
                    let Some(state) = self.peers.get_mut(&peer) else {
                        return;
                    };
                    // Only the connection in use measures the peer.
                    if state.connections.first().map(|c| c.0) != Some(connection)
                        && state.connections.len() > 1
                    {
                        return;
                    }
                    state.rtt = Some(rtt);
                    tracing::trace!(%peer, rtt_ms = rtt.as_secs_f64() * 1e3, "ping answered");
                    if state.is_agent {
                        if let Some(p) = core_id(&peer) {
                            self.emit(NetEvent::PeerRtt { peer: p, rtt });
                        }
                    }
                }
                Err(crate::probe::ProbeFailure::Unsupported) => {}
                Err(e) => {
                    // A peer that stops answering is gone even if TCP does not say so.
                    tracing::info!(
                        "ping to {peer} failed ({e}) after {answered} answers: closing the connection"
                    );
                    self.swarm.close_connection(connection);
                }
            },
            BehaviourEvent::Messages(ev) => self.on_message_event(ev),
            BehaviourEvent::Rendezvous(ev) => self.on_rendezvous(ev, now),
        }
    }

    fn on_message_event(&mut self, ev: request_response::Event<Request, Ack>) {
        use request_response::{Event, Message as M};
        match ev {
            Event::Message {
                peer,
                message: M::Request {
                    request, channel, ..
                },
                ..
            } => {
                let Some(from) = core_id(&peer) else {
                    return;
                };
                let (ack, ev) = match request {
                    Request::Message(message) => {
                        (Ack::Accepted, NetEvent::Message { from, message })
                    }
                    Request::Bad(reason) => (
                        Ack::Rejected(reason.clone()),
                        NetEvent::BadMessage { from, reason },
                    ),
                    // The reader never yields raw bytes.
                    Request::Raw(_) => return,
                };
                let _ = self
                    .swarm
                    .behaviour_mut()
                    .messages
                    .send_response(channel, ack);
                if let NetEvent::BadMessage { reason, .. } = &ev {
                    tracing::info!("bad message from {peer}: {reason}");
                }
                self.emit(ev);
            }
            Event::Message {
                message:
                    M::Response {
                        request_id,
                        response,
                    },
                ..
            } => {
                let Some((peer, kind)) = self.outbound.remove(&request_id) else {
                    return;
                };
                if let Ack::Rejected(reason) = response {
                    if let Some(to) = core_id(&peer) {
                        self.emit(NetEvent::SendFailed {
                            to,
                            kind,
                            reason: format!("refused by the peer: {reason}"),
                        });
                    }
                }
            }
            Event::OutboundFailure {
                request_id, error, ..
            } => {
                let Some((peer, kind)) = self.outbound.remove(&request_id) else {
                    return;
                };
                if let Some(to) = core_id(&peer) {
                    self.emit(NetEvent::SendFailed {
                        to,
                        kind,
                        reason: chain(&error),
                    });
                }
            }
            Event::InboundFailure { peer, error, .. } => {
                tracing::debug!("inbound message from {peer} failed: {}", chain(&error));
            }
            Event::ResponseSent { .. } => {}
        }
    }

    fn on_rendezvous(&mut self, ev: rendezvous::client::Event, now: Instant) {
        use rendezvous::client::Event as E;
        match ev {
            E::Registered {
                rendezvous_node,
                ttl,
                namespace,
            } => {
                if namespace == self.namespace {
                    self.discovery.on_registered(rendezvous_node, ttl, now);
                } else {
                    tracing::debug!("registered in {namespace} with {rendezvous_node}");
                }
            }
            E::RegisterFailed {
                rendezvous_node,
                namespace,
                error,
            } if namespace != self.namespace => {
                tracing::warn!(
                    "peer server {rendezvous_node} refused the registration in {namespace}: \
                     {error:?} (other agents cannot find this one by its host's name there)"
                );
            }
            E::RegisterFailed {
                rendezvous_node,
                error,
                ..
            } => {
                let hint = match error {
                    rendezvous::ErrorCode::InvalidTtl => format!(
                        ": the server does not accept a TTL of {} s (start it with a lower --min-ttl)",
                        self.config.registration_ttl.as_secs()
                    ),
                    _ => String::new(),
                };
                self.discovery.on_register_failed(
                    rendezvous_node,
                    format!("registration refused ({error:?}){hint}"),
                    now,
                );
            }
            E::Discovered {
                rendezvous_node,
                registrations,
                cookie,
            } if cookie.namespace() != Some(&self.namespace) => {
                let host = cookie
                    .namespace()
                    .and_then(|ns| self.lookups.host_asked_in(&ns.to_string()).cloned());
                match host {
                    Some(host) => self.on_host_found(host, registrations, now),
                    None => tracing::debug!(
                        "unasked discovery answer from {rendezvous_node}: {:?}",
                        cookie.namespace()
                    ),
                }
            }
            E::Discovered {
                rendezvous_node,
                registrations,
                cookie,
            } => {
                let registrations: Vec<(PeerId, Vec<Multiaddr>)> = registrations
                    .into_iter()
                    .map(|reg| (reg.record.peer_id(), reg.record.addresses().to_vec()))
                    .collect();
                let local = *self.swarm.local_peer_id();
                for (peer, addrs) in &registrations {
                    if *peer != local {
                        self.on_request.learn(*peer, addrs.iter().cloned(), now);
                    }
                }
                self.discovery
                    .on_discovered(rendezvous_node, cookie, registrations, now);
            }
            E::DiscoverFailed {
                rendezvous_node,
                namespace: Some(ns),
                error,
            } if ns != self.namespace => {
                if let Some(host) = self.lookups.host_asked_in(&ns.to_string()).cloned() {
                    self.lookups.on_failed(&host, now);
                    self.emit(NetEvent::HostUnknown {
                        host,
                        reason: format!("peer server {rendezvous_node} refused: {error:?}"),
                    });
                }
            }
            E::DiscoverFailed {
                rendezvous_node,
                error,
                ..
            } => {
                if let Some(addr) = self.discovery.on_discover_failed(rendezvous_node) {
                    tracing::warn!("discovery at {addr} failed: {error:?}");
                }
            }
            E::Expired { .. } => {}
        }
    }
}

/// A dial error in one line, naming each address tried.
fn describe_dial_error(e: &DialError) -> String {
    match e {
        DialError::Transport(errors) => errors
            .iter()
            .map(|(addr, e)| format!("{addr}: {}", describe_transport_error(e).message))
            .collect::<Vec<_>>()
            .join("; "),
        DialError::WrongPeerId { obtained, address } => format!(
            "{address} is {obtained}, not the peer expected (if it was restarted with a new \
             identity, give its new address, /p2p/ part included)"
        ),
        DialError::NoAddresses => "no address to dial".to_owned(),
        other => chain(other),
    }
}
