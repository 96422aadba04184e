//! The network: a port admits a packet (AQM) and starts it on the wire, a link delivers it at
//! the far end, a switch runs its hook and flow table and routes it to an output port.

use crate::fifo::Waiting;
use crate::packet::PktId;
use crate::queue::Verdict;
use crate::rules::Forward;
use crate::topology::NodeRef;
use tacc_mech::headers::Ecn;

use super::{EvKind, Sim};

impl Sim {
    // ------------------------------------------------------------------ network

    /// A packet offered to a port's queue: AQM admission, then its transmission, at once if
    /// the port is idle, else after the packets ahead of it.
    pub(super) fn enqueue(&mut self, port: u32, id: PktId) {
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
    pub(super) fn launch(&mut self, port: u32, id: PktId, end: u64) {
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
        let route = plain_switch.and_then(|s| self.m.route(s, self.pkts.get(id)));
        if let Some(split) = self.split.as_deref_mut() {
            // A packet routed as it leaves goes to its output port's partition.
            let to = match route {
                Some(out) => split.of_port[out as usize],
                None => split.far[port as usize],
            };
            if to != split.part {
                let (port, forward) = route.map_or((port, false), |out| (out, true));
                let pkt = self.pkts.get(id).clone();
                self.pkts.free(id);
                split.outbox[to as usize].push_packet(at, port, forward, pkt);
                return;
            }
        }
        let kind = match route {
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
    pub(super) fn capture_sent(
        &mut self,
        port: u32,
        id: PktId,
        end: u64,
        note: Option<&'static str>,
    ) {
        let start = end - self.m.ports[port as usize].ser(self.pkts.get(id).len as u32);
        if let Some(c) = &mut self.rec.capture {
            c.sent(port, start, self.pkts.get(id), note);
        }
    }

    /// A port that departs by event reached its head packet's start: send it, and wait for
    /// the next one's.
    pub(super) fn tx_done(&mut self, port: u32) {
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

    pub(super) fn arrive(&mut self, port: u32, id: PktId) {
        match self.m.ports[port as usize].to() {
            NodeRef::Switch(s) => self.switch_forward(s, port, id),
            NodeRef::Host(_) => self.deliver(id),
        }
    }

    pub(super) fn sync_switch_timer(&mut self, sw: u32) {
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
    pub(super) fn switch_forward(&mut self, s: u32, in_port: u32, id: PktId) {
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
}
