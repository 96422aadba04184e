//! A controller process's view of a mechanism: the [`ControllerApp`] built from a plan, and the
//! switch hooks that decide which packets become packet-ins. A real controller (the testbed's
//! OpenFlow app) sees the first packet of every new flow at every switch (a table miss) and
//! gets packet copies from the copy rules; this is where those become the mechanism's inputs,
//! exactly as the simulator feeds them, and where its outputs come back as [`ControlMessage`]s
//! for the driver to turn into OpenFlow messages and host notifications.

use crate::plan::{Node, Plan};
use crate::vocab::control::{ControlMessage, FlowMod, PacketIn, StatsReply};
use crate::vocab::roles::{ControllerApp, Instance, PathOracle, SwitchHook};
use crate::vocab::units::Nanos;
use crate::vocab::wire::{Ipv4Packet, WireError};

type Packet = Ipv4Packet<Vec<u8>>;

/// A plan's routes followed hop by hop, each switch choosing among equal ports by its ECMP
/// hash ([`Plan::route_port`]): the testbed's controller installs that very choice.
impl PathOracle for Plan {
    fn path(&self, mut switch: u32, h: &crate::vocab::control::PacketInHeaders) -> Vec<(u32, u32)> {
        let mut hops = Vec::new();
        while let Some(port) =
            self.route_port(switch, h.src, h.dst, h.protocol, h.src_port, h.dst_port)
        {
            hops.push((switch, port));
            match self.ports[port as usize].to {
                Node::Switch(next) if hops.len() <= self.switches.len() => switch = next,
                _ => break,
            }
        }
        hops
    }
}

/// The controller side of a mechanism built for a plan.
pub struct Controller {
    plan: Plan,
    app: Option<Box<dyn ControllerApp>>,
    hooks: Vec<Option<Box<dyn SwitchHook<Packet>>>>,
    initial_rules: Vec<FlowMod>,
    latency: Nanos,
}

impl Controller {
    pub fn new(plan: Plan) -> Controller {
        let inst: Instance<Packet> = match &plan.mechanism {
            Some(m) => m.build(&plan),
            None => Instance::none(&plan),
        };
        Controller {
            app: inst.controller,
            hooks: inst.switch_hooks,
            initial_rules: inst.initial_rules,
            latency: inst.control_latency,
            plan,
        }
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// True if the mechanism has a controller app at all.
    pub fn has_app(&self) -> bool {
        self.app.is_some()
    }

    /// True if the mechanism has a hook in `switch`: the driver must then show it the first
    /// packet of every flow there.
    pub fn has_hook(&self, switch: u32) -> bool {
        self.hooks.get(switch as usize).is_some_and(|h| h.is_some())
    }

    /// Rules every switch gets when it connects, before any traffic.
    pub fn initial_rules(&self) -> &[FlowMod] {
        &self.initial_rules
    }

    /// The control channel's one-way latency the scenario asks for.
    pub fn latency(&self) -> Nanos {
        self.latency
    }

    /// A packet that reached the controller from `switch`: a table miss (`out_port` None; the
    /// switch's mechanism hook decides whether the app hears of it, as it does in the
    /// simulator) or a copy rule's copy (`out_port` the port the switch forwards it to).
    /// `ip` is the packet from its IPv4 header on; a copy's may stop after its headers.
    pub fn packet_in(
        &mut self,
        now: Nanos,
        switch: u32,
        in_port: u32,
        out_port: Option<u32>,
        ip: Vec<u8>,
    ) -> Result<Vec<ControlMessage>, WireError> {
        let mut pkt = match out_port {
            Some(_) => Ipv4Packet::new_copy(ip)?,
            None => Ipv4Packet::new_checked(ip)?,
        };
        let mut out = Vec::new();
        if out_port.is_none() {
            let from_host = self
                .plan
                .ports
                .get(in_port as usize)
                .is_some_and(|p| matches!(p.from, Node::Host(_)));
            let hook = self.hooks.get_mut(switch as usize).and_then(|h| h.as_mut());
            if !hook.is_some_and(|h| h.on_arrival(now, in_port, from_host, &mut pkt)) {
                return Ok(out);
            }
        }
        let pi = PacketIn {
            switch,
            in_port,
            out_port,
            headers: pkt.packet_in_headers(),
        };
        if let Some(app) = &mut self.app {
            app.on_packet_in(now, &pi, &self.plan, &mut out);
        }
        Ok(out)
    }

    pub fn stats_reply(&mut self, now: Nanos, reply: &StatsReply) -> Vec<ControlMessage> {
        let mut out = Vec::new();
        if let Some(app) = &mut self.app {
            app.on_stats_reply(now, reply, &mut out);
        }
        out
    }

    pub fn timer(&mut self, now: Nanos) -> Vec<ControlMessage> {
        let mut out = Vec::new();
        if let Some(app) = &mut self.app {
            app.on_timer(now, &mut out);
        }
        out
    }

    pub fn poll_at(&self) -> Option<Nanos> {
        self.app.as_ref().and_then(|a| a.poll_at())
    }
}
