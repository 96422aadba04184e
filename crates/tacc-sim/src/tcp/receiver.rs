//! The receiving side: in-order and out-of-order data, the ACK field, the advertised window
//! and the SACK blocks a receiver reports.

use super::*;
use crate::cc::CcKind;
use crate::packet::{Packet, Sack};
use tacc_mech::headers::{tcp_flags as F, Ecn};

impl TcpEndpoint {
    pub(super) fn ack_field(&self) -> u32 {
        self.irs
            .wrapping_add((1 + self.rcv_nxt + self.fin_consumed as u64) as u32)
    }

    /// The application reads in-order data at once, so the window's right edge stays at
    /// `rcv_nxt + rcv_buf`. Out-of-order data lies inside the window the sender already counts
    /// as in flight; taking it off again would move the right edge left (RFC 9293 3.8.6
    /// advises against shrinking) and, without SACK, make every duplicate ACK carry another
    /// window, which the sender does not count as a duplicate.
    pub(super) fn adv_window(&self) -> u16 {
        (self.cfg.rcv_buf >> self.rcv_wscale).min(65535) as u16
    }

    pub(super) fn sack_blocks(&self) -> Sack {
        let mut s = Sack::default();
        let base = self.irs.wrapping_add(1);
        let push = |s: &mut Sack, (a, b): (u64, u64)| {
            if (s.len as usize) < s.blocks.len() {
                s.blocks[s.len as usize] =
                    (base.wrapping_add(a as u32), base.wrapping_add(b as u32));
                s.len += 1;
            }
        };
        if let Some(dup) = self.dsack {
            push(&mut s, dup);
        }
        let first = self
            .last_ooo
            .and_then(|(a, _)| self.ooo.iter().copied().find(|r| r.0 <= a && a < r.1));
        if let Some(r) = first {
            push(&mut s, r);
        }
        for r in self.ooo.iter().rev() {
            if Some(*r) != first {
                push(&mut s, *r);
            }
        }
        s
    }

    pub(super) fn on_data(&mut self, now: u64, p: &Packet) {
        let off = unwrap(p.seq.wrapping_sub(self.irs), self.rcv_nxt + 1);
        let start = off.saturating_sub(1);
        let end = start + p.payload() as u64;
        if p.flags & F::FIN != 0 {
            self.peer_fin = end;
        }
        if p.flags & F::CWR != 0 {
            self.ece_latch = false;
        }
        let ce = p.ecn == Ecn::Ce;
        if self.cfg.cc == CcKind::Dctcp {
            if ce != self.dctcp_ce {
                // RFC 8257 3.2: ACK what came before with the old CE state first.
                if self.ack_pending > 0 {
                    self.ack_now = true;
                }
                self.dctcp_ce = ce;
            }
        } else if ce && self.ecn_ok {
            if self.cfg.quickack && !self.ece_latch {
                // Linux: the sender may have a small window; do not delay the echo.
                self.quick = self.quick.max(2);
            }
            self.ece_latch = true;
        }
        let had_holes = !self.ooo.is_empty();
        if p.payload() > 0 {
            if end <= self.rcv_nxt {
                self.ack_now = true; // duplicate
                self.on_duplicate(start, end);
            } else if start <= self.rcv_nxt {
                if start < self.rcv_nxt && self.cfg.dsack {
                    self.dsack = Some((start, self.rcv_nxt));
                    self.ack_now = true;
                }
                if self.cfg.quickack && self.rcv_nxt == 0 {
                    // The connection's first data: Linux's tcp_event_data_recv.
                    self.quick = self.quick_acks(16);
                }
                self.rcv_nxt = end;
                while let Some(&(a, b)) = self.ooo.first() {
                    if a > self.rcv_nxt {
                        break;
                    }
                    self.rcv_nxt = self.rcv_nxt.max(b);
                    self.ooo.remove(0);
                }
                if had_holes {
                    self.ack_now = true;
                }
                self.ack_pending += 1;
            } else {
                if self.cfg.dsack && self.ooo.iter().any(|&(a, b)| a <= start && end <= b) {
                    self.dsack = Some((start, end));
                }
                self.insert_ooo(start, end);
                self.last_ooo = Some((start, end));
                self.ack_now = true;
            }
        }
        // (`rcv_nxt` never reaches `NO_FIN`.)
        if !self.fin_consumed && self.rcv_nxt == self.peer_fin {
            self.fin_consumed = true;
            self.ack_now = true;
            // Passive close: nothing more to say once the peer is done.
            if self.app_limit == self.nxt {
                self.close_requested = true;
            }
        }
        let quick = self.cfg.quickack && self.quick > 0;
        if self.ack_pending >= self.cfg.delack_count || (quick && self.ack_pending > 0) {
            self.ack_now = true;
        } else if self.ack_pending > 0 && self.delack_deadline.is_none() {
            self.delack_deadline = Some(now + self.cfg.delack_timeout);
        }
    }

    /// Quick ACKs a receiver grants (Linux's tcp_incr_quickack): half its window in
    /// segments, at least 2, at most `most`.
    fn quick_acks(&self, most: u8) -> u8 {
        let half_window = self.cfg.rcv_buf / (2 * self.cfg.mss as u64);
        half_window.clamp(2, most as u64) as u8
    }

    /// Data that arrived before: reported in a D-SACK block, and ACKs go out at once for a
    /// while (Linux: tcp_enter_quickack_mode on a duplicate).
    fn on_duplicate(&mut self, start: u64, end: u64) {
        if self.cfg.dsack {
            self.dsack = Some((start, end));
        }
        if self.cfg.quickack {
            self.quick = self.quick.max(self.quick_acks(16));
        }
    }

    pub(super) fn insert_ooo(&mut self, a: u64, b: u64) {
        let i = self.ooo.partition_point(|r| r.1 < a);
        let mut lo = a;
        let mut hi = b;
        let mut j = i;
        while j < self.ooo.len() && self.ooo[j].0 <= hi {
            lo = lo.min(self.ooo[j].0);
            hi = hi.max(self.ooo[j].1);
            j += 1;
        }
        self.ooo.splice(i..j, [(lo, hi)]);
    }
}
