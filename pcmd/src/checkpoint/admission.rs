//! Who may hold a connection of the checkpoint service: pure bookkeeping, no sockets.
//!
//! The ranks of this node (Unix socket) and the network (TCP, before and after the pool-key
//! handshake) draw on separate budgets, so that connections from the network, which anyone
//! who can reach the port may open without the key, can never take the slots the node's own
//! ranks need to checkpoint. Within the network budget each source address has a cap of
//! its own, so that one host cannot take the whole budget either.
//!
//! The accept loops ask [`Admission::admit`] before starting any work for a connection and
//! call [`Admission::release`] when it ends; the decision is made here, the sockets are
//! handled by the caller.

use std::collections::HashMap;
use std::net::IpAddr;

/// Default of [`Limits::local`]: connections from this node's ranks at once (64).
pub const DEFAULT_LOCAL: usize = 64;
/// Default of [`Limits::remote`]: TCP connections at once, authenticated or not (16).
pub const DEFAULT_REMOTE: usize = 16;
/// Default of [`Limits::per_source`]: TCP connections from one address at once (4). A buddy
/// needs two (its copy worker and one restart lookup).
pub const DEFAULT_PER_SOURCE: usize = 4;

/// Connection budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections on the ranks' Unix socket ([`DEFAULT_LOCAL`]).
    pub local: usize,
    /// Connections on the buddy TCP port ([`DEFAULT_REMOTE`]).
    pub remote: usize,
    /// Connections on the buddy TCP port from one IP address ([`DEFAULT_PER_SOURCE`]).
    pub per_source: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            local: DEFAULT_LOCAL,
            remote: DEFAULT_REMOTE,
            per_source: DEFAULT_PER_SOURCE,
        }
    }
}

/// Where a connection comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// A process of this node, over the Unix socket.
    Local,
    /// A peer on the network, by IP address.
    Remote(IpAddr),
}

/// Why a connection was turned away.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The Unix socket's budget is used up.
    #[error("pcmd is serving {limit} checkpoint connections of this node's ranks; retry")]
    LocalFull {
        /// The budget.
        limit: usize,
    },
    /// The TCP budget is used up.
    #[error("pcmd is serving {limit} buddy connections; retry")]
    RemoteFull {
        /// The budget.
        limit: usize,
    },
    /// This address holds its share of the TCP budget.
    #[error("{address} already holds {limit} buddy connections to this pcmd; retry")]
    SourceFull {
        /// The address.
        address: IpAddr,
        /// Its cap.
        limit: usize,
    },
}

/// Connections held, by budget.
#[derive(Debug, Default)]
pub struct Admission {
    limits: Limits,
    local: usize,
    remote: usize,
    by_source: HashMap<IpAddr, usize>,
}

impl Admission {
    /// Nothing held yet.
    pub fn new(limits: Limits) -> Self {
        Admission {
            limits,
            ..Admission::default()
        }
    }

    /// The budgets.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Connections held from this node and from the network.
    pub fn held(&self) -> (usize, usize) {
        (self.local, self.remote)
    }

    /// Takes a slot for a connection from `source`, or says why not. Every `Ok` must be
    /// matched by one [`Admission::release`] of the same source.
    pub fn admit(&mut self, source: Source) -> Result<(), Refusal> {
        match source {
            Source::Local => {
                if self.local >= self.limits.local {
                    return Err(Refusal::LocalFull {
                        limit: self.limits.local,
                    });
                }
                self.local += 1;
            }
            Source::Remote(ip) => {
                if self.remote >= self.limits.remote {
                    return Err(Refusal::RemoteFull {
                        limit: self.limits.remote,
                    });
                }
                let held = self.by_source.entry(ip).or_insert(0);
                if *held >= self.limits.per_source {
                    return Err(Refusal::SourceFull {
                        address: ip,
                        limit: self.limits.per_source,
                    });
                }
                *held += 1;
                self.remote += 1;
            }
        }
        Ok(())
    }

    /// Gives back a slot taken by [`Admission::admit`].
    pub fn release(&mut self, source: Source) {
        match source {
            Source::Local => self.local = self.local.saturating_sub(1),
            Source::Remote(ip) => {
                self.remote = self.remote.saturating_sub(1);
                if let Some(held) = self.by_source.get_mut(&ip) {
                    *held = held.saturating_sub(1);
                    if *held == 0 {
                        // Forget the address: the table stays as small as the connections.
                        self.by_source.remove(&ip);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ip(last: u8) -> Source {
        Source::Remote(IpAddr::from([127, 0, 0, last]))
    }

    #[test]
    fn given_the_network_budget_used_up_then_local_ranks_are_still_admitted() {
        let mut a = Admission::new(Limits {
            local: 2,
            remote: 3,
            per_source: 3,
        });
        for _ in 0..3 {
            a.admit(ip(1)).unwrap();
        }
        assert_eq!(a.admit(ip(2)), Err(Refusal::RemoteFull { limit: 3 }));
        a.admit(Source::Local).unwrap();
        a.admit(Source::Local).unwrap();
        assert_eq!(a.admit(Source::Local), Err(Refusal::LocalFull { limit: 2 }));
        a.release(Source::Local);
        a.admit(Source::Local).unwrap();
        assert_eq!(a.held(), (2, 3));
    }

    #[test]
    fn given_one_address_at_its_cap_then_others_still_get_in_and_release_frees_it() {
        let mut a = Admission::new(Limits {
            local: 1,
            remote: 8,
            per_source: 2,
        });
        a.admit(ip(1)).unwrap();
        a.admit(ip(1)).unwrap();
        let refused = a.admit(ip(1)).unwrap_err();
        assert!(refused.to_string().contains("127.0.0.1"), "{refused}");
        a.admit(ip(2)).unwrap();
        a.release(ip(1));
        a.admit(ip(1)).unwrap();
        for _ in 0..3 {
            a.release(ip(1));
            a.release(ip(2));
        }
        assert_eq!(a.held(), (0, 0));
        assert!(a.by_source.is_empty());
    }
}
