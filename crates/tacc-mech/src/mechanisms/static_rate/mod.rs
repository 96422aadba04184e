//! `kind = "static-rate"`: the static per-VM rate-limit baseline.

use serde::{Deserialize, Serialize};

use crate::limiters::keys::{bucket_config, BURST, ON_SHORTAGE};
use crate::limiters::rate_alloc::StaticRateLimiter;
use crate::vocab::headers::PacketHeaders;
use crate::vocab::keys::{Checks, KeyDoc, Mechanism};
use crate::vocab::roles::HostShimCore;
use crate::vocab::roles::{BucketConfig, EgressVerdict};
use crate::vocab::roles::{Datapath, Fabric, HostShim, Instance};
use crate::vocab::units::Nanos;
use crate::vocab::units::{Duration, Rate};

#[derive(Deserialize, Serialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct StaticRateTable {
    /// The fixed per-VM rate.
    pub rate: Option<Rate>,
    /// VMs limited (default all).
    pub vms: Option<Vec<String>>,
    /// "drop" (the papers' default) or "queue" packets that find no tokens.
    pub on_shortage: Option<String>,
    /// Bucket depth as time at the bucket's rate.
    pub burst: Option<Duration>,
}

const RATE: KeyDoc = KeyDoc {
    key: "rate",
    unit: "rate",
    default: "required",
    range: "> 0",
    doc: "The fixed rate of each VM limited.",
};

const VMS: KeyDoc = KeyDoc {
    key: "vms",
    unit: "names",
    default: "none",
    range: "",
    doc: "VMs limited; unset, all.",
};

/// The kind's own keys.
const KEYS: &[KeyDoc] = &[RATE, VMS, ON_SHORTAGE, BURST];

impl Mechanism for StaticRateTable {
    /// The buckets, the rate and the limited VMs' addresses (`None`: all).
    type Params = (BucketConfig, u64, Option<Vec<u32>>);

    fn keys() -> Vec<KeyDoc> {
        KEYS.to_vec()
    }

    fn resolve(&self, ck: &mut Checks, vm_address: &dyn Fn(&str) -> Option<u32>) -> Self::Params {
        let bucket = bucket_config(ck, &self.on_shortage, self.burst);
        let rate = match self.rate {
            None => {
                ck.problem("rate", "static-rate needs a rate such as \"500Mbps\"");
                0
            }
            Some(r) if r.0 == 0 => {
                ck.problem("rate", "must be greater than zero");
                0
            }
            Some(r) => r.0,
        };
        let targets = self.vms.as_ref().map(|names| {
            names
                .iter()
                .enumerate()
                .filter_map(|(i, n)| {
                    let ip = vm_address(n);
                    if ip.is_none() {
                        ck.problem(&format!("vms[{i}]"), format!("no host or VM named {n:?}"));
                    }
                    ip
                })
                .collect()
        });
        (bucket, rate, targets)
    }

    fn instantiate<P: PacketHeaders + ?Sized + 'static>(
        &self,
        (bucket, rate, targets): Self::Params,
        fabric: &dyn Fabric,
    ) -> Instance<P> {
        let vms = fabric.vms();
        let targets = targets.unwrap_or_else(|| vms.iter().map(|&(_, ip)| ip).collect());
        let host_of: std::collections::HashMap<u32, u32> =
            vms.iter().map(|&(h, ip)| (ip, h)).collect();
        let mut limiters: Vec<StaticRateLimiter> = (0..fabric.hosts())
            .map(|_| StaticRateLimiter::new(bucket))
            .collect();
        for ip in targets {
            limiters[host_of[&ip] as usize].set_rate(0, ip, rate);
        }
        let mut inst = Instance::none(fabric);
        inst.shims = limiters
            .into_iter()
            .map(|l| Some(Box::new(l) as Box<dyn HostShim<P>>))
            .collect();
        inst
    }
}

impl HostShimCore for StaticRateLimiter {
    fn datapath(&self) -> Datapath {
        Datapath {
            limiter: Some(*self.bucket_config()),
            ..Datapath::default()
        }
    }
    fn rates(&self, out: &mut dyn FnMut(u32, u32, u64)) {
        for (vm, key, bps) in self.rates() {
            out(vm, key, bps);
        }
    }
}

impl<P: PacketHeaders + ?Sized> HostShim<P> for StaticRateLimiter {
    fn on_egress(&mut self, now: Nanos, pkt: &mut P) -> EgressVerdict {
        StaticRateLimiter::on_egress(self, now, pkt.src(), pkt.ip_len() as u64)
    }
}
