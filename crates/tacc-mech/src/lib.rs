//! Sans-IO state machines of tacc's transport-agnostic congestion-control mechanisms.
//!
//! Nothing here knows about the simulator or the Linux datapath. Every mechanism is a plain
//! state machine: time enters as integer nanoseconds ([`Nanos`]), packets enter through the
//! [`headers::PacketHeaders`] trait (implemented by the simulator's packet struct and by
//! [`wire`]'s view of real IPv4/TCP bytes), and decisions leave as return values.
//! The caller owns the clock and the timers: each mechanism says when it next needs
//! attention (`poll_at`) and the caller calls it back then.
//!
//! The interface every driver uses (the simulator, a Linux host agent, an SDN controller):
//! - [`roles`]: the three roles (host shim, switch hook, controller app) as traits, and the
//!   [`roles::Fabric`] a mechanism is built for.
//! - [`control`]: the control-plane messages (packet-ins, statistics, flow-mods,
//!   notifications to hosts), serializable.
//! - [`controller`]: a controller process's view of a mechanism built from a plan (the app,
//!   the switch hooks that select packet-ins, the plan's paths).
//! - [`mechanisms`]: the scenario's `[mechanism]` table, one struct per kind, checked and
//!   built into the roles; one line registers a kind.
//! - [`units`]: values with units as scenario files write them ("1Gbps", "25us").
//!
//! The state machines:
//! - [`headers`]: the header fields mechanisms read and write (ECN, reserved flag, IP ID, rwnd).
//! - [`wire`]: those fields on real bytes, with RFC 1071/1624 checksum maintenance.
//! - [`token_bucket`]: the per-VM rate limiter shared by HyGenICC, SDN-GCC and static limits.
//! - [`rate_alloc`]: per-NIC weighted shares of active VMs (E(i)) policed by token buckets, the
//!   per-key limiter bookkeeping HyGenICC and SDN-GCC share, and the static per-VM rate-limit
//!   baseline.
//! - [`hygenicc`]: HyGenICC, the host-to-host shim (sender rate control and receiver ECN echo).
//! - [`sdn_gcc`]: SDN-GCC, the same rate limiters driven by a controller that polls switch mark
//!   counters and notifies the sources.
//! - [`sicc`]: SICC, a controller that spots incast volleys from SYN copies and queue samples,
//!   and the hypervisor module that then clamps the rwnd of ACKs to one MSS.
//! - [`rwndq`]: RWNDQ, the switch-side baseline that writes a per-flow fair-share window into
//!   ACKs.
//! - [`sdn_ecn`]: SDN-ECN, a controller that finds links above 75% utilization and installs
//!   CE-marking rules for their fastest flows.

pub mod control;
pub mod controller;
pub mod headers;
pub mod hygenicc;
pub mod mechanisms;
pub mod plan;
pub mod rate_alloc;
pub mod roles;
pub mod rwndq;
pub mod sdn_ecn;
pub mod sdn_gcc;
pub mod sicc;
pub mod token_bucket;
pub mod units;
pub mod wire;

pub use headers::{Ecn, FlowKey, PacketHeaders};
pub use hygenicc::{FeedbackPacket, HygenConfig, HygenShim};
pub use mechanisms::MechanismConfig;
pub use rate_alloc::{
    AllocatorConfig, BucketConfig, DropReason, EgressVerdict, KeyedBuckets, KeyedLimiter,
    RateAllocator, ShortagePolicy, StaticRateLimiter,
};
pub use roles::IngressVerdict;
pub use rwndq::{Rwndq, RwndqConfig};
pub use sdn_ecn::{InstallMarkRule, SdnEcnConfig, SdnEcnController};
pub use sdn_gcc::{Notify, SdnGccController, SdnGccControllerConfig, SdnGccShim, SdnGccShimConfig};
pub use sicc::{
    SiccController, SiccControllerConfig, SiccHypervisor, SiccHypervisorConfig, SiccMessage,
};
pub use token_bucket::TokenBucket;
pub use wire::Ipv4Packet;

/// Time in integer nanoseconds since the start of a run (or any fixed epoch).
pub type Nanos = u64;

/// Nanoseconds per second.
pub const NS_PER_SEC: u64 = 1_000_000_000;
