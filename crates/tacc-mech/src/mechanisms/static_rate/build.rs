//! `kind = "static-rate"` built for a fabric: a static rate limiter per host.

use crate::limiters::rate_alloc::StaticRateLimiter;
use crate::mechanisms::static_rate::StaticRateConfig;
use crate::vocab::headers::PacketHeaders;
use crate::vocab::keys::Mechanism;
use crate::vocab::roles::{Fabric, HostShim, Instance};

impl Mechanism for StaticRateConfig {
    fn build<P: PacketHeaders + ?Sized + 'static>(&self, fabric: &dyn Fabric) -> Instance<P> {
        let vms = fabric.vms();
        let targets: Vec<u32> = match &self.vms {
            Some(names) => names.iter().filter_map(|n| fabric.vm_address(n)).collect(),
            None => vms.iter().map(|&(_, ip)| ip).collect(),
        };
        let (bucket, rate) = (self.bucket(), self.rate.map_or(0, |r| r.0));
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
