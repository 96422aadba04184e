//! The keys and the construction shared by the rate-limiting kinds (static-rate, hygenicc,
//! sdn-gcc): token-bucket sizing, the NIC share allocator and per-VM weights.

use std::collections::BTreeMap;

use crate::limiters::rate_alloc::AllocatorConfig;
use crate::vocab::keys::{Checks, KeyDoc};
use crate::vocab::roles::{BucketConfig, ShortagePolicy};
use crate::vocab::roles::{Fabric, HostShim};
use crate::vocab::units::Duration;

/// Declares a kind's configuration struct with the limiter keys every rate-limiting kind takes
/// (`weights`, `on_shortage`, `burst`, `idle_timeout`) followed by its own.
macro_rules! limiter_config {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident: $t:ty,)* }) => {
        $(#[$m])*
        #[derive(serde::Deserialize, serde::Serialize, Debug, Clone, Default)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            /// Per-VM weights for the NIC share (default 1 each).
            pub weights: Option<std::collections::BTreeMap<String, u32>>,
            /// "drop" (the papers' default) or "queue" packets that find no tokens.
            pub on_shortage: Option<String>,
            /// Bucket depth as time at the bucket's rate.
            pub burst: Option<crate::vocab::units::Duration>,
            /// A VM idle this long gives its share back (To).
            pub idle_timeout: Option<crate::vocab::units::Duration>,
            $($(#[$fm])* pub $f: $t,)*
        }

        impl $name {
            fn limiter_keys(&self) -> crate::limiters::keys::LimiterKeys<'_> {
                crate::limiters::keys::LimiterKeys {
                    weights: &self.weights,
                    on_shortage: &self.on_shortage,
                    burst: self.burst,
                    idle_timeout: self.idle_timeout,
                }
            }
        }
    };
}
pub(crate) use limiter_config;

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

const IDLE_TIMEOUT: KeyDoc = KeyDoc {
    key: "idle_timeout",
    unit: "time",
    default: "1s",
    range: "> 0",
    doc: "To: a VM that has offered no packet for this long gives its share back to the \
         others. The papers: 1 s.",
};

/// The keys every rate-limiting kind takes (declared by [`limiter_config`]).
pub const LIMITER_KEYS: &[KeyDoc] = &[WEIGHTS, ON_SHORTAGE, BURST, IDLE_TIMEOUT];

pub struct LimiterKeys<'a> {
    pub weights: &'a Option<BTreeMap<String, u32>>,
    pub on_shortage: &'a Option<String>,
    pub burst: Option<Duration>,
    pub idle_timeout: Option<Duration>,
}

/// Token-bucket sizing and shortage behaviour from `on_shortage` and `burst`.
pub fn bucket_config(
    ck: &mut Checks,
    on_shortage: &Option<String>,
    burst: Option<Duration>,
) -> BucketConfig {
    let d = BucketConfig::default();
    BucketConfig {
        on_shortage: match ck.choice(&ON_SHORTAGE, on_shortage) {
            0 => ShortagePolicy::Drop,
            _ => ShortagePolicy::Queue,
        },
        burst_ns: ck.time(&BURST, burst),
        ..d
    }
}

impl LimiterKeys<'_> {
    /// The share allocator's configuration.
    pub fn alloc(&self, ck: &mut Checks) -> AllocatorConfig {
        AllocatorConfig {
            idle_timeout: ck.time(&IDLE_TIMEOUT, self.idle_timeout),
            bucket: bucket_config(ck, self.on_shortage, self.burst),
        }
    }

    /// Weights by VM address.
    pub fn weights(
        &self,
        ck: &mut Checks,
        vm_address: &dyn Fn(&str) -> Option<u32>,
    ) -> BTreeMap<u32, u32> {
        let mut out = BTreeMap::new();
        for (name, &w) in self.weights.iter().flatten() {
            let Some(vm) = vm_address(name) else {
                ck.problem("weights", format!("no host or VM named {name:?}"));
                continue;
            };
            if w == 0 {
                ck.problem(
                    "weights",
                    format!("weight of {name:?} must be greater than zero"),
                );
            }
            out.insert(vm, w);
        }
        out
    }
}

/// One rate-limiting shim per host, made by `new` from the host's NIC rate, with every VM of
/// the host registered at its weight (1 unless the scenario gives one).
pub fn rate_shims<S, P>(
    fabric: &dyn Fabric,
    weights: &BTreeMap<u32, u32>,
    new: impl Fn(u64) -> S,
    register: impl Fn(&mut S, u32, u32),
) -> Vec<Option<Box<dyn HostShim<P>>>>
where
    S: HostShim<P> + 'static,
    P: crate::vocab::headers::PacketHeaders + ?Sized,
{
    let vms = fabric.vms();
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
