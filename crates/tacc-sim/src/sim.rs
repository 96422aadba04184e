//! The engine: one event queue keyed by (time, insertion sequence), integer nanoseconds,
//! one seeded RNG. Nodes are hosts (VMs behind a virtual switch on one NIC) and switches;
//! every link direction is a port with an output queue.
//!
//! Packet path: VM stack -> vswitch egress hook (shim) -> NIC queue -> link -> switch queues
//! -> ... -> NIC -> vswitch ingress hook (shim) -> VM stack.

use crate::event_queue::EventQueue;
use crate::model::{jittered, App, EpKind, Model, Port, VnicInNic, Waiting, NO_TIMER};
use crate::output::Recorded;
use crate::packet::{Arena, Packet, PktId, FEEDBACK_PACKET, NO_EP};
use crate::prefetch;
use crate::queue::Verdict;
use crate::rules::{Forward, Rule};
use crate::scenario::Forge;
use crate::topology::NodeRef;
use crate::units::ser_ns;
use tacc_mech::control::{
    ControlMessage, FlowMod, FlowModCommand, PacketIn, PacketInHeaders, PortSample, StatsReply,
    StatsRequest,
};
use tacc_mech::headers::{ip_proto, Ecn};
use tacc_mech::roles::EgressVerdict;
use tacc_mech::roles::IngressVerdict;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvKind {
    /// A port that departs by event finished serializing a packet: its next waiting one
    /// starts.
    TxDone(u32),
    /// A packet reaches the far end of a port's link.
    Arrive(u32, PktId),
    /// A packet reaches a switch that forwards by its routing table alone
    /// (`Port::plain_far_end`), and goes into the output port it was routed to as it left
    /// the port before: the event names the port it reads first, so the loop can ask the
    /// cache for it two events ahead, without first loading the packet and the route.
    Forward(u32, PktId),
    EpTimer(u32),
    FlowStart(u32),
    FlowStop(u32),
    UdpSend(u32),
    IncastEpoch(u32),
    TrafficArrival(u32),
    InstallRule(u32),
    ShimTimer(u32),
    SwitchTimer(u32),
    CtrlTimer,
    CtrlDeliver,
    /// A VM's vNIC finished serializing its head packet (or a held head is offered again).
    VnicDone(u32),
    Sample,
    /// A packet of a flow's receiving end with a `return_delay` reaches the sender.
    Return(PktId),
}

/// An `EvKind` packed in one word: the kind in the top 4 bits, an arrival's port in the 28
/// below (a forward's with `FORWARD` set) and its packet in the low 32, any other kind's
/// index in the low 32. The event queue's entries are then two words, built and moved in
/// registers: an enum of three 4-byte fields was written to the stack piece by piece and read
/// back whole, a store that cannot be forwarded to the load, at every push: half the samples
/// of `schedule`, itself a sixth of the 288-server SICC tree's time. Packed, that tree runs in
/// 0.96 of the time.
#[derive(Clone, Copy, Default)]
struct Ev(u64);

/// Ports an arrival can name (`Ev`): far beyond any fabric that fits in memory.
const MAX_PORTS: usize = 1 << 27;
/// Marks a forward among the arrivals (`Ev`).
const FORWARD: u32 = MAX_PORTS as u32;

impl From<EvKind> for Ev {
    #[inline(always)]
    fn from(kind: EvKind) -> Ev {
        let (tag, a, b): (u64, u32, u32) = match kind {
            EvKind::TxDone(p) => (0, 0, p),
            EvKind::Arrive(p, id) => (1, p, id),
            EvKind::Forward(p, id) => (1, p | FORWARD, id),
            EvKind::EpTimer(x) => (2, 0, x),
            EvKind::FlowStart(x) => (3, 0, x),
            EvKind::FlowStop(x) => (4, 0, x),
            EvKind::UdpSend(x) => (5, 0, x),
            EvKind::IncastEpoch(x) => (6, 0, x),
            EvKind::TrafficArrival(x) => (7, 0, x),
            EvKind::InstallRule(x) => (8, 0, x),
            EvKind::ShimTimer(x) => (9, 0, x),
            EvKind::SwitchTimer(x) => (10, 0, x),
            EvKind::CtrlTimer => (11, 0, 0),
            EvKind::CtrlDeliver => (12, 0, 0),
            EvKind::VnicDone(x) => (13, 0, x),
            EvKind::Sample => (14, 0, 0),
            EvKind::Return(id) => (15, 0, id),
        };
        debug_assert!((a & !FORWARD) < FORWARD);
        Ev(tag << 60 | (a as u64) << 32 | b as u64)
    }
}

impl From<Ev> for EvKind {
    #[inline(always)]
    fn from(ev: Ev) -> EvKind {
        let (a, b) = ((ev.0 >> 32) as u32 & (2 * FORWARD - 1), ev.0 as u32);
        match ev.0 >> 60 {
            0 => EvKind::TxDone(b),
            1 if a & FORWARD != 0 => EvKind::Forward(a & !FORWARD, b),
            1 => EvKind::Arrive(a, b),
            2 => EvKind::EpTimer(b),
            3 => EvKind::FlowStart(b),
            4 => EvKind::FlowStop(b),
            5 => EvKind::UdpSend(b),
            6 => EvKind::IncastEpoch(b),
            7 => EvKind::TrafficArrival(b),
            8 => EvKind::InstallRule(b),
            9 => EvKind::ShimTimer(b),
            10 => EvKind::SwitchTimer(b),
            11 => EvKind::CtrlTimer,
            12 => EvKind::CtrlDeliver,
            13 => EvKind::VnicDone(b),
            14 => EvKind::Sample,
            _ => EvKind::Return(b),
        }
    }
}

pub struct Sim {
    pub now: u64,
    queue: EventQueue<Ev>,
    pub pkts: Arena,
    pub m: Model,
    /// Counts and time series for the result files.
    pub rec: Recorded,
    next_rate_sample: u64,
    /// Reused by `pump`: the ids of the segments an endpoint just sent.
    sent_buf: Vec<PktId>,
    /// Whether the loop asks the cache for the next events' state ahead of time: only where
    /// the ports alone outgrow a core's L2 cache. Below that everything is in the cache
    /// already, and computing the addresses costs about 9% more instructions per event for
    /// nothing (the 4-flow dumbbell).
    prefetching: bool,
}

impl Sim {
    pub fn new(m: Model) -> Sim {
        assert!(
            m.ports.len() <= MAX_PORTS,
            "{} ports: an event names at most {MAX_PORTS}",
            m.ports.len()
        );
        let mut s = Sim {
            now: 0,
            queue: EventQueue::default(),
            pkts: Arena::default(),
            prefetching: Port::outgrow_l2(m.ports.len()),
            m,
            rec: Recorded::default(),
            next_rate_sample: 0,
            sent_buf: Vec::new(),
        };
        for f in 0..s.m.flows.len() {
            let at = s.m.flows[f].start;
            s.schedule(at, EvKind::FlowStart(f as u32));
            if let Some(stop) = s.m.flows[f].stop {
                s.schedule(stop, EvKind::FlowStop(f as u32));
            }
        }
        for a in 0..s.m.apps.len() {
            match &s.m.apps[a] {
                App::Incast(i) => {
                    let at = i.start;
                    s.schedule(at, EvKind::IncastEpoch(a as u32));
                }
                App::Traffic(t) => {
                    let at = t.start;
                    s.schedule(at, EvKind::TrafficArrival(a as u32));
                }
            }
        }
        for i in 0..s.m.pending_rules.len() {
            let at = s.m.pending_rules[i].1;
            s.schedule(at, EvKind::InstallRule(i as u32));
        }
        for sw in 0..s.m.switch_mech.len() {
            s.sync_switch_timer(sw as u32);
        }
        s.sync_ctrl_timer();
        s.schedule(0, EvKind::Sample);
        s
    }

    #[inline(always)]
    pub fn schedule(&mut self, at: u64, kind: EvKind) {
        self.queue.push(at, Ev::from(kind));
    }

    /// Runs to the end; `progress(now, end)` is called every 2^20 events.
    pub fn run(&mut self, progress: &mut dyn FnMut(u64, u64)) {
        let end = self.m.duration;
        crate::heap::advise();
        while let Some((at, ev)) = self.queue.pop_until(end) {
            let kind = EvKind::from(ev);
            self.now = at;
            self.rec.events += 1;
            if self.rec.events & 0xF_FFFF == 0 {
                crate::heap::advise();
                progress(self.now, end);
            }
            if self.prefetching {
                // Each event's loads in three steps, one event apart, each step reading what
                // the one before brought in. A sample, which no step reads, stands for no
                // event.
                let [next, second, third] = self.queue.peek_hint(Ev::from(EvKind::Sample));
                self.prefetch(third.into());
                self.prefetch_next(second.into());
                self.prefetch_endpoint(next.into());
            }
            self.dispatch(kind);
        }
        self.now = end;
        progress(end, end);
        for i in 0..self.m.ports.len() {
            self.m.settle(i as u32, end);
            let port = &mut self.m.ports[i];
            port.stats.advance(end, port.backlog().0 as u64);
        }
        self.rec.in_flight = self.in_flight();
    }

    /// Asks the cache for what event `kind` will read first, while the current event runs. On a
    /// large fabric the ports, packets and endpoints an event touches are mostly not in the
    /// cache, and each is otherwise a wait for memory.
    #[inline]
    fn prefetch(&self, kind: EvKind) {
        match kind {
            EvKind::Arrive(port, id) => {
                // An arrival reads only where its link goes.
                let p = self.m.ports.as_ptr().wrapping_add(port as usize);
                prefetch(p.cast::<u8>().wrapping_add(std::mem::offset_of!(Port, to)));
                prefetch(self.pkts.as_ptr(id));
            }
            EvKind::TxDone(port) => self.prefetch_port(port),
            EvKind::Forward(port, id) => {
                self.prefetch_port(port);
                prefetch(self.pkts.as_ptr(id));
            }
            EvKind::EpTimer(ep) => prefetch(self.m.eps.as_ptr().wrapping_add(ep as usize)),
            EvKind::VnicDone(vm) => prefetch(self.m.vms.as_ptr().wrapping_add(vm as usize)),
            _ => {}
        }
    }

    /// What an event reads after what `prefetch` (run one event earlier) brought in: an
    /// arrival's route entry at a switch, its endpoint's slot at a host.
    #[inline]
    fn prefetch_next(&self, kind: EvKind) {
        let (port, id) = match kind {
            EvKind::Arrive(port, id) => (port, id),
            EvKind::TxDone(port) => {
                self.prefetch_port(port);
                // The port, asked for one event earlier, says where its next packet's id is.
                if let Some(p) = self.m.ports.get(port as usize) {
                    if let Some(head) = p.queue.front() {
                        prefetch(head);
                    }
                }
                return;
            }
            _ => return self.prefetch(kind),
        };
        let Some((to, pkt)) = self.arrival(port, id) else {
            return;
        };
        match to {
            NodeRef::Switch(s) => self.m.prefetch_route(s, pkt.dst),
            NodeRef::Host(_) => prefetch(self.m.eps.as_ptr().wrapping_add(pkt.dst_ep as usize)),
        }
    }

    /// Where an arrival's link goes and its packet, if the port and the packet's slot exist
    /// (a prefetch's hint may name a packet since freed).
    #[inline]
    fn arrival(&self, port: u32, id: PktId) -> Option<(NodeRef, &Packet)> {
        Some((
            self.m.ports.get(port as usize)?.to(),
            self.pkts.try_get(id)?,
        ))
    }

    /// The last step for an arrival at a host, from the slot `prefetch_next` brought in: the
    /// lines of its TCP endpoint that the segment's processing reads, and its NIC's (the
    /// reply's queue).
    #[inline]
    fn prefetch_endpoint(&self, kind: EvKind) {
        let EvKind::Arrive(port, id) = kind else {
            return;
        };
        let Some((to, pkt)) = self.arrival(port, id) else {
            return;
        };
        if let (NodeRef::Host(_), Some(slot)) = (to, self.m.eps.get(pkt.dst_ep as usize)) {
            if let EpKind::Tcp(t) = &slot.kind {
                use crate::tcp::TcpEndpoint;
                let lines = if pkt.payload() > 0 {
                    TcpEndpoint::RECEIVER_LINES
                } else {
                    TcpEndpoint::SENDER_LINES
                };
                let t = std::ptr::from_ref::<TcpEndpoint>(t).cast::<u8>();
                for line in 0..lines {
                    prefetch(t.wrapping_add(line * 64));
                }
            }
            // What it sends in reply joins its NIC's queue.
            if let Some(v) = slot.vnic_in_nic() {
                self.prefetch_port(v.nic);
            }
        }
    }

    /// The lines of a port a packet's admission and transmission read and write (see `Port`).
    #[inline]
    fn prefetch_port(&self, port: u32) {
        let p = self
            .m
            .ports
            .as_ptr()
            .wrapping_add(port as usize)
            .cast::<u8>();
        for line in 0..Port::HOT_LINES {
            prefetch(p.wrapping_add(line * 64));
        }
    }

    fn dispatch(&mut self, kind: EvKind) {
        match kind {
            EvKind::TxDone(p) => self.tx_done(p),
            EvKind::Arrive(p, pkt) => self.arrive(p, pkt),
            // `switch_forward` at a switch with no hook and an empty table, routed already.
            EvKind::Forward(out, pkt) => self.enqueue(out, pkt),
            EvKind::EpTimer(ep) => {
                let now = self.now;
                let slot = &mut self.m.eps[ep as usize];
                if slot.timer_at == now {
                    slot.timer_at = NO_TIMER;
                }
                if let Some(t) = self.m.tcp_mut(ep) {
                    t.on_timer(now);
                }
                self.pump(ep);
            }
            EvKind::FlowStart(f) => self.flow_start(f),
            EvKind::FlowStop(f) => self.flow_stop(f),
            EvKind::UdpSend(f) => self.udp_send(f),
            EvKind::IncastEpoch(a) => self.incast_epoch(a),
            EvKind::TrafficArrival(a) => self.traffic_arrival(a),
            EvKind::ShimTimer(h) => {
                let now = self.now;
                let hs = &mut self.m.shims[h as usize];
                if hs.timer_at == Some(now) {
                    hs.timer_at = None;
                }
                if let Some(shim) = &mut hs.shim {
                    shim.on_timer(now);
                }
                self.shim_transmit(h);
            }
            EvKind::SwitchTimer(sw) => {
                let now = self.now;
                let sm = &mut self.m.switch_mech[sw as usize];
                if sm.timer_at == Some(now) {
                    sm.timer_at = None;
                }
                if let Some(hook) = &mut sm.hook {
                    let ports = &self.m.ports;
                    hook.on_timer(now, &|p| ports[p as usize].queue_bytes);
                }
                self.sync_switch_timer(sw);
            }
            EvKind::CtrlTimer => {
                if self.m.control.timer_at == Some(self.now) {
                    self.m.control.timer_at = None;
                }
                self.ctrl_timer();
            }
            EvKind::CtrlDeliver => self.ctrl_deliver(),
            EvKind::VnicDone(vm) => {
                self.m.vms[vm as usize].vnic_busy = false;
                self.vnic_pump(vm);
            }
            EvKind::InstallRule(i) => {
                let (sw, _, rule) = self.m.pending_rules[i as usize].clone();
                self.m.tables[sw as usize].install(rule);
            }
            EvKind::Sample => self.sample(),
            EvKind::Return(id) => self.deliver(id),
        }
    }

    // ------------------------------------------------------------------ network

    /// A packet offered to a port's queue: AQM admission, then its transmission, at once if
    /// the port is idle, else after the packets ahead of it.
    fn enqueue(&mut self, port: u32, id: PktId) {
        let now = self.now;
        let p = &mut self.m.ports[port as usize];
        debug_assert!(
            !p.holds_vnic,
            "a NIC holding its VM's vNIC is fed by vnic_in_nic_send"
        );
        p.settle(now, |_| {});
        let (len, ecn) = {
            let pk = self.pkts.get(id);
            (pk.len as u32, pk.ecn)
        };
        let backlog = p.queue.len() as u64;
        let verdict = p.qdisc.admit(
            now,
            backlog,
            p.queue_bytes,
            len,
            ecn,
            &mut p.red,
            &mut self.m.rng,
        );
        match verdict {
            Verdict::DropOverflow | Verdict::DropAqm => {
                let reason = if verdict == Verdict::DropOverflow {
                    p.drops.overflow += 1;
                    "dropped: the queue was full"
                } else {
                    p.drops.aqm += 1;
                    "dropped by the AQM"
                };
                self.rec.cons.dropped += 1;
                if p.captured() && self.m.pcap_dropped {
                    if let Some(c) = &mut self.rec.capture {
                        c.dropped(port, now, self.pkts.get(id), reason);
                    }
                }
                self.pkts.free(id);
                return;
            }
            Verdict::Mark => {
                p.stats.marked += 1;
                self.pkts.get_mut(id).ecn = Ecn::Ce;
            }
            Verdict::Enqueue => {}
        }
        let (start, end) = p.admit(now, len);
        if start == now {
            // The port is idle (so is its queue): no completion event for a packet that
            // waits for nothing.
            self.launch(port, id, end);
            return;
        }
        p.stats.advance(now, backlog);
        p.push_waiting(Waiting { id, len }, start);
        p.max_backlog = p.max_backlog.max(p.queue.len() as u32);
        if !p.departs_by_event {
            self.launch(port, id, end);
        } else if p.queue.len() == 1 {
            // The first to wait: its start is the port's next completion.
            self.schedule(start, EvKind::TxDone(port));
        }
    }

    /// A packet whose serialization ends at `end` arrives at the far end a link delay later
    /// (plus the host's timing noise), unless the link loses it.
    fn launch(&mut self, port: u32, id: PktId, end: u64) {
        let p = &mut self.m.ports[port as usize];
        let mut at = end + p.delay_ns;
        let plain_switch = match p.to() {
            NodeRef::Switch(s) if p.plain_far_end => Some(s),
            _ => None,
        };
        // Most ports have neither noise nor a capture: one test of one byte passes them.
        if p.extras != 0 {
            let captured = p.captured();
            if let Some(noise) = p.noise_mut() {
                at = noise.jitter(at, &mut self.m.rng);
                if noise.loss.as_mut().is_some_and(|l| l.lose(&mut self.m.rng)) {
                    p.drops.loss += 1;
                    self.rec.cons.dropped += 1;
                    if captured {
                        self.capture_sent(port, id, end, Some("lost on the link"));
                    }
                    self.pkts.free(id);
                    return;
                }
            }
            if captured {
                self.capture_sent(port, id, end, None);
            }
        }
        let kind = match plain_switch.and_then(|s| self.m.route(s, self.pkts.get(id))) {
            Some(out) => EvKind::Forward(out, id),
            // Elsewhere, or unroutable there (dropped when it arrives).
            None => EvKind::Arrive(port, id),
        };
        self.schedule(at, kind);
    }

    /// Hands packet `id`, whose serialization on port `port` ends at `end`, to the port's
    /// capture, stamped as a sender's capture stamps it: as it starts onto the wire.
    #[cold]
    #[inline(never)]
    fn capture_sent(&mut self, port: u32, id: PktId, end: u64, note: Option<&'static str>) {
        let start = end - self.m.ports[port as usize].ser(self.pkts.get(id).len as u32);
        if let Some(c) = &mut self.rec.capture {
            c.sent(port, start, self.pkts.get(id), note);
        }
    }

    /// A port that departs by event reached its head packet's start: send it, and wait for
    /// the next one's.
    fn tx_done(&mut self, port: u32) {
        let now = self.now;
        let p = &mut self.m.ports[port as usize];
        debug_assert_eq!(p.head_start, now, "a head packet leaves at its start");
        let w = p.send_head();
        let end = now + p.ser(w.len);
        if let NodeRef::Switch(s) = p.from {
            let sm = &mut self.m.switch_mech[s as usize];
            if let (true, Some(hook)) = (sm.queue_events, &mut sm.hook) {
                hook.on_dequeue(now, port, p.queue_bytes);
            }
        }
        self.launch(port, w.id, end);
        let next = self.m.ports[port as usize].head_start;
        if next != u64::MAX {
            self.schedule(next, EvKind::TxDone(port));
        }
    }

    fn arrive(&mut self, port: u32, id: PktId) {
        match self.m.ports[port as usize].to() {
            NodeRef::Switch(s) => self.switch_forward(s, port, id),
            NodeRef::Host(_) => self.deliver(id),
        }
    }

    /// A packet reached its host.
    fn deliver(&mut self, id: PktId) {
        self.rec.cons.delivered += 1;
        let tcp_ep = self.host_ingress(id);
        self.pkts.free(id);
        if let Some(ep) = tcp_ep {
            self.pump(ep);
        }
    }

    /// Hands a packet that reached its host to the shim and the endpoint; returns the TCP
    /// endpoint that received it, to be pumped once the packet is freed.
    fn host_ingress(&mut self, id: PktId) -> Option<u32> {
        let pkt = self.pkts.get_mut(id);
        debug_assert!(
            pkt.tcp_checksum_ok(),
            "TCP checksum broken in flight: {pkt:?}"
        );
        // A host without a mechanism has no ingress hook, timer or feedback to send.
        let shim = self
            .m
            .any_shim
            .then(|| self.m.host_of_ip(pkt.dst))
            .flatten();
        if let Some((h, shim)) = shim.and_then(|h| {
            let shim = self.m.shims[h as usize].shim.as_mut()?;
            Some((h, shim))
        }) {
            let action = shim.on_ingress(self.now, pkt);
            debug_assert!(
                pkt.tcp_checksum_ok(),
                "a shim rewrite broke the TCP checksum: {pkt:?}"
            );
            self.shim_transmit(h);
            if let IngressVerdict::Consume = action {
                return None;
            }
        }
        let pkt = self.pkts.get(id);
        let ep = pkt.dst_ep;
        if ep as usize >= self.m.eps.len() {
            return None;
        }
        let now = self.now;
        if let Some(t) = self.m.tcp_mut(ep) {
            t.on_segment(now, pkt);
            return Some(ep);
        }
        match &mut self.m.eps[ep as usize].kind {
            EpKind::Tcp(_) | EpKind::TcpClosed(_) => unreachable!("handled above"),
            EpKind::UdpSink => {
                let f = self.m.eps[ep as usize].flow;
                self.credit(f, pkt.payload() as u64);
                None
            }
            EpKind::UdpEcho { reply } => {
                let reply = *reply;
                let f = self.m.eps[ep as usize].flow;
                let mut r = Packet::new(pkt.dst, pkt.src, ip_proto::UDP, reply);
                r.sport = pkt.dport;
                r.dport = pkt.sport;
                self.credit(f, pkt.payload() as u64);
                r.dst_ep = self.m.flows[f as usize].tx_ep;
                let vm = self.m.eps[ep as usize].vm;
                let id = self.pkts.alloc(r);
                self.vm_send(vm, id, NO_EP);
                None
            }
        }
    }

    /// Adds delivered application bytes to a flow's goodput and checks completion.
    fn credit(&mut self, f: u32, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let now = self.now;
        let bin = self.m.goodput_bin;
        let flow = &mut self.m.flows[f as usize];
        flow.delivered += bytes;
        flow.add_to_bin((now / bin) as usize, bytes);
        if let Some(total) = flow.bytes {
            if flow.delivered >= total && flow.end.is_none() {
                flow.end = Some(now);
                flow.completed = true;
                if let Some(a) = flow.app {
                    self.incast_flow_done(a);
                }
            }
        }
    }

    /// Lets a TCP endpoint transmit, accounts its deliveries and re-arms its timer.
    fn pump(&mut self, ep: u32) {
        let now = self.now;
        let vnic_in_nic = self.m.eps[ep as usize].vnic_in_nic();
        if let Some(to) = vnic_in_nic {
            // Its packets that left the vNIC by now are out of its small queue.
            self.m.settle(to.nic, now);
        }
        let slot = &mut self.m.eps[ep as usize];
        let Some(t) = slot.kind.tcp_mut(&mut self.m.closed) else {
            return;
        };
        let budget = slot.tsq_limit.saturating_sub(slot.in_host);
        // Segments go straight to the arena; the vNIC then moves only their ids.
        let mut sent = std::mem::take(&mut self.sent_buf);
        let pkts = &mut self.pkts;
        t.poll_transmit(now, budget, &mut |p| sent.push(pkts.alloc(p)));
        let delivered = t.delivered();
        let new_bytes = delivered - slot.last_delivered;
        slot.last_delivered = delivered;
        let poll = t.poll_at();
        // Only an end just found closed and idle makes its flow's two ends worth a look.
        let closed = poll.is_none() && t.is_closed();
        let (vm, flow, return_delay) = (slot.vm, slot.flow, slot.return_delay());
        if let Some(at) = poll {
            if at < slot.timer_at {
                slot.timer_at = at;
                self.schedule(at.max(now), EvKind::EpTimer(ep));
            }
        }
        match return_delay {
            None => {
                for &id in &sent {
                    match vnic_in_nic {
                        Some(to) => self.vnic_in_nic_send(to, id, ep),
                        None => self.vm_send(vm, id, ep),
                    }
                }
            }
            Some(delay) => {
                // With its host's transmit timing noise, as if they had left by its NIC: in
                // the order they leave (whatever flow they are of), each then `delay` on.
                let host = self.m.vms[vm as usize].host as usize;
                let jitter_ns = self.m.ports[self.m.hosts[host].nic_port as usize]
                    .noise()
                    .map_or(0, |n| n.jitter_ns);
                self.rec.cons.sent += sent.len() as u64;
                for &id in &sent {
                    let last = &mut self.m.hosts[host].returned_last;
                    let left = jittered(now, jitter_ns, last, &mut self.m.rng);
                    self.schedule(left + delay, EvKind::Return(id));
                }
            }
        }
        sent.clear();
        self.sent_buf = sent;
        if new_bytes > 0 {
            self.credit(flow, new_bytes);
        }
        if closed {
            self.m.close_if_done(flow);
        }
    }

    /// VM stack -> vNIC queue (drop-tail; serialized at the NIC rate) -> vswitch egress hook.
    /// `id` is in the arena; `ep` is the sending endpoint or `NO_EP`.
    fn vm_send(&mut self, vm: u32, id: PktId, ep: u32) {
        if let Some(to) = self.m.vnic_in_nic(vm) {
            return self.vnic_in_nic_send(to, id, ep);
        }
        let v = &mut self.m.vms[vm as usize];
        if v.vnic.len() as u64 >= v.vnic_limit {
            self.rec.vnic_dropped += 1;
            self.pkts.free(id);
            return;
        }
        v.vnic.push_back((id, ep));
        if ep != NO_EP {
            self.m.eps[ep as usize].in_host += 1;
        }
        if !v.vnic_busy {
            self.vnic_pump(vm);
        }
    }

    /// Hands the vNIC's head packet to the vswitch egress hook if the vNIC is free: packets
    /// leave back to back at the NIC rate, the first of a burst without delay (cut-through).
    fn vnic_pump(&mut self, vm: u32) {
        let now = self.now;
        let v = &mut self.m.vms[vm as usize];
        let Some(&(id, ep)) = v.vnic.front() else {
            return;
        };
        if now < v.vnic_free_at {
            v.vnic_busy = true;
            let at = v.vnic_free_at;
            self.schedule(at, EvKind::VnicDone(vm));
            return;
        }
        let host = v.host;
        let verdict = match &mut self.m.shims[host as usize].shim {
            // No egress hook, so no timer to re-arm either.
            None => EgressVerdict::Pass,
            Some(shim) => {
                let verdict = shim.on_egress(now, self.pkts.get_mut(id));
                self.sync_shim_timer(host);
                verdict
            }
        };
        if let EgressVerdict::Hold { until } = verdict {
            self.m.vms[vm as usize].vnic_busy = true;
            self.schedule(until.max(now + 1), EvKind::VnicDone(vm));
            return;
        }
        let v = &mut self.m.vms[vm as usize];
        v.vnic.pop_front();
        let nic = self.m.hosts[host as usize].nic_port;
        v.vnic_free_at = now + self.m.ports[nic as usize].ser(self.pkts.get(id).len as u32);
        if !v.vnic.is_empty() {
            v.vnic_busy = true;
            let at = v.vnic_free_at;
            self.schedule(at, EvKind::VnicDone(vm));
        }
        match verdict {
            EgressVerdict::Pass => {
                if ep == NO_EP
                    || !self.m.scripted_drops
                    || !self.scripted_drop(self.m.eps[ep as usize].flow, id)
                {
                    self.nic_send(host, id);
                } else {
                    self.rec.cons.sent += 1;
                    self.rec.cons.dropped += 1;
                    self.m.ports[nic as usize].drops.scripted += 1;
                    self.pkts.free(id);
                }
            }
            _ => {
                self.rec.shim_dropped += 1;
                self.pkts.free(id);
            }
        }
        if ep != NO_EP {
            let slot = &mut self.m.eps[ep as usize];
            slot.in_host -= 1;
            if slot.in_host + 1 >= slot.tsq_limit {
                // The small-queue budget just reopened.
                self.pump(ep);
            }
        }
    }

    /// `vm_send` where the vNIC is the NIC's queue (`Vm::vnic_in_nic`): the packet's start is
    /// the end of the one ahead, its arrival is scheduled now, and it leaves the vNIC (and
    /// its endpoint's small queue) when the NIC is next settled. The vNIC's rules hold: a
    /// drop-tail limit on the packets waiting, and an endpoint whose small-queue budget is
    /// spent is woken as its oldest waiting packet leaves (an `EpTimer` then).
    fn vnic_in_nic_send(&mut self, to: VnicInNic, id: PktId, ep: u32) {
        let now = self.now;
        let VnicInNic { nic, limit } = to;
        self.m.settle(nic, now);
        let p = &mut self.m.ports[nic as usize];
        debug_assert!(p.holds_vnic && !p.departs_by_event);
        if p.queue.len() as u64 >= limit as u64 {
            self.rec.vnic_dropped += 1;
            self.pkts.free(id);
            return;
        }
        self.rec.cons.sent += 1;
        let len = self.pkts.get(id).len as u32;
        // The NIC's own queue is empty (the vNIC feeds it no faster than it sends): its
        // drop-tail admits every packet.
        let (start, end) = p.admit(now, len);
        if start == now {
            self.launch(nic, id, end);
            if ep != NO_EP {
                // In and out of the vNIC at once: a spent budget reopens as it leaves.
                let slot = &self.m.eps[ep as usize];
                if slot.in_host + 1 >= slot.tsq_limit {
                    self.pump(ep);
                }
            }
            return;
        }
        p.push_waiting(Waiting { id: ep, len }, start);
        self.launch(nic, id, end);
        if ep != NO_EP {
            let slot = &mut self.m.eps[ep as usize];
            slot.in_host += 1;
            if slot.in_host >= slot.tsq_limit {
                let at = self.m.ports[nic as usize]
                    .start_of_first(ep)
                    .expect("the endpoint's packet just queued");
                self.schedule(at, EvKind::EpTimer(ep));
            }
        }
    }

    fn nic_send(&mut self, host: u32, id: PktId) {
        let nic = self.m.hosts[host as usize].nic_port;
        self.rec.cons.sent += 1;
        self.enqueue(nic, id);
    }

    /// Sends the shim's explicit feedback packets and re-arms its timer.
    fn shim_transmit(&mut self, host: u32) {
        let now = self.now;
        while let Some(fb) = self.m.shims[host as usize]
            .shim
            .as_mut()
            .and_then(|s| s.poll_transmit(now))
        {
            let mut p = Packet::new(fb.src, fb.dst, ip_proto::FEEDBACK, FEEDBACK_PACKET);
            p.ip_id = fb.count;
            // Control traffic carried in band: counted with the controller's.
            self.m
                .control
                .count("in_band_feedback", FEEDBACK_PACKET as u64);
            let id = self.pkts.alloc(p);
            self.nic_send(host, id);
        }
        self.sync_shim_timer(host);
    }

    fn sync_shim_timer(&mut self, host: u32) {
        let hs = &mut self.m.shims[host as usize];
        if let Some(at) = hs.shim.as_ref().and_then(|s| s.poll_at()) {
            if hs.timer_at.is_none_or(|t| at < t) {
                hs.timer_at = Some(at);
                let at = at.max(self.now);
                self.schedule(at, EvKind::ShimTimer(host));
            }
        }
    }

    fn sync_switch_timer(&mut self, sw: u32) {
        let sm = &mut self.m.switch_mech[sw as usize];
        if let Some(at) = sm.hook.as_ref().and_then(|h| h.poll_at()) {
            if sm.timer_at.is_none_or(|t| at < t) {
                sm.timer_at = Some(at);
                let at = at.max(self.now);
                self.schedule(at, EvKind::SwitchTimer(sw));
            }
        }
    }

    // ------------------------------------------------------------------ switches

    /// A packet arriving at switch `s` on `in_port`: mechanism hook, flow table, routing.
    fn switch_forward(&mut self, s: u32, in_port: u32, id: PktId) {
        let now = self.now;
        if let Some(hook) = &mut self.m.switch_mech[s as usize].hook {
            let from_host = matches!(self.m.ports[in_port as usize].from, NodeRef::Host(_));
            if hook.on_arrival(now, in_port, from_host, self.pkts.get_mut(id)) {
                self.packet_in(s, in_port, None, id);
            }
        }
        let mut out = None;
        let mut copy = false;
        if !self.m.tables[s as usize].is_empty() {
            if let Some(a) = self.m.tables[s as usize].lookup(now, self.pkts.get(id)) {
                let pkt = self.pkts.get_mut(id);
                if a.set_ce && pkt.ecn.is_ect() {
                    pkt.ecn = Ecn::Ce;
                }
                copy = a.copy_to_controller;
                match a.forward {
                    Forward::Normal => {}
                    Forward::Port(p) => out = Some(p),
                    Forward::Drop => {
                        self.rec.cons.dropped += 1;
                        self.rec.rule_dropped += 1;
                        self.pkts.free(id);
                        return;
                    }
                }
            }
        }
        let Some(out) = out.or_else(|| self.m.route(s, self.pkts.get(id))) else {
            self.rec.cons.dropped += 1;
            self.pkts.free(id);
            return;
        };
        // Its lines are then loaded together rather than one after another as `enqueue` reads.
        if self.prefetching {
            self.prefetch_port(out);
        }
        if copy {
            self.packet_in(s, in_port, Some(out), id);
            let pkt = self.pkts.get(id).clone();
            self.rec.packet_ins.push((now, s, in_port, pkt));
        }
        let sm = &mut self.m.switch_mech[s as usize];
        if let Some(hook) = &mut sm.hook {
            hook.on_forward(now, out, self.pkts.get(id));
            if sm.queue_events {
                hook.on_enqueue(now, out, self.m.ports[out as usize].queue_bytes);
            }
        }
        self.enqueue(out, id);
    }

    /// Sends the controller (if there is one) the headers of packet `id`.
    fn packet_in(&mut self, switch: u32, in_port: u32, out_port: Option<u32>, id: PktId) {
        if self.m.control.app.is_none() {
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

    /// Puts a message on the control channel. A message for a VM no host runs goes nowhere.
    fn ctrl_send(&mut self, m: ControlMessage) {
        if let ControlMessage::ToHost(h) = &m {
            if self.m.host_of_ip(h.vm()).is_none() {
                return;
            }
        }
        let at = self.m.control.send(self.now, m);
        self.schedule(at, EvKind::CtrlDeliver);
    }

    fn sync_ctrl_timer(&mut self) {
        let at = self.m.control.app.as_ref().and_then(|a| a.poll_at());
        if let Some(at) = at {
            if self.m.control.timer_at.is_none_or(|t| at < t) {
                self.m.control.timer_at = Some(at);
                let at = at.max(self.now);
                self.schedule(at, EvKind::CtrlTimer);
            }
        }
    }

    fn ctrl_timer(&mut self) {
        let mut out = Vec::new();
        if let Some(app) = &mut self.m.control.app {
            app.on_timer(self.now, &mut out);
        }
        for m in out {
            self.ctrl_send(m);
        }
        self.sync_ctrl_timer();
    }

    fn ctrl_deliver(&mut self) {
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
    fn stats_reply(&mut self, r: StatsRequest) -> StatsReply {
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

    fn flow_mod(&mut self, f: FlowMod) {
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

    fn scripted_drop(&mut self, f: u32, id: PktId) -> bool {
        let flow = &mut self.m.flows[f as usize];
        let pkt = self.pkts.get(id);
        if flow.drop_segments.is_empty() || pkt.payload() == 0 || pkt.dst_ep != flow.rx_ep {
            return false;
        }
        let seg = (pkt.seq.wrapping_sub(flow.iss).wrapping_sub(1) / flow.mss) as u64;
        if let Some(i) = flow.drop_segments.iter().position(|&s| s == seg) {
            flow.drop_segments.swap_remove(i);
            return true;
        }
        false
    }

    // ------------------------------------------------------------------ applications

    fn flow_start(&mut self, f: u32) {
        let now = self.now;
        let flow = &self.m.flows[f as usize];
        if flow.udp.is_some() {
            self.udp_send(f);
            return;
        }
        let tx = flow.tx_ep;
        let bytes = flow.bytes;
        if let Some(t) = self.m.tcp_mut(tx) {
            t.send(bytes.unwrap_or(u64::MAX / 4));
            if bytes.is_some() {
                t.close();
            }
            t.connect(now);
        }
        self.pump(tx);
    }

    fn flow_stop(&mut self, f: u32) {
        let now = self.now;
        let flow = &mut self.m.flows[f as usize];
        if flow.end.is_none() {
            flow.end = Some(now);
        }
        flow.stopped = true;
        let tx = flow.tx_ep;
        if let Some(t) = self.m.tcp_mut(tx) {
            t.stop();
            self.pump(tx);
        }
    }

    fn udp_send(&mut self, f: u32) {
        let now = self.now;
        let flow = &mut self.m.flows[f as usize];
        if flow.stopped {
            return;
        }
        let udp = flow.udp.as_mut().expect("udp flow");
        // On/off sources: leave the current period when it ends.
        if let (Some(on), Some(off)) = (udp.on_mean, udp.off_mean) {
            if now >= udp.period_end {
                if udp.is_on {
                    udp.is_on = false;
                    udp.period_end = now + self.m.rng.exponential(off as f64) as u64;
                } else {
                    udp.is_on = true;
                    udp.period_end = now + self.m.rng.exponential(on as f64) as u64;
                }
            }
            if !udp.is_on {
                let at = udp.period_end;
                self.schedule(at, EvKind::UdpSend(f));
                return;
            }
        }
        let size = udp.packet_size;
        // Inter-packet gaps vary uniformly by +/-10% around the CBR period (mean rate exact),
        // like ns-2's CBR `random_`: perfectly periodic sources phase-lock at a shared queue
        // and one of them would win every free slot.
        let period = ser_ns(udp.rate_bps, size) as f64;
        let gap = (period * (0.9 + 0.2 * self.m.rng.uniform())).round() as u64;
        let dst = self.m.vms[flow.dst_vm as usize].ip;
        let protocol = match udp.forge {
            Some(Forge::Feedback) => ip_proto::FEEDBACK,
            _ => ip_proto::UDP,
        };
        let mut p = Packet::new(udp.src_ip, dst, protocol, size);
        match udp.forge {
            Some(Forge::Feedback) => p.ip_id = 1,
            Some(Forge::Ipr) => p.reserved_bit = true,
            None => {}
        }
        p.sport = flow.sport;
        p.dport = flow.dport;
        p.dst_ep = flow.rx_ep;
        let vm = flow.src_vm;
        let id = self.pkts.alloc(p);
        self.vm_send(vm, id, NO_EP);
        self.schedule(now + gap, EvKind::UdpSend(f));
    }

    fn incast_epoch(&mut self, a: u32) {
        let now = self.now;
        let App::Incast(inc) = &mut self.m.apps[a as usize] else {
            return;
        };
        if inc.epoch >= inc.epochs {
            return;
        }
        let epoch = inc.epoch;
        inc.epoch += 1;
        inc.outstanding = inc.workers.len() as u32;
        let (workers, agg, bytes, jitter, name) = (
            inc.workers.clone(),
            inc.aggregator,
            inc.bytes,
            inc.jitter,
            inc.name.clone(),
        );
        let tcp = inc.tcp.clone();
        if let Some(iv) = inc.interval {
            let next = inc.start + iv * (epoch as u64 + 1);
            self.schedule(next, EvKind::IncastEpoch(a));
        }
        for (w, &vm) in workers.iter().enumerate() {
            let delay = if jitter > 0 {
                self.m.rng.exponential(jitter as f64) as u64
            } else {
                0
            };
            let f = self.m.add_tcp_flow(
                format!("{name}.{w}.{epoch}"),
                name.clone(),
                vm,
                agg,
                now + delay,
                Some(bytes),
                tcp.clone(),
                Some(a),
            );
            self.schedule(now + delay, EvKind::FlowStart(f));
        }
    }

    fn incast_flow_done(&mut self, a: u32) {
        let now = self.now;
        let App::Incast(inc) = &mut self.m.apps[a as usize] else {
            return;
        };
        inc.outstanding = inc.outstanding.saturating_sub(1);
        if inc.outstanding == 0 && inc.interval.is_none() {
            self.schedule(now, EvKind::IncastEpoch(a));
        }
    }

    fn traffic_arrival(&mut self, a: u32) {
        let now = self.now;
        let App::Traffic(t) = &mut self.m.apps[a as usize] else {
            return;
        };
        if t.stop.is_some_and(|s| now >= s) {
            return;
        }
        let arrival = t.next_arrival();
        let (name, k, tcp) = (t.name.clone(), t.count, t.tcp.clone());
        t.count += 1;
        let f = self.m.add_tcp_flow(
            format!("{name}.{k}"),
            name,
            arrival.src,
            arrival.dst,
            now,
            Some(arrival.bytes),
            tcp,
            None,
        );
        self.flow_start(f);
        self.schedule(now + arrival.gap_ns.max(1), EvKind::TrafficArrival(a));
    }

    fn sample(&mut self) {
        let now = self.now;
        if now >= self.next_rate_sample {
            self.next_rate_sample += self.m.goodput_bin;
            let samples = &mut self.rec.rate_samples;
            for shim in self.m.shims.iter().filter_map(|h| h.shim.as_ref()) {
                shim.rates(&mut |vm, dst, bps| samples.push((now, vm, dst, bps)));
            }
        }
        for i in 0..self.m.sampled_ports.len() {
            let p = self.m.sampled_ports[i];
            self.m.settle(p, now);
            let port = &self.m.ports[p as usize];
            let (pkts, bytes) = port.backlog();
            self.rec.queue_sample(now, p, &port.name, pkts, bytes);
        }
        let next = now + self.m.queue_sample;
        self.schedule(next, EvKind::Sample);
    }

    /// Packets sent to a NIC and not yet delivered or dropped (those waiting in a vNIC are in
    /// the arena too, but not yet sent).
    pub fn in_flight(&self) -> u64 {
        let in_vnics: usize = self.m.vms.iter().map(|v| v.vnic.len()).sum();
        self.pkts.live() - in_vnics as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_kind_survives_packing_into_one_word() {
        let last_port = MAX_PORTS as u32 - 1;
        let kinds = [
            EvKind::TxDone(u32::MAX),
            EvKind::Arrive(0, 0),
            EvKind::Arrive(last_port, u32::MAX),
            EvKind::Forward(0, 0),
            EvKind::Forward(last_port, u32::MAX),
            EvKind::EpTimer(u32::MAX),
            EvKind::FlowStart(7),
            EvKind::FlowStop(7),
            EvKind::UdpSend(7),
            EvKind::IncastEpoch(7),
            EvKind::TrafficArrival(7),
            EvKind::InstallRule(7),
            EvKind::ShimTimer(7),
            EvKind::SwitchTimer(7),
            EvKind::CtrlTimer,
            EvKind::CtrlDeliver,
            EvKind::VnicDone(7),
            EvKind::Sample,
            EvKind::Return(u32::MAX),
        ];
        for kind in kinds {
            assert_eq!(EvKind::from(Ev::from(kind)), kind);
        }
    }
}
