//! The control plane: packet-ins, the controller's messages on their channel (constant
//! latency), statistics replies read from the switches' counters, flow-mods, the app's timer.

use crate::packet::PktId;
use crate::rules::Rule;
use crate::topology::NodeRef;
use tacc_mech::control::{
    ControlMessage, FlowMod, FlowModCommand, PacketIn, PacketInHeaders, PortSample, StatsReply,
    StatsRequest,
};

use super::{EvKind, Sim};

impl Sim {
    /// Sends the controller (if there is one) the headers of packet `id`.
    pub(super) fn packet_in(
        &mut self,
        switch: u32,
        in_port: u32,
        out_port: Option<u32>,
        id: PktId,
    ) {
        if self.m.control.app.is_none() && !self.m.control.elsewhere {
            return;
        }
        let p = self.pkts.get(id);
        let headers = PacketInHeaders {
            src: p.src,
            dst: p.dst,
            protocol: p.protocol,
            src_port: p.sport,
            dst_port: p.dport,
            tcp_flags: p.flags,
            mss: p.mss(),
            wscale: p.wscale(),
        };
        self.ctrl_send(ControlMessage::PacketIn(PacketIn {
            switch,
            in_port,
            out_port,
            headers,
        }));
    }

    // ------------------------------------------------------------------ control plane

    /// Puts a message on the control channel. A message for a VM no host runs goes nowhere;
    /// one for another partition's switch, host or controller goes there as mail.
    pub(super) fn ctrl_send(&mut self, m: ControlMessage) {
        let mut host = None;
        if let ControlMessage::ToHost(h) = &m {
            host = self.m.host_of_ip(h.vm());
            if host.is_none() {
                return;
            }
        }
        if let (Some(split), Some(part)) = (self.split.as_deref_mut(), &self.m.part) {
            let to = match &m {
                ControlMessage::StatsRequest(r) => part.of_switch[r.switch() as usize],
                ControlMessage::FlowMod(f) => part.of_switch[f.switch as usize],
                ControlMessage::ToHost(_) => part.of_host[host.expect("returned above") as usize],
                // The controller runs in the first partition.
                ControlMessage::PacketIn(_) | ControlMessage::StatsReply(_) => 0,
            };
            if to != split.part {
                self.m.control.account(&m);
                let at = self.now + self.m.control.latency;
                let cargo = super::Cargo::Control(m);
                split.outbox[to as usize].push(super::Mail { at, cargo });
                return;
            }
        }
        let at = self.m.control.send(self.now, m);
        self.schedule(at, EvKind::CtrlDeliver);
    }

    pub(super) fn sync_ctrl_timer(&mut self) {
        let at = self.m.control.app.as_ref().and_then(|a| a.poll_at());
        if let Some(at) = at {
            if self.m.control.timer_at.is_none_or(|t| at < t) {
                self.m.control.timer_at = Some(at);
                let at = at.max(self.now);
                self.schedule(at, EvKind::CtrlTimer);
            }
        }
    }

    pub(super) fn ctrl_timer(&mut self) {
        let mut out = Vec::new();
        if let Some(app) = &mut self.m.control.app {
            app.on_timer(self.now, &mut out);
        }
        for m in out {
            self.ctrl_send(m);
        }
        self.sync_ctrl_timer();
    }

    pub(super) fn ctrl_deliver(&mut self) {
        let now = self.now;
        let Some((at, msg)) = self.m.control.inflight.pop_front() else {
            return;
        };
        debug_assert_eq!(at, now, "control messages are delivered in order");
        let mut out = Vec::new();
        match msg {
            // --- at a switch
            ControlMessage::StatsRequest(r) => {
                out.push(ControlMessage::StatsReply(self.stats_reply(r)))
            }
            ControlMessage::FlowMod(f) => self.flow_mod(f),
            // --- at a host's shim
            ControlMessage::ToHost(h) => {
                if let Some(host) = self.m.host_of_ip(h.vm()) {
                    if let Some(shim) = &mut self.m.shims[host as usize].shim {
                        shim.on_message(now, &h);
                    }
                    self.sync_shim_timer(host);
                }
            }
            // --- at the controller (taken out while it runs: it may ask the model for paths)
            ControlMessage::PacketIn(pi) => {
                if let Some(mut app) = self.m.control.app.take() {
                    app.on_packet_in(now, &pi, &self.m, &mut out);
                    self.m.control.app = Some(app);
                }
            }
            ControlMessage::StatsReply(r) => {
                if let Some(app) = &mut self.m.control.app {
                    app.on_stats_reply(now, &r, &mut out);
                }
            }
        }
        for m in out {
            self.ctrl_send(m);
        }
        self.sync_ctrl_timer();
    }

    /// A switch answers a statistics request with its counters as they are now (the ports
    /// it reads settled).
    pub(super) fn stats_reply(&mut self, r: StatsRequest) -> StatsReply {
        let now = self.now;
        let ports = &mut self.m.ports;
        match r {
            StatsRequest::PortMarks { switch, port } => StatsReply::PortMarks {
                switch,
                port,
                marks: ports[port as usize].stats.marked,
            },
            StatsRequest::QueueLength { switch, port } => {
                self.m.settle(port, now);
                StatsReply::QueueLength {
                    switch,
                    port,
                    pkts: self.m.ports[port as usize].backlog().0,
                }
            }
            StatsRequest::Switch { switch } => {
                let mut flows = Vec::new();
                if let Some(hook) = &self.m.switch_mech[switch as usize].hook {
                    hook.flow_stats(&mut flows);
                }
                StatsReply::Switch {
                    switch,
                    ports: ports
                        .iter_mut()
                        .enumerate()
                        .filter(|(_, p)| p.from == NodeRef::Switch(switch))
                        .map(|(i, p)| {
                            p.settle(now, |_| {});
                            PortSample {
                                switch,
                                port: i as u32,
                                tx_bytes: p.stats.tx_bytes,
                            }
                        })
                        .collect(),
                    flows,
                }
            }
        }
    }

    pub(super) fn flow_mod(&mut self, f: FlowMod) {
        let table = &mut self.m.tables[f.switch as usize];
        match f.command {
            FlowModCommand::Add => table.install(Rule {
                m: f.rule_match,
                priority: f.priority,
                actions: f.actions,
                expires_at: f.hard_timeout.map(|t| self.now + t),
                packets: 0,
                bytes: 0,
            }),
            FlowModCommand::Delete => {
                table.remove(&f.rule_match, f.priority);
            }
        }
    }
}
