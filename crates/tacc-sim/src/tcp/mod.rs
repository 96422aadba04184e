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

use crate::cc::{Cc, CcKind, Window};
use crate::packet::Packet;
use std::collections::VecDeque;
use std::sync::Arc;
use tacc_mech::headers::tcp_flags as F;

mod receiver;
mod scoreboard;
mod sender;

use scoreboard::{in_pipe, retrans_out, to_resend, Seg, LOST, RETRANS, SACKED};

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
    /// RACK (RFC 8985 6.2, Linux's tcp_recovery.c): a segment is lost once a segment sent
    /// after it was delivered and a reordering window (a quarter of the minimum RTT, none in
    /// recovery or once DupThresh segments are SACKed) has passed since it should have
    /// arrived; a lost retransmission is found the same way. Off: RFC 6675's DupThresh rule.
    pub rack: bool,
    /// Tail loss probes (RFC 8985 7, Linux's tcp_schedule_loss_probe): two smoothed RTTs
    /// after the last send with nothing acknowledged, one segment (new data, else the last
    /// one again) goes out so that a lost tail is repaired by SACK recovery, not the RTO.
    pub tlp: bool,
    /// The receiver reports a duplicate segment in a D-SACK block (RFC 2883), which tells a
    /// sender that a probe or retransmission was not needed.
    pub dsack: bool,
    /// Linux's quick-ACK mode: the first segments of a connection (up to 16, half the
    /// receive window in segments) and data after a hole or a CE change are ACKed at once;
    /// delayed ACKs, where on, apply after that.
    pub quickack: bool,
    /// RTO = SRTT + max(4 RTTVAR, rto_min) as Linux computes it (tcp_set_rto), where RFC
    /// 6298 gives max(SRTT + 4 RTTVAR, rto_min).
    pub rto_linux: bool,
    /// HyStart (Ha and Rhee 2011, Linux's Cubic): slow start ends when an ACK train spans
    /// half the minimum RTT or the RTT grows by an eighth (4-16 ms). Cubic only.
    pub hystart: bool,
    /// Cubic grows by at least a segment per 20 acknowledged until its first loss or mark
    /// (Linux's bictcp_update, ns-3's CntClamp); off, RFC 9438's curve alone, which is flat
    /// for seconds where HyStart ended slow start.
    pub cubic_clamp: bool,
    /// A segment cut short by the peer's window goes out as the tail of new data that began
    /// with room for a full segment, unless a short segment sent before is unacknowledged
    /// (Linux's tcp_mss_split_point under Nagle with Minshall's rule, tcp_nagle_check); off,
    /// only when nothing is in flight (sender SWS avoidance, RFC 1122 4.2.3.4). Linux's
    /// Nagle also holds a short tail of the application's data; this rule does not. A window clamped to a segment and a few bytes (SICC) then carries the two
    /// each round trip, which the receiver ACKs at once, where one full segment a round trip
    /// waits for the delayed ACK.
    pub minshall: bool,
    /// A segment is at most half the largest window the peer has advertised, or the whole
    /// window when that is at most 536 B (Linux's tcp_bound_to_half_wnd, re-applied as the
    /// largest window grows, tcp_sync_mss). A peer whose windows never exceed a segment
    /// (SICC's clamp from the SYN-ACK on) gets two half-size segments a round trip.
    pub half_window: bool,
    /// Every ACK of data gives an RTT sample, from the timestamp it echoes (RFC 7323 4.1),
    /// a retransmission's included: Linux's tcp_ack_update_rtt falls back on the echoed
    /// timestamp where Karn's rule leaves no sample, and a valid sample ends the RTO's
    /// backoff (RFC 6298 5.7). Without, an acknowledged retransmission keeps the doubled RTO.
    /// The option's 12 bytes are not carried: a segment holds `mss` of data.
    pub timestamps: bool,
    /// A connection's own copy only (set through `Arc::make_mut`): while its segments are
    /// bounded by `half_window`, the MSS before the bound and the largest window seen; None
    /// in every configuration a scenario builds.
    pub bounded: Option<(u32, u64)>,
    /// Receive buffer in bytes; sets the advertised window and the window-scale shift.
    pub rcv_buf: u64,
    pub cc: CcKind,
    pub dctcp_g: f64,
    pub dupthresh: u32,
}

impl TcpConfig {
    /// Linux 6.x's defaults for what the scenario does not set (`tcp.profile = "linux"`).
    pub fn linux() -> TcpConfig {
        TcpConfig {
            init_cwnd: 10,
            delack_count: 2,
            cwnd_validation: true,
            prr: true,
            rack: true,
            tlp: true,
            dsack: true,
            quickack: true,
            rto_linux: true,
            hystart: true,
            cubic_clamp: true,
            minshall: true,
            half_window: true,
            timestamps: true,
            ..TcpConfig::default()
        }
    }
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
            rack: false,
            tlp: false,
            dsack: false,
            quickack: false,
            rto_linux: false,
            hystart: false,
            cubic_clamp: false,
            minshall: false,
            half_window: false,
            timestamps: false,
            bounded: None,
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

#[derive(Clone, Debug, Default)]
pub struct TcpStats {
    pub segments_sent: u64,
    pub retransmits: u64,
    /// Entries into fast recovery (fast retransmits).
    pub fast_retransmits: u64,
    pub timeouts: u64,
    pub ecn_reductions: u64,
}

/// What the retransmission timer (`rto_deadline`) is set for: as in Linux (`icsk_pending`),
/// one timer serves the RTO, the tail loss probe and RACK's reordering timeout, and arming
/// one replaces the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timer {
    Rto,
    Probe,
    Reorder,
}

/// Linux's TCP_TIMEOUT_MIN_US: added to the probe timeout when several segments are out, and
/// to RACK's reordering timeout.
const TIMEOUT_MIN: u64 = 2_000_000;

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
    // --- RACK, TLP and Linux's RTO estimator: read on every ACK only where they are on ---
    /// The send order ([`scoreboard::Seg::send_order`]) of the most recently sent segment
    /// delivered (RACK.xmit_ts and RACK.end_seq), and the RTT measured from the last segment
    /// delivered (RACK.rtt).
    rack_sent: (u64, u64, u64),
    rack_rtt: u64,
    /// Set when a delivered segment moved the RACK state: only then is a scan worth it.
    rack_advanced: bool,
    /// A never-retransmitted segment was delivered below one SACKed before it.
    reord_seen: bool,
    timer: Timer,
    /// The probe's timer fired: `poll_transmit` sends it.
    probe_due: bool,
    /// The probe's segment was a retransmission (Linux's tlp_retrans).
    tlp_retrans: bool,
    /// Segments SACKed and not yet cumulatively acknowledged.
    sacked_out: u32,
    /// Quick ACKs left (Linux's icsk_ack.quick).
    quick: u8,
    /// Tail loss probes sent.
    probes: u32,
    /// `nxt` when the probe went out (Linux's tlp_high_seq); `NO_PROBE` when none is out.
    tlp_high: u64,
    min_rtt: u64,
    /// The probe timeout with several segments out, 2 SRTT + 2 ms; 0 before an RTT sample.
    probe_base: u64,
    /// Linux's estimator (tcp_rtt_estimator), in ns: 4 x the mean deviation, its maximum in
    /// the current round trip, the variance term of the RTO, and the round trip's end.
    mdev: u64,
    mdev_max: u64,
    rttvar_linux: u64,
    rtt_seq: u64,
    /// A duplicate segment arrived: the next ACK reports it first (RFC 2883).
    dsack: Option<(u64, u64)>,
    // --- rarely read ---
    ctrl_sent_at: u64,
    /// The end of the last new segment shorter than the MSS (Linux's snd_sml): read only
    /// when the window cuts a segment short.
    short_end: u64,
    last_ooo: Option<(u64, u64)>,
}

const NO_PROBE: u64 = u64::MAX;

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

    /// Where the oldest and the newest segment records not yet acknowledged lie, for a
    /// prefetch.
    pub(crate) fn sent_ends(&self) -> Option<(*const u8, *const u8)> {
        let ptr = |s: &Seg| std::ptr::from_ref(s).cast();
        Some((ptr(self.segs.front()?), ptr(self.segs.back()?)))
    }

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
        let cc = Cc::new(cfg.cc, cfg.dctcp_g).with_cubic_clamp(cfg.cubic_clamp);
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
            short_end: 0,
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
            rack_sent: (0, 0, 0),
            rack_rtt: 0,
            rack_advanced: false,
            reord_seen: false,
            timer: Timer::Rto,
            probe_due: false,
            tlp_retrans: false,
            sacked_out: 0,
            quick: 0,
            probes: 0,
            tlp_high: NO_PROBE,
            min_rtt: u64::MAX,
            probe_base: 0,
            mdev: 0,
            mdev_max: 0,
            rttvar_linux: 0,
            rtt_seq: 0,
            dsack: None,
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
        self.restart_rto(now);
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

    /// Tail loss probes sent so far.
    pub fn probes(&self) -> u32 {
        self.probes
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
                self.restart_rto(now);
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
        // The SYN's window is never scaled (RFC 7323 2.2); it is the first largest window.
        self.snd_wnd = p.window as u64;
        if self.cfg.half_window && self.snd_wnd < 2 * self.cfg.mss as u64 {
            let full = self.cfg.mss;
            Arc::make_mut(&mut self.cfg).bounded = Some((full, 0));
            self.grow_max_window(self.snd_wnd);
        }
        self.sack_ok = self.cfg.sack && p.wscale().is_some();
    }

    /// The peer advertised `window`, larger than any before, while the segments are bounded
    /// by it (`TcpConfig::half_window`): the bound follows, and goes once the window holds two
    /// full segments. The congestion window keeps its count of segments, as Linux's does.
    #[cold]
    fn grow_max_window(&mut self, window: u64) {
        let cfg = Arc::make_mut(&mut self.cfg);
        let Some((full, _)) = cfg.bounded else { return };
        const TCP_MSS_DEFAULT: u64 = 536;
        // 68 B, the smallest IPv4 datagram every link carries, less the TCP/IP headers.
        const MIN_SEGMENT: u64 = 68 - 40;
        let cutoff = if window > TCP_MSS_DEFAULT {
            window / 2
        } else {
            window
        };
        let mss = if cutoff > 0 && cutoff < full as u64 {
            cfg.bounded = Some((full, window));
            cutoff.max(MIN_SEGMENT) as u32
        } else {
            cfg.bounded = (cutoff == 0).then_some((full, window));
            full
        };
        let old = std::mem::replace(&mut cfg.mss, mss);
        if mss != old {
            let scale = mss as f64 / old as f64;
            self.win.mss = mss as f64;
            self.win.cwnd *= scale;
            self.win.ssthresh *= scale;
        }
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

    pub fn on_timer(&mut self, now: u64) {
        if self.delack_deadline.is_some_and(|t| t <= now) {
            self.delack_deadline = None;
            if self.ack_pending > 0 {
                self.ack_now = true;
            }
        }
        if self.rto_deadline.is_some_and(|t| t <= now) {
            self.rto_deadline = None;
            match self.timer {
                Timer::Rto => self.on_rto(now),
                Timer::Probe => self.on_probe_timer(now),
                Timer::Reorder => self.on_reorder_timer(now),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tacc_mech::headers::Ecn;
    use tacc_mech::PacketHeaders;

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

    type PacketFilter = Box<dyn FnMut(&mut Packet) -> bool>;

    /// Two endpoints wired back to back with a fixed one-way delay and an optional drop filter.
    struct Pair {
        a: TcpEndpoint,
        b: TcpEndpoint,
        now: u64,
        wire: VecDeque<(u64, bool, Packet)>,
        delay: u64,
        /// Packets delivered to `a` so far.
        to_a: u64,
        /// Says whether to lose a packet towards `a` (and may rewrite it).
        drop_to_a: Option<PacketFilter>,
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
                drop_to_a: None,
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
                } else if !self.drop_to_a.as_mut().is_some_and(|d| d(&mut p)) {
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
            drop_to_a: None,
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

    // ------------------------------------------------------------ the Linux profile's pieces

    /// Linux's defaults with ACKs for every segment, so that each test sees its own piece.
    fn linux_every_ack() -> TcpConfig {
        TcpConfig {
            delack_count: 1,
            ..TcpConfig::linux()
        }
    }

    /// Steps the pair until `b` holds `bytes`; returns when the last of them arrived.
    fn delivered_at(
        pair: &mut Pair,
        bytes: u64,
        drop: &mut impl FnMut(&mut Packet) -> bool,
    ) -> u64 {
        while pair.b.delivered() < bytes {
            assert!(
                pair.step(60_000_000_000, drop),
                "stalled at {}",
                pair.b.delivered()
            );
        }
        pair.now
    }

    /// A transfer of `segs` segments that loses the first copy of each of `lost`; returns the
    /// pair and when the last byte arrived.
    fn transfer_losing(cfg: TcpConfig, segs: u64, lost: &[u64]) -> (Pair, u64) {
        let mss = cfg.mss as u64;
        let mut pair = Pair::new(cfg, segs * mss);
        let mut dropped = std::collections::HashSet::new();
        let at = delivered_at(&mut pair, segs * mss, &mut |p| {
            let seg = data_offset(p) / mss;
            p.payload() > 0 && lost.contains(&seg) && dropped.insert(seg)
        });
        pair.run(60_000_000_000, &mut |_| false);
        (pair, at)
    }

    /// RFC 8985 7: the last three segments of a flight are lost. Classic TCP waits for the
    /// RTO; the probe, two smoothed RTTs plus 2 ms after the last ACK, draws a SACK that lets
    /// RACK find the other two, so the tail is repaired within a probe timeout and two round
    /// trips more than the transfer takes without loss.
    #[test]
    fn a_lost_tail_is_repaired_by_a_probe_not_the_rto() {
        let rtt = 2 * Pair::new(TcpConfig::default(), 0).delay;
        let (_, clean) = transfer_losing(linux_every_ack(), 40, &[]);
        let (pair, at) = transfer_losing(linux_every_ack(), 40, &[37, 38, 39]);
        let a = &pair.a;
        assert_eq!(a.stats.timeouts, 0);
        assert_eq!(a.probes(), 1);
        assert_eq!(a.stats.retransmits, 3, "the probe and the two RACK found");
        assert_eq!(a.stats.fast_retransmits, 1);
        // The RTT estimate may sit above the wire's RTT by a little queueing of the burst.
        let bound = clean + 2 * (rtt + rtt / 2) + TIMEOUT_MIN + 2 * rtt;
        assert!(
            at <= bound,
            "repaired at {at} ns, bound {bound} (clean {clean})"
        );
        let (classic, _) = transfer_losing(
            TcpConfig {
                init_cwnd: 10,
                ..TcpConfig::default()
            },
            40,
            &[37, 38, 39],
        );
        assert_eq!(
            classic.a.stats.timeouts, 1,
            "without a probe the RTO repairs it"
        );
    }

    /// A whole window lost while more data waits: the probe is a new segment, sent whatever
    /// cwnd says, and the recovery it starts resends exactly the lost ones.
    #[test]
    fn a_probe_sends_new_data_when_there_is_some() {
        let lost: Vec<u64> = (10..30).collect();
        let (pair, _) = transfer_losing(linux_every_ack(), 100, &lost);
        let a = &pair.a;
        assert_eq!(a.stats.timeouts, 0);
        assert_eq!(a.probes(), 1);
        assert_eq!(
            a.stats.retransmits, 20,
            "the lost window once, and no probe resent"
        );
        assert_eq!(pair.b.delivered(), 100 * a.cfg.mss as u64);
    }

    /// RFC 8985 6: two segments after a hole are too few for DupThresh, and classic TCP
    /// waits for the RTO; RACK marks the hole lost a quarter of the minimum RTT (plus Linux's
    /// 2 ms timer slack) after it should have arrived.
    #[test]
    fn rack_repairs_a_hole_that_dupthresh_cannot_see() {
        let rtt = 2 * Pair::new(TcpConfig::default(), 0).delay;
        let (_, clean) = transfer_losing(linux_every_ack(), 4, &[]);
        let (pair, at) = transfer_losing(linux_every_ack(), 4, &[1]);
        let a = &pair.a;
        assert_eq!(a.stats.timeouts, 0);
        assert_eq!(a.probes(), 0);
        assert_eq!((a.stats.retransmits, a.stats.fast_retransmits), (1, 1));
        let bound = clean + rtt + rtt / 4 + TIMEOUT_MIN + rtt;
        assert!(
            at <= bound,
            "repaired at {at} ns, bound {bound} (clean {clean})"
        );
        let classic = TcpConfig {
            init_cwnd: 10,
            ..TcpConfig::default()
        };
        let (classic, _) = transfer_losing(classic, 4, &[1]);
        assert_eq!(classic.a.stats.timeouts, 1);
    }

    /// The classic recovery's scripted drops, under RACK: the same repairs, no timeout.
    #[test]
    fn rack_recovers_three_scripted_drops_without_a_timeout() {
        let (pair, _) = transfer_losing(linux_every_ack(), 200, &[10, 11, 50]);
        assert_eq!(pair.a.stats.timeouts, 0);
        assert_eq!(pair.a.stats.retransmits, 3);
        assert_eq!(pair.a.stats.fast_retransmits, 2);
    }

    /// A retransmission lost too: RACK sees that segments sent after it were delivered and
    /// sends it again in the same recovery.
    #[test]
    fn rack_finds_a_lost_retransmission() {
        let cfg = linux_every_ack();
        let mss = cfg.mss as u64;
        let mut pair = Pair::new(cfg, 200 * mss);
        let mut drops_of_10 = 0;
        pair.run(5_000_000_000, &mut |p| {
            let drop = p.payload() > 0 && data_offset(p) / mss == 10 && drops_of_10 < 2;
            drops_of_10 += drop as u32;
            drop
        });
        assert_eq!(drops_of_10, 2);
        assert_eq!(pair.b.delivered(), 200 * mss);
        assert_eq!(pair.a.stats.timeouts, 0);
        assert_eq!(pair.a.stats.retransmits, 2);
        assert_eq!(pair.a.stats.fast_retransmits, 1);
    }

    /// RFC 2883: a segment that arrives again is reported in the first SACK block of the
    /// next ACK, with the cumulative ACK beyond it.
    #[test]
    fn a_duplicate_segment_is_reported_in_a_dsack_block() {
        for dsack in [false, true] {
            let cfg = TcpConfig {
                dsack,
                ..TcpConfig::linux()
            };
            let mss = cfg.mss as u64;
            let mut pair = Pair::new(cfg, 10 * mss);
            let mut copy = None;
            pair.run(1_000_000_000, &mut |p| {
                if p.payload() > 0 && data_offset(p) == 3 * mss {
                    copy = Some(p.clone());
                }
                false
            });
            let copy = copy.expect("segment 3 was sent");
            pair.b.on_segment(pair.now, &copy);
            let mut acks = Vec::new();
            pair.b
                .poll_transmit(pair.now, u32::MAX, &mut |p| acks.push(p));
            assert_eq!(acks.len(), 1, "the duplicate is ACKed at once");
            let blocks = acks[0].sack_blocks();
            if dsack {
                let end = copy.seq.wrapping_add(mss as u32);
                assert_eq!(blocks, &[(copy.seq, end)]);
                assert!(
                    acks[0].ack.wrapping_sub(end) < 1 << 31,
                    "below the cumulative ACK"
                );
            } else {
                assert!(blocks.is_empty());
            }
        }
    }

    /// Linux's tcp_process_tlp_ack: when the probe resent a segment that had arrived (its
    /// ACK was lost), the D-SACK of the copy ends the episode with no window reduction.
    #[test]
    fn a_dsack_of_the_probe_means_no_loss() {
        for dsack in [true, false] {
            let cfg = TcpConfig {
                dsack,
                ..linux_every_ack()
            };
            let mss = cfg.mss as u64;
            let mut pair = Pair::new(cfg, 40 * mss);
            // No FIN, whose ACK would acknowledge the tail.
            pair.a.close_requested = false;
            let (iss, mut lost_acks) = (CLIENT_ISS, 0);
            // The ACKs of the last three segments are lost; the probe's is not.
            pair.drop_to_a = Some(Box::new(move |p: &mut Packet| {
                let acked = p.ack.wrapping_sub(iss).wrapping_sub(1) as u64;
                let drop = acked > 37 * mss && lost_acks < 3;
                lost_acks += drop as u32;
                drop
            }));
            let at = delivered_at(&mut pair, 40 * mss, &mut |_| false);
            pair.run(at + 50_000_000, &mut |_| false);
            let a = &pair.a;
            assert_eq!((a.probes(), a.stats.timeouts), (1, 0));
            assert_eq!(a.win.ssthresh, f64::INFINITY, "no reduction");
            // Without the D-SACK the probe's ACK cannot tell; the episode stays open.
            assert_eq!(a.tlp_high == NO_PROBE, dsack);
        }
    }

    /// Linux's quick-ACK mode: the first 16 data segments are each ACKed, then every second
    /// one (ACKs that cover one segment afterwards end a flight and wait for the timer).
    #[test]
    fn quick_acks_then_delayed_acks() {
        let cfg = TcpConfig::linux();
        let mss = cfg.mss as u64;
        let mut pair = Pair::new(cfg, 100 * mss);
        let acked = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let log = acked.clone();
        pair.drop_to_a = Some(Box::new(move |p: &mut Packet| {
            if p.flags & (F::SYN | F::FIN) == 0 {
                log.borrow_mut()
                    .push(p.ack.wrapping_sub(CLIENT_ISS).wrapping_sub(1) as u64 / mss);
            }
            false
        }));
        pair.run(10_000_000_000, &mut |_| false);
        assert_eq!(pair.b.delivered(), 100 * mss);
        let acked = acked.borrow();
        assert_eq!(acked[..16], (1..=16).collect::<Vec<_>>()[..], "{acked:?}");
        let steps: Vec<u64> = acked[16..].windows(2).map(|w| w[1] - w[0]).collect();
        let pairs = steps.iter().filter(|&&d| d == 2).count();
        assert!(steps.iter().all(|&d| d <= 2), "{acked:?}");
        assert!(pairs * 10 >= steps.len() * 8, "{acked:?}");
        // Classic delayed ACKs have no quick start.
        let mut classic = Pair::new(
            TcpConfig {
                delack_count: 2,
                init_cwnd: 10,
                ..TcpConfig::default()
            },
            100 * mss,
        );
        let first = std::rc::Rc::new(std::cell::Cell::new(None));
        let seen = first.clone();
        classic.drop_to_a = Some(Box::new(move |p: &mut Packet| {
            if p.flags & F::SYN == 0 && seen.get().is_none() {
                seen.set(Some(
                    p.ack.wrapping_sub(CLIENT_ISS).wrapping_sub(1) as u64 / mss,
                ));
            }
            false
        }));
        classic.run(10_000_000_000, &mut |_| false);
        assert_eq!(first.get(), Some(2));
    }

    /// Linux's RTO (tcp_rtt_estimator, __tcp_set_rto) against RFC 6298's, sample by sample.
    #[test]
    fn linux_rto_is_srtt_plus_at_least_rto_min() {
        const US: u64 = 1_000;
        const MS: u64 = 1_000_000;
        let rto_after = |rto_linux: bool, samples: &[u64]| {
            let cfg = TcpConfig {
                rto_linux,
                ..TcpConfig::default()
            };
            let mut ep = TcpEndpoint::client(cfg, (1, 1), (2, 2), 0, 0);
            for (i, &m) in samples.iter().enumerate() {
                // Each sample a round trip later than the last.
                (ep.una, ep.nxt) = (10 * i as u64 + 5, 10 * i as u64 + 10);
                ep.rtt_sample(m);
            }
            ep.rto
        };
        // The handshake's sample m alone: m + max(2m, rto_min), against RFC 6298's floor.
        assert_eq!(rto_after(true, &[100 * US]), 100 * US + 200 * MS);
        assert_eq!(rto_after(false, &[100 * US]), 200 * MS);
        // A jump to 300 ms: the deviation term takes it at once.
        let jump = rto_after(true, &[100 * US, 300 * MS]);
        let (srtt, mdev4) = (
            100 * US + (300 * MS - 100 * US) / 8,
            200 * US + 300 * MS - 100 * US - 50 * US,
        );
        assert!(jump.abs_diff(srtt + mdev4) <= 1, "{jump} ns");
        // Then steady samples: the variance term decays a quarter per round trip to rto_min.
        let mut samples = vec![100 * US, 300 * MS];
        samples.extend([100 * US; 60]);
        let settled = rto_after(true, &samples);
        assert!((200 * MS..201 * MS).contains(&settled), "{settled} ns");
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

    /// A window of a segment and 12 bytes (SICC's clamp of one MSS, rounded up by the window
    /// scale): under Minshall's rule the sender sends both each round trip and the receiver
    /// ACKs the two at once; with sender SWS avoidance alone the 12 bytes wait while the
    /// segment is out, and each segment waits for the delayed ACK. Without quick ACKs: the
    /// connection's first segments, each ACKed at once, would split a pair once (the runt's
    /// room opens while the next full segment is out) and cost one delayed ACK, as on Linux.
    #[test]
    fn a_window_cut_short_goes_out_under_minshalls_rule() {
        let transfer = |minshall: bool| {
            // Full segments: Linux would halve them under a window of 1472 B (below).
            let cfg = TcpConfig {
                rcv_buf: 1472,
                minshall,
                quickack: false,
                half_window: false,
                ..TcpConfig::linux()
            };
            let rounds = 20;
            let mut pair = Pair::new(cfg, rounds * 1472);
            let mut sizes = std::collections::BTreeSet::new();
            let done = delivered_at(&mut pair, rounds * 1472, &mut |p| {
                if p.payload() > 0 {
                    sizes.insert(p.payload());
                }
                false
            });
            (done, sizes)
        };
        let rtt = 100_000;
        // The handshake, then 20 rounds of 1,472 B.
        let (done, sizes) = transfer(true);
        assert!(done <= 22 * rtt, "{done} ns");
        assert_eq!(sizes.into_iter().collect::<Vec<_>>(), [12, 1460]);
        // A segment a round trip, each ACKed after 40 ms.
        let (done, _) = transfer(false);
        assert!(done >= 20 * 40_000_000, "{done} ns");
    }

    /// Minshall's rule case by case: a window of 12 B left, the first segment of a 1,472 B
    /// window out.
    #[test]
    fn a_runt_waits_for_a_full_segment_before_it_and_for_the_last_runts_ack() {
        let runt = |minshall: bool, una: u64, pass_start: u64, short_end: u64| {
            let cfg = TcpConfig {
                minshall,
                ..TcpConfig::linux()
            };
            let mut ep = TcpEndpoint::client(cfg, (1, 1), (2, 2), 0, 0);
            (ep.una, ep.nxt, ep.snd_wnd, ep.app_limit) = (una, una + 1460, 1472, 1 << 20);
            (ep.pipe, ep.short_end) = (1460, short_end);
            ep.next_segment(1 << 20, pass_start)
                .map(|(start, len, _)| (start, len))
        };
        let tail = Some((1460, 12));
        // The full segment went out in this round, no runt is unacknowledged: the tail too.
        assert_eq!(runt(true, 0, 0, 0), tail);
        // The round began with only the runt's room: it waits for the full segment's ACK.
        assert_eq!(runt(true, 0, 1460, 0), None);
        // The last runt is unacknowledged (it ends beyond una): Nagle holds this one.
        assert_eq!(runt(true, 10_000, 10_000, 10_012), None);
        assert_eq!(runt(true, 10_000, 10_000, 10_000).map(|(_, l)| l), Some(12));
        // Sender SWS avoidance alone: never while a segment is out.
        assert_eq!(runt(false, 0, 0, 0), None);
    }

    /// A receiver's windows clamped to 1,472 B from the SYN-ACK on (SICC's clamp, as the
    /// testbed's captures show it): Linux's sender sends 736 B segments, two a round trip,
    /// and full ones again once a larger window arrives.
    #[test]
    fn a_segment_is_at_most_half_the_largest_window_the_peer_advertised() {
        const CLAMP: u64 = 1472;
        let cfg = TcpConfig {
            quickack: false,
            ..TcpConfig::linux()
        };
        let bytes = 400 * 1460;
        let mut pair = Pair::new(cfg, bytes);
        let ws = pair.b.rcv_wscale;
        let clamped = std::rc::Rc::new(std::cell::Cell::new(true));
        let on = clamped.clone();
        pair.drop_to_a = Some(Box::new(move |p: &mut Packet| {
            let shift = if p.flags & F::SYN != 0 { 0 } else { ws };
            if on.get() {
                p.set_tcp_window(((CLAMP >> shift) as u16).min(p.window));
            }
            false
        }));
        let sizes = std::cell::RefCell::new(std::collections::BTreeSet::new());
        let mut record = |p: &mut Packet| {
            if p.payload() > 0 {
                sizes.borrow_mut().insert(p.payload());
            }
            false
        };
        delivered_at(&mut pair, 40 * CLAMP, &mut record);
        assert_eq!(sizes.take().into_iter().collect::<Vec<_>>(), [736]);
        // Two segments a round trip of 100 us: 40 round trips (and a handshake's), each
        // pair ACKed at once, none waiting for the delayed ACK.
        assert!(pair.now <= 42 * 100_000, "{} ns", pair.now);
        assert_eq!(pair.a.cfg.mss, 736);
        clamped.set(false);
        delivered_at(&mut pair, bytes, &mut record);
        assert_eq!(pair.a.cfg.mss, 1460);
        assert!(sizes.borrow().contains(&1460), "{sizes:?}");
    }

    /// The bound follows the largest window, and the congestion window keeps its count of
    /// segments as the segments change size (Linux counts it in segments).
    #[test]
    fn the_half_window_bound_keeps_the_congestion_window_in_segments() {
        let mut ep = TcpEndpoint::client(TcpConfig::linux(), (1, 1), (2, 2), 0, 0);
        let mut syn_ack = Packet::new(2, 1, tacc_mech::headers::ip_proto::TCP, 60);
        syn_ack.set_syn_options(1460, 7);
        syn_ack.window = 1000;
        ep.take_syn_options(&syn_ack);
        // Above 536 B, half the window; the initial window is 10 such segments.
        assert_eq!((ep.cfg.mss, ep.win.cwnd), (500, 5000.0));
        ep.grow_max_window(2000);
        assert_eq!((ep.cfg.mss, ep.win.cwnd), (1000, 10_000.0));
        ep.grow_max_window(2920);
        assert_eq!(
            (ep.cfg.mss, ep.win.cwnd, ep.cfg.bounded),
            (1460, 14_600.0, None)
        );
        let mut small = TcpEndpoint::client(TcpConfig::linux(), (1, 1), (2, 2), 0, 0);
        syn_ack.window = 400;
        small.take_syn_options(&syn_ack);
        // At most 536 B, the whole window.
        assert_eq!(small.cfg.mss, 400);
        // The classic profile never bounds.
        let mut classic = TcpEndpoint::client(TcpConfig::default(), (1, 1), (2, 2), 0, 0);
        classic.take_syn_options(&syn_ack);
        assert_eq!(classic.cfg.mss, 1460);
    }

    /// A starved flow (a queue held full by another sender lets through only what comes back
    /// later): every segment's first copy is lost and its retransmission passes. With
    /// timestamps each acknowledged retransmission gives an RTT sample and ends the backoff,
    /// so every timeout is the base RTO (SRTT + rto_min); under Karn's rule the RTO doubles
    /// from one segment to the next, as the sender never acknowledges new data sent once.
    #[test]
    fn an_acknowledged_retransmission_ends_the_backoff_with_timestamps_only() {
        let run = |timestamps: bool| {
            let cfg = TcpConfig {
                timestamps,
                init_cwnd: 1,
                tlp: false,
                ..linux_every_ack()
            };
            let (mss, rto_min) = (cfg.mss as u64, cfg.rto_min);
            let mut pair = Pair::new(cfg, 4 * mss);
            let mut sent = std::collections::HashSet::new();
            let done = delivered_at(&mut pair, 4 * mss, &mut |p| {
                p.payload() > 0 && sent.insert(data_offset(p))
            });
            let timeouts = pair.a.stats.timeouts;
            // Two segments out at once lose both: the second is repaired on the first's ACK.
            assert!(timeouts >= 3, "{timeouts} timeouts");
            (done, timeouts, rto_min)
        };
        let (with, timeouts, rto_min) = run(true);
        // A base RTO each, and the round trips between them (100 us each).
        assert!(
            with < timeouts * rto_min + 10_000_000,
            "{with} ns, {timeouts} timeouts"
        );
        let (without, timeouts, _) = run(false);
        assert!(
            without >= ((1 << timeouts) - 1) * rto_min,
            "{without} ns, {timeouts} timeouts"
        );
    }
}
