//! `kind = "sicc"`: the SICC controller app, rules at every ToR that copy SYN and FIN to it,
//! and the hypervisor module of every host; or, with `mode = "switch"`, the authors' ns-2
//! module in every switch alone.

use serde::{Deserialize, Serialize};

use crate::mechanisms::sicc::{
    SiccController, SiccControllerConfig, SiccHypervisor, SiccHypervisorConfig, SiccSwitch,
    SiccSwitchConfig,
};
use crate::vocab::control::{
    ControlMessage, FlowMod, FlowModCommand, Forward, HostMessage, PacketIn, RuleActions,
    RuleMatch, StatsReply, StatsRequest,
};
use crate::vocab::headers::{ip_proto, tcp_flags, PacketHeaders};
use crate::vocab::keys::{Checks, KeyDoc, Mechanism, CONTROL_LATENCY};
use crate::vocab::roles::{ControllerApp, Fabric, Instance, PathOracle, SwitchHook};
use crate::vocab::units::Duration;
use crate::vocab::units::Nanos;

#[derive(Deserialize, Serialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct SiccTable {
    /// "controller" (the paper's design, default) or "switch" (the authors' ns-2 module:
    /// each switch port reacts to its own queue and rewrites the ACKs itself).
    pub mode: Option<String>,
    /// Queue sampling period T.
    pub interval: Option<Duration>,
    /// One-way latency of the out-of-band control channel.
    pub latency: Option<Duration>,
    /// Incast OFF at this fraction of the buffer (default 0.2 in both modes).
    pub off_fraction: Option<f64>,
    /// Incast ON at this fraction of the buffer (controller: 1.0, switch: 0.95).
    pub on_fraction: Option<f64>,
    /// DM: shortest incast episode.
    pub incast_duration: Option<Duration>,
    /// IW in packets as the controller assumes it.
    pub initial_window: Option<f64>,
    /// Also test the incast-ON condition on every SYN copy, not only every interval.
    pub evaluate_on_syn: Option<bool>,
}

/// Priority of the SYN/FIN copy rules: above any forwarding rule.
const COPY_RULE_PRIORITY: u16 = 1000;

/// What a `sicc` table resolves to: the state machines of its mode.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SiccParams {
    Controller(SiccControllerConfig),
    /// The receivers' window scale is the fabric's, set when built.
    Switch(SiccSwitchConfig),
}

impl SiccTable {
    fn resolve_switch(&self, ck: &mut Checks) -> SiccSwitchConfig {
        for (key, given) in [
            ("interval", self.interval.is_some()),
            ("latency", self.latency.is_some()),
            ("incast_duration", self.incast_duration.is_some()),
            ("initial_window", self.initial_window.is_some()),
            ("evaluate_on_syn", self.evaluate_on_syn.is_some()),
        ] {
            if given {
                ck.problem(
                    key,
                    "applies to mode = \"controller\" only: in mode = \"switch\" each port \
                     reacts to its own queue (keys: on_fraction, off_fraction)",
                );
            }
        }
        // Switch mode's own default (the authors' module); the controller's is 1.
        let d = SiccSwitchConfig::default();
        let on_fraction = ck.fraction_or(ON_FRACTION.key, self.on_fraction, d.on_fraction);
        let off_fraction = ck.fraction(&OFF_FRACTION, self.off_fraction);
        let fraction = |x: f64| (0.0..=1.0).contains(&x);
        if fraction(on_fraction) && fraction(off_fraction) && off_fraction >= on_fraction {
            ck.problem(
                "off_fraction",
                format!(
                    "expected below on_fraction ({on_fraction}), got {off_fraction}: every \
                     departure would end the incast its arrival began"
                ),
            );
        }
        SiccSwitchConfig {
            on_fraction,
            off_fraction,
            ..d
        }
    }
}

const MODE: KeyDoc = KeyDoc {
    key: "mode",
    unit: "string",
    default: "\"controller\"",
    range: "\"controller\" or \"switch\"",
    doc: "controller: the paper's design; switch: the authors' ns-2 module, each switch port \
         reacting to its own queue and rewriting the ACKs itself (keys on_fraction and \
         off_fraction only).",
};

const INTERVAL: KeyDoc = KeyDoc {
    key: "interval",
    unit: "time",
    default: "1ms",
    range: ">= 10us",
    doc: "T: the controller's queue sampling period. The paper: 1 ms (10 RTTs).",
};

const OFF_FRACTION: KeyDoc = KeyDoc {
    key: "off_fraction",
    unit: "fraction",
    default: "0.2",
    range: "0..1 (switch mode: below on_fraction)",
    doc: "alpha1: incast OFF once the queue is at most this fraction of the buffer. The \
         paper and the module: 20%.",
};

const ON_FRACTION: KeyDoc = KeyDoc {
    key: "on_fraction",
    unit: "number",
    default: "1 (switch mode: 0.95)",
    range: "> 0 (switch mode: 0..1, above off_fraction)",
    doc: "alpha2: incast ON once beta x IW + Q reaches this fraction of the buffer. The \
         paper: 100%; the switch module: 0.95 of the queue.",
};

const INCAST_DURATION: KeyDoc = KeyDoc {
    key: "incast_duration",
    unit: "time",
    default: "3ms",
    range: "> 0",
    doc: "DM: the shortest incast episode (a typical mice duration). The paper gives no \
         number; the prototype's 30 RTTs.",
};

const INITIAL_WINDOW: KeyDoc = KeyDoc {
    key: "initial_window",
    unit: "number",
    default: "1",
    range: ">= 0",
    doc: "IW in packets: the initial window the controller assumes a new connection sends at \
         once. The simulations: 1 MSS (10 is typical of Linux).",
};

const EVALUATE_ON_SYN: KeyDoc = KeyDoc {
    key: "evaluate_on_syn",
    unit: "bool",
    default: "false",
    range: "",
    doc: "Also test the incast-ON condition on every SYN copy, not only every T (Algorithm \
         1), as the authors' in-switch module does.",
};

/// The kind's own keys.
const KEYS: &[KeyDoc] = &[
    MODE,
    INTERVAL,
    CONTROL_LATENCY,
    OFF_FRACTION,
    ON_FRACTION,
    INCAST_DURATION,
    INITIAL_WINDOW,
    EVALUATE_ON_SYN,
];

impl Mechanism for SiccTable {
    type Params = SiccParams;

    fn keys() -> Vec<KeyDoc> {
        KEYS.to_vec()
    }

    fn resolve(&self, ck: &mut Checks, _vm_address: &dyn Fn(&str) -> Option<u32>) -> Self::Params {
        if ck.choice(&MODE, &self.mode) == 1 {
            return SiccParams::Switch(self.resolve_switch(ck));
        }
        let d = SiccControllerConfig::default();
        let cfg = SiccControllerConfig {
            monitor_interval: ck.time(&INTERVAL, self.interval),
            off_fraction: ck.fraction(&OFF_FRACTION, self.off_fraction),
            on_fraction: self.on_fraction.unwrap_or(d.on_fraction), // mode-dependent default
            incast_duration: ck.time(&INCAST_DURATION, self.incast_duration),
            initial_window_pkts: self
                .initial_window
                .unwrap_or_else(|| INITIAL_WINDOW.default_number()),
            buffer_pkts: d.buffer_pkts,
            evaluate_on_syn: ck.flag(&EVALUATE_ON_SYN, self.evaluate_on_syn),
        };
        if !(cfg.on_fraction > 0.0 && cfg.on_fraction.is_finite()) {
            ck.problem(
                "on_fraction",
                format!("expected a positive number, got {}", cfg.on_fraction),
            );
        }
        if !(cfg.initial_window_pkts >= 0.0 && cfg.initial_window_pkts.is_finite()) {
            ck.problem(
                "initial_window",
                format!(
                    "expected a non-negative number of packets, got {}",
                    cfg.initial_window_pkts
                ),
            );
        }
        SiccParams::Controller(cfg)
    }

    fn instantiate<P: PacketHeaders + ?Sized + 'static>(
        &self,
        params: Self::Params,
        fabric: &dyn Fabric,
    ) -> Instance<P> {
        let cfg = match params {
            SiccParams::Controller(cfg) => cfg,
            SiccParams::Switch(cfg) => return switch_instance(cfg, fabric),
        };
        let ports = fabric.switch_ports();
        let mut app = SiccController::new(cfg);
        for p in &ports {
            app.set_port_buffer(
                p.switch,
                p.port,
                p.buffer_pkts().min(u32::MAX as u64) as u32,
            );
        }
        let mut inst = Instance::none(fabric);
        inst.controller = Some(Box::new(app));
        for shim in inst.shims.iter_mut() {
            *shim = Some(Box::new(SiccHypervisor::new(SiccHypervisorConfig {
                flag_lifetime: cfg.incast_duration,
            })));
        }
        for switch in fabric.tors() {
            // SYNs and SYN-ACKs (the responder's window scale), and FINs.
            for (mask, value) in [
                (tcp_flags::SYN, tcp_flags::SYN),
                (tcp_flags::FIN, tcp_flags::FIN),
            ] {
                inst.initial_rules.push(FlowMod {
                    switch,
                    command: FlowModCommand::Add,
                    rule_match: RuleMatch {
                        protocol: Some(ip_proto::TCP),
                        flags_mask: mask,
                        flags_value: value,
                        ..RuleMatch::default()
                    },
                    priority: COPY_RULE_PRIORITY,
                    actions: RuleActions {
                        forward: Forward::Normal,
                        set_ce: false,
                        copy_to_controller: true,
                    },
                    hard_timeout: None,
                });
            }
        }
        inst.control_latency = self
            .latency
            .map_or_else(|| CONTROL_LATENCY.default_time(), |d| d.0);
        inst
    }
}

/// SICC in every switch: no controller, no rules, no host shims.
fn switch_instance<P: PacketHeaders + ?Sized + 'static>(
    cfg: SiccSwitchConfig,
    fabric: &dyn Fabric,
) -> Instance<P> {
    let cfg = SiccSwitchConfig {
        window_shift: fabric.receiver_window().1,
        ..cfg
    };
    let mut switches: Vec<SiccSwitch> = (0..fabric.switches())
        .map(|_| SiccSwitch::new(cfg))
        .collect();
    for p in fabric.switch_ports() {
        switches[p.switch as usize].add_port(p.port, p.buffer_bytes());
    }
    let mut inst = Instance::none(fabric);
    inst.switch_hooks = switches
        .into_iter()
        .map(|s| Some(Box::new(s) as Box<dyn SwitchHook<P>>))
        .collect();
    inst
}

impl ControllerApp for SiccController {
    fn on_packet_in(
        &mut self,
        now: Nanos,
        pi: &PacketIn,
        _paths: &dyn PathOracle,
        out: &mut Vec<ControlMessage>,
    ) {
        // Only the copy rules send packet-ins here, and they say where the packet goes.
        let (Some(port), h) = (pi.out_port, &pi.headers) else {
            return;
        };
        if h.tcp_flags & tcp_flags::SYN != 0 && h.tcp_flags & tcp_flags::ACK == 0 {
            let msgs = self.on_syn(
                now,
                pi.switch,
                port,
                h.src,
                h.dst,
                h.mss.unwrap_or(1460),
                h.wscale.unwrap_or(0),
            );
            out.extend(
                msgs.into_iter()
                    .map(|m| ControlMessage::ToHost(HostMessage::Incast(m))),
            );
        } else if h.tcp_flags & tcp_flags::SYN != 0 {
            let msgs = self.on_syn_ack(h.dst, h.src, h.wscale.unwrap_or(0));
            out.extend(
                msgs.into_iter()
                    .map(|m| ControlMessage::ToHost(HostMessage::Incast(m))),
            );
        } else if h.tcp_flags & tcp_flags::FIN != 0 {
            self.on_fin(now, pi.switch, port, h.src, h.dst);
        }
    }

    fn on_stats_reply(&mut self, now: Nanos, reply: &StatsReply, out: &mut Vec<ControlMessage>) {
        if let StatsReply::QueueLength { switch, port, pkts } = *reply {
            let msgs = self.on_queue_sample(now, switch, port, pkts);
            out.extend(
                msgs.into_iter()
                    .map(|m| ControlMessage::ToHost(HostMessage::Incast(m))),
            );
        }
    }

    fn on_timer(&mut self, now: Nanos, out: &mut Vec<ControlMessage>) {
        out.extend(SiccController::on_timer(self, now).into_iter().map(|r| {
            ControlMessage::StatsRequest(StatsRequest::QueueLength {
                switch: r.switch,
                port: r.port,
            })
        }));
    }

    fn poll_at(&self) -> Option<Nanos> {
        SiccController::poll_at(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(json: &str) -> (SiccParams, Vec<String>) {
        let c: SiccTable = serde_json::from_str(json).unwrap();
        let mut ck = Checks::default();
        let params = c.resolve(&mut ck, &|_| None);
        (params, ck.problems.into_iter().map(|p| p.key).collect())
    }

    #[test]
    fn the_paper_s_controller_is_the_default_mode_and_the_switch_takes_the_module_s_thresholds() {
        assert_eq!(
            resolve("{}").0,
            SiccParams::Controller(SiccControllerConfig::default())
        );
        assert_eq!(
            resolve(r#"{"mode": "switch"}"#),
            (SiccParams::Switch(SiccSwitchConfig::default()), vec![])
        );
        let (params, problems) = resolve(r#"{"mode": "switch", "on_fraction": 0.8}"#);
        assert!(problems.is_empty());
        assert!(matches!(params, SiccParams::Switch(c) if c.on_fraction == 0.8));
    }

    #[test]
    fn the_switch_refuses_controller_keys_and_an_off_threshold_not_below_on() {
        let (_, problems) = resolve(
            r#"{"mode": "switch", "interval": "1ms", "evaluate_on_syn": true,
                "on_fraction": 0.5, "off_fraction": 0.5}"#,
        );
        assert_eq!(
            problems,
            [
                "mechanism.interval",
                "mechanism.evaluate_on_syn",
                "mechanism.off_fraction"
            ]
        );
        let (_, problems) = resolve(r#"{"mode": "router"}"#);
        assert_eq!(problems, ["mechanism.mode"]);
    }
}
