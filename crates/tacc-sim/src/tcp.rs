//! A TCP endpoint as a state machine: segments and time in, segments out.
//!
//! Models: three-way handshake with MSS, window-scale, SACK-permitted and ECN negotiation;
//! byte sequence numbers (32-bit on the wire, unwrapped to 64-bit stream offsets inside);
//! cumulative ACKs with optional delayed ACK; SACK (RFC 2018) and SACK-based loss recovery
//! (RFC 6675, with a lost retransmission sent again once DupThresh segments sent after it are
//! SACKed, as Linux did before RACK) or NewReno partial-ACK recovery (RFC 6582) without SACK;
//! RTO per RFC 6298 with
//! RTOmin and exponential backoff; ECN per RFC 3168 (ECE latched until CWR, at most one
//! reduction per window) or DCTCP's per-packet CE echo; the peer's receive window (scaled) is
//! honoured; FIN teardown. Data always flows client -> server; the server only ACKs and FINs.
//!
//! Sequence layout (stream offsets): 0 = SYN, 1 + b = data byte b, 1 + len = FIN.

use crate::cc::{Cc, CcKind, Congestion, Window};
use crate::packet::{Packet, Sack, IP_HEADER, TCP_HEADER};
use std::collections::VecDeque;
use std::sync::Arc;
use tacc_mech::headers::{ip_proto, tcp_flags as F, Ecn};

#[derive(Clone, Debug, PartialEq)]
pub struct TcpConfig {
    /// Payload bytes per full segment.
    pub mss: u32,
    /// Initial congestion window in segments.
    pub init_cwnd: u32,
    pub rto_min: u64,
    pub rto_init: u64,
    pub rto_max: u64,
    /// ACK every `delack_count` full segments (1 = no delayed ACK) ...
    pub delack_count: u32,
    /// ... or when this much time has passed since the first unacknowledged one.
    pub delack_timeout: u64,
    pub sack: bool,
    pub ecn: bool,
    /// Send SYN and SYN-ACK as ECT(0) (RFC 8311's relaxation, "ECN++"). RFC 3168 forbids it,
    /// which makes a marking queue at K drop every SYN that arrives while it is above K.
    pub ecn_syn: bool,
    /// Send retransmitted segments as ECT(0), as ns-2's FullTcp does. RFC 3168 6.1.5 forbids
    /// it, which makes a marking queue held at K by ECN drop most retransmissions.
    pub ecn_retransmit: bool,
    /// Grow the window only while the sender is cwnd-limited, as Linux does
    /// (tcp_is_cwnd_limited; RFC 7661's intent): in slow start while cwnd < 2 x the data in
    /// flight, afterwards while the flight reached cwnd in the current or the previous window.
    /// Off (ns-2): the window grows on every ACK, even when the receive window or the
    /// application limits the sender, and a later cut may leave it far above the flight.
    pub cwnd_validation: bool,
    /// Proportional Rate Reduction (RFC 6937, as Linux and ns-3 by default): during a loss
    /// recovery and the round trip after an ECN reduction, send in proportion to what is
    /// delivered, so the window comes down to ssthresh over that round trip. Off: the window
    /// drops to ssthresh at once (RFC 6675, RFC 3168), and whatever leaves the pipe may be
    /// sent again at once.
    pub prr: bool,
    /// Receive buffer in bytes; sets the advertised window and the window-scale shift.
    pub rcv_buf: u64,
    pub cc: CcKind,
    pub dctcp_g: f64,
    pub dupthresh: u32,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            mss: 1460,
            init_cwnd: 2,
            rto_min: 200_000_000,
            rto_init: 1_000_000_000,
            rto_max: 60_000_000_000,
            delack_count: 1,
            delack_timeout: 40_000_000,
            sack: true,
            ecn: false,
            ecn_syn: false,
            ecn_retransmit: false,
            cwnd_validation: false,
            prr: false,
            rcv_buf: 2_000_000,
            cc: CcKind::Newreno,
            dctcp_g: 1.0 / 16.0,
            dupthresh: 3,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Closed,
    Listen,
    SynSent,
    SynRcvd,
    Established,
}

const SACKED: u8 = 1;
const LOST: u8 = 2;
const RETRANS: u8 = 4;

fn in_pipe(flags: u8) -> bool {
    flags & SACKED == 0 && (flags & LOST == 0 || flags & RETRANS != 0)
}

/// A hole to retransmit: lost, neither SACKed nor retransmitted yet.
fn to_resend(flags: u8) -> bool {
    flags & (LOST | RETRANS | SACKED) == LOST
}

/// A retransmission not yet known to have arrived.
fn retrans_out(flags: u8) -> bool {
    flags & (RETRANS | SACKED) == RETRANS
}

#[derive(Clone, Debug)]
struct Seg {
    start: u64,
    len: u32,
    sent_at: u64,
    flags: u8,
    /// `nxt` when the segment was last retransmitted: data from there on was sent after it.
    resent_nxt: u64,
}

#[derive(Clone, Debug, Default)]
pub struct TcpStats {
    pub segments_sent: u64,
    pub retransmits: u64,
    /// Entries into fast recovery (fast retransmits).
    pub fast_retransmits: u64,
    pub timeouts: u64,
    pub ecn_reductions: u64,
}

/// The window-scale shift a receiver announces for a buffer of `rcv_buf` bytes: the smallest
/// that fits the buffer in the 16-bit window field (RFC 7323 caps it at 14).
pub use tacc_mech::plan::window_scale_for;

/// Unwraps a 32-bit sequence difference to the 64-bit offset closest to `near`.
#[inline]
fn unwrap(diff: u32, near: u64) -> u64 {
    // Less than 2^31 ahead (every in-order segment and ACK): that offset is the closest one.
    let ahead = diff.wrapping_sub(near as u32);
    if ahead < 1 << 31 {
        return near + ahead as u64;
    }
    unwrap_behind(diff, near)
}

#[cold]
fn unwrap_behind(diff: u32, near: u64) -> u64 {
    let base = near & !0xffff_ffff;
    let mut best = base | diff as u64;
    for cand in [best.wrapping_sub(1 << 32), best + (1 << 32)] {
        if cand.abs_diff(near) < best.abs_diff(near) {
            best = cand;
        }
    }
    best
}

/// Laid out by hand (`repr(C)`) by when each field is read: the first two lines on every
/// segment in or out at either end (a receiver processes the ACK field of every data segment
/// too), the third on every data segment received or segment sent, the fourth on every
/// segment sent, then the sender's ACK processing, then the rarely read. A receiver then
/// touches three or four of the nine lines per data segment, where the compiler's order,
/// by alignment, spread what it reads over most of them.
#[repr(C)]
pub struct TcpEndpoint {
    // --- line 1: every segment, either end ---
    /// Shared by the endpoints of a configuration: read on every segment, it then stays in
    /// the cache instead of taking two lines of each endpoint.
    cfg: Arc<TcpConfig>,
    // send side (data-byte offsets)
    una: u64,
    nxt: u64,
    snd_wnd: u64,
    recover: u64,
    ecn_reduce_end: u64,
    rto_deadline: Option<u64>,
    // --- line 2: every segment, either end ---
    segs: VecDeque<Seg>,
    iss: u32,
    dupacks: u32,
    pub state: State,
    fin_sent: bool,
    fin_acked: bool,
    peer_wscale: u8,
    sack_ok: bool,
    ecn_ok: bool,
    /// Set by an ECN reduction: until an ACK passes `ecn_reduce_end` the window does not grow
    /// (Linux's CA_CWR; ns-3 likewise). Cleared after that ACK has grown the window, and by a
    /// loss recovery or a timeout, which set `ecn_reduce_end` for their own purpose.
    in_cwr: bool,
    in_recovery: bool,
    ack_now: bool,
    cwr_pending: bool,
    close_requested: bool,
    ece_latch: bool,
    dctcp_ce: bool,
    fin_consumed: bool,
    rcv_wscale: u8,
    syn_acked: bool,
    ack_pending: u32,
    // receive side
    irs: u32,
    // --- line 3: every data segment received, every segment sent ---
    rcv_nxt: u64,
    /// The offset of the peer's FIN, `NO_FIN` until it arrives.
    peer_fin: u64,
    delack_deadline: Option<u64>,
    ooo: Vec<(u64, u64)>,
    /// Endpoint index of the peer (simulator demultiplexing shortcut).
    pub peer_ep: u32,
    /// Segments of `segs` to retransmit: most sends find none without scanning.
    resend: u32,
    // --- line 4: every segment sent ---
    pub local: (u32, u16),
    pub remote: (u32, u16),
    /// Bytes the application has handed over so far.
    app_limit: u64,
    pub stats: TcpStats,
    /// Retransmitted segments neither acknowledged nor SACKed yet.
    retrans_out: u32,
    // --- lines 5-7: the sender's ACK processing ---
    pipe: u64,
    win: Window,
    /// Without SACK, the bytes duplicate ACKs say have left the network and are not counted
    /// out of `pipe` by any segment's flags: RFC 6582 inflates cwnd by a segment per
    /// duplicate ACK; counting them out of `pipe` instead is the same (Linux's Reno
    /// emulation of `sacked_out`). Always 0 with SACK.
    dup_left: u64,
    srtt: f64,
    rttvar: f64,
    rto: u64,
    /// Largest `pipe` since `window_end`, and in the window before (cwnd validation).
    max_pipe: u64,
    prev_max_pipe: u64,
    window_end: u64,
    /// The last ACK's SACK blocks as data offsets. SACKED is never cleared and new segments
    /// start at `nxt`, so every segment wholly inside one stays SACKed: a block that repeats
    /// or extends one is marked from that one's end only.
    sacked_blocks: [(u64, u64); 3],
    /// Its NewReno and DCTCP state first, in line 7; Cubic's after it.
    cc: Cc,
    /// Every segment starting below this offset is LOST or SACKED (neither flag is ever
    /// cleared except by setting the other): IsLost need not look there again.
    lost_below: u64,
    /// PRR's state for the reduction under way: FlightSize at its start (RecoverFS), bytes
    /// delivered and sent since.
    prr_recover_fs: u64,
    prr_delivered: u64,
    prr_out: u64,
    // --- rarely read ---
    ctrl_sent_at: u64,
    last_ooo: Option<(u64, u64)>,
}

const NO_FIN: u64 = u64::MAX;

// The lines above hold what their comments say (offsets in bytes).
const _: () = {
    use std::mem::offset_of;
    assert!(offset_of!(TcpEndpoint, rto_deadline) == 48);
    assert!(offset_of!(TcpEndpoint, segs) == 64 && offset_of!(TcpEndpoint, irs) == 124);
    assert!(offset_of!(TcpEndpoint, rcv_nxt) == 128 && offset_of!(TcpEndpoint, resend) == 188);
    assert!(offset_of!(TcpEndpoint, local) == 192 && offset_of!(TcpEndpoint, stats) == 216);
    assert!(offset_of!(TcpEndpoint, retrans_out) == 256 && offset_of!(TcpEndpoint, cc) == 400);
    // A receiver's lines end where the sender's ACK state begins; a sender's take in the
    // start of `cc`.
    assert!(offset_of!(TcpEndpoint, retrans_out) == TcpEndpoint::RECEIVER_LINES * 64);
    assert!(offset_of!(TcpEndpoint, cc) < TcpEndpoint::SENDER_LINES * 64);
};

impl TcpEndpoint {
    /// The first lines, which a data segment's arrival reads at a receiver (the ACK it sends
    /// included): what a prefetch asks for.
    pub(crate) const RECEIVER_LINES: usize = 4;
    /// The first lines, which an ACK's arrival reads at a sender (the data it then sends and
    /// the congestion control's NewReno and DCTCP state included).
    pub(crate) const SENDER_LINES: usize = 7;

    fn new(
        cfg: Arc<TcpConfig>,
        state: State,
        local: (u32, u16),
        remote: (u32, u16),
        peer_ep: u32,
        iss: u32,
    ) -> TcpEndpoint {
        let mss = cfg.mss as f64;
        let rcv_wscale = window_scale_for(cfg.rcv_buf);
        let cc = Cc::new(cfg.cc, cfg.dctcp_g);
        let rto = cfg.rto_init;
        TcpEndpoint {
            win: Window {
                cwnd: cfg.init_cwnd as f64 * mss,
                ssthresh: f64::INFINITY,
                mss,
            },
            cfg,
            state,
            local,
            remote,
            peer_ep,
            iss,
            syn_acked: false,
            una: 0,
            nxt: 0,
            app_limit: 0,
            close_requested: false,
            fin_sent: false,
            fin_acked: false,
            segs: VecDeque::new(),
            pipe: 0,
            resend: 0,
            retrans_out: 0,
            sacked_blocks: [(0, 0); 3],
            lost_below: 0,
            cc,
            in_recovery: false,
            recover: 0,
            dupacks: 0,
            dup_left: 0,
            ecn_ok: false,
            sack_ok: false,
            cwr_pending: false,
            ecn_reduce_end: 0,
            in_cwr: false,
            prr_recover_fs: 0,
            prr_delivered: 0,
            prr_out: 0,
            max_pipe: 0,
            prev_max_pipe: 0,
            window_end: 0,
            snd_wnd: 65535,
            peer_wscale: 0,
            srtt: 0.0,
            rttvar: 0.0,
            rto,
            rto_deadline: None,
            ctrl_sent_at: 0,
            irs: 0,
            rcv_nxt: 0,
            ooo: Vec::new(),
            last_ooo: None,
            peer_fin: NO_FIN,
            fin_consumed: false,
            rcv_wscale,
            ack_pending: 0,
            ack_now: false,
            delack_deadline: None,
            ece_latch: false,
            dctcp_ce: false,
            stats: TcpStats::default(),
        }
    }

    /// The active opener; call [`connect`](Self::connect) to send the SYN.
    pub fn client(
        cfg: impl Into<Arc<TcpConfig>>,
        local: (u32, u16),
        remote: (u32, u16),
        peer_ep: u32,
        iss: u32,
    ) -> TcpEndpoint {
        TcpEndpoint::new(cfg.into(), State::Closed, local, remote, peer_ep, iss)
    }

    /// The passive side, waiting for a SYN.
    pub fn server(
        cfg: impl Into<Arc<TcpConfig>>,
        local: (u32, u16),
        remote: (u32, u16),
        peer_ep: u32,
        iss: u32,
    ) -> TcpEndpoint {
        TcpEndpoint::new(cfg.into(), State::Listen, local, remote, peer_ep, iss)
    }

    pub fn connect(&mut self, now: u64) {
        debug_assert_eq!(self.state, State::Closed);
        self.state = State::SynSent;
        self.rto_deadline = Some(now + self.rto);
    }

    /// Hands `bytes` more application data to the sender.
    pub fn send(&mut self, bytes: u64) {
        self.app_limit = self.app_limit.saturating_add(bytes);
    }

    /// Stops taking new data: everything handed over so far is sent, then a FIN.
    pub fn close(&mut self) {
        self.close_requested = true;
    }

    /// Stops an unlimited sender now: no new data after what was already sent.
    pub fn stop(&mut self) {
        self.app_limit = self.nxt;
        self.close_requested = true;
    }

    /// In-order bytes delivered to the receiving application.
    pub fn delivered(&self) -> u64 {
        self.rcv_nxt
    }

    pub fn bytes_acked(&self) -> u64 {
        self.una
    }

    pub fn cwnd_bytes(&self) -> f64 {
        self.win.cwnd
    }

    pub fn ecn_negotiated(&self) -> bool {
        self.ecn_ok
    }

    pub fn is_closed(&self) -> bool {
        self.state == State::Established && self.fin_acked && self.fin_consumed
    }

    /// Frees the memory of the send and reorder queues (a closed endpoint's are empty; they
    /// grow again if anything comes).
    pub fn release_queues(&mut self) {
        self.segs.shrink_to_fit();
        self.ooo.shrink_to_fit();
    }

    /// When the endpoint next needs [`on_timer`](Self::on_timer).
    pub fn poll_at(&self) -> Option<u64> {
        match (self.rto_deadline, self.delack_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn seq_of(&self, off: u64) -> u32 {
        self.iss.wrapping_add(off as u32)
    }

    fn ack_field(&self) -> u32 {
        self.irs
            .wrapping_add((1 + self.rcv_nxt + self.fin_consumed as u64) as u32)
    }

    /// The application reads in-order data at once, so the window's right edge stays at
    /// `rcv_nxt + rcv_buf`. Out-of-order data lies inside the window the sender already counts
    /// as in flight; taking it off again would move the right edge left (RFC 9293 3.8.6
    /// advises against shrinking) and, without SACK, make every duplicate ACK carry another
    /// window, which the sender does not count as a duplicate.
    fn adv_window(&self) -> u16 {
        (self.cfg.rcv_buf >> self.rcv_wscale).min(65535) as u16
    }

    /// The header fields every segment carries; the caller adds options and the checksum.
    #[inline]
    fn header(&self, flags: u8, off: u64, payload: u32, ack: u32, window: u16) -> Packet {
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
    fn segment(&self, flags: u8, off: u64, payload: u32) -> Packet {
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
        if self.sack_ok && !self.ooo.is_empty() {
            p.set_sack(&self.sack_blocks());
        }
        p.fill_tcp_checksum();
        p
    }

    fn sack_blocks(&self) -> Sack {
        let mut s = Sack::default();
        let base = self.irs.wrapping_add(1);
        let push = |s: &mut Sack, (a, b): (u64, u64)| {
            if (s.len as usize) < s.blocks.len() {
                s.blocks[s.len as usize] =
                    (base.wrapping_add(a as u32), base.wrapping_add(b as u32));
                s.len += 1;
            }
        };
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

    // ------------------------------------------------------------------ input

    /// Processes one arriving segment.
    pub fn on_segment(&mut self, now: u64, p: &Packet) {
        let flags = p.flags;
        if self.state != State::Established {
            if !self.on_handshake_segment(now, p) {
                return;
            }
        } else if flags & F::SYN != 0 {
            // A retransmitted SYN-ACK: our ACK of it was lost.
            self.ack_now = true;
            return;
        }
        if flags & F::ACK != 0 {
            self.on_ack(now, p);
        }
        if p.payload() > 0 || flags & F::FIN != 0 {
            self.on_data(now, p);
        }
    }

    /// A segment before the connection is established; whether its ACK and data are processed.
    #[cold]
    fn on_handshake_segment(&mut self, now: u64, p: &Packet) -> bool {
        let flags = p.flags;
        match self.state {
            State::Closed => false,
            State::Listen => {
                if flags & F::SYN == 0 {
                    return false;
                }
                self.irs = p.seq;
                self.take_syn_options(p);
                self.ecn_ok = self.cfg.ecn && flags & F::ECE != 0 && flags & F::CWR != 0;
                self.state = State::SynRcvd;
                self.ack_now = true;
                self.rto_deadline = Some(now + self.rto);
                false
            }
            State::SynSent => {
                if flags & F::SYN == 0 || flags & F::ACK == 0 {
                    return false;
                }
                self.irs = p.seq;
                self.take_syn_options(p);
                self.ecn_ok = self.cfg.ecn && flags & F::ECE != 0 && flags & F::CWR == 0;
                self.establish(now);
                self.ack_now = true;
                false
            }
            State::SynRcvd => {
                if flags & F::SYN != 0 {
                    // Our SYN-ACK was lost: the peer retransmitted its SYN.
                    self.ack_now = true;
                    return false;
                }
                if flags & F::ACK == 0 {
                    return false;
                }
                self.establish(now);
                true
            }
            State::Established => true,
        }
    }

    fn take_syn_options(&mut self, p: &Packet) {
        self.peer_wscale = p.wscale().unwrap_or(0).min(14);
        if let Some(m) = p.mss() {
            if (m as u32) < self.cfg.mss {
                // The peer's smaller MSS: this connection's own copy of the configuration.
                Arc::make_mut(&mut self.cfg).mss = m as u32;
            }
            self.win.mss = self.cfg.mss as f64;
            self.win.cwnd = self.cfg.init_cwnd as f64 * self.win.mss;
        }
        self.snd_wnd = p.window as u64;
        self.sack_ok = self.cfg.sack && p.wscale().is_some();
    }

    fn establish(&mut self, now: u64) {
        if self.state == State::SynSent || self.state == State::SynRcvd {
            if self.stats.timeouts == 0 {
                self.rtt_sample(now.saturating_sub(self.ctrl_sent_at));
            }
            self.state = State::Established;
            self.syn_acked = true;
            self.rto_deadline = None;
        }
    }

    fn rtt_sample(&mut self, r: u64) {
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
    }

    fn set_flags(&mut self, i: usize, flags: u8) {
        let s = &mut self.segs[i];
        let (before, resend_before) = (in_pipe(s.flags), to_resend(s.flags));
        match (retrans_out(s.flags), retrans_out(flags)) {
            (true, false) => self.retrans_out -= 1,
            (false, true) => self.retrans_out += 1,
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

    fn seg_index(&self, start: u64) -> Option<usize> {
        self.segs.binary_search_by_key(&start, |s| s.start).ok()
    }

    fn on_ack(&mut self, now: u64, p: &Packet) {
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

        let mut newly_sacked = 0u64;
        if self.sack_ok {
            // Most ACKs carry no blocks: nothing to unwrap or mark.
            if p.sack_blocks().is_empty() {
                self.sacked_blocks = [(0, 0); 3];
            } else {
                newly_sacked = self.take_sack_blocks(p.sack_blocks());
            }
        }

        let ece = self.ecn_ok && p.flags & F::ECE != 0;
        let acked = acked_to.saturating_sub(self.una);
        // Bytes that reached the receiver with this ACK (RFC 6937's DeliveredData): newly
        // acknowledged, less what was SACKed before, plus what is newly SACKed.
        let mut delivered = acked + newly_sacked;
        if acked > 0 {
            let mut sample = None;
            while let Some(s) = self.segs.front() {
                if s.start + s.len as u64 > acked_to {
                    break;
                }
                let s = self.segs.pop_front().unwrap();
                if s.flags & SACKED != 0 {
                    delivered -= s.len as u64;
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
                sample = if s.flags & RETRANS == 0 {
                    Some(now - s.sent_at)
                } else {
                    None
                };
            }
            self.una = acked_to;
            if let Some(r) = sample {
                self.rtt_sample(r);
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
            self.restart_rto(now);
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
        if ece && !self.in_recovery && self.una > self.ecn_reduce_end {
            let flight = self.nxt - self.una;
            self.cc
                .on_congestion(&mut self.win, Congestion::Ecn, flight);
            self.ecn_reduce_end = self.nxt;
            self.cwr_pending = true;
            self.in_cwr = true;
            self.stats.ecn_reductions += 1;
            self.prr_start(flight);
        }

        if self.sack_ok && newly_sacked > 0 {
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
            if let Some(first) = self.segs.front() {
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
    fn prr_active(&self) -> bool {
        self.cfg.prr && (self.in_recovery || (self.in_cwr && self.una <= self.ecn_reduce_end))
    }

    /// A reduction starts with `flight` bytes outstanding (RecoverFS); `on_congestion` has set
    /// ssthresh. Under PRR the window is set ACK by ACK from here on, starting from the flight.
    fn prr_start(&mut self, flight: u64) {
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
    fn prr_on_ack(&mut self, delivered: u64) {
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

    /// Marks what an ACK's SACK blocks cover and keeps the blocks; returns the bytes newly
    /// SACKed.
    fn take_sack_blocks(&mut self, sack: &[(u32, u32)]) -> u64 {
        let mut newly_sacked = 0;
        let mut blocks = [(0, 0); 3];
        for (block, &(a, b)) in blocks.iter_mut().zip(sack) {
            let a = unwrap(a.wrapping_sub(self.iss), self.una + 1).saturating_sub(1);
            let b = unwrap(b.wrapping_sub(self.iss), self.una + 1).saturating_sub(1);
            newly_sacked += self.mark_sacked(a, b);
            *block = (a, b.min(self.nxt));
        }
        self.sacked_blocks = blocks;
        newly_sacked
    }

    /// Marks segments inside [a, b) as SACKed; returns the bytes newly SACKed.
    fn mark_sacked(&mut self, a: u64, b: u64) -> u64 {
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
                self.set_flags(i, (f | SACKED) & !LOST);
            }
            i += 1;
        }
        newly
    }

    /// RFC 6675 IsLost: a hole with DupThresh SACKed segments above it is lost.
    fn mark_lost_by_sack(&mut self) {
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
    fn mark_lost_retransmissions(&mut self) {
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

    #[cold]
    fn enter_recovery(&mut self) {
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
        let f = self.segs[0].flags;
        if f & LOST == 0 {
            self.set_flags(0, f | LOST);
        }
    }

    fn on_data(&mut self, now: u64, p: &Packet) {
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
            self.ece_latch = true;
        }
        let had_holes = !self.ooo.is_empty();
        if p.payload() > 0 {
            if end <= self.rcv_nxt {
                self.ack_now = true; // duplicate
            } else if start <= self.rcv_nxt {
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
        if self.ack_pending >= self.cfg.delack_count {
            self.ack_now = true;
        } else if self.ack_pending > 0 && self.delack_deadline.is_none() {
            self.delack_deadline = Some(now + self.cfg.delack_timeout);
        }
    }

    fn insert_ooo(&mut self, a: u64, b: u64) {
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

    // ------------------------------------------------------------------ timers

    fn restart_rto(&mut self, now: u64) {
        self.rto_deadline = Some(now + self.rto);
    }

    pub fn on_timer(&mut self, now: u64) {
        if self.delack_deadline.is_some_and(|t| t <= now) {
            self.delack_deadline = None;
            if self.ack_pending > 0 {
                self.ack_now = true;
            }
        }
        if self.rto_deadline.is_some_and(|t| t <= now) {
            self.rto_deadline = None;
            self.on_rto(now);
        }
    }

    fn on_rto(&mut self, now: u64) {
        self.rto = (self.rto * 2).min(self.cfg.rto_max);
        match self.state {
            State::SynSent | State::SynRcvd => {
                self.stats.timeouts += 1;
                self.stats.retransmits += 1; // the SYN or SYN-ACK goes again
                self.rto_deadline = Some(now + self.rto);
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
        for i in 0..self.segs.len() {
            let f = self.segs[i].flags;
            if f & SACKED == 0 {
                self.set_flags(i, (f | LOST) & !RETRANS);
            }
        }
        if fin_out && !data_out {
            self.fin_sent = false; // resend the FIN
        }
        self.rto_deadline = Some(now + self.rto);
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
        // Most calls (every receiver's) have nothing to send: skip the window arithmetic.
        if budget > 0 && (self.resend > 0 || self.app_limit > self.nxt) {
            // Sending does not change the window.
            let cwnd = self.win.cwnd.max(self.win.mss) as u64;
            for _ in 0..budget {
                let Some(seg) = self.next_segment(cwnd) else {
                    break;
                };
                self.emit(now, seg, out);
                sent_any = true;
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
    fn send_ctrl(&mut self, now: u64, flags: u8, out: &mut impl FnMut(Packet)) {
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
            self.rto_deadline = Some(now + self.rto);
        }
        out(p);
    }

    fn after_send(&mut self) {
        self.ack_now = false;
        self.ack_pending = 0;
        self.delack_deadline = None;
        self.stats.segments_sent += 1;
    }

    /// Whether the window limited the sender lately (see `TcpConfig::cwnd_validation`).
    fn cwnd_limited(&self) -> bool {
        let used = self.max_pipe.max(self.prev_max_pipe) as f64;
        if self.win.cwnd < self.win.ssthresh {
            self.win.cwnd < 2.0 * used
        } else {
            used + self.win.mss >= self.win.cwnd
        }
    }

    /// RFC 6675 NextSeg: lost holes first, then new data, within `cwnd` bytes (and rwnd for new
    /// data).
    #[inline]
    fn next_segment(&self, cwnd: u64) -> Option<(u64, u32, bool)> {
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
        // Sender SWS avoidance: a window-limited runt only when nothing is in flight.
        if len < (self.cfg.mss as u64).min(avail) && self.una != self.nxt {
            return None;
        }
        if pipe + len > cwnd && pipe > 0 {
            return None;
        }
        Some((self.nxt, len as u32, false))
    }

    fn emit(
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The test client's initial sequence number: close to the wrap, so sequence arithmetic
    /// is tested across it.
    const CLIENT_ISS: u32 = 0xffff_0000;

    /// Offset in the client's byte stream of a data segment's first byte.
    fn data_offset(p: &Packet) -> u64 {
        p.seq.wrapping_sub(CLIENT_ISS).wrapping_sub(1) as u64
    }

    #[test]
    fn unwrap_picks_nearest_offset() {
        assert_eq!(unwrap(5, 0), 5);
        assert_eq!(unwrap(0xffff_fff0, 0x1_0000_0005), 0xffff_fff0);
        assert_eq!(unwrap(3, 0xffff_fff0), 0x1_0000_0003);
    }

    #[test]
    fn unwrap_fast_path_agrees_with_the_nearest_candidate_search() {
        let nears: [u64; 8] = [
            0,
            1,
            5,
            0x7fff_ffff,
            0x8000_0000,
            0xffff_ffff,
            0x1_0000_0005,
            0x3_8000_0001,
        ];
        let diffs: [u32; 9] = [
            0,
            1,
            4,
            6,
            0x7fff_ffff,
            0x8000_0000,
            0x8000_0005,
            0xffff_fff0,
            0xffff_ffff,
        ];
        for near in nears {
            for d in diffs {
                for diff in [d, d.wrapping_add(near as u32)] {
                    assert_eq!(
                        unwrap(diff, near),
                        unwrap_behind(diff, near),
                        "{diff:#x} {near:#x}"
                    );
                }
            }
        }
    }

    /// Two endpoints wired back to back with a fixed one-way delay and an optional drop filter.
    struct Pair {
        a: TcpEndpoint,
        b: TcpEndpoint,
        now: u64,
        wire: VecDeque<(u64, bool, Packet)>,
        delay: u64,
        /// Packets delivered to `a` so far.
        to_a: u64,
    }

    impl Pair {
        fn new(cfg: TcpConfig, bytes: u64) -> Pair {
            let mut a = TcpEndpoint::client(cfg.clone(), (1, 1000), (2, 80), 1, CLIENT_ISS);
            let b = TcpEndpoint::server(cfg, (2, 80), (1, 1000), 0, 77);
            a.send(bytes);
            a.close();
            a.connect(0);
            Pair {
                a,
                b,
                now: 0,
                wire: VecDeque::new(),
                delay: 50_000,
                to_a: 0,
            }
        }

        /// `drop` sees every packet towards `b` (and may mark it) and says whether to lose it.
        fn run(&mut self, until: u64, drop: &mut impl FnMut(&mut Packet) -> bool) {
            while self.step(until, drop) {}
        }

        /// Delivers one packet or fires the timers due next; false once nothing is due by
        /// `until`.
        fn step(&mut self, until: u64, drop: &mut impl FnMut(&mut Packet) -> bool) -> bool {
            let (now, delay) = (self.now, self.delay);
            let wire = &mut self.wire;
            self.a.poll_transmit(now, u32::MAX, &mut |p| {
                wire.push_back((now + delay, true, p))
            });
            self.b.poll_transmit(now, u32::MAX, &mut |p| {
                wire.push_back((now + delay, false, p))
            });
            let next_wire = self.wire.front().map(|w| w.0);
            let next_timer = [self.a.poll_at(), self.b.poll_at()]
                .into_iter()
                .flatten()
                .min();
            let next = [next_wire, next_timer].into_iter().flatten().min();
            let Some(t) = next else { return false };
            if t > until {
                return false;
            }
            self.now = t;
            if next_wire == Some(t) {
                let (_, to_b, mut p) = self.wire.pop_front().unwrap();
                assert!(p.tcp_checksum_ok());
                if to_b && drop(&mut p) {
                    return true;
                }
                if to_b {
                    self.b.on_segment(t, &p)
                } else {
                    self.to_a += 1;
                    self.a.on_segment(t, &p)
                }
            } else {
                self.a.on_timer(t);
                self.b.on_timer(t);
            }
            true
        }
    }

    #[test]
    fn handshake_transfer_and_close() {
        let mut pair = Pair::new(TcpConfig::default(), 100_000);
        pair.run(1_000_000_000, &mut |_| false);
        assert_eq!(pair.b.delivered(), 100_000);
        assert!(pair.a.is_closed() && pair.b.is_closed());
        assert_eq!(pair.a.stats.retransmits, 0);
    }

    /// The smaller MSS of the two SYNs binds that connection, and no other endpoint of the
    /// configuration it shares.
    #[test]
    fn a_smaller_peer_mss_binds_its_connection_alone() {
        let shared = Arc::new(TcpConfig::default());
        let other = TcpEndpoint::client(shared.clone(), (1, 1001), (2, 80), 2, CLIENT_ISS);
        let mut a = TcpEndpoint::client(shared.clone(), (1, 1000), (2, 80), 1, CLIENT_ISS);
        a.send(20_000);
        a.close();
        a.connect(0);
        let small = TcpConfig {
            mss: 536,
            ..TcpConfig::default()
        };
        let b = TcpEndpoint::server(small, (2, 80), (1, 1000), 0, 77);
        let mut pair = Pair {
            a,
            b,
            now: 0,
            wire: VecDeque::new(),
            delay: 50_000,
            to_a: 0,
        };
        let mut largest = 0;
        pair.run(1_000_000_000, &mut |p| {
            largest = largest.max(p.payload());
            false
        });
        assert_eq!(pair.b.delivered(), 20_000);
        assert_eq!(largest, 536);
        assert_eq!((other.cfg.mss, shared.mss), (1460, 1460));
    }

    #[test]
    fn sack_recovers_three_scripted_drops_with_one_fast_retransmit_each_burst() {
        three_scripted_drops(true);
    }

    /// RFC 6582: the second hole of a window is retransmitted on the partial ACK, without a
    /// timeout, and nothing that arrived is sent again.
    #[test]
    fn newreno_without_sack_recovers_the_same_drops_by_partial_acks() {
        three_scripted_drops(false);
    }

    fn three_scripted_drops(sack: bool) {
        let cfg = TcpConfig {
            init_cwnd: 10,
            sack,
            ..TcpConfig::default()
        };
        let mss = cfg.mss as u64;
        let mut pair = Pair::new(cfg, 200 * mss);
        let mut dropped = std::collections::HashSet::new();
        pair.run(5_000_000_000, &mut |p| {
            let seg = data_offset(p) / mss;
            p.payload() > 0 && [10, 11, 50].contains(&seg) && dropped.insert(seg)
        });
        assert_eq!(pair.b.delivered(), 200 * mss);
        assert_eq!(pair.a.stats.timeouts, 0);
        assert_eq!(pair.a.stats.retransmits, 3);
        assert_eq!(pair.a.stats.fast_retransmits, 2);
    }

    #[test]
    fn a_lost_retransmission_is_sent_again_once_later_data_is_sacked_without_a_timeout() {
        let cfg = TcpConfig {
            init_cwnd: 10,
            ..TcpConfig::default()
        };
        let mss = cfg.mss as u64;
        let mut pair = Pair::new(cfg, 200 * mss);
        let mut drops_of_10 = 0;
        pair.run(5_000_000_000, &mut |p| {
            let seg = data_offset(p) / mss;
            let drop = p.payload() > 0 && seg == 10 && drops_of_10 < 2;
            drops_of_10 += drop as u32;
            drop
        });
        assert_eq!(drops_of_10, 2, "the segment and its first retransmission");
        assert_eq!(pair.b.delivered(), 200 * mss);
        assert_eq!(pair.a.stats.timeouts, 0);
        assert_eq!(pair.a.stats.retransmits, 2);
        assert_eq!(
            pair.a.stats.fast_retransmits, 1,
            "one recovery, one window cut"
        );
    }

    /// ECT(0) on the retransmission of a dropped segment, with and without `ecn_retransmit`.
    fn retransmission_ecn(ecn_retransmit: bool) -> Ecn {
        let cfg = TcpConfig {
            ecn: true,
            ecn_retransmit,
            init_cwnd: 10,
            ..TcpConfig::default()
        };
        let mss = cfg.mss as u64;
        let mut pair = Pair::new(cfg, 40 * mss);
        let mut sent = std::collections::HashMap::new();
        let mut retx_ecn = None;
        pair.run(5_000_000_000, &mut |p| {
            let seg = data_offset(p) / mss;
            if p.payload() == 0 || seg != 5 {
                return false;
            }
            let copies = sent.entry(seg).or_insert(0);
            *copies += 1;
            if *copies == 2 {
                retx_ecn = Some(p.ecn);
            }
            *copies == 1
        });
        assert_eq!(pair.b.delivered(), 40 * mss);
        retx_ecn.expect("segment 5 was retransmitted")
    }

    /// cwnd after a receive-window-limited transfer of 400 segments through 10-segment windows.
    fn cwnd_after_rwnd_limited_transfer(cwnd_validation: bool) -> f64 {
        let cfg = TcpConfig {
            cwnd_validation,
            rcv_buf: 10 * 1460,
            ..TcpConfig::default()
        };
        let mss = cfg.mss as u64;
        let mut pair = Pair::new(cfg, 400 * mss);
        pair.run(5_000_000_000, &mut |_| false);
        assert_eq!(pair.b.delivered(), 400 * mss);
        pair.a.cwnd_bytes() / mss as f64
    }

    #[test]
    fn cwnd_validation_stops_growth_the_receive_window_does_not_let_the_sender_use() {
        // ns-2 style: every ACK grows cwnd (slow start doubles it each window).
        assert!(cwnd_after_rwnd_limited_transfer(false) > 100.0);
        // Linux style: slow start stops once cwnd reaches twice the 10 segments in flight; the
        // last permitted increment adds at most 2 MSS (RFC 3465, L = 2) to a cwnd under 20.
        let validated = cwnd_after_rwnd_limited_transfer(true);
        assert!(validated <= 21.0, "cwnd {validated} segments");
    }

    /// An ECN-capable transfer of 400 segments, an ACK per segment, initial window 10; and
    /// its MSS.
    fn ecn_transfer_of_400_segments() -> (Pair, u64) {
        let cfg = TcpConfig {
            ecn: true,
            init_cwnd: 10,
            delack_count: 1,
            ..TcpConfig::default()
        };
        let mss = cfg.mss as u64;
        (Pair::new(cfg, 400 * mss), mss)
    }

    /// Sets CE on the first copy of data segment 30 to pass.
    fn mark_segment_30_once(p: &mut Packet, mss: u64, marked: &mut bool) {
        if p.payload() > 0 && data_offset(p) / mss == 30 && !std::mem::replace(marked, true) {
            p.ecn = Ecn::Ce;
        }
    }

    /// One CE mark: the sender halves its window once, though ACKs echo ECE until the CWR
    /// that follows the reduction reaches the receiver (RFC 3168 6.1.2).
    #[test]
    fn one_mark_one_window_reduction() {
        let (mut pair, mss) = ecn_transfer_of_400_segments();
        let mut marked = false;
        pair.run(5_000_000_000, &mut |p| {
            mark_segment_30_once(p, mss, &mut marked);
            false
        });
        assert!(marked);
        assert_eq!(pair.b.delivered(), 400 * mss);
        assert_eq!(pair.a.stats.ecn_reductions, 1);
    }

    /// After an ECN reduction the window stays put until the data sent before the reduction
    /// is acknowledged (Linux's CA_CWR), then grows again.
    #[test]
    fn no_window_growth_in_the_round_trip_after_an_ecn_reduction() {
        let (mut pair, mss) = ecn_transfer_of_400_segments();
        let mut marked = false;
        let mut reduced: Option<(f64, u64)> = None;
        let mut frozen_events = 0;
        let mut mark = |p: &mut Packet| {
            mark_segment_30_once(p, mss, &mut marked);
            false
        };
        while pair.step(1_000_000_000, &mut mark) {
            let a = &pair.a;
            if a.stats.ecn_reductions == 1 && reduced.is_none() {
                reduced = Some((a.cwnd_bytes(), a.ecn_reduce_end));
            }
            if let Some((cwnd, end)) = reduced {
                if a.una <= end {
                    assert_eq!(a.cwnd_bytes(), cwnd, "grew at una {} before {end}", a.una);
                    frozen_events += 1;
                }
            }
        }
        assert_eq!(pair.b.delivered(), 400 * mss);
        let (cwnd, _) = reduced.expect("one reduction");
        assert!(
            frozen_events > 10,
            "{frozen_events} events in the round trip after the reduction"
        );
        assert!(
            pair.a.cwnd_bytes() > cwnd,
            "growth resumes after the round trip"
        );
    }

    /// Segments the sender sends after each ACK of a loss recovery (one segment dropped in
    /// a window of about 40), and its window and ssthresh when the recovery ends.
    fn sends_per_ack_in_recovery(prr: bool) -> (Vec<u64>, f64, f64) {
        let cfg = TcpConfig {
            init_cwnd: 40,
            delack_count: 1,
            prr,
            ..TcpConfig::default()
        };
        let mss = cfg.mss as u64;
        let mut pair = Pair::new(cfg, 200 * mss);
        let mut dropped = false;
        let mut drop = |p: &mut Packet| {
            p.payload() > 0 && data_offset(p) / mss == 10 && !std::mem::replace(&mut dropped, true)
        };
        let (mut sends, mut end) = (Vec::new(), None);
        let (mut was_in_recovery, mut answering) = (false, false);
        loop {
            let (acks, sent) = (pair.to_a, pair.a.stats.segments_sent);
            if !pair.step(1_000_000_000, &mut drop) {
                break;
            }
            // A step polls the endpoints before it delivers: what it sent answers the ACK
            // delivered in the step before.
            if answering {
                sends.push(pair.a.stats.segments_sent - sent);
            }
            answering = was_in_recovery && pair.a.in_recovery && pair.to_a > acks;
            if was_in_recovery && !pair.a.in_recovery && end.is_none() {
                end = Some((pair.a.cwnd_bytes(), pair.a.win.ssthresh));
            }
            was_in_recovery = pair.a.in_recovery;
        }
        assert_eq!(pair.b.delivered(), 200 * mss);
        let (cwnd, ssthresh) = end.expect("one recovery");
        (sends, cwnd, ssthresh)
    }

    /// RFC 6937: PRR spreads a recovery's transmissions over its ACKs, about one segment for
    /// every two delivered, where RFC 6675 sends nothing until the pipe has fallen to the new
    /// window (about half the ACKs) and then one per ACK; both end at ssthresh.
    #[test]
    fn prr_sends_in_proportion_to_what_is_delivered() {
        for prr in [false, true] {
            let (sends, cwnd, ssthresh) = sends_per_ack_in_recovery(prr);
            let n = sends.len();
            assert!(n >= 20, "{n} ACKs in the recovery");
            // The first third of the ACKs: the pipe is still above the new window.
            let first: u64 = sends[..n / 3].iter().sum();
            let total: u64 = sends.iter().sum();
            if prr {
                // ssthresh / RecoverFS = 1/2 of what those ACKs delivered.
                let expect = (n / 6) as u64;
                assert!(
                    first + 1 >= expect && first <= expect + 1,
                    "PRR: {first} sent after the first {} ACKs",
                    n / 3
                );
                assert!(sends.iter().all(|&k| k <= 2), "PRR bursts: {sends:?}");
            } else {
                assert_eq!(
                    first, 0,
                    "RFC 6675 sends nothing while the pipe exceeds cwnd"
                );
            }
            assert!(total as usize >= n / 2 - 2, "{total} sent over {n} ACKs");
            assert!(
                (cwnd - ssthresh).abs() < 1.0,
                "cwnd {cwnd} at the end, ssthresh {ssthresh}"
            );
        }
    }

    #[test]
    fn retransmissions_are_not_ect_unless_asked_for() {
        assert_eq!(retransmission_ecn(false), Ecn::NotEct, "RFC 3168 6.1.5");
        assert_eq!(retransmission_ecn(true), Ecn::Ect0, "ns-2 FullTcp");
    }

    #[test]
    fn lost_syn_is_retransmitted_after_initial_rto() {
        let mut pair = Pair::new(TcpConfig::default(), 10_000);
        let mut first = true;
        pair.run(5_000_000_000, &mut |p| {
            std::mem::take(&mut first) && p.flags & F::SYN != 0
        });
        assert_eq!(pair.b.delivered(), 10_000);
        assert_eq!(pair.a.stats.timeouts, 1);
    }

    #[test]
    fn tail_loss_is_repaired_by_rto() {
        let cfg = TcpConfig::default();
        let mss = cfg.mss as u64;
        let mut pair = Pair::new(cfg, 20 * mss);
        let mut once = true;
        pair.run(5_000_000_000, &mut |p| {
            let last = data_offset(p) == 19 * mss;
            p.payload() > 0 && last && std::mem::take(&mut once)
        });
        assert_eq!(pair.b.delivered(), 20 * mss);
        assert_eq!(pair.a.stats.timeouts, 1);
    }
}
