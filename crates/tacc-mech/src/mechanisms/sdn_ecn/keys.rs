//! `kind = "sdn-ecn"`: the SDN-ECN controller app and per-flow byte counters in every switch
//! (what OpenFlow flow statistics give it).

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::mechanisms::sdn_ecn::{InstallMarkRule, SdnEcnConfig, SdnEcnController};
use crate::vocab::control::{
    ControlMessage, FlowMod, FlowModCommand, FlowSample, Forward, RuleActions, RuleMatch,
    StatsReply, StatsRequest,
};
use crate::vocab::headers::{FlowKey, PacketHeaders};
use crate::vocab::keys::{Checks, KeyDoc, Mechanism, CONTROL_LATENCY};
use crate::vocab::roles::SwitchHookCore;
use crate::vocab::roles::{ControllerApp, Fabric, Instance, SwitchHook};
use crate::vocab::units::Duration;
use crate::vocab::units::Nanos;

#[derive(Deserialize, Serialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct SdnEcnTable {
    /// Probe interval.
    pub interval: Option<Duration>,
    /// One-way latency of the out-of-band control channel.
    pub latency: Option<Duration>,
    pub threshold: Option<f64>,
    pub max_fraction: Option<f64>,
    pub rule_timeout: Option<Duration>,
}

const INTERVAL: KeyDoc = KeyDoc {
    key: "interval",
    unit: "time",
    default: "2s",
    range: ">= 10us",
    doc: "The controller's probe interval. The paper: 2 s.",
};

const THRESHOLD: KeyDoc = KeyDoc {
    key: "threshold",
    unit: "fraction",
    default: "0.75",
    range: "0..1",
    doc: "Utilization above which a link is congested. The paper: 0.75.",
};

const MAX_FRACTION: KeyDoc = KeyDoc {
    key: "max_fraction",
    unit: "fraction",
    default: "0.5",
    range: "0..1",
    doc: "The fraction T of a congested link's flows selected for marking at 100% \
         utilization. The paper: 0.5.",
};

const RULE_TIMEOUT: KeyDoc = KeyDoc {
    key: "rule_timeout",
    unit: "time",
    default: "1s",
    range: "> 0",
    doc: "How long a marking rule lives. The paper says short; half a probe interval, so a \
         flow stops being marked unless the next probe selects it again.",
};

/// The kind's own keys.
const KEYS: &[KeyDoc] = &[
    INTERVAL,
    CONTROL_LATENCY,
    THRESHOLD,
    MAX_FRACTION,
    RULE_TIMEOUT,
];

impl Mechanism for SdnEcnTable {
    type Params = SdnEcnConfig;

    fn keys() -> Vec<KeyDoc> {
        KEYS.to_vec()
    }

    fn resolve(&self, ck: &mut Checks, _vm_address: &dyn Fn(&str) -> Option<u32>) -> Self::Params {
        let d = SdnEcnConfig::default();
        SdnEcnConfig {
            probe_interval: ck.time(&INTERVAL, self.interval),
            congestion_threshold: ck.fraction(&THRESHOLD, self.threshold),
            max_marked_fraction: ck.fraction(&MAX_FRACTION, self.max_fraction),
            rule_priority: d.rule_priority,
            rule_hard_timeout: ck.time(&RULE_TIMEOUT, self.rule_timeout),
        }
    }

    fn instantiate<P: PacketHeaders + ?Sized + 'static>(
        &self,
        params: Self::Params,
        fabric: &dyn Fabric,
    ) -> Instance<P> {
        let mut app = SdnEcnController::new(params);
        for p in fabric.switch_ports() {
            app.add_link(0, p.switch, p.port, p.rate_bps);
        }
        let mut inst = Instance::none(fabric);
        inst.controller = Some(Box::new(app));
        for (switch, hook) in inst.switch_hooks.iter_mut().enumerate() {
            *hook = Some(Box::new(FlowBytes {
                switch: switch as u32,
                bytes: FxHashMap::default(),
            }));
        }
        inst.control_latency = self
            .latency
            .map_or_else(|| CONTROL_LATENCY.default_time(), |d| d.0);
        inst
    }
}

/// Bytes per (output port, flow) of one switch.
struct FlowBytes {
    switch: u32,
    bytes: FxHashMap<(u32, FlowKey), u64>,
}

impl SwitchHookCore for FlowBytes {
    fn flow_stats(&self, out: &mut Vec<FlowSample>) {
        let start = out.len();
        out.extend(self.bytes.iter().map(|(&(port, key), &bytes)| FlowSample {
            switch: self.switch,
            port,
            key,
            bytes,
        }));
        out[start..].sort_by_key(|f| (f.port, f.key));
    }
}

impl<P: PacketHeaders + ?Sized> SwitchHook<P> for FlowBytes {
    fn on_forward(&mut self, _now: Nanos, port: u32, pkt: &P) {
        *self.bytes.entry((port, FlowKey::of(pkt))).or_default() += pkt.ip_len() as u64;
    }
}

/// A rule that CE-marks the selected flow and forwards it where it was going.
fn mark_rule(r: &InstallMarkRule) -> FlowMod {
    let k = r.key;
    FlowMod {
        switch: r.switch,
        command: FlowModCommand::Add,
        rule_match: RuleMatch {
            src: Some(k.src),
            dst: Some(k.dst),
            protocol: Some(k.protocol),
            sport: Some(k.src_port),
            dport: Some(k.dst_port),
            flags_mask: 0,
            flags_value: 0,
        },
        priority: r.priority,
        actions: RuleActions {
            forward: Forward::Port(r.out_port),
            set_ce: true,
            copy_to_controller: false,
        },
        hard_timeout: Some(r.hard_timeout),
    }
}

impl ControllerApp for SdnEcnController {
    fn on_stats_reply(&mut self, now: Nanos, reply: &StatsReply, out: &mut Vec<ControlMessage>) {
        if let StatsReply::Switch { ports, flows, .. } = reply {
            out.extend(
                self.on_probe(now, ports, flows)
                    .iter()
                    .map(|r| ControlMessage::FlowMod(mark_rule(r))),
            );
        }
    }

    fn on_timer(&mut self, now: Nanos, out: &mut Vec<ControlMessage>) {
        out.extend(
            SdnEcnController::on_timer(self, now)
                .into_iter()
                .map(|r| ControlMessage::StatsRequest(StatsRequest::Switch { switch: r.switch })),
        );
    }

    fn poll_at(&self) -> Option<Nanos> {
        SdnEcnController::poll_at(self)
    }
}
