//! The keys and the construction shared by the rate-limiting kinds (static-rate, hygenicc,
//! sdn-gcc): token-bucket sizing, the NIC share allocator and per-VM weights.

use std::collections::BTreeMap;

use crate::mechanisms::Checks;
use crate::rate_alloc::{AllocatorConfig, BucketConfig, ShortagePolicy};
use crate::roles::{Fabric, HostShim};
use crate::units::Duration;

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
            pub burst: Option<crate::units::Duration>,
            /// A VM idle this long gives its share back (To).
            pub idle_timeout: Option<crate::units::Duration>,
            $($(#[$fm])* pub $f: $t,)*
        }

        impl $name {
            fn limiter_keys(&self) -> crate::mechanisms::limiter::LimiterKeys<'_> {
                crate::mechanisms::limiter::LimiterKeys {
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
        on_shortage: match ck.choice("on_shortage", on_shortage, &["drop", "queue"]) {
            0 => ShortagePolicy::Drop,
            _ => ShortagePolicy::Queue,
        },
        burst_ns: burst.map(|b| b.0).unwrap_or(d.burst_ns),
        ..d
    }
}

impl LimiterKeys<'_> {
    /// The share allocator's configuration.
    pub fn alloc(&self, ck: &mut Checks) -> AllocatorConfig {
        AllocatorConfig {
            idle_timeout: ck.positive(
                "idle_timeout",
                self.idle_timeout,
                AllocatorConfig::default().idle_timeout,
            ),
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
    P: crate::headers::PacketHeaders + ?Sized,
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
