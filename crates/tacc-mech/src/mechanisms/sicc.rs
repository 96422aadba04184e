//! `kind = "sicc"`: the SICC controller app, rules at every ToR that copy SYN and FIN to it,
//! and the hypervisor module of every host.

use serde::{Deserialize, Serialize};

use crate::control::{
    ControlMessage, FlowMod, FlowModCommand, Forward, HostMessage, PacketIn, RuleActions,
    RuleMatch, StatsReply, StatsRequest,
};
use crate::headers::{ip_proto, tcp_flags, PacketHeaders};
use crate::mechanisms::{Checks, Mechanism, MIN_POLL};
use crate::roles::{
    ControllerApp, Datapath, Fabric, HostShim, IngressVerdict, Instance, PathOracle, WindowClamp,
};
use crate::sicc::{SiccController, SiccControllerConfig, SiccHypervisor, SiccHypervisorConfig};
use crate::units::Duration;
use crate::Nanos;

#[derive(Deserialize, Serialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct SiccConfig {
    /// Queue sampling period T.
    pub interval: Option<Duration>,
    /// One-way latency of the out-of-band control channel.
    pub latency: Option<Duration>,
    pub off_fraction: Option<f64>,
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

impl Mechanism for SiccConfig {
    type Params = SiccControllerConfig;

    fn resolve(&self, ck: &mut Checks, _vm_address: &dyn Fn(&str) -> Option<u32>) -> Self::Params {
        let d = SiccControllerConfig::default();
        let cfg = SiccControllerConfig {
            monitor_interval: ck.period("interval", self.interval, d.monitor_interval, MIN_POLL),
            off_fraction: ck.fraction("off_fraction", self.off_fraction, d.off_fraction),
            on_fraction: self.on_fraction.unwrap_or(d.on_fraction),
            incast_duration: ck.positive(
                "incast_duration",
                self.incast_duration,
                d.incast_duration,
            ),
            initial_window_pkts: self.initial_window.unwrap_or(d.initial_window_pkts),
            buffer_pkts: d.buffer_pkts,
            evaluate_on_syn: self.evaluate_on_syn.unwrap_or(false),
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
        cfg
    }

    fn instantiate<P: PacketHeaders + ?Sized + 'static>(
        &self,
        cfg: Self::Params,
        fabric: &dyn Fabric,
    ) -> Instance<P> {
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
            for (mask, value) in [
                (tcp_flags::SYN | tcp_flags::ACK, tcp_flags::SYN),
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
        inst.control_latency = self.latency.map(|d| d.0).unwrap_or(0);
        inst
    }
}

impl<P: PacketHeaders + ?Sized> HostShim<P> for SiccHypervisor {
    fn on_ingress(&mut self, now: Nanos, pkt: &mut P) -> IngressVerdict {
        self.on_ack_to_vm(now, pkt);
        IngressVerdict::Deliver
    }
    fn datapath(&self) -> Datapath {
        Datapath {
            clamp_window: true,
            ..Datapath::default()
        }
    }
    fn window_clamps(&self, out: &mut dyn FnMut(WindowClamp)) {
        for c in self.clamps() {
            out(c);
        }
    }
    fn on_message(&mut self, now: Nanos, msg: &HostMessage) {
        if let HostMessage::Incast(m) = msg {
            SiccHypervisor::on_message(self, now, m);
        }
    }
    fn on_timer(&mut self, now: Nanos) {
        SiccHypervisor::on_timer(self, now)
    }
    fn poll_at(&self) -> Option<Nanos> {
        SiccHypervisor::poll_at(self)
    }
    fn counters(&self, out: &mut dyn FnMut(&'static str, f64)) {
        let k = SiccHypervisor::counters(self);
        out("incast_on_received", k.incast_on as f64);
        out("incast_off_received", k.incast_off as f64);
        out("rwnd_rewrites", k.rwnd_rewrites as f64);
    }
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
