//! The core's peer ids and libp2p's: the core names an agent by the bytes of its libp2p
//! peer id (`ios_agent_core::tier::PeerId`), so that it needs no libp2p types.

use ios_agent_core::tier::PeerId as CorePeerId;
use libp2p::PeerId;

/// The core's id for a libp2p peer id.
pub fn core_id(p: &PeerId) -> Option<CorePeerId> {
    CorePeerId::new(p.to_bytes()).ok()
}

/// The libp2p peer id for a core id.
pub fn libp2p_id(p: &CorePeerId) -> Option<PeerId> {
    PeerId::from_bytes(p.as_bytes()).ok()
}
