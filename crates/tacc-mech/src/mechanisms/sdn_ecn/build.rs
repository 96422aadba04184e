//! `kind = "sdn-ecn"` built for a fabric: the SDN-ECN controller app and per-flow byte
//! counters in every switch (what OpenFlow flow statistics give it).

use rustc_hash::FxHashMap;

use crate::mechanisms::sdn_ecn::{InstallMarkRule, SdnEcnConfig, SdnEcnController};
use crate::vocab::control::{
    ControlMessage, FlowMod, FlowModCommand, FlowSample, Forward, RuleActions, RuleMatch,
    StatsReply, StatsRequest,
};
use crate::vocab::headers::{FlowKey, PacketHeaders};
use crate::vocab::keys::Mechanism;
use crate::vocab::roles::SwitchHookCore;
use crate::vocab::roles::{ControllerApp, Fabric, Instance, SwitchHook};
use crate::vocab::units::Nanos;

impl Mechanism for SdnEcnConfig {
    fn build<P: PacketHeaders + ?Sized + 'static>(&self, fabric: &dyn Fabric) -> Instance<P> {
        let mut app = SdnEcnController::new(*self);
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
        inst.control_latency = self.latency;
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
