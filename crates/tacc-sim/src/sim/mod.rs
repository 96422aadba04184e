//! The engine: one event queue keyed by (time, insertion sequence), integer nanoseconds,
//! one seeded RNG. Nodes are hosts (VMs behind a virtual switch on one NIC) and switches;
//! every link direction is a port with an output queue.
//!
//! Packet path: VM stack -> vswitch egress hook (shim) -> NIC queue -> link -> switch queues
//! -> ... -> NIC -> vswitch ingress hook (shim) -> VM stack.

use crate::event_queue::EventQueue;
use crate::model::{App, Model, Port, NO_TIMER};
use crate::output::Recorded;
use crate::packet::{Arena, Packet, PktId};
use std::sync::Arc;

mod cache;
mod control;
mod hosts;
mod network;
mod traffic;

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
    /// cache for it four events ahead, without first loading the packet and the route.
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

/// What one partition sends another during a window (`crate::parallel`), in the order
/// sent. A crossing packet is kept by value in one array and its arrival in another, so that
/// it is its own line and a quarter of another: as a 192-byte `Mail` each packet took three
/// lines, written by one thread and read by the other, a cache-to-cache transfer each.
#[derive(Default)]
pub struct Outbox {
    arrivals: Vec<Crossing>,
    pkts: Vec<Packet>,
    /// Control messages and epochs, each with the count of packets sent before it.
    others: Vec<(usize, Mail)>,
}

/// A packet's arrival at the far end of `port` at `at` (with `forward`, a `Forward` to
/// output port `port`).
struct Crossing {
    at: u64,
    port: u32,
    forward: bool,
}

impl Outbox {
    pub fn len(&self) -> usize {
        self.pkts.len() + self.others.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The packets in it: in flight.
    pub fn packets(&self) -> usize {
        self.pkts.len()
    }

    /// Whether everything in it is due after `t`.
    pub fn all_after(&self, t: u64) -> bool {
        self.arrivals.iter().all(|a| a.at > t) && self.others.iter().all(|(_, m)| m.at > t)
    }

    fn push_packet(&mut self, at: u64, port: u32, forward: bool, pkt: Packet) {
        self.arrivals.push(Crossing { at, port, forward });
        self.pkts.push(pkt);
    }

    fn push(&mut self, mail: Mail) {
        self.others.push((self.pkts.len(), mail));
    }
}

/// A control message or an epoch for another partition, due at `at`.
struct Mail {
    at: u64,
    cargo: Cargo,
}

enum Cargo {
    /// A control message, at the switch, host or controller it is for.
    Control(tacc_mech::control::ControlMessage),
    /// The next epoch of partition-aggregate application `app` (without an interval), whose
    /// last answer arrived in the aggregator's partition: every partition begins it.
    Epoch(u32),
}

/// One partition's place in a partitioned run: each port's far end's partition, the
/// partition that runs each port (`Partitioning::of_port`), and the packets bound for each
/// partition since the window began.
pub struct Split {
    pub part: u16,
    pub far: Arc<Vec<u16>>,
    pub of_port: Arc<Vec<u16>>,
    pub outbox: Vec<Outbox>,
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
    /// Set in a partitioned run: this Sim runs one partition's events.
    pub split: Option<Box<Split>>,
}

impl Sim {
    pub fn new(m: Model) -> Sim {
        Sim::partition(m, None)
    }

    /// The Sim of one partition (`split`; `m` its copy of the world), or of the whole run:
    /// only the events of its own hosts and switches are scheduled.
    pub fn partition(m: Model, split: Option<Box<Split>>) -> Sim {
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
            split,
        };
        for f in 0..s.m.flows.len() {
            if !s.m.vm_is_local(s.m.flows[f].src_vm) {
                continue;
            }
            let at = s.m.flows[f].start;
            s.schedule(at, EvKind::FlowStart(f as u32));
            if let Some(stop) = s.m.flows[f].stop {
                s.schedule(stop, EvKind::FlowStop(f as u32));
            }
        }
        for a in 0..s.m.apps.len() {
            match &s.m.apps[a] {
                App::Incast(i) => {
                    // The first requests leave at the start (no interval: they begin the
                    // epoch when they reach the nearest worker).
                    let at = i.start + i.request_min;
                    s.schedule(at, EvKind::IncastEpoch(a as u32));
                }
                App::Traffic(t) => {
                    let at = t.start;
                    s.schedule(at, EvKind::TrafficArrival(a as u32));
                }
            }
        }
        for i in 0..s.m.pending_rules.len() {
            if !s.m.switch_is_local(s.m.pending_rules[i].0) {
                continue;
            }
            let at = s.m.pending_rules[i].1;
            s.schedule(at, EvKind::InstallRule(i as u32));
        }
        for sw in 0..s.m.switch_mech.len() {
            if s.m.switch_is_local(sw as u32) {
                s.sync_switch_timer(sw as u32);
            }
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
        self.run_until(end, progress);
        progress(end, end);
        self.finish();
    }

    /// Runs the events due by `last`; `progress(now, end)` is called every 2^20 events.
    #[inline]
    pub fn run_until(&mut self, last: u64, progress: &mut dyn FnMut(u64, u64)) {
        let end = self.m.duration;
        while let Some((at, ev)) = self.queue.pop_until(last) {
            let kind = EvKind::from(ev);
            self.now = at;
            self.rec.events += 1;
            if self.rec.events & 0xF_FFFF == 0 {
                crate::heap::advise();
                progress(self.now, end);
            }
            if self.prefetching {
                // Each event's loads in three steps, one event apart, each step reading what
                // the one before brought in, the last one event before the event's own: on a
                // k = 32 fat tree 0.955 of the time taken with the last step just before the
                // event, where two events before took 1.12 of it (bench/README.md). A fourth
                // step just before the event follows the third's lines at a host (an ACK's
                // segment records, the NIC queue's head): 0.94-0.97 of the time at k = 32. A
                // sample, which no step reads, stands for no event.
                let [e1, e2, e3, e4] = self.queue.peek_hint(Ev::from(EvKind::Sample));
                self.prefetch(e4.into());
                self.prefetch_next(e3.into());
                self.prefetch_endpoint(e2.into());
                self.prefetch_host(e1.into());
            }
            self.dispatch(kind);
        }
    }

    /// The earliest pending event's time.
    pub fn next_at(&self) -> Option<u64> {
        self.queue.next_at()
    }

    /// Everything another partition sent this one in a window, in the order sent; leaves
    /// `mail` empty, its arrays' room kept for the sender's next window.
    pub fn receive(&mut self, mail: &mut Outbox) {
        let mut others = mail.others.drain(..).peekable();
        for (i, (a, pkt)) in mail.arrivals.drain(..).zip(mail.pkts.drain(..)).enumerate() {
            while let Some((_, m)) = others.next_if(|(before, _)| *before == i) {
                self.receive_mail(m);
            }
            let id = self.pkts.alloc(pkt);
            let kind = match a.forward {
                true => EvKind::Forward(a.port, id),
                false => EvKind::Arrive(a.port, id),
            };
            self.schedule(a.at, kind);
        }
        for (_, m) in others {
            self.receive_mail(m);
        }
    }

    fn receive_mail(&mut self, mail: Mail) {
        let kind = match mail.cargo {
            Cargo::Control(m) => {
                self.m.control.arrive(mail.at, m);
                EvKind::CtrlDeliver
            }
            Cargo::Epoch(a) => EvKind::IncastEpoch(a),
        };
        self.schedule(mail.at, kind);
    }

    /// The run is over: every port settled at the end, the packets still in flight counted.
    pub fn finish(&mut self) {
        let end = self.m.duration;
        self.now = end;
        for i in 0..self.m.ports.len() {
            self.m.settle(i as u32, end);
            let port = &mut self.m.ports[i];
            port.stats.advance(end, port.backlog().0 as u64);
        }
        self.rec.in_flight = self.in_flight();
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

    fn sample(&mut self) {
        let now = self.now;
        if now >= self.next_rate_sample {
            self.next_rate_sample += self.m.goodput_bin;
            let samples = &mut self.rec.rate_samples;
            for (h, slot) in self.m.shims.iter().enumerate() {
                if let Some(shim) = slot.shim.as_ref().filter(|_| self.m.host_is_local(h)) {
                    shim.rates(&mut |vm, dst, bps| samples.push((now, vm, dst, bps)));
                }
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

    #[test]
    fn mail_is_taken_in_the_order_it_was_sent() {
        let text = "name = \"d\"\nduration = \"1ms\"\n[topology]\nkind = \"dumbbell\"\n\
                    senders = 1\nreceivers = 1\nlink_rate = \"1Gbps\"\nlink_delay = \"1us\"\n\
                    [[flows]]\nname = \"f\"\nsrc = \"s0\"\ndst = \"r0\"\nstart = \"0.5ms\"\n";
        let p = crate::load(text, "d.toml", &[], None).expect("a valid scenario");
        let mut s = Sim::new(p.model);
        let at = 5_000;
        let pkt = |len| Packet::new(0, 1, 6, len);
        let mut mail = Outbox::default();
        mail.push(Mail {
            at,
            cargo: Cargo::Epoch(7),
        });
        mail.push_packet(at, 2, false, pkt(100));
        mail.push(Mail {
            at,
            cargo: Cargo::Epoch(8),
        });
        mail.push(Mail {
            at,
            cargo: Cargo::Epoch(9),
        });
        mail.push_packet(at, 3, true, pkt(200));
        mail.push_packet(at, 1, false, pkt(300));
        mail.push(Mail {
            at,
            cargo: Cargo::Epoch(10),
        });
        assert_eq!(mail.len(), 7);
        assert!(mail.all_after(at - 1) && !mail.all_after(at));
        s.receive(&mut mail);
        assert!(mail.is_empty());
        let mut got = Vec::new();
        while let Some((t, ev)) = s.queue.pop_until(at) {
            if t == at {
                got.push(match EvKind::from(ev) {
                    EvKind::Arrive(port, id) => format!("arrive {port} {}", s.pkts.get(id).len),
                    EvKind::Forward(port, id) => format!("forward {port} {}", s.pkts.get(id).len),
                    EvKind::IncastEpoch(a) => format!("epoch {a}"),
                    other => format!("{other:?}"),
                });
            }
        }
        let sent = [
            "epoch 7",
            "arrive 2 100",
            "epoch 8",
            "epoch 9",
            "forward 3 200",
            "arrive 1 300",
            "epoch 10",
        ];
        assert_eq!(got, sent);
    }
}
