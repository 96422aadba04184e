//! `kind = "sicc"` built for a fabric: the SICC controller app, rules at every ToR (or every
//! switch, `copy_at`) that copy SYN and FIN to it, and the hypervisor module of every host;
//! or, with `mode = "switch"`, the authors' ns-2 module in every switch alone.

use crate::mechanisms::sicc::{
    SiccConfig, SiccController, SiccCopyAt, SiccHypervisor, SiccMode, SiccSwitch,
};
use crate::vocab::control::{
    ControlMessage, FlowMod, FlowModCommand, Forward, HostMessage, PacketIn, RuleActions,
    RuleMatch, StatsReply, StatsRequest,
};
use crate::vocab::headers::{ip_proto, tcp_flags, PacketHeaders};
use crate::vocab::keys::Mechanism;
use crate::vocab::roles::{ControllerApp, Fabric, Instance, PathOracle, SwitchHook};
use crate::vocab::units::Nanos;

/// Priority of the SYN/FIN copy rules: above any forwarding rule.
const COPY_RULE_PRIORITY: u16 = 1000;

impl Mechanism for SiccConfig {
    fn build<P: PacketHeaders + ?Sized + 'static>(&self, fabric: &dyn Fabric) -> Instance<P> {
        if self.mode == SiccMode::Switch {
            return switch_instance(*self, fabric);
        }
        let cfg = *self;
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
            *shim = Some(Box::new(SiccHypervisor::new(&cfg)));
        }
        let copying = match cfg.copy_at {
            SiccCopyAt::Tors => fabric.tors(),
            SiccCopyAt::All => (0..fabric.switches()).collect(),
        };
        for switch in copying {
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
        inst.control_latency = self.latency;
        inst
    }
}

/// SICC in every switch: no controller, no rules, no host shims.
fn switch_instance<P: PacketHeaders + ?Sized + 'static>(
    cfg: SiccConfig,
    fabric: &dyn Fabric,
) -> Instance<P> {
    let cfg = SiccConfig {
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
