//! Every message agents exchange: one enum, plain serde types, checked by
//! [`Message::validate`] after decoding.
//!
//! The driver frames them (for example with libp2p's `request_response::cbor` under
//! [`PROTOCOL_NAME`]), refuses frames longer than [`MAX_MESSAGE_LEN`] before decoding, and
//! hands decoded messages to [`Agent::handle_message`](crate::Agent::handle_message), which
//! validates them and drops invalid ones. No message carries a program or a command line: a
//! migration request names registered processes ([`EntityId`]) and a destination, and the
//! receiving agent checks that they are its own and eligible.

use std::fmt;
use std::sync::Arc;

use pcm_proto::HostName;
use serde::{Deserialize, Serialize};

use crate::model::{EntityId, EntityProfile, InvalidProfile, JobOffer, NodeProfile};
use crate::tier::{LatencyTier, PeerId};

/// Protocol name and version, for the transport's protocol negotiation.
pub const PROTOCOL_NAME: &str = "/mpi-ios/agent/1.1.0";
/// Largest encoded message accepted, in bytes (256 KiB).
pub const MAX_MESSAGE_LEN: usize = 256 * 1024;
/// Largest time-to-live of a work-steal packet.
pub const MAX_TTL: u8 = 32;
/// Most entities in one message.
pub const MAX_ENTITIES: usize = 1024;

/// Most RTTs in one work-steal packet.
pub const MAX_RTTS: usize = 256;

/// One measured round-trip time from a node to a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRtt {
    /// The host measured.
    pub host: HostName,
    /// Round-trip time, microseconds.
    pub rtt_us: u32,
}

impl HostRtt {
    /// `host` at `rtt_s` seconds, in whole microseconds, saturating (a measured RTT is
    /// finite and >= 0).
    pub fn from_secs(host: HostName, rtt_s: f64) -> Self {
        HostRtt {
            host,
            rtt_us: (rtt_s * 1e6).clamp(0.0, f64::from(u32::MAX)) as u32,
        }
    }

    /// The round-trip time in seconds.
    pub fn secs(&self) -> f64 {
        f64::from(self.rtt_us) / 1e6
    }

    /// The RTT to `host` in a list of them, seconds: its last entry counts, as it would in a
    /// map built from the list.
    pub fn find_in(rtts: &[HostRtt], host: &HostName) -> Option<f64> {
        rtts.iter()
            .rev()
            .find(|r| r.host == *host)
            .map(HostRtt::secs)
    }
}

/// Identifier of a message (work steal, poll, heartbeat). Agents draw their first id at random
/// and count up, so ids from different agents do not collide in practice; a receiver keys
/// them with the sender's peer id anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MessageId(pub u64);

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "m{}", self.0)
    }
}

/// Identifier of one migration, chosen by the agent that decides it. The driver passes it to
/// pcmd as the request id, so a request delivered twice is carried out once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MigrationId(pub u64);

impl fmt::Display for MigrationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "g{}", self.0)
    }
}

/// An agent-to-agent message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Message {
    /// A reconfiguration request packet (RRP): `source` has spare resources and asks for
    /// work. Forwarded hop by hop (TTL decremented) among local peers until some agent gives
    /// work or the TTL runs out (section 5.2).
    WorkSteal {
        /// Id chosen by `origin`.
        id: MessageId,
        /// The agent running the steal; replies go to it. The source itself in NSp2p, the
        /// source's cluster manager in NSc2c.
        origin: PeerId,
        /// The node that would receive work.
        source: PeerId,
        /// The source's host name, as the MPI runtime knows it.
        source_host: HostName,
        /// The source's resources when the packet left.
        source_profile: NodeProfile,
        /// Hops left.
        ttl: u8,
        /// Tier the origin sent this round to.
        tier: LatencyTier,
        /// The source's measured RTTs to other hosts, nearest first (at most [`MAX_RTTS`]):
        /// the giver weighs with them how far a rank would be from its partners at the
        /// source (the model's communication term). Absent in older agents' packets: none.
        /// Shared: a thief sends the same list with every steal, and a steal is forwarded
        /// hop by hop.
        #[serde(default)]
        rtts: Arc<[HostRtt]>,
        /// What the source offers one more entity of each job it already runs entities of
        /// (at most [`MAX_ENTITIES`]): its own ranks that wait for the one moved compute
        /// again once it arrives. Absent in older agents' packets: none.
        #[serde(default)]
        job_offers: Vec<JobOffer>,
        /// Entities that left the source's node within the last two hold-downs (at most
        /// [`MAX_ENTITIES`]): a giver does not send them back there, whoever decided their
        /// departure (an NSc2c cluster whose manager changed has lost the manager's own
        /// record). It can only keep work away from the source. Absent in older agents'
        /// packets: none.
        #[serde(default)]
        departed: Vec<EntityId>,
    },
    /// Answer to a work steal: work is on its way.
    StealAccepted {
        /// The work steal.
        id: MessageId,
        /// The migration that carries the work.
        migration: MigrationId,
        /// What moves.
        entities: Vec<EntityId>,
        /// The host the entities leave: the answering agent's own in NSp2p, the ordered
        /// member's when an NSc2c manager answers. The origin bars them from going back
        /// there for a while. Absent in older agents' answers: the sender's host.
        #[serde(default)]
        from_host: Option<HostName>,
        /// The giver moves them within their hold-down, as a step of gathering
        /// ([`crate::Config::with_gather_within_hold_down`]). The origin then holds them for
        /// a hold-down from their arrival, with no such step, so that no entity moves more
        /// than twice within a hold-down. Absent in older agents' answers: false (they take
        /// no such step).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        within_hold_down: bool,
    },
    /// Answer to a work steal: its TTL ran out, or it reached an agent with nowhere to
    /// forward it, and nobody gave work.
    StealExhausted {
        /// The work steal.
        id: MessageId,
    },
    /// NSp2p: the sender refused an earlier work steal of the receiver's and now has work it
    /// would give (its node got loaded). The receiver may steal from the sender at once
    /// instead of waiting out its back-off; it only ever answers with a work steal, so a
    /// hint can make an agent send a message, never move or run anything.
    WorkAvailable,
    /// A migration announced with [`Message::StealAccepted`] or ordered with
    /// [`Message::MoveOrder`] has ended.
    MigrationFinished {
        /// The migration.
        migration: MigrationId,
        /// Whether the entities now run at the destination.
        completed: bool,
    },
    /// NSc2c: sent each heartbeat period by a member to its manager, by a manager to its
    /// members, and to one other local peer in turn (see [`crate::c2c`], "upkeep bounded per
    /// node"). Carries the sender's vote, the manager it elected (seniority, then votes); it
    /// is both the liveness signal and the election message.
    Heartbeat {
        /// Id of this heartbeat.
        id: MessageId,
        /// Whom the sender takes as its cluster manager.
        manager: PeerId,
        /// Sent by a manager: the member that takes over if the manager dies, its most
        /// senior member as the manager saw them arrive. Absent in older agents' heartbeats.
        #[serde(default)]
        successor: Option<PeerId>,
        /// How many peers the sender heard vote for it: a manager's members, near and far
        /// from the receiver. An agent alone joins a cluster it is junior to only if it
        /// hears all of them itself ([`crate::c2c`], "Election"). Absent (0) in older
        /// agents' heartbeats.
        #[serde(default)]
        members: u32,
    },
    /// NSc2c: a cluster manager asks a member for its profile.
    ProfileRequest {
        /// Id of this poll round.
        id: MessageId,
    },
    /// NSc2c: a member's profile, answering [`Message::ProfileRequest`].
    ProfileReply {
        /// The poll round answered.
        id: MessageId,
        /// The member's host name.
        host: HostName,
        /// The member's resources.
        node: NodeProfile,
        /// The member's entities.
        entities: Vec<EntityProfile>,
        /// The member is leaving the pool ([`crate::Agent::handle_leave`]): its entities
        /// must all go, and none may come to it. Absent in older agents' replies: false.
        #[serde(default)]
        leaving: bool,
        /// Entities that left the member's node within the last two hold-downs (see
        /// [`Message::WorkSteal`]'s `departed`). Absent in older agents' replies: none.
        #[serde(default)]
        departed: Vec<EntityId>,
        /// Hosts the member measured within the local tier (at most [`MAX_RTTS`]): the
        /// manager tells with them which of its members are near each other, the place a
        /// job gathers in. Absent in older agents' replies: none.
        #[serde(default)]
        near_hosts: Vec<HostName>,
        /// The member's RTTs to the hosts of its entities' partners (at most [`MAX_RTTS`]):
        /// the manager weighs the member's partner steals with them, not with its own
        /// RTTs. Absent in older agents' replies: none.
        #[serde(default)]
        partner_rtts: Vec<HostRtt>,
    },
    /// NSc2c: a cluster manager tells a member to move some of its registered entities.
    /// Members obey only their own manager, and only for their own eligible entities.
    MoveOrder {
        /// Id the migration will carry.
        migration: MigrationId,
        /// The entities, all of one job.
        entities: Vec<EntityId>,
        /// Destination agent.
        to: PeerId,
        /// Destination host.
        to_host: HostName,
        /// Who to send [`Message::MigrationFinished`] to.
        notify: PeerId,
    },
    /// NSc2c: a member ordered to move work to an agent whose host it does not know sends
    /// this to that agent. The message only opens a connection, over which both agents
    /// announce their hosts; it asks for nothing and is answered with nothing.
    Introduce,
    /// NSc2c: answer of a cluster member to a partner steal sent to it directly (a manager
    /// gathering a job asks the agent of its rank's partner): members do not give work,
    /// their manager does, so the steal should go to `manager`. The receiver may send the
    /// same steal there; the message can only make it ask, never move anything. Older
    /// agents refuse it as undecodable.
    StealRedirect {
        /// The work steal.
        id: MessageId,
        /// The member's manager.
        manager: PeerId,
    },
}

/// A decoded message that breaks an invariant.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidMessage {
    /// A profile field is out of range.
    #[error("{0}")]
    Profile(#[from] InvalidProfile),
    /// TTL above [`MAX_TTL`] or zero.
    #[error("ttl {ttl} out of range 1..={MAX_TTL}")]
    Ttl {
        /// TTL given.
        ttl: u8,
    },
    /// Too many entities, or none where some are needed.
    #[error("{count} entities, must be 1..={MAX_ENTITIES}")]
    EntityCount {
        /// Number given.
        count: usize,
    },
    /// A move names entities of several jobs.
    #[error("entities of several jobs in one move")]
    MixedJobs,
    /// A job offer out of range or too many of them.
    #[error("job offers: {0}")]
    JobOffer(String),
    /// Too many RTTs in a work steal.
    #[error("{count} RTTs, must be at most {MAX_RTTS}")]
    RttCount {
        /// Number given.
        count: usize,
    },
    /// Too many near hosts in a profile reply.
    #[error("{count} near hosts, must be at most {MAX_RTTS}")]
    NearHostCount {
        /// Number given.
        count: usize,
    },
    /// Too many partner RTTs in a profile reply.
    #[error("{count} partner RTTs, must be at most {MAX_RTTS}")]
    PartnerRttCount {
        /// Number given.
        count: usize,
    },
}

impl Message {
    /// Short name of the variant, for logs and statistics.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::WorkSteal { .. } => "work-steal",
            Message::StealAccepted { .. } => "steal-accepted",
            Message::StealExhausted { .. } => "steal-exhausted",
            Message::WorkAvailable => "work-available",
            Message::MigrationFinished { .. } => "migration-finished",
            Message::Heartbeat { .. } => "heartbeat",
            Message::ProfileRequest { .. } => "profile-request",
            Message::ProfileReply { .. } => "profile-reply",
            Message::MoveOrder { .. } => "move-order",
            Message::Introduce => "introduce",
            Message::StealRedirect { .. } => "steal-redirect",
        }
    }

    /// Checks the invariants serde cannot: numeric ranges and list sizes. Identifiers and host
    /// names are already checked while decoding.
    pub fn validate(&self) -> Result<(), InvalidMessage> {
        match self {
            Message::WorkSteal {
                source_profile,
                ttl,
                rtts,
                job_offers,
                departed,
                ..
            } => {
                check_entities(departed, 0)?;
                if *ttl == 0 || *ttl > MAX_TTL {
                    return Err(InvalidMessage::Ttl { ttl: *ttl });
                }
                if rtts.len() > MAX_RTTS {
                    return Err(InvalidMessage::RttCount { count: rtts.len() });
                }
                source_profile.validate()?;
                if job_offers.len() > MAX_ENTITIES {
                    return Err(InvalidMessage::JobOffer(format!(
                        "{} offers, at most {MAX_ENTITIES}",
                        job_offers.len()
                    )));
                }
                if let Some(o) = job_offers.iter().find(|o| {
                    !(o.cores.is_finite() && (0.0..=source_profile.cores).contains(&o.cores))
                }) {
                    return Err(InvalidMessage::JobOffer(format!(
                        "{} cores offered to job {}, must be in 0..={}",
                        o.cores, o.job, source_profile.cores
                    )));
                }
                if let Some(o) = job_offers
                    .iter()
                    .find(|o| !(o.place_room.is_finite() && o.place_room >= 0.0))
                {
                    return Err(InvalidMessage::JobOffer(format!(
                        "{} idle cores in the cluster for job {}, must be finite and >= 0",
                        o.place_room, o.job
                    )));
                }
                if let Some(o) = job_offers.iter().find(|o| o.ranks as usize > MAX_ENTITIES) {
                    return Err(InvalidMessage::JobOffer(format!(
                        "{} ranks of job {} on one node, at most {MAX_ENTITIES}",
                        o.ranks, o.job
                    )));
                }
            }
            Message::StealAccepted { entities, .. } => check_entities(entities, 0)?,
            Message::ProfileReply {
                node,
                entities,
                departed,
                near_hosts,
                partner_rtts,
                ..
            } => {
                check_entities(departed, 0)?;
                if near_hosts.len() > MAX_RTTS {
                    return Err(InvalidMessage::NearHostCount {
                        count: near_hosts.len(),
                    });
                }
                if partner_rtts.len() > MAX_RTTS {
                    return Err(InvalidMessage::PartnerRttCount {
                        count: partner_rtts.len(),
                    });
                }
                node.validate()?;
                if entities.len() > MAX_ENTITIES {
                    return Err(InvalidMessage::EntityCount {
                        count: entities.len(),
                    });
                }
                for e in entities {
                    e.validate()?;
                }
            }
            Message::MoveOrder { entities, .. } => {
                check_entities(entities, 1)?;
                if entities.iter().any(|e| e.job != entities[0].job) {
                    return Err(InvalidMessage::MixedJobs);
                }
            }
            Message::StealExhausted { .. }
            | Message::WorkAvailable
            | Message::Introduce
            | Message::StealRedirect { .. }
            | Message::MigrationFinished { .. }
            | Message::Heartbeat { .. }
            | Message::ProfileRequest { .. } => {}
        }
        Ok(())
    }
}

fn check_entities(entities: &[EntityId], min: usize) -> Result<(), InvalidMessage> {
    if entities.len() < min || entities.len() > MAX_ENTITIES {
        return Err(InvalidMessage::EntityCount {
            count: entities.len(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcm_proto::{JobId, Rank};
    use proptest::prelude::*;

    fn peer(s: &str) -> PeerId {
        PeerId::new(s.as_bytes()).expect("valid")
    }

    fn steal(ttl: u8) -> Message {
        Message::WorkSteal {
            id: MessageId(7),
            origin: peer("a"),
            source: peer("a"),
            source_host: HostName::new("node-a").expect("valid"),
            source_profile: NodeProfile::idle(4.0, 1 << 30),
            ttl,
            tier: LatencyTier::Local,
            rtts: Default::default(),
            job_offers: Vec::new(),
            departed: Vec::new(),
        }
    }

    #[test]
    fn job_offers_out_of_range_are_refused_by_name() {
        let with_offer = |cores: f64, ranks: u32| {
            let mut m = steal(3);
            if let Message::WorkSteal { job_offers, .. } = &mut m {
                job_offers.push(JobOffer {
                    job: JobId::new("heat").expect("valid"),
                    cores,
                    ranks,
                    place_ranks: 0,
                    place_room: 0.0,
                });
            }
            m
        };
        assert!(with_offer(2.5, 1).validate().is_ok());
        for bad in [f64::NAN, -0.1, 4.5, f64::INFINITY] {
            let err = with_offer(bad, 1).validate().expect_err("out of range");
            assert!(err.to_string().contains("job heat"), "{err}");
        }
        let err = with_offer(1.0, u32::MAX)
            .validate()
            .expect_err("more ranks than a node holds");
        assert!(err.to_string().contains("ranks of job heat"), "{err}");
        for bad in [f64::NAN, -1.0, f64::INFINITY] {
            let mut m = with_offer(1.0, 1);
            if let Message::WorkSteal { job_offers, .. } = &mut m {
                job_offers[0].place_room = bad;
            }
            let err = m.validate().expect_err("bad cluster room");
            assert!(
                err.to_string().contains("in the cluster for job heat"),
                "{err}"
            );
        }
    }

    fn cbor(m: &Message) -> Vec<u8> {
        let mut out = Vec::new();
        ciborium::into_writer(m, &mut out).expect("encodes");
        out
    }

    #[test]
    fn messages_round_trip_through_cbor() {
        let id = EntityId {
            job: JobId::new("heat").expect("valid"),
            rank: Rank(3),
        };
        for m in [
            steal(4),
            Message::StealAccepted {
                id: MessageId(1),
                migration: MigrationId(2),
                entities: vec![id.clone()],
                from_host: Some(HostName::new("b").expect("valid")),
                within_hold_down: true,
            },
            Message::WorkAvailable,
            Message::Introduce,
            Message::StealRedirect {
                id: MessageId(5),
                manager: peer("m"),
            },
            Message::Heartbeat {
                id: MessageId(3),
                manager: peer("b"),
                successor: Some(peer("c")),
                members: 3,
            },
            Message::ProfileReply {
                id: MessageId(4),
                host: HostName::new("h").expect("valid"),
                node: NodeProfile::idle(1.0, 0),
                entities: vec![EntityProfile::new(id.clone(), 0.5)],
                leaving: true,
                departed: vec![id.clone()],
                near_hosts: vec![HostName::new("h2").expect("valid")],
                partner_rtts: vec![HostRtt {
                    host: HostName::new("h3").expect("valid"),
                    rtt_us: 270_000,
                }],
            },
            Message::MoveOrder {
                migration: MigrationId(5),
                entities: vec![id],
                to: peer("c"),
                to_host: HostName::new("hc").expect("valid"),
                notify: peer("b"),
            },
        ] {
            let bytes = cbor(&m);
            assert!(bytes.len() < MAX_MESSAGE_LEN);
            let back: Message = ciborium::from_reader(bytes.as_slice()).expect("decodes");
            assert_eq!(back, m);
            assert!(back.validate().is_ok(), "{}", m.kind());
        }
    }

    #[test]
    fn invariants_are_checked() {
        assert_eq!(steal(0).validate(), Err(InvalidMessage::Ttl { ttl: 0 }));
        assert!(steal(MAX_TTL + 1).validate().is_err());
        let mut m = steal(1);
        if let Message::WorkSteal { source_profile, .. } = &mut m {
            source_profile.cores = f64::INFINITY;
        }
        assert!(m.validate().expect_err("bad").to_string().contains("cores"));
        let order = Message::MoveOrder {
            migration: MigrationId(1),
            entities: vec![],
            to: peer("c"),
            to_host: HostName::new("hc").expect("valid"),
            notify: peer("b"),
        };
        assert!(order.validate().is_err());
        let reply = |hosts: usize, partners: usize| Message::ProfileReply {
            id: MessageId(1),
            host: HostName::new("h").expect("valid"),
            node: NodeProfile::idle(1.0, 0),
            entities: vec![],
            leaving: false,
            departed: vec![],
            near_hosts: (0..hosts)
                .map(|i| HostName::new(format!("h{i}")).expect("valid"))
                .collect(),
            partner_rtts: (0..partners)
                .map(|i| HostRtt {
                    host: HostName::new(format!("p{i}")).expect("valid"),
                    rtt_us: 1_000,
                })
                .collect(),
        };
        assert_eq!(reply(MAX_RTTS, MAX_RTTS).validate(), Ok(()));
        assert_eq!(
            reply(MAX_RTTS + 1, 0).validate(),
            Err(InvalidMessage::NearHostCount {
                count: MAX_RTTS + 1
            })
        );
        assert_eq!(
            reply(0, MAX_RTTS + 1).validate(),
            Err(InvalidMessage::PartnerRttCount {
                count: MAX_RTTS + 1
            })
        );
    }

    #[test]
    fn hostile_identifiers_are_refused_while_decoding() {
        // A peer id of 0 bytes and a host name with a shell metacharacter.
        let bytes = cbor(&steal(1));
        let text = String::from_utf8_lossy(&bytes).replace("node-a", "node;a");
        let r: Result<Message, _> = ciborium::from_reader(text.as_bytes());
        assert!(r.is_err());
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(m) = ciborium::from_reader::<Message, _>(bytes.as_slice()) {
                let _ = m.validate();
            }
        }

        #[test]
        fn decoding_mutated_messages_never_panics(pos in 0usize..400, byte in any::<u8>()) {
            let mut bytes = cbor(&steal(3));
            let i = pos % bytes.len();
            bytes[i] = byte;
            if let Ok(m) = ciborium::from_reader::<Message, _>(bytes.as_slice()) {
                let _ = m.validate();
            }
        }
    }
}
