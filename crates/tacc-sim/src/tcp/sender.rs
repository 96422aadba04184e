//! The sending side: ACK processing (RTT samples, the congestion control's reaction, fast
//! recovery with PRR), the retransmission timer, and what goes out next within the window.

use super::*;
use crate::cc::{CcKind, Congestion};
use crate::packet::{Packet, IP_HEADER, TCP_HEADER};
use tacc_mech::headers::{ip_proto, tcp_flags as F, Ecn};

impl TcpEndpoint {
    pub(super) fn seq_of(&self, off: u64) -> u32 {
        self.iss.wrapping_add(off as u32)
    }

    /// The header fields every segment carries; the caller adds options and the checksum.
    #[inline]
    pub(super) fn header(
        &self,
        flags: u8,
        off: u64,
        payload: u32,
        ack: u32,
        window: u16,
    ) -> Packet {
        let mut p = Packet::new(
            self.local.0,
            self.remote.0,
            ip_proto::TCP,
            IP_HEADER + TCP_HEADER + payload,
        );
        p.sport = self.local.1;
        p.dport = self.remote.1;
        p.seq = self.seq_of(off);
        p.ack = ack;
        p.flags = flags;
        p.window = window;
        p.dst_ep = self.peer_ep;
        p
    }

    /// A segment after the handshake: it acknowledges, echoes CE and reports SACK blocks.
    #[inline(always)]
    pub(super) fn segment(&self, flags: u8, off: u64, payload: u32) -> Packet {
        debug_assert!(flags & F::ACK != 0 && flags & F::SYN == 0);
        let echo = if self.cfg.cc == CcKind::Dctcp {
            self.dctcp_ce
        } else {
            self.ece_latch
        };
        let ece = if self.ecn_ok && echo { F::ECE } else { 0 };
        let mut p = self.header(
            flags | ece,
            off,
            payload,
            self.ack_field(),
            self.adv_window(),
        );
        // A D-SACK is pending only where a duplicate asked for an ACK now.
        let dsack = self.cfg.dsack && self.ack_now && self.dsack.is_some();
        if self.sack_ok && (!self.ooo.is_empty() || dsack) {
            p.set_sack(&self.sack_blocks());
        }
        p.fill_tcp_checksum();
        p
    }

    pub(super) fn rtt_sample(&mut self, r: u64) {
        self.min_rtt = self.min_rtt.min(r);
        if self.cfg.rto_linux {
            self.linux_rtt_sample(r);
            return;
        }
        let r = r as f64;
        if self.srtt == 0.0 {
            self.srtt = r;
            self.rttvar = r / 2.0;
        } else {
            self.rttvar = 0.75 * self.rttvar + 0.25 * (self.srtt - r).abs();
            self.srtt = 0.875 * self.srtt + 0.125 * r;
        }
        let rto = (self.srtt + 4.0 * self.rttvar) as u64;
        self.rto = rto.clamp(self.cfg.rto_min, self.cfg.rto_max);
        if self.cfg.tlp {
            self.probe_base = 2 * self.srtt as u64 + TIMEOUT_MIN;
        }
    }

    /// Linux's tcp_rtt_estimator and __tcp_set_rto (tcp_input.c): the same smoothed RTT, but
    /// the variance term starts at rto_min or more, follows the largest deviation of the
    /// round trip and decays by a quarter per round trip only, so RTO >= SRTT + rto_min.
    fn linux_rtt_sample(&mut self, m: u64) {
        let rto_min = self.cfg.rto_min;
        if self.srtt == 0.0 {
            self.srtt = m as f64;
            self.mdev = 2 * m;
            self.rttvar_linux = self.mdev.max(rto_min);
            self.mdev_max = self.rttvar_linux;
            self.rtt_seq = self.nxt;
        } else {
            let err = m as f64 - self.srtt;
            self.srtt += err / 8.0;
            let mdev = self.mdev as f64;
            // A falling RTT moves the deviation up with a gain of 1/32 only.
            let e = if err < 0.0 && -err > mdev / 4.0 {
                (-err - mdev / 4.0) / 8.0
            } else {
                err.abs() - mdev / 4.0
            };
            self.mdev = (mdev + e).max(0.0) as u64;
            if self.mdev > self.mdev_max {
                self.mdev_max = self.mdev;
                self.rttvar_linux = self.rttvar_linux.max(self.mdev_max);
            }
            if self.una > self.rtt_seq {
                if self.mdev_max < self.rttvar_linux {
                    self.rttvar_linux -= (self.rttvar_linux - self.mdev_max) / 4;
                }
                self.rtt_seq = self.nxt;
                self.mdev_max = rto_min;
            }
        }
        let srtt = self.srtt as u64;
        self.rto = (srtt + self.rttvar_linux).min(self.cfg.rto_max);
        self.probe_base = 2 * srtt + TIMEOUT_MIN;
    }

    pub(super) fn on_ack(&mut self, now: u64, p: &Packet) {
        let ack_off = unwrap(p.ack.wrapping_sub(self.iss), self.una + 1);
        let data_end = self.nxt;
        // Bytes of data acknowledged: offset minus the SYN, capped at what was sent.
        let mut acked_to = ack_off.saturating_sub(1).min(data_end);
        if self.fin_sent && ack_off >= data_end + 2 {
            self.fin_acked = true;
            acked_to = data_end;
        }
        let window = (p.window as u64) << self.peer_wscale;
        let window_changed = window != self.snd_wnd;
        self.snd_wnd = window;
        if self.cfg.bounded.is_some_and(|(_, max)| window > max) {
            self.grow_max_window(window);
        }

        let mut newly_sacked = 0u64;
        // The ACK reports the probe's segment as a duplicate (Linux's FLAG_DSACK_TLP).
        let mut dsack_probe = false;
        if self.sack_ok {
            // Most ACKs carry no blocks: nothing to unwrap or mark.
            if p.sack_blocks().is_empty() {
                self.sacked_blocks = [(0, 0); 3];
            } else {
                newly_sacked = self.take_sack_blocks(now, p.sack_blocks());
                if self.cfg.tlp && self.tlp_high != NO_PROBE {
                    let (a, b) = self.sacked_blocks[0];
                    let dsack = a < acked_to
                        || p.sack_blocks().len() > 1
                            && self.sacked_blocks[1].0 <= a
                            && b <= self.sacked_blocks[1].1;
                    dsack_probe = dsack && b == self.tlp_high && b - a <= self.cfg.mss as u64;
                }
            }
        }

        let ece = self.ecn_ok && p.flags & F::ECE != 0;
        let acked = acked_to.saturating_sub(self.una);
        // Bytes that reached the receiver with this ACK (RFC 6937's DeliveredData): newly
        // acknowledged, less what was SACKed before, plus what is newly SACKed.
        let mut delivered = acked + newly_sacked;
        if acked > 0 {
            let mut sample = None;
            let rack = self.rack_on();
            let mut sacked_out = self.sacked_out;
            while let Some(s) = self.segs.front() {
                if s.start + s.len as u64 > acked_to {
                    break;
                }
                let s = self.segs.pop_front().unwrap();
                if s.flags & SACKED != 0 {
                    delivered -= s.len as u64;
                    sacked_out -= 1;
                } else if rack {
                    // Delivered below data SACKed before it, never sent twice: reordering.
                    if s.resent_nxt == 0 && sacked_out > 0 {
                        self.reord_seen = true;
                    }
                    self.rack_advance(now, &s);
                }
                if in_pipe(s.flags) {
                    self.pipe -= s.len as u64;
                }
                if to_resend(s.flags) {
                    self.resend -= 1;
                }
                if retrans_out(s.flags) {
                    self.retrans_out -= 1;
                }
                sample = if self.cfg.timestamps {
                    // The ACK echoes the timestamp of the segment that moved it, a
                    // retransmission's too; one SACKed before moved nothing (RFC 7323 4.3).
                    if s.flags & SACKED == 0 {
                        Some(now - s.sent_at)
                    } else {
                        sample
                    }
                } else if s.flags & RETRANS == 0 {
                    Some(now - s.sent_at)
                } else {
                    None
                };
            }
            self.una = acked_to;
            self.sacked_out = sacked_out;
            if let Some(r) = sample {
                self.rtt_sample(r);
                if self.cfg.hystart && self.cfg.cc == CcKind::Cubic {
                    let (una, nxt) = (self.una, self.nxt);
                    self.cc.hystart(&mut self.win, r, now, una, nxt, self.srtt);
                }
            }
            self.dupacks = 0;
            // The first acknowledged segment is the one the duplicates were about.
            self.dup_left = self
                .dup_left
                .saturating_sub(acked.saturating_sub(self.cfg.mss as u64));
            self.cc.on_ack_ecn(acked, ece, self.una, self.nxt);
            if self.in_recovery {
                if self.una >= self.recover {
                    self.in_recovery = false;
                    self.dup_left = 0;
                    if self.cfg.prr {
                        self.win.cwnd = self.win.ssthresh;
                    }
                } else if !self.sack_ok {
                    // NewReno partial ACK: the next hole is lost too.
                    if !self.segs.is_empty() {
                        let f = self.segs[0].flags;
                        self.set_flags(0, (f | LOST) & !RETRANS);
                    }
                }
            } else if self.in_cwr && self.una <= self.ecn_reduce_end {
                // The window after an ECN reduction: no growth until it is acknowledged.
            } else if !self.cfg.cwnd_validation || self.cwnd_limited() {
                let srtt = self.srtt;
                self.cc.on_ack(&mut self.win, acked, now, srtt);
            }
            if self.una >= self.window_end {
                self.prev_max_pipe = self.max_pipe;
                self.max_pipe = self.pipe;
                self.window_end = self.nxt;
            }
            self.set_xmit_timer(now);
        } else {
            // Nothing for DCTCP's estimator: no bytes, and `una` has not moved past the
            // window end it set when `una` last moved.
            let outstanding = self.una < self.nxt;
            if outstanding
                && p.payload() == 0
                && (newly_sacked > 0 || (!self.sack_ok && !window_changed))
            {
                self.dupacks += 1;
                if !self.sack_ok {
                    // The hole itself has not left.
                    let out = (self.nxt - self.una).saturating_sub(self.cfg.mss as u64);
                    self.dup_left = (self.dup_left + self.cfg.mss as u64).min(out);
                }
            }
        }
        if self.una == self.nxt && (!self.fin_sent || self.fin_acked) {
            self.rto_deadline = None;
        }

        // Once per window (RFC 3168 6.1.2): the ACK that covers exactly the data sent before
        // the last reduction still echoes ECE, because CWR rides on the first segment sent
        // after it; only an ACK beyond that point may reduce again (Linux holds CA_CWR until
        // snd_una passes high_seq).
        if self.in_cwr && self.una > self.ecn_reduce_end {
            self.in_cwr = false;
            if self.cfg.prr {
                self.win.cwnd = self.win.ssthresh;
            }
        }
        // Only probes set `tlp_high`; without TLP its line is not read on every ACK
        // (`on_probe_ack` is out of line for that).
        if self.cfg.tlp {
            let progress = acked > 0 || newly_sacked > 0 || window_changed || p.payload() > 0;
            self.on_probe_ack(acked_to, dsack_probe, progress);
        }
        if ece && !self.in_recovery && self.una > self.ecn_reduce_end {
            let flight = self.nxt - self.una;
            self.tlp_high = NO_PROBE;
            self.cc
                .on_congestion(&mut self.win, Congestion::Ecn, flight);
            self.ecn_reduce_end = self.nxt;
            self.cwr_pending = true;
            self.in_cwr = true;
            self.stats.ecn_reductions += 1;
            self.prr_start(flight);
        }

        if self.rack_on() {
            // Linux runs RACK on an ACK that is not plainly in order (tcp_ack_is_dubious).
            let dubious = !p.sack_blocks().is_empty()
                || self.in_recovery
                || self.retrans_out > 0
                || self.una < self.recover;
            if dubious && self.rack_advanced {
                let (_, wait) = self.rack_detect(now);
                if wait > 0 {
                    let after = (wait + TIMEOUT_MIN).min(self.rto);
                    self.set_timer(Timer::Reorder, now + after);
                }
            }
        } else if self.sack_ok && newly_sacked > 0 {
            self.mark_lost_by_sack();
            if self.retrans_out > 0 {
                self.mark_lost_retransmissions();
            }
        }
        // After a timeout, whatever was sent before it is being sent again in slow start: the
        // duplicate ACKs and holes of that data do not start a fast recovery (RFC 6582 3.2
        // step 1, RFC 6675 5.1), which would set cwnd to half the old flight at once and send
        // the whole window again in one burst.
        if !self.in_recovery && self.una >= self.recover {
            if self.rack_on() {
                // With RACK a recovery starts once a loss is marked (tcp_time_to_recover).
                if self.resend > 0 {
                    self.enter_recovery();
                }
            } else if let Some(first) = self.segs.front() {
                if self.dupacks >= self.cfg.dupthresh || first.flags & LOST != 0 {
                    self.enter_recovery();
                }
            }
        }
        if self.prr_active() {
            self.prr_on_ack(delivered);
        }
    }

    /// Whether PRR sets the window now: in a loss recovery, or in the round trip after an ECN
    /// reduction.
    pub(super) fn prr_active(&self) -> bool {
        self.cfg.prr && (self.in_recovery || (self.in_cwr && self.una <= self.ecn_reduce_end))
    }

    /// A reduction starts with `flight` bytes outstanding (RecoverFS); `on_congestion` has set
    /// ssthresh. Under PRR the window is set ACK by ACK from here on, starting from the flight.
    pub(super) fn prr_start(&mut self, flight: u64) {
        if self.cfg.prr {
            self.prr_recover_fs = flight.max(1);
            self.prr_delivered = 0;
            self.prr_out = 0;
            self.win.cwnd = flight as f64;
        }
    }

    /// RFC 6937 on an ACK that delivered `delivered` bytes: the window is the pipe plus what
    /// may be sent now, in proportion to the delivered data while the pipe is above ssthresh,
    /// then up to ssthresh with slow-start reduction bound.
    pub(super) fn prr_on_ack(&mut self, delivered: u64) {
        self.prr_delivered += delivered;
        let pipe = self.pipe.saturating_sub(self.dup_left);
        let ssthresh = self.win.ssthresh as u64;
        let mss = self.cfg.mss as u64;
        let sndcnt = if pipe > ssthresh {
            (self.prr_delivered * ssthresh)
                .div_ceil(self.prr_recover_fs)
                .saturating_sub(self.prr_out)
        } else {
            let limit = self
                .prr_delivered
                .saturating_sub(self.prr_out)
                .max(delivered)
                + mss;
            (ssthresh - pipe).min(limit)
        };
        self.win.cwnd = (pipe + sndcnt) as f64;
    }

    #[cold]
    pub(super) fn enter_recovery(&mut self) {
        let flight = self.nxt - self.una;
        self.cc
            .on_congestion(&mut self.win, Congestion::Loss, flight);
        self.prr_start(flight);
        self.in_recovery = true;
        self.recover = self.nxt;
        self.stats.fast_retransmits += 1;
        // Loss and ECN reductions share one per-window budget.
        self.ecn_reduce_end = self.nxt;
        self.in_cwr = false;
        self.tlp_high = NO_PROBE;
        if !self.rack_on() {
            let f = self.segs[0].flags;
            if f & LOST == 0 {
                self.set_flags(0, f | LOST);
            }
        }
    }

    // ------------------------------------------------------------------ RACK and TLP

    pub(super) fn rack_on(&self) -> bool {
        self.cfg.rack && self.sack_ok
    }

    /// RFC 8985 6.2 step 2 (Linux's tcp_rack_advance): segment `s` was delivered. A
    /// retransmitted one that seems to have arrived faster than the minimum RTT was its
    /// original: it tells nothing.
    pub(super) fn rack_advance(&mut self, now: u64, s: &Seg) {
        let rtt = now - s.sent_at;
        if s.resent_nxt != 0 && rtt < self.min_rtt {
            return;
        }
        self.rack_advanced = true;
        self.rack_rtt = rtt;
        // Most segments delivered were sent later than any before them.
        if s.sent_at > self.rack_sent.0 {
            self.rack_sent = s.send_order();
        } else if s.sent_at == self.rack_sent.0 {
            self.rack_sent = self.rack_sent.max(s.send_order());
        }
    }

    /// The reordering window (Linux's tcp_rack_reo_wnd): none before reordering is seen once
    /// in recovery or once DupThresh segments are SACKed, else a quarter of the minimum RTT,
    /// at most the smoothed RTT.
    fn rack_reo_wnd(&self) -> u64 {
        let recovering = self.in_recovery || self.una < self.recover;
        if !self.reord_seen && (recovering || self.sacked_out >= self.cfg.dupthresh) {
            return 0;
        }
        (self.min_rtt / 4).min(self.srtt as u64)
    }

    /// RFC 8985 6.2 step 5 (Linux's tcp_rack_detect_loss): every segment sent before the
    /// most recently sent delivered one, and out for longer than RACK.rtt plus the reordering
    /// window, is lost. Returns whether any was newly marked, and the longest any other of
    /// them has yet to wait.
    fn rack_detect(&mut self, now: u64) -> (bool, u64) {
        self.rack_advanced = false;
        let reo_wnd = self.rack_reo_wnd();
        let (mut lost, mut wait) = (false, 0);
        for i in 0..self.segs.len() {
            let s = &self.segs[i];
            let f = s.flags;
            if f & SACKED != 0 || f & (LOST | RETRANS) == LOST {
                continue;
            }
            if s.send_order() >= self.rack_sent {
                // Sent after it: a first transmission, and every segment after it was sent
                // later still; a retransmission may have later ones sent earlier.
                if s.resent_nxt == 0 {
                    break;
                }
                continue;
            }
            let timeout = self.rack_rtt + reo_wnd;
            let age = now - s.sent_at;
            if age >= timeout {
                self.set_flags(i, (f | LOST) & !RETRANS);
                lost = true;
            } else {
                wait = wait.max(timeout - age);
            }
        }
        (lost, wait)
    }

    /// RACK's reordering timer (Linux's tcp_rack_reo_timeout): what has waited out the window
    /// is lost, and a recovery starts if none is under way.
    pub(super) fn on_reorder_timer(&mut self, now: u64) {
        let (lost, _) = self.rack_detect(now);
        if lost && !self.in_recovery && self.una >= self.recover {
            self.enter_recovery();
            if self.prr_active() {
                // As tcp_cwnd_reduction(sk, 1, ...): one segment's worth delivered.
                self.prr_on_ack(self.cfg.mss as u64);
            }
        }
        self.rearm_rto_from_head(now);
    }

    /// Whether a tail loss probe may be armed (Linux's tcp_schedule_loss_probe): data out,
    /// SACK on, no recovery, nothing SACKed, lost or retransmitted.
    fn can_probe(&self) -> bool {
        self.cfg.tlp
            && self.sack_ok
            && self.una < self.nxt
            && !self.in_recovery
            && self.una >= self.recover
            && (self.sacked_out | self.resend | self.retrans_out) == 0
    }

    /// The probe timeout: two smoothed RTTs, plus rto_min with a single segment out (its ACK
    /// may be delayed) or 2 ms with more; 1 s before any RTT sample.
    fn probe_timeout(&self) -> u64 {
        match self.probe_base {
            0 => 1_000_000_000,
            base if self.segs.len() == 1 => base - TIMEOUT_MIN + self.cfg.rto_min,
            base => base,
        }
    }

    /// On an ACK that acknowledged data (Linux's tcp_set_xmit_timer): the probe if one may
    /// be armed, no later than the RTO, else the RTO.
    fn set_xmit_timer(&mut self, now: u64) {
        if self.can_probe() {
            let after = self.probe_timeout().min(self.rto);
            self.set_timer(Timer::Probe, now + after);
        } else {
            self.restart_rto(now);
        }
    }

    /// After new data went out: the probe, no later than the RTO counted from the oldest
    /// segment's send.
    fn schedule_probe_after_send(&mut self, now: u64) {
        if !self.can_probe() {
            return;
        }
        let rto_left = self.rto_from_head(now) - now;
        let after = self.probe_timeout().min(rto_left);
        self.set_timer(Timer::Probe, now + after);
    }

    pub(super) fn on_probe_timer(&mut self, now: u64) {
        if self.tlp_high != NO_PROBE || self.una == self.nxt {
            // One probe per tail (Linux's tlp_high_seq).
            self.rearm_rto_from_head(now);
        } else {
            self.probe_due = true;
        }
    }

    /// RFC 8985 7.3 (Linux's tcp_send_loss_probe): a new segment if the receive window lets
    /// it go, whatever cwnd says, else the last one again. Returns whether one was sent.
    fn send_probe(&mut self, now: u64, budget: u32, out: &mut impl FnMut(Packet)) -> bool {
        let mss = self.cfg.mss as u64;
        let avail = self.app_limit.saturating_sub(self.nxt);
        let len = mss.min(avail);
        let fits = len > 0 && self.nxt + len <= self.una + self.snd_wnd;
        let seg = if budget == 0 {
            None // still queued in the host (Linux: skb_still_in_host_queue)
        } else if fits {
            Some((self.nxt, len as u32, false))
        } else {
            self.segs
                .back()
                .filter(|s| s.flags & SACKED == 0)
                .map(|s| (s.start, s.len, true))
        };
        let Some(seg) = seg else {
            self.rearm_rto_from_head(now);
            return false;
        };
        self.tlp_retrans = seg.2;
        self.emit(now, seg, out);
        self.tlp_high = self.nxt;
        self.probes += 1;
        self.restart_rto(now);
        true
    }

    /// Linux's tcp_process_tlp_ack: once the ACK reaches the probe's point, a probe of new
    /// data is done; a retransmitted one repaired a loss (one window reduction) unless a
    /// D-SACK or a pure duplicate ACK shows both copies arrived. Nothing while no probe is
    /// out (`tlp_high` is `NO_PROBE`, above any sequence number). Out of line: inlined, its
    /// first load was hoisted above the caller's test of `cfg.tlp`, and every ACK of every
    /// profile read `tlp_high`'s line, outside the sender's hot ones (2% of a k = 32 fat
    /// tree's time).
    #[inline(never)]
    fn on_probe_ack(&mut self, acked_to: u64, dsack_probe: bool, progress: bool) {
        if acked_to < self.tlp_high {
            return;
        }
        if !self.tlp_retrans || dsack_probe || (acked_to == self.tlp_high && !progress) {
            self.tlp_high = NO_PROBE;
        } else if acked_to > self.tlp_high {
            let flight = self.nxt - self.una;
            self.cc
                .on_congestion(&mut self.win, Congestion::Loss, flight);
            self.tlp_high = NO_PROBE;
        }
    }

    // ------------------------------------------------------------------ timers

    pub(super) fn set_timer(&mut self, timer: Timer, at: u64) {
        self.timer = timer;
        self.rto_deadline = Some(at);
    }

    pub(super) fn restart_rto(&mut self, now: u64) {
        self.set_timer(Timer::Rto, now + self.rto);
    }

    /// When the RTO falls, counted from the oldest segment's last send, not before `now + 1`
    /// (Linux's tcp_rearm_rto after a probe or reordering timer).
    fn rto_from_head(&self, now: u64) -> u64 {
        self.segs
            .front()
            .map_or(now + self.rto, |s| (s.sent_at + self.rto).max(now + 1))
    }

    fn rearm_rto_from_head(&mut self, now: u64) {
        let at = self.rto_from_head(now);
        self.set_timer(Timer::Rto, at);
    }

    pub(super) fn on_rto(&mut self, now: u64) {
        self.rto = (self.rto * 2).min(self.cfg.rto_max);
        match self.state {
            State::SynSent | State::SynRcvd => {
                self.stats.timeouts += 1;
                self.stats.retransmits += 1; // the SYN or SYN-ACK goes again
                self.restart_rto(now);
                if self.state == State::SynRcvd {
                    self.ack_now = true;
                }
                self.ctrl_sent_at = 0; // resend from poll_transmit
                return;
            }
            State::Established => {}
            _ => return,
        }
        let data_out = self.una < self.nxt;
        let fin_out = self.fin_sent && !self.fin_acked;
        if !data_out && !fin_out {
            if self.snd_wnd == 0 && self.app_limit > self.nxt {
                // Zero-window probe: let one segment through.
                self.snd_wnd = 1;
            }
            return;
        }
        self.stats.timeouts += 1;
        let flight = self.nxt - self.una;
        self.cc
            .on_congestion(&mut self.win, Congestion::Timeout, flight);
        self.in_recovery = false;
        self.recover = self.nxt;
        self.ecn_reduce_end = self.nxt;
        self.in_cwr = false;
        self.dupacks = 0;
        self.dup_left = 0;
        self.tlp_high = NO_PROBE;
        let rack = self.rack_on();
        for i in 0..self.segs.len() {
            let s = &self.segs[i];
            // With RACK, what was sent within the last RACK.rtt may still arrive
            // (tcp_timeout_mark_lost); the oldest is lost whatever its age.
            let recent = rack && i > 0 && now - s.sent_at < self.rack_rtt;
            let f = s.flags;
            if f & SACKED == 0 && !recent {
                self.set_flags(i, (f | LOST) & !RETRANS);
            }
        }
        if fin_out && !data_out {
            self.fin_sent = false; // resend the FIN
        }
        self.restart_rto(now);
    }

    // ------------------------------------------------------------------ output

    /// Emits every segment the endpoint may send now, at most `budget` data segments (the
    /// host's small-queue limit; pure ACKs, SYNs and FINs are not counted).
    pub fn poll_transmit(&mut self, now: u64, budget: u32, out: &mut impl FnMut(Packet)) {
        match self.state {
            State::Closed | State::Listen => return,
            State::SynSent => {
                if self.ctrl_sent_at == 0 || self.ack_now {
                    self.ack_now = false;
                    let mut flags = F::SYN;
                    if self.cfg.ecn {
                        flags |= F::ECE | F::CWR;
                    }
                    self.send_ctrl(now, flags, out);
                }
                return;
            }
            State::SynRcvd => {
                if self.ack_now || self.ctrl_sent_at == 0 {
                    self.ack_now = false;
                    let mut flags = F::SYN | F::ACK;
                    if self.ecn_ok {
                        flags |= F::ECE;
                    }
                    self.send_ctrl(now, flags, out);
                }
                return;
            }
            State::Established => {}
        }
        let mut sent_any = false;
        let mut budget = budget;
        if self.probe_due {
            self.probe_due = false;
            if self.send_probe(now, budget, out) {
                sent_any = true;
                budget -= 1;
            }
        }
        // Most calls (every receiver's) have nothing to send: skip the window arithmetic.
        if budget > 0 && (self.resend > 0 || self.app_limit > self.nxt) {
            let nxt = self.nxt;
            // Sending does not change the window.
            let cwnd = self.win.cwnd.max(self.win.mss) as u64;
            for _ in 0..budget {
                let Some(seg) = self.next_segment(cwnd, nxt) else {
                    break;
                };
                self.emit(now, seg, out);
                sent_any = true;
            }
            if self.nxt > nxt && self.cfg.tlp {
                self.schedule_probe_after_send(now);
            }
        }
        if self.close_requested
            && !self.fin_sent
            && self.nxt >= self.app_limit
            && (self.una == self.nxt || self.nxt == self.app_limit)
        {
            self.fin_sent = true;
            let p = self.segment(F::FIN | F::ACK, 1 + self.nxt, 0);
            self.after_send();
            out(p);
            sent_any = true;
            if self.rto_deadline.is_none() {
                self.restart_rto(now);
            }
        }
        if self.ack_now && !sent_any {
            let mut p = self.segment(F::ACK, 1 + self.nxt + (self.fin_sent as u64), 0);
            if self.ecn_ok && self.cfg.cc == CcKind::Dctcp {
                // Linux leaves ECT on every segment of a congestion control that needs ECN.
                p.ecn = Ecn::Ect0;
            }
            self.after_send();
            out(p);
        }
    }

    /// Sends the SYN or SYN-ACK: the options, and the window unscaled (RFC 7323 2.2).
    #[cold]
    pub(super) fn send_ctrl(&mut self, now: u64, flags: u8, out: &mut impl FnMut(Packet)) {
        let ack = if flags & F::ACK != 0 {
            self.ack_field()
        } else {
            0
        };
        let window = self.cfg.rcv_buf.min(65535) as u16;
        let mut p = self.header(flags, 0, 0, ack, window);
        p.set_syn_options(self.cfg.mss as u16, self.rcv_wscale);
        p.fill_tcp_checksum();
        if self.cfg.ecn && (self.cfg.ecn_syn || self.cfg.cc == CcKind::Dctcp) {
            p.ecn = Ecn::Ect0;
        }
        self.ctrl_sent_at = now.max(1);
        self.stats.segments_sent += 1;
        if self.rto_deadline.is_none() {
            self.restart_rto(now);
        }
        out(p);
    }

    pub(super) fn after_send(&mut self) {
        if self.cfg.quickack && self.quick > 0 && (self.ack_pending > 0 || self.ack_now) {
            self.quick -= 1;
        }
        if self.cfg.dsack {
            self.dsack = None;
        }
        self.ack_now = false;
        self.ack_pending = 0;
        self.delack_deadline = None;
        self.stats.segments_sent += 1;
    }

    /// Whether the window limited the sender lately (see `TcpConfig::cwnd_validation`).
    pub(super) fn cwnd_limited(&self) -> bool {
        let used = self.max_pipe.max(self.prev_max_pipe) as f64;
        if self.win.cwnd < self.win.ssthresh {
            self.win.cwnd < 2.0 * used
        } else {
            used + self.win.mss >= self.win.cwnd
        }
    }

    /// RFC 6675 NextSeg: lost holes first, then new data, within `cwnd` bytes (and rwnd for new
    /// data). `pass_start` is `nxt` when this round of sending began.
    #[inline]
    pub(super) fn next_segment(&self, cwnd: u64, pass_start: u64) -> Option<(u64, u32, bool)> {
        let pipe = self.pipe.saturating_sub(self.dup_left);
        if pipe >= cwnd {
            return None;
        }
        debug_assert_eq!(
            self.resend as usize,
            self.segs.iter().filter(|s| to_resend(s.flags)).count()
        );
        if let Some(i) = (self.resend > 0)
            .then(|| self.segs.iter().position(|s| to_resend(s.flags)))
            .flatten()
        {
            let s = &self.segs[i];
            if pipe + s.len as u64 <= cwnd || pipe == 0 {
                return Some((s.start, s.len, true));
            }
            return None;
        }
        let avail = self.app_limit.saturating_sub(self.nxt);
        if avail == 0 {
            return None;
        }
        let wnd_room = (self.una + self.snd_wnd).saturating_sub(self.nxt);
        let len = (self.cfg.mss as u64).min(avail).min(wnd_room);
        if len == 0 {
            return None;
        }
        // A window-limited runt: with nothing in flight (sender SWS avoidance), or under
        // Minshall's rule as the tail of this round's new data, which began with room for a
        // full segment (Linux's tcp_snd_wnd_test, then tcp_mss_split_point), when no short
        // segment is unacknowledged (tcp_nagle_check).
        if len < (self.cfg.mss as u64).min(avail)
            && self.una != self.nxt
            && !(self.cfg.minshall && self.nxt > pass_start && self.short_end <= self.una)
        {
            return None;
        }
        if pipe + len > cwnd && pipe > 0 {
            return None;
        }
        Some((self.nxt, len as u32, false))
    }

    pub(super) fn emit(
        &mut self,
        now: u64,
        (start, len, retx): (u64, u32, bool),
        out: &mut impl FnMut(Packet),
    ) {
        let mut flags = F::ACK;
        if !retx && self.cwr_pending {
            flags |= F::CWR;
            self.cwr_pending = false;
        }
        let mut p = self.segment(flags, 1 + start, len);
        // RFC 3168 6.1.5: retransmissions are not ECT. Like Linux, a congestion control that
        // needs ECN (DCTCP) keeps ECT on them, or a marking queue would drop every one.
        if self.ecn_ok && (!retx || self.cfg.ecn_retransmit || self.cfg.cc == CcKind::Dctcp) {
            p.ecn = Ecn::Ect0;
        }
        if retx {
            let i = self
                .seg_index(start)
                .expect("retransmitted segment is on the scoreboard");
            let f = self.segs[i].flags;
            self.set_flags(i, f | RETRANS);
            self.segs[i].sent_at = now;
            self.segs[i].resent_nxt = self.nxt;
            self.stats.retransmits += 1;
        } else {
            self.segs.push_back(Seg {
                start,
                len,
                sent_at: now,
                flags: 0,
                resent_nxt: 0,
            });
            self.pipe += len as u64;
            self.nxt = start + len as u64;
            if len < self.cfg.mss {
                self.short_end = self.nxt;
            }
        }
        self.max_pipe = self.max_pipe.max(self.pipe);
        if self.prr_active() {
            self.prr_out += len as u64;
        }
        if self.rto_deadline.is_none() {
            self.restart_rto(now);
        }
        self.after_send();
        out(p);
    }
}
