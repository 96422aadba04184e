//! `kind = "sdn-gcc"` built for a fabric: one SDN-GCC shim per host, the controller app, and at
//! each ToR the table miss that tells the controller about a new (source, destination) pair.

use rustc_hash::FxHashSet;

use crate::limiters::keys::rate_shims;
use crate::mechanisms::sdn_gcc::{RateKeying, SdnGccConfig, SdnGccController, SdnGccShim};
use crate::vocab::control::{ControlMessage, HostMessage, PacketIn, StatsReply, StatsRequest};
use crate::vocab::headers::{FlowKey, PacketHeaders};
use crate::vocab::keys::Mechanism;
use crate::vocab::roles::SwitchHookCore;
use crate::vocab::roles::{ControllerApp, Fabric, Instance, PathOracle, SwitchHook};
use crate::vocab::units::Nanos;

impl Mechanism for SdnGccConfig {
    fn build<P: PacketHeaders + ?Sized + 'static>(&self, fabric: &dyn Fabric) -> Instance<P> {
        let per_path = self.keying == RateKeying::PerPath;
        let mut inst = Instance::none(fabric);
        inst.shims = rate_shims(
            fabric,
            &self.weights,
            |rate| SdnGccShim::new(self.clone(), rate),
            |s, ip, w| s.register_vm(0, ip, w),
        );
        // The controller knows the topology: which destinations each switch port reaches.
        let mut app = SdnGccController::new(self);
        let vms = fabric.vms();
        for s in 0..fabric.switches() {
            for (vm, &(_, ip)) in vms.iter().enumerate() {
                for &p in fabric.route_ports(s, vm as u32) {
                    app.register_route(s, p, ip);
                }
            }
        }
        inst.controller = Some(Box::new(SdnGccApp { app, per_path }));
        for switch in fabric.tors() {
            inst.switch_hooks[switch as usize] = Some(Box::new(FirstPacket {
                seen: FxHashSet::default(),
                per_path,
            }));
        }
        inst.control_latency = self.latency;
        inst
    }
}

/// Reactive forwarding at a ToR: the first packet of a new (source, destination) pair from a
/// host (of a new flow, when marks are attributed per path) misses the table and goes to the
/// controller.
struct FirstPacket {
    seen: FxHashSet<FlowKey>,
    per_path: bool,
}

impl SwitchHookCore for FirstPacket {}

impl<P: PacketHeaders + ?Sized> SwitchHook<P> for FirstPacket {
    fn on_arrival(&mut self, _now: Nanos, _in_port: u32, from_host: bool, pkt: &mut P) -> bool {
        if !from_host {
            return false;
        }
        let key = if self.per_path {
            FlowKey::of(pkt)
        } else {
            FlowKey {
                src: pkt.src(),
                dst: pkt.dst(),
                src_port: 0,
                dst_port: 0,
                protocol: 0,
            }
        };
        self.seen.insert(key)
    }
}

struct SdnGccApp {
    app: SdnGccController,
    per_path: bool,
}

impl ControllerApp for SdnGccApp {
    fn on_packet_in(
        &mut self,
        now: Nanos,
        pi: &PacketIn,
        paths: &dyn PathOracle,
        _out: &mut Vec<ControlMessage>,
    ) {
        let h = &pi.headers;
        self.app
            .on_packet_in(now, pi.switch, pi.in_port, h.src, h.dst);
        if self.per_path {
            let hops = paths.path(pi.switch, h);
            if !hops.is_empty() {
                self.app.register_path(h.src, h.flow_key().id(), &hops);
            }
        }
    }

    fn on_stats_reply(&mut self, now: Nanos, reply: &StatsReply, out: &mut Vec<ControlMessage>) {
        if let StatsReply::PortMarks {
            switch,
            port,
            marks,
        } = *reply
        {
            out.extend(
                self.app
                    .on_port_stats(now, switch, port, marks)
                    .into_iter()
                    .map(|n| ControlMessage::ToHost(HostMessage::Congestion(n))),
            );
        }
    }

    fn on_timer(&mut self, now: Nanos, out: &mut Vec<ControlMessage>) {
        out.extend(self.app.on_timer(now).into_iter().map(|r| {
            ControlMessage::StatsRequest(StatsRequest::PortMarks {
                switch: r.switch,
                port: r.port,
            })
        }));
    }

    fn poll_at(&self) -> Option<Nanos> {
        self.app.poll_at()
    }
}
