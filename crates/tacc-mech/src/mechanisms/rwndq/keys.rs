//! `kind = "rwndq"`: the RWNDQ switch in every switch.

use serde::{Deserialize, Serialize};

use crate::mechanisms::rwndq::{Rwndq, RwndqConfig};
use crate::vocab::headers::PacketHeaders;
use crate::vocab::keys::{Checks, KeyDoc, Mechanism};
use crate::vocab::roles::{Fabric, Instance, SwitchHook};
use crate::vocab::units::Duration;

#[derive(Deserialize, Serialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct RwndqTable {
    /// Control-loop period.
    pub tick: Option<Duration>,
    pub target_fraction: Option<f64>,
    pub base_rtt: Option<Duration>,
}

const TICK: KeyDoc = KeyDoc {
    key: "tick",
    unit: "time",
    default: "200us",
    range: ">= 1us",
    doc: "Control-loop period. The prototype: 200 us.",
};

const TARGET_FRACTION: KeyDoc = KeyDoc {
    key: "target_fraction",
    unit: "fraction",
    default: "0.125",
    range: "0..1",
    doc: "Target queue as a fraction of the port's buffer. The prototype: 1/8.",
};

const BASE_RTT: KeyDoc = KeyDoc {
    key: "base_rtt",
    unit: "time",
    default: "100us",
    range: "> 0",
    doc: "Base RTT used for the port's BDP. The experiments: 100 us.",
};

/// The kind's own keys.
const KEYS: &[KeyDoc] = &[TICK, TARGET_FRACTION, BASE_RTT];

impl Mechanism for RwndqTable {
    /// The switch's parameters, but for the receivers' window (the fabric's).
    type Params = RwndqConfig;

    fn keys() -> Vec<KeyDoc> {
        KEYS.to_vec()
    }

    fn resolve(&self, ck: &mut Checks, _vm_address: &dyn Fn(&str) -> Option<u32>) -> Self::Params {
        let d = RwndqConfig::default();
        RwndqConfig {
            tick: ck.time(&TICK, self.tick),
            target_fraction: ck.fraction(&TARGET_FRACTION, self.target_fraction),
            base_rtt: ck.time(&BASE_RTT, self.base_rtt),
            ..d
        }
    }

    fn instantiate<P: PacketHeaders + ?Sized + 'static>(
        &self,
        params: Self::Params,
        fabric: &dyn Fabric,
    ) -> Instance<P> {
        // The receivers' window scale, as every endpoint derives it from the receive buffer.
        let (rcv_buf, shift) = fabric.receiver_window();
        let cfg = RwndqConfig {
            window_shift: shift,
            max_window_bytes: params
                .max_window_bytes
                .max(rcv_buf.min(u32::MAX as u64) as u32),
            ..params
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
