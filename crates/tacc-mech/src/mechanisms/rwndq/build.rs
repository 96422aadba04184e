//! `kind = "rwndq"` built for a fabric: the RWNDQ switch in every switch.

use crate::mechanisms::rwndq::{Rwndq, RwndqConfig};
use crate::vocab::headers::PacketHeaders;
use crate::vocab::keys::Mechanism;
use crate::vocab::roles::{Fabric, Instance, SwitchHook};

impl Mechanism for RwndqConfig {
    fn build<P: PacketHeaders + ?Sized + 'static>(&self, fabric: &dyn Fabric) -> Instance<P> {
        // The receivers' window scale, as every endpoint derives it from the receive buffer.
        let (rcv_buf, shift) = fabric.receiver_window();
        let cfg = RwndqConfig {
            window_shift: shift,
            max_window_bytes: self
                .max_window_bytes
                .max(rcv_buf.min(u32::MAX as u64) as u32),
            ..*self
        };
        let mut switches: Vec<Rwndq> = (0..fabric.switches()).map(|_| Rwndq::new(cfg)).collect();
        for p in fabric.switch_ports() {
            switches[p.switch as usize].add_port(0, p.port, p.rate_bps, p.buffer_bytes());
        }
        let mut inst = Instance::none(fabric);
        inst.switch_hooks = switches
            .into_iter()
            .map(|r| Some(Box::new(r) as Box<dyn SwitchHook<P>>))
            .collect();
        inst
    }
}
