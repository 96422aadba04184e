//! The SACK scoreboard (RFC 6675): each segment sent with its state (SACKed, lost,
//! retransmitted), SACK blocks taken in, and losses inferred from them.

use super::*;

pub(super) const SACKED: u8 = 1;
pub(super) const LOST: u8 = 2;
pub(super) const RETRANS: u8 = 4;

pub(super) fn in_pipe(flags: u8) -> bool {
    flags & SACKED == 0 && (flags & LOST == 0 || flags & RETRANS != 0)
}

/// A hole to retransmit: lost, neither SACKed nor retransmitted yet.
pub(super) fn to_resend(flags: u8) -> bool {
    flags & (LOST | RETRANS | SACKED) == LOST
}

/// A retransmission not yet known to have arrived.
pub(super) fn retrans_out(flags: u8) -> bool {
    flags & (RETRANS | SACKED) == RETRANS
}

#[derive(Clone, Debug)]
pub(super) struct Seg {
    pub(super) start: u64,
    pub(super) len: u32,
    pub(super) sent_at: u64,
    pub(super) flags: u8,
    /// `nxt` when the segment was last retransmitted: data from there on was sent after it.
    /// 0 for a segment never retransmitted.
    pub(super) resent_nxt: u64,
}

impl Seg {
    /// Orders segments by when they were last sent, ties within one nanosecond included:
    /// first transmissions go out in sequence order, and a retransmission comes after the
    /// data below the `nxt` it was sent at and before the data above.
    pub(super) fn send_order(&self) -> (u64, u64, u64) {
        let end = self.start + self.len as u64;
        let key = match self.resent_nxt {
            0 => 2 * end,
            nxt => 2 * nxt + 1,
        };
        (self.sent_at, key, end)
    }
}

impl TcpEndpoint {
    pub(super) fn set_flags(&mut self, i: usize, flags: u8) {
        let s = &mut self.segs[i];
        let (before, resend_before) = (in_pipe(s.flags), to_resend(s.flags));
        match (retrans_out(s.flags), retrans_out(flags)) {
            (true, false) => self.retrans_out -= 1,
            (false, true) => self.retrans_out += 1,
            _ => {}
        }
        match (s.flags & SACKED, flags & SACKED) {
            (0, SACKED) => self.sacked_out += 1,
            (SACKED, 0) => self.sacked_out -= 1,
            _ => {}
        }
        s.flags = flags;
        match (before, in_pipe(flags)) {
            (true, false) => self.pipe -= s.len as u64,
            (false, true) => self.pipe += s.len as u64,
            _ => {}
        }
        match (resend_before, to_resend(flags)) {
            (true, false) => self.resend -= 1,
            (false, true) => self.resend += 1,
            _ => {}
        }
    }

    pub(super) fn seg_index(&self, start: u64) -> Option<usize> {
        self.segs.binary_search_by_key(&start, |s| s.start).ok()
    }

    /// Marks what an ACK's SACK blocks cover and keeps the blocks; returns the bytes newly
    /// SACKed.
    pub(super) fn take_sack_blocks(&mut self, now: u64, sack: &[(u32, u32)]) -> u64 {
        let mut newly_sacked = 0;
        let mut blocks = [(0, 0); 3];
        for (block, &(a, b)) in blocks.iter_mut().zip(sack) {
            let a = unwrap(a.wrapping_sub(self.iss), self.una + 1).saturating_sub(1);
            let b = unwrap(b.wrapping_sub(self.iss), self.una + 1).saturating_sub(1);
            newly_sacked += self.mark_sacked(now, a, b);
            *block = (a, b.min(self.nxt));
        }
        self.sacked_blocks = blocks;
        newly_sacked
    }

    /// Marks segments inside [a, b) as SACKed; returns the bytes newly SACKed.
    pub(super) fn mark_sacked(&mut self, now: u64, a: u64, b: u64) -> u64 {
        if b <= a || b <= self.una {
            return 0;
        }
        // Skip the segments of a known block this one starts in.
        let known_end = self
            .sacked_blocks
            .iter()
            .filter(|&&(a0, b0)| a0 <= a && a <= b0)
            .map(|&(_, b0)| b0)
            .fold(a, u64::max);
        let mut i = self
            .segs
            .partition_point(|s| s.start < a || s.start + s.len as u64 <= known_end);
        debug_assert!(self
            .segs
            .range(self.segs.partition_point(|s| s.start < a)..i)
            .all(|s| s.flags & SACKED != 0));
        let mut newly = 0;
        while i < self.segs.len() {
            let s = &self.segs[i];
            if s.start + s.len as u64 > b {
                break;
            }
            if s.flags & SACKED == 0 {
                newly += s.len as u64;
                let f = s.flags;
                if self.cfg.rack {
                    let s = s.clone();
                    self.rack_advance(now, &s);
                }
                self.set_flags(i, (f | SACKED) & !LOST);
            }
            i += 1;
        }
        newly
    }

    /// RFC 6675 IsLost: a hole with DupThresh SACKed segments above it is lost.
    pub(super) fn mark_lost_by_sack(&mut self) {
        let mut sacked_above = 0u32;
        let settled = self.lost_below;
        debug_assert!(self
            .segs
            .iter()
            .take_while(|s| s.start < settled)
            .all(|s| s.flags & (LOST | SACKED) != 0));
        for i in (0..self.segs.len()).rev() {
            let s = &self.segs[i];
            if s.start < settled {
                break;
            }
            let f = s.flags;
            if f & SACKED != 0 {
                sacked_above += 1;
            } else if sacked_above >= self.cfg.dupthresh {
                // This segment and every one below it end up LOST or SACKED.
                self.lost_below = self.lost_below.max(s.start + 1);
                if f & LOST == 0 {
                    self.set_flags(i, f | LOST);
                }
            }
        }
    }

    /// A retransmission is lost when DupThresh segments first sent after it were SACKed (the
    /// rule Linux applied before RACK): it is sent again within the same recovery. Without
    /// this only the RTO finds a lost retransmission, and until then SACKs for new data keep
    /// the window open while the recovery, and with it any further reduction, cannot end.
    #[cold]
    pub(super) fn mark_lost_retransmissions(&mut self) {
        let sacked: Vec<u64> = self
            .segs
            .iter()
            .filter(|s| s.flags & SACKED != 0)
            .map(|s| s.start)
            .collect();
        for i in 0..self.segs.len() {
            let s = &self.segs[i];
            if !retrans_out(s.flags) {
                continue;
            }
            let after = sacked.len() - sacked.partition_point(|&a| a < s.resent_nxt);
            if after >= self.cfg.dupthresh as usize {
                let f = s.flags;
                self.set_flags(i, (f | LOST) & !RETRANS);
            }
        }
    }
}
