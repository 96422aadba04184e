//! `kind = "static-rate"`: the static per-VM rate-limit baseline, [`StaticRateLimiter`] in the
//! host role.

mod build;
pub mod config;

pub use config::StaticRateConfig;

use crate::limiters::rate_alloc::StaticRateLimiter;
use crate::vocab::headers::PacketHeaders;
use crate::vocab::roles::{Datapath, EgressVerdict, HostShim, HostShimCore};
use crate::vocab::units::Nanos;

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
