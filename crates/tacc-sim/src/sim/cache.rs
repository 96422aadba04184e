//! What the engine knows of the cache: when prefetching pays (`Port::outgrow_l2`), the
//! prefetch hint itself, and which lines each event will read, asked for two to four events
//! ahead by the loop. The layouts these lines come from are the structs' own (`Port`,
//! `EpSlot`, `TcpEndpoint`'s hot lines, `fifo`), each `repr(C)` with its fields in the order
//! an event reads them.

use crate::model::{EpKind, EpSlot, Model, Port, IP_BASE};
use crate::packet::{Packet, PktId};
use crate::topology::NodeRef;

use super::{EvKind, Sim};

/// A hint to load the cache line at `p`; never faults, whatever `p` is.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing the program sees and cannot fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

impl Port {
    /// Whether `n` ports outgrow a core's L2 cache (1 MB on the development machine): a
    /// fabric whose events then mostly wait for memory, where prefetching and huge pages pay.
    pub fn outgrow_l2(n: usize) -> bool {
        n * std::mem::size_of::<Port>() > 1 << 20
    }
}

impl Model {
    /// Asks the cache for switch `s`'s forwarding entry towards address `dst`.
    #[inline]
    pub(crate) fn prefetch_route(&self, s: u32, dst: u32) {
        if let Some(e) = self.fib.entry(s, dst.wrapping_sub(IP_BASE + 1) as usize) {
            prefetch(e);
        }
    }
}

impl Sim {
    /// Asks the cache for what event `kind` will read first, while the current event runs. On a
    /// large fabric the ports, packets and endpoints an event touches are mostly not in the
    /// cache, and each is otherwise a wait for memory.
    #[inline]
    pub(super) fn prefetch(&self, kind: EvKind) {
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
    pub(super) fn prefetch_next(&self, kind: EvKind) {
        let (port, id) = match kind {
            EvKind::Arrive(port, id) => (port, id),
            EvKind::TxDone(port) => {
                self.prefetch_port(port);
                // The port, asked for one event earlier, says where its next packet's id is.
                if let Some(p) = self.m.ports.get(port as usize) {
                    if let Some(head) = p.queue.head_addr() {
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
    pub(super) fn arrival(&self, port: u32, id: PktId) -> Option<(NodeRef, &Packet)> {
        Some((
            self.m.ports.get(port as usize)?.to(),
            self.pkts.try_get(id)?,
        ))
    }

    /// An arrival at a host: its packet and its endpoint's slot, if they exist.
    #[inline]
    fn host_arrival(&self, kind: EvKind) -> Option<(&Packet, &EpSlot)> {
        let EvKind::Arrive(port, id) = kind else {
            return None;
        };
        let (NodeRef::Host(_), pkt) = self.arrival(port, id)? else {
            return None;
        };
        Some((pkt, self.m.eps.get(pkt.dst_ep as usize)?))
    }

    /// The third step for an arrival at a host, from the slot `prefetch_next` brought in: the
    /// lines of its TCP endpoint that the segment's processing reads, and its NIC's (the
    /// reply's queue).
    #[inline]
    pub(super) fn prefetch_endpoint(&self, kind: EvKind) {
        let Some((pkt, slot)) = self.host_arrival(kind) else {
            return;
        };
        if let EpKind::Tcp(t) = &slot.kind {
            use crate::tcp::TcpEndpoint;
            let lines = if pkt.payload() > 0 {
                // New bytes are credited to the flow's record (`Sim::credit`): one of
                // thousands, long out of the cache on a large fabric. Its first line holds
                // what a credit reads.
                prefetch(self.m.flows.as_ptr().wrapping_add(slot.flow as usize));
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

    /// The last step for an arrival at a host, one event before it, from the lines
    /// `prefetch_endpoint` brought in: an ACK's oldest segment records, which it takes off,
    /// and where its sender records the segments it lets out, in a buffer of their own; and
    /// the head entry of the NIC queue that the reply joins, settled first.
    #[inline]
    pub(super) fn prefetch_host(&self, kind: EvKind) {
        let Some((pkt, slot)) = self.host_arrival(kind) else {
            return;
        };
        if let (0, EpKind::Tcp(t)) = (pkt.payload(), &slot.kind) {
            if let Some((oldest, newest)) = t.sent_ends() {
                // Two records of 32 bytes, across a line's end or not: a delayed ACK's.
                prefetch(oldest);
                prefetch(oldest.wrapping_add(63));
                prefetch(newest.wrapping_add(32));
            }
        }
        if let Some(v) = slot.vnic_in_nic() {
            let nic = self.m.ports.get(v.nic as usize);
            if let Some(head) = nic.and_then(|p| p.queue.head_addr()) {
                prefetch(head);
            }
        }
    }

    /// The lines of a port a packet's admission and transmission read and write (see `Port`).
    #[inline]
    pub(super) fn prefetch_port(&self, port: u32) {
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
}
