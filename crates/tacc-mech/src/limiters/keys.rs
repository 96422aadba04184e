//! The keys and the construction shared by the rate-limiting kinds (static-rate, hygenicc,
//! sdn-gcc): token-bucket sizing, the NIC share allocator and per-VM weights.

use std::collections::BTreeMap;

use crate::vocab::keys::{Checks, KeyDoc};
use crate::vocab::roles::{BucketConfig, ShortagePolicy};
use crate::vocab::roles::{Fabric, HostShim};
use crate::vocab::units::Nanos;

/// Declares a rate-limiting kind's table (as [`table!`](crate::vocab::keys::table)) with the
/// limiter keys every such kind takes (`weights`, `on_shortage`, `burst`, `idle_timeout`)
/// followed by its own.
macro_rules! limiter_table {
    ($(#[$m:meta])* pub struct $name:ident { $($body:tt)* }) => {
        crate::vocab::keys::table! {
            $(#[$m])*
            pub struct $name {
                /// Per-VM weights for the NIC share, by VM name (1 where not given).
                pub weights: std::collections::BTreeMap<String, u32> = Default::default(),
                /// Drop (the papers' default) or queue packets that find no tokens.
                pub on_shortage: crate::vocab::roles::ShortagePolicy = Default::default(),
                /// Bucket depth as time at the bucket's rate.
                #[serde(with = "crate::vocab::units::as_duration")]
                pub burst: crate::vocab::units::Nanos = crate::limiters::keys::BURST.default_time(),
                /// To: a VM idle this long gives its share back.
                #[serde(with = "crate::vocab::units::as_duration")]
                pub idle_timeout: crate::vocab::units::Nanos =
                    crate::limiters::keys::IDLE_TIMEOUT.default_time(),
                $($body)*
            }
        }

        impl $name {
            /// The share allocator's configuration.
            pub fn alloc(&self) -> crate::limiters::rate_alloc::AllocatorConfig {
                crate::limiters::rate_alloc::AllocatorConfig {
                    idle_timeout: self.idle_timeout,
                    bucket: crate::limiters::keys::bucket_config(self.on_shortage, self.burst),
                }
            }
        }
    };
}
pub(crate) use limiter_table;

const WEIGHTS: KeyDoc = KeyDoc {
    key: "weights",
    unit: "table",
    default: "1 each",
    range: "> 0",
    doc: "Per-VM weights for the NIC share, by VM name (weights = { \"s0\" = 2 }); a VM's \
         share is the NIC rate in proportion to its weight.",
};

pub const ON_SHORTAGE: KeyDoc = KeyDoc {
    key: "on_shortage",
    unit: "string",
    default: "\"drop\"",
    range: "\"drop\" or \"queue\"",
    doc: "What happens to packets that find no tokens: dropped (the papers' default) or \
         queued.",
};

pub const BURST: KeyDoc = KeyDoc {
    key: "burst",
    unit: "time",
    default: "1ms",
    range: "",
    doc: "Bucket depth as time at the bucket's rate (at least one 1514-byte frame). The \
         papers give none; 1 ms absorbs ten 100 us RTTs of a window-limited flow, the \
         prototype's 25 ms lets a VM burst buffers' worth.",
};

pub const IDLE_TIMEOUT: KeyDoc = KeyDoc {
    key: "idle_timeout",
    unit: "time",
    default: "1s",
    range: "> 0",
    doc: "To: a VM that has offered no packet for this long gives its share back to the \
         others. The papers: 1 s.",
};

/// The keys every rate-limiting kind takes (declared by [`limiter_table`]).
pub const LIMITER_KEYS: &[KeyDoc] = &[WEIGHTS, ON_SHORTAGE, BURST, IDLE_TIMEOUT];

/// Token-bucket sizing and shortage behaviour from `on_shortage` and `burst`.
pub fn bucket_config(on_shortage: ShortagePolicy, burst: Nanos) -> BucketConfig {
    BucketConfig {
        on_shortage,
        burst_ns: burst,
        ..BucketConfig::default()
    }
}

/// Records the problems with the limiter keys (`on_shortage` and `burst` take any value their
/// type reads).
pub fn check_limiter_keys(
    ck: &mut Checks,
    weights: &BTreeMap<String, u32>,
    idle_timeout: Nanos,
    vm_address: &dyn Fn(&str) -> Option<u32>,
) {
    ck.time(&IDLE_TIMEOUT, idle_timeout);
    for (name, &w) in weights {
        if vm_address(name).is_none() {
            ck.problem("weights", format!("no host or VM named {name:?}"));
        } else if w == 0 {
            ck.problem(
                "weights",
                format!("weight of {name:?} must be greater than zero"),
            );
        }
    }
}

/// One rate-limiting shim per host, made by `new` from the host's NIC rate, with every VM of
/// the host registered at its weight (`weights` by VM name; 1 where not given).
pub fn rate_shims<S, P>(
    fabric: &dyn Fabric,
    weights: &BTreeMap<String, u32>,
    new: impl Fn(u64) -> S,
    register: impl Fn(&mut S, u32, u32),
) -> Vec<Option<Box<dyn HostShim<P>>>>
where
    S: HostShim<P> + 'static,
    P: crate::vocab::headers::PacketHeaders + ?Sized,
{
    let vms = fabric.vms();
    let weights: BTreeMap<u32, u32> = weights
        .iter()
        .filter_map(|(name, &w)| Some((fabric.vm_address(name)?, w)))
        .collect();
    (0..fabric.hosts())
        .map(|h| {
            let mut shim = new(fabric.nic_rate_bps(h));
            for &(_, ip) in vms.iter().filter(|(host, _)| *host == h) {
                register(&mut shim, ip, weights.get(&ip).copied().unwrap_or(1));
            }
            Some(Box::new(shim) as Box<dyn HostShim<P>>)
        })
        .collect()
}
