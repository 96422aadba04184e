//! `kind = "hygenicc"` built for a fabric: one HyGenICC shim per host; no controller.

use crate::limiters::keys::rate_shims;
use crate::mechanisms::hygenicc::{HygenConfig, HygenShim};
use crate::vocab::headers::PacketHeaders;
use crate::vocab::keys::Mechanism;
use crate::vocab::roles::{Fabric, Instance};

impl Mechanism for HygenConfig {
    fn build<P: PacketHeaders + ?Sized + 'static>(&self, fabric: &dyn Fabric) -> Instance<P> {
        let mut inst = Instance::none(fabric);
        inst.shims = rate_shims(
            fabric,
            &self.weights,
            |rate| HygenShim::new(self.clone(), rate),
            |s, ip, w| s.register_vm(0, ip, w),
        );
        inst
    }
}
