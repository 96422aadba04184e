//! Congestion controls: NewReno (RFC 5681/6582 with RFC 3465 byte counting), Cubic (RFC 9438)
//! and DCTCP (RFC 8257 / the SIGCOMM 2010 paper). Windows are in bytes (f64 so fractional
//! growth is not lost); one `Cc` per connection, selected by an enum (static dispatch).

use serde::Deserialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CcKind {
    Newreno,
    Cubic,
    Dctcp,
}

impl CcKind {
    pub fn name(self) -> &'static str {
        match self {
            CcKind::Newreno => "newreno",
            CcKind::Cubic => "cubic",
            CcKind::Dctcp => "dctcp",
        }
    }
}

/// Why the window is being reduced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Congestion {
    /// Fast retransmit / SACK loss detection.
    Loss,
    /// An ECN-Echo, at most once per window of data.
    Ecn,
    /// Retransmission timeout.
    Timeout,
}

/// The window every controller manipulates.
#[derive(Clone, Debug)]
pub struct Window {
    pub cwnd: f64,
    pub ssthresh: f64,
    pub mss: f64,
}

const CUBIC_C: f64 = 0.4;
const CUBIC_BETA: f64 = 0.7;

/// Laid out by hand (`repr(C)`): what NewReno and DCTCP read on every ACK in the first 48
/// bytes, so that a TCP endpoint can keep them in one line with its other ACK state.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct Cc {
    kind: CcKind,
    /// Bytes acknowledged since the last congestion-avoidance increment (byte counting).
    ca_bytes: f64,
    // DCTCP
    alpha: f64,
    window_end: u64,
    acked_total: u64,
    acked_ce: u64,
    g: f64,
    // Cubic (in segments and seconds)
    w_max: f64,
    k: f64,
    epoch_start: Option<u64>,
    w_est: f64,
    // HyStart (Cubic): the smallest RTT seen, and the current round's start, last ACK of its
    // train, end, smallest RTT and samples.
    delay_min: u64,
    hs_found: bool,
    hs_round_start: u64,
    hs_last_ack: u64,
    hs_end: u64,
    hs_curr_rtt: u64,
    hs_samples: u32,
    /// Linux's clamp of Cubic's growth before its first loss (see `with_cubic_clamp`), and
    /// whether no loss or mark has come since the start or the last timeout.
    clamp: bool,
    lossless: bool,
}

/// HyStart's constants (Linux's tcp_cubic.c): the window below which it does not act, the
/// widest gap between ACKs of one train, the samples a round takes before the delay test, and
/// the bounds of the RTT increase that ends slow start.
const HYSTART_LOW_WINDOW: f64 = 16.0;
const HYSTART_ACK_DELTA: u64 = 2_000_000;
const HYSTART_MIN_SAMPLES: u32 = 8;
const HYSTART_DELAY_MIN: u64 = 4_000_000;
const HYSTART_DELAY_MAX: u64 = 16_000_000;

impl Cc {
    pub fn new(kind: CcKind, dctcp_g: f64) -> Cc {
        Cc {
            kind,
            ca_bytes: 0.0,
            w_max: 0.0,
            k: 0.0,
            epoch_start: None,
            w_est: 0.0,
            delay_min: 0,
            hs_found: false,
            hs_round_start: 0,
            hs_last_ack: 0,
            hs_end: 0,
            hs_curr_rtt: u64::MAX,
            hs_samples: 0,
            clamp: false,
            lossless: true,
            g: dctcp_g,
            // Linux starts DCTCP's alpha at 1: the first marks cause a full halving.
            alpha: 1.0,
            window_end: 0,
            acked_total: 0,
            acked_ce: 0,
        }
    }

    /// Cubic grows by at least a segment per 20 acknowledged while it has seen no loss
    /// (Linux's bictcp_update: cnt at most 20 while last_max_cwnd is 0; ns-3's CntClamp):
    /// after HyStart ends slow start, RFC 9438's curve alone is flat for seconds.
    pub fn with_cubic_clamp(mut self, on: bool) -> Cc {
        self.clamp = on;
        self
    }

    pub fn kind(&self) -> CcKind {
        self.kind
    }

    pub fn dctcp_alpha(&self) -> f64 {
        self.alpha
    }

    /// Window growth for `acked` newly acknowledged bytes outside loss recovery.
    #[inline]
    pub fn on_ack(&mut self, w: &mut Window, acked: u64, now: u64, srtt_ns: f64) {
        let acked = acked as f64;
        if w.cwnd < w.ssthresh {
            // Slow start, RFC 3465 with L = 2 SMSS.
            w.cwnd += acked.min(2.0 * w.mss);
            return;
        }
        match self.kind {
            CcKind::Newreno | CcKind::Dctcp => {
                self.ca_bytes += acked;
                if self.ca_bytes >= w.cwnd {
                    self.ca_bytes -= w.cwnd;
                    w.cwnd += w.mss;
                }
            }
            CcKind::Cubic => self.cubic_ack(w, acked, now, srtt_ns),
        }
    }

    fn cubic_ack(&mut self, w: &mut Window, acked: f64, now: u64, srtt_ns: f64) {
        let cwnd = w.cwnd / w.mss;
        let start = match self.epoch_start {
            Some(t) => t,
            None => {
                self.epoch_start = Some(now);
                if cwnd < self.w_max {
                    self.k = ((self.w_max - cwnd) / CUBIC_C).cbrt();
                } else {
                    self.k = 0.0;
                    self.w_max = cwnd;
                }
                self.w_est = cwnd;
                now
            }
        };
        let t = (now - start) as f64 * 1e-9;
        let rtt = srtt_ns * 1e-9;
        let w_cubic = |t: f64| CUBIC_C * (t - self.k).powi(3) + self.w_max;
        let target = w_cubic(t + rtt).clamp(cwnd, 1.5 * cwnd);
        let segs_acked = acked / w.mss;
        let alpha_cubic = 3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA);
        self.w_est += alpha_cubic * segs_acked / cwnd;
        let mut new = if w_cubic(t) < self.w_est {
            self.w_est.max(cwnd)
        } else {
            cwnd + (target - cwnd) / cwnd * segs_acked
        };
        if self.clamp && self.lossless {
            new = new.max(cwnd + segs_acked / 20.0);
        }
        w.cwnd = new * w.mss;
    }

    /// HyStart (Ha and Rhee 2011, as Linux's cubictcp_acked and hystart_update): on an ACK
    /// with an RTT sample `rtt` in slow start, ends slow start (ssthresh = cwnd) when the
    /// round's ACK train has lasted half the minimum RTT, or its smallest RTT of at least 8
    /// samples exceeds the minimum by an eighth of it (4 to 16 ms). `una` and `nxt` mark the
    /// rounds; `srtt_ns` gives the pacing rate Linux's ACK-train threshold allows for.
    pub fn hystart(
        &mut self,
        w: &mut Window,
        rtt: u64,
        now: u64,
        una: u64,
        nxt: u64,
        srtt_ns: f64,
    ) {
        if self.kind != CcKind::Cubic {
            return;
        }
        // Linux ignores the first second of a congestion-avoidance epoch.
        if self.epoch_start.is_some_and(|t| now - t < 1_000_000_000) {
            return;
        }
        let delay = rtt.max(1);
        if self.delay_min == 0 || delay < self.delay_min {
            self.delay_min = delay;
        }
        if self.hs_found || w.cwnd >= w.ssthresh {
            return;
        }
        if una > self.hs_end {
            self.hs_round_start = now;
            self.hs_last_ack = now;
            self.hs_end = nxt;
            self.hs_curr_rtt = u64::MAX;
            self.hs_samples = 0;
        }
        if w.cwnd < HYSTART_LOW_WINDOW * w.mss {
            return;
        }
        if now - self.hs_last_ack <= HYSTART_ACK_DELTA {
            self.hs_last_ack = now;
            // hystart_ack_delay: how long four 64 KB bursts take at the pacing rate (twice
            // cwnd per RTT in slow start), at most 1 ms; halved with the rest, as unpaced.
            let ratio = if w.cwnd < w.ssthresh / 2.0 { 2.0 } else { 1.2 };
            let rate = ratio * w.cwnd / (srtt_ns * 1e-9);
            let ack_delay = if srtt_ns > 0.0 {
                (4.0 * 65536.0 / rate * 1e9).min(1e6) as u64
            } else {
                0
            };
            if now - self.hs_round_start > (self.delay_min + ack_delay) / 2 {
                self.hs_found = true;
            }
        }
        self.hs_curr_rtt = self.hs_curr_rtt.min(delay);
        if self.hs_samples < HYSTART_MIN_SAMPLES {
            self.hs_samples += 1;
        } else {
            let rise = (self.delay_min / 8).clamp(HYSTART_DELAY_MIN, HYSTART_DELAY_MAX);
            if self.hs_curr_rtt > self.delay_min + rise {
                self.hs_found = true;
            }
        }
        if self.hs_found {
            w.ssthresh = w.cwnd;
        }
    }

    /// Records one ACK for DCTCP's per-window estimate of the marked fraction.
    pub fn on_ack_ecn(&mut self, acked: u64, ece: bool, snd_una: u64, snd_nxt: u64) {
        if self.kind != CcKind::Dctcp {
            return;
        }
        self.acked_total += acked;
        if ece {
            self.acked_ce += acked;
        }
        if snd_una > self.window_end {
            if self.acked_total > 0 {
                let f = self.acked_ce as f64 / self.acked_total as f64;
                self.alpha = (1.0 - self.g) * self.alpha + self.g * f;
            }
            self.acked_total = 0;
            self.acked_ce = 0;
            self.window_end = snd_nxt;
        }
    }

    /// Reduces the window; `flight` is the data outstanding in bytes.
    pub fn on_congestion(&mut self, w: &mut Window, why: Congestion, flight: u64) {
        self.ca_bytes = 0.0;
        // Linux resets Cubic's history on a timeout (bictcp_reset).
        self.lossless = why == Congestion::Timeout;
        let floor = 2.0 * w.mss;
        match (self.kind, why) {
            (CcKind::Dctcp, Congestion::Ecn) => {
                w.ssthresh = (w.cwnd * (1.0 - self.alpha / 2.0)).max(floor);
                w.cwnd = w.ssthresh;
            }
            (CcKind::Cubic, _) => {
                let cwnd = w.cwnd / w.mss;
                // fast convergence
                self.w_max = if cwnd < self.w_max {
                    cwnd * (1.0 + CUBIC_BETA) / 2.0
                } else {
                    cwnd
                };
                self.epoch_start = None;
                w.ssthresh = (w.cwnd * CUBIC_BETA).max(floor);
                w.cwnd = w.ssthresh;
            }
            _ => {
                w.ssthresh = (flight as f64 / 2.0).max(floor);
                w.cwnd = w.ssthresh;
            }
        }
        if why == Congestion::Timeout {
            w.cwnd = w.mss;
            // Linux's bictcp_reset on a timeout: HyStart watches the next slow start afresh.
            self.delay_min = 0;
            self.hs_found = false;
            self.hs_end = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(cwnd_segs: f64) -> Window {
        Window {
            cwnd: cwnd_segs * 1000.0,
            ssthresh: 1.0,
            mss: 1000.0,
        }
    }

    #[test]
    fn newreno_adds_one_segment_per_window_of_acks() {
        let mut cc = Cc::new(CcKind::Newreno, 1.0 / 16.0);
        let mut w = window(10.0);
        for _ in 0..10 {
            cc.on_ack(&mut w, 1000, 0, 1e5);
        }
        assert_eq!(w.cwnd, 11_000.0);
    }

    #[test]
    fn newreno_halves_flight_on_loss_and_restarts_at_one_on_timeout() {
        let mut cc = Cc::new(CcKind::Newreno, 1.0 / 16.0);
        let mut w = window(20.0);
        cc.on_congestion(&mut w, Congestion::Loss, 20_000);
        assert_eq!((w.cwnd, w.ssthresh), (10_000.0, 10_000.0));
        cc.on_congestion(&mut w, Congestion::Timeout, 10_000);
        assert_eq!((w.cwnd, w.ssthresh), (1000.0, 5000.0));
    }

    #[test]
    fn dctcp_alpha_follows_marked_fraction_and_cuts_by_half_alpha() {
        let mut cc = Cc::new(CcKind::Dctcp, 1.0 / 16.0);
        // One window fully marked keeps alpha at 1: the cut is a halving.
        cc.on_ack_ecn(10_000, true, 10_000, 20_000);
        assert_eq!(cc.dctcp_alpha(), 1.0);
        // A window with 25% marked: alpha = 15/16 + 1/16 * 0.25
        cc.on_ack_ecn(3000, false, 13_000, 23_000);
        cc.on_ack_ecn(1000, true, 14_000, 24_000);
        cc.on_ack_ecn(0, false, 20_001, 30_000);
        assert!((cc.dctcp_alpha() - (15.0 / 16.0 + 0.25 / 16.0)).abs() < 1e-12);
        let mut w = window(40.0);
        let a = cc.dctcp_alpha();
        cc.on_congestion(&mut w, Congestion::Ecn, 40_000);
        assert!((w.cwnd - 40_000.0 * (1.0 - a / 2.0)).abs() < 1e-6);
    }

    #[test]
    fn cubic_cuts_to_beta_and_regrows_to_w_max_after_k() {
        let mut cc = Cc::new(CcKind::Cubic, 1.0 / 16.0);
        let mut w = window(100.0);
        cc.on_congestion(&mut w, Congestion::Loss, 100_000);
        assert_eq!(w.cwnd, 70_000.0);
        // K = cbrt(100 * 0.3 / 0.4) = 4.217 s; after K the window is back near W_max = 100.
        let k = (30.0f64 / 0.4).cbrt();
        let rtt = 1e8; // 100 ms
        let mut now = 0u64;
        while (now as f64) < k * 1e9 {
            cc.on_ack(&mut w, 1000, now, rtt);
            now += 1_000_000;
        }
        let segs = w.cwnd / 1000.0;
        assert!((99.0..=102.0).contains(&segs), "cwnd {segs} segments at K");
    }
    /// HyStart's inputs: a Cubic window in slow start of `cwnd_segs` segments of 1000 B.
    fn slow_start(cwnd_segs: f64) -> (Cc, Window) {
        let mut w = window(cwnd_segs);
        w.ssthresh = f64::INFINITY;
        (Cc::new(CcKind::Cubic, 1.0 / 16.0), w)
    }

    const MS: u64 = 1_000_000;

    /// The delay rule: a round whose smallest RTT, over at least 8 samples, exceeds the
    /// minimum by more than max(min/8, 4 ms) ends slow start on its 9th sample; a rise of
    /// exactly 4 ms does not. ACKs 3 ms apart keep the ACK-train rule out of it.
    #[test]
    fn hystart_ends_slow_start_when_a_rounds_rtt_rises() {
        for (rise, found_at) in [(4 * MS, None), (4 * MS + 1, Some(9))] {
            let (mut cc, mut w) = slow_start(20.0);
            let mut now = 0;
            let mut una = 0;
            // Round 1 at 1 ms sets the minimum.
            for _ in 0..9 {
                (now, una) = (now + 3 * MS, una + 1000);
                cc.hystart(&mut w, MS, now, una, 1_000_000, 1e6);
            }
            assert_eq!(w.ssthresh, f64::INFINITY);
            // Round 2 (una passes round 1's end) with the RTT risen.
            una = 1_000_000;
            let mut found = None;
            for k in 1..=20 {
                (now, una) = (now + 3 * MS, una + 1000);
                cc.hystart(&mut w, MS + rise, now, una, 2_000_000, 1e6);
                if found.is_none() && w.ssthresh.is_finite() {
                    found = Some(k);
                }
            }
            assert_eq!(found, found_at, "rise {rise} ns");
            if found.is_some() {
                assert_eq!(w.ssthresh, w.cwnd, "ssthresh = cwnd, no cut");
            }
        }
    }

    /// The ACK-train rule: unpaced, slow start ends once the round's closely spaced ACKs
    /// span more than (min RTT + the pacing allowance, 1 ms here) / 2 = 1 ms.
    #[test]
    fn hystart_ends_slow_start_when_an_ack_train_spans_half_the_min_rtt() {
        let (mut cc, mut w) = slow_start(20.0);
        let start = 10 * MS;
        for k in 0..=20u64 {
            let now = start + k * 100_000;
            cc.hystart(&mut w, MS, now, 1000 * (k + 1), 1_000_000, 1e6);
            let found = w.ssthresh.is_finite();
            assert_eq!(found, k > 10, "ACK {k}, {} us into the round", k * 100);
        }
    }

    /// Below 16 segments, and for other congestion controls, HyStart does nothing.
    #[test]
    fn hystart_waits_for_16_segments_and_is_cubics_alone() {
        for (kind, cwnd) in [(CcKind::Cubic, 15.0), (CcKind::Newreno, 20.0)] {
            let (_, mut w) = slow_start(cwnd);
            let mut cc = Cc::new(kind, 1.0 / 16.0);
            for k in 0..100u64 {
                cc.hystart(
                    &mut w,
                    MS + k * MS,
                    k * 100_000,
                    1000 * (k + 1),
                    1 << 40,
                    1e6,
                );
            }
            assert_eq!(w.ssthresh, f64::INFINITY, "{kind:?} at {cwnd} segments");
        }
    }
    /// Linux's clamp: after slow start ended with no loss (HyStart), RFC 9438's curve from
    /// W_max = cwnd is flat, and without the clamp a window of ACKs adds under a segment;
    /// with it, at least a segment per 20 acknowledged, until the first loss.
    #[test]
    fn cubic_grows_a_twentieth_per_segment_acked_before_its_first_loss() {
        let grown = |clamp: bool, lossy: bool| {
            let mut cc = Cc::new(CcKind::Cubic, 1.0 / 16.0).with_cubic_clamp(clamp);
            let mut w = window(100.0);
            w.ssthresh = 100_000.0; // slow start over, as HyStart leaves it
            if lossy {
                cc.on_congestion(&mut w, Congestion::Loss, 142_857);
                w.cwnd = 100_000.0;
            }
            // One window of ACKs over 1 ms with a 1 ms RTT.
            for k in 0..100 {
                cc.on_ack(&mut w, 1000, 1_000_000 + k * 10_000, 1e6);
            }
            w.cwnd / 1000.0 - 100.0
        };
        assert!(grown(false, false) < 1.0, "{}", grown(false, false));
        let clamped = grown(true, false);
        assert!((4.9..5.2).contains(&clamped), "{clamped} segments");
        assert!(grown(true, true) < 1.0, "a loss ends the clamp");
    }
}
