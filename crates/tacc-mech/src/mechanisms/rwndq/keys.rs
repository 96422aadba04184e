//! `kind = "rwndq"`: the RWNDQ switch in every switch.

use serde::{Deserialize, Serialize};

use crate::mechanisms::rwndq::{Rwndq, RwndqConfig as RwndqParams};
use crate::vocab::headers::PacketHeaders;
use crate::vocab::keys::{Checks, KeyDoc, Mechanism};
use crate::vocab::roles::{Fabric, Instance, SwitchHook};
use crate::vocab::units::Duration;
use crate::vocab::units::Nanos;

#[derive(Deserialize, Serialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct RwndqConfig {
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

impl Mechanism for RwndqConfig {
    /// The switch's parameters, but for the receivers' window (the fabric's).
    type Params = RwndqParams;

    fn keys() -> Vec<KeyDoc> {
        KEYS.to_vec()
    }

    fn resolve(&self, ck: &mut Checks, _vm_address: &dyn Fn(&str) -> Option<u32>) -> Self::Params {
        let d = RwndqParams::default();
        RwndqParams {
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
        let cfg = RwndqParams {
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

impl<P: PacketHeaders + ?Sized> SwitchHook<P> for Rwndq {
    fn on_arrival(&mut self, _now: Nanos, _in_port: u32, _from_host: bool, pkt: &mut P) -> bool {
        self.on_ack(pkt);
        false
    }
    fn on_forward(&mut self, now: Nanos, port: u32, pkt: &P) {
        self.on_enqueue(now, port, pkt);
    }
    fn on_timer(&mut self, now: Nanos, queue_bytes: &dyn Fn(u32) -> u64) {
        Rwndq::on_timer(self, now, queue_bytes)
    }
    fn poll_at(&self) -> Option<Nanos> {
        Rwndq::poll_at(self)
    }
    fn port_windows(&self, out: &mut dyn FnMut(u32, u16)) {
        for (port, field) in self.window_fields() {
            out(port, field);
        }
    }
    fn counters(&self, out: &mut dyn FnMut(&'static str, f64)) {
        out("rwnd_rewrites", self.counters().rwnd_rewrites as f64);
        out(
            "rwndq_overflow_resets",
            self.counters().overflow_resets as f64,
        );
    }
}
