//! Sans-IO state machines of tacc's transport-agnostic congestion-control mechanisms.
//!
//! Nothing here knows about the simulator or the Linux datapath. Every mechanism is a plain
//! state machine: time enters as integer nanoseconds ([`Nanos`]), packets enter through the
//! [`PacketHeaders`] trait (implemented by the simulator's packet struct and by [`wire`]'s
//! view of real IPv4/TCP bytes), and decisions leave as return values. The caller owns the
//! clock and the timers: each mechanism says when it next needs attention (`poll_at`) and the
//! caller calls it back then.
//!
//! The crate is in layers, each using only those below it (`tests/layers.rs` checks it):
//! 1. [`vocab`], naming no mechanism: [`units`] (time, "1Gbps", "25us"), [`headers`] (the
//!    fields mechanisms read and write), [`wire`] (those fields on real bytes, RFC 1071/1624
//!    checksums), [`control`] (the control plane's messages, serializable), [`roles`] (host
//!    shim, switch hook, controller app; the [`roles::Fabric`] a mechanism is built for) and
//!    [`vocab::keys`] (a kind's table, which is its configuration: its keys, their checks,
//!    and the [`vocab::keys::Mechanism`] trait).
//! 2. [`limiters`]: the state machines several kinds share (token bucket, the per-NIC share
//!    allocator and keyed limiter, the rate-limiting kinds' common keys).
//! 3. [`mechanisms`]: one folder per kind (static-rate, HyGenICC, SDN-GCC, SICC, SDN-ECN,
//!    RWNDQ) with its state machines and its table; a kind never uses another.
//! 4. On top: [`registry`] (the `[mechanism]` table, one line per kind), [`plan`] (a
//!    scenario's built world, mechanism included, as plain data) and [`controller`] (a
//!    controller process's view of a mechanism built from a plan).

pub mod controller;
pub mod limiters;
pub mod mechanisms;
pub mod plan;
pub mod registry;
pub mod vocab;

pub use limiters::{rate_alloc, token_bucket};
pub use vocab::{control, headers, roles, units, wire};

pub use control::{IncastMessage, Notify};
pub use headers::{Ecn, FlowKey, PacketHeaders};
pub use mechanisms::hygenicc::{HygenConfig, HygenShim};
pub use mechanisms::rwndq::{Rwndq, RwndqConfig};
pub use mechanisms::sdn_ecn::{InstallMarkRule, SdnEcnConfig, SdnEcnController};
pub use mechanisms::sdn_gcc::{SdnGccConfig, SdnGccController, SdnGccShim};
pub use mechanisms::sicc::{SiccConfig, SiccController, SiccHypervisor, SiccSwitch};
pub use rate_alloc::{
    AllocatorConfig, KeyedBuckets, KeyedLimiter, RateAllocator, StaticRateLimiter,
};
pub use registry::MechanismConfig;
pub use roles::{
    BucketConfig, DropReason, EgressVerdict, FeedbackPacket, IngressVerdict, ShortagePolicy,
};
pub use token_bucket::TokenBucket;
pub use units::{Nanos, NS_PER_SEC};
pub use wire::Ipv4Packet;
