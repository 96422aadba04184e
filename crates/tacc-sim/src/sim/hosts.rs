//! The hosts: delivery to a VM's endpoint through its shim's ingress hook, endpoints sending
//! through the vNIC and the shim's egress hook to the NIC, and the shim's own packets and timer.

use crate::fifo::Waiting;
use crate::model::{jittered, EpKind, VnicInNic};
use crate::packet::{Packet, PktId, FEEDBACK_PACKET, NO_EP};
use tacc_mech::headers::ip_proto;
use tacc_mech::roles::EgressVerdict;
use tacc_mech::roles::IngressVerdict;

use super::{EvKind, Sim};

impl Sim {
    /// A packet reached its host.
    pub(super) fn deliver(&mut self, id: PktId) {
        self.rec.cons.delivered += 1;
        let tcp_ep = self.host_ingress(id);
        self.pkts.free(id);
        if let Some(ep) = tcp_ep {
            self.pump(ep);
        }
    }

    /// Hands a packet that reached its host to the shim and the endpoint; returns the TCP
    /// endpoint that received it, to be pumped once the packet is freed.
    pub(super) fn host_ingress(&mut self, id: PktId) -> Option<u32> {
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
            EpKind::Elsewhere => unreachable!("a packet reaches the partition of its host"),
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
    pub(super) fn credit(&mut self, f: u32, bytes: u64) {
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
    pub(super) fn pump(&mut self, ep: u32) {
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
    pub(super) fn vm_send(&mut self, vm: u32, id: PktId, ep: u32) {
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
    pub(super) fn vnic_pump(&mut self, vm: u32) {
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
    pub(super) fn vnic_in_nic_send(&mut self, to: VnicInNic, id: PktId, ep: u32) {
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

    pub(super) fn nic_send(&mut self, host: u32, id: PktId) {
        let nic = self.m.hosts[host as usize].nic_port;
        self.rec.cons.sent += 1;
        self.enqueue(nic, id);
    }

    /// Sends the shim's explicit feedback packets and re-arms its timer.
    pub(super) fn shim_transmit(&mut self, host: u32) {
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

    pub(super) fn sync_shim_timer(&mut self, host: u32) {
        let hs = &mut self.m.shims[host as usize];
        if let Some(at) = hs.shim.as_ref().and_then(|s| s.poll_at()) {
            if hs.timer_at.is_none_or(|t| at < t) {
                hs.timer_at = Some(at);
                let at = at.max(self.now);
                self.schedule(at, EvKind::ShimTimer(host));
            }
        }
    }

    pub(super) fn scripted_drop(&mut self, f: u32, id: PktId) -> bool {
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
}
