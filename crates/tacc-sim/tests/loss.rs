//! Random loss on links, and TCP against the Mathis model (Mathis, Semke, Mahdavi, Ott, "The
//! macroscopic behavior of the TCP congestion avoidance algorithm", CCR 1997):
//! throughput = MSS / RTT x C / sqrt(p) for a long flow whose window is limited by random loss
//! alone (no queue, no receive window, no timeouts). The paper's constant is C = sqrt(3/2) =
//! 1.22 for periodic loss and 1.31 for random loss with an ACK per segment; the sender counts
//! bytes acknowledged (as Linux does), so delayed ACKs do not slow its growth and the
//! per-segment figure applies. At loss rates of a few percent, where timeouts count, against
//! Padhye et al.'s model with timeouts.

mod common;
use common::*;

/// One NewReno flow over a 10 Gb/s star (never the bottleneck: the loss limits the window),
/// RTT = 4 x `delay`, the data path's last hop losing `p` of its packets.
fn lossy_path(delay: &str, p: f64, duration: &str, extra: &str) -> String {
    format!(
        "name = \"loss\"\nduration = \"{duration}\"\n[topology]\nkind = \"star\"\nsenders = 1\nreceivers = 1\nlink_rate = \"10Gbps\"\nlink_delay = \"{delay}\"\n[queue]\nkind = \"droptail\"\nlimit = \"10000pkt\"\n[tcp]\ncc = \"newreno\"\necn = false\nrcv_buf = \"64MB\"\n[[flows]]\nname = \"bulk\"\nsrc = \"s0\"\ndst = \"r0\"\n{extra}"
    ) + &format!("[[loss]]\nmodel = \"bernoulli\"\nports = [\"sw0->r0\"]\nrate = {p}\n")
}

/// Mathis's C measured: goodput x RTT x sqrt(p) / MSS, p as lost on the link; and the number
/// of loss events the run saw.
fn mathis_c(delay: &str, p: f64, duration: &str) -> (f64, f64) {
    let (_, s) = run(&lossy_path(delay, p, duration, ""));
    let port = port(&s, "sw0->r0");
    let lost = port.dropped_loss as f64 / port.enqueued as f64;
    assert!(
        (lost - p).abs() < 5.0 * (p * (1.0 - p) / port.enqueued as f64).sqrt(),
        "lost {lost} of the packets, not {p}"
    );
    let f = flow(&s, "bulk");
    // The model leaves timeouts out: they must be rare.
    assert!(
        f.timeouts as f64 <= 0.01 * f.fast_retransmits as f64 + 1.0,
        "{} timeouts in {} loss events: not the model's regime",
        f.timeouts,
        f.fast_retransmits
    );
    let rtt = 4.0 * secs(delay);
    let mss_bits = 1460.0 * 8.0;
    let c = f.goodput_mbps * 1e6 * rtt * lost.sqrt() / mss_bits;
    (c, f.fast_retransmits as f64)
}

#[test]
fn newreno_follows_the_mathis_model_over_loss_rates_and_rtts() {
    // (one-way hop delay, loss rate, simulated time for several hundred loss events)
    for (delay, p, duration) in [
        ("50us", 0.002, "3s"),
        ("50us", 0.01, "1s"),
        ("250us", 0.0005, "14s"),
        ("250us", 0.002, "8s"),
        ("250us", 0.01, "4s"),
        ("1ms", 0.002, "40s"),
        ("1ms", 0.01, "15s"),
    ] {
        let (c, events) = mathis_c(delay, p, duration);
        // The window's sawtooth is sampled once per loss event: the mean over N events has a
        // relative error of about 1 / sqrt(N) (five of them allowed), around the span between
        // the paper's periodic and random constants.
        let noise = 5.0 / events.sqrt();
        let (lo, hi) = (1.22 * (1.0 - noise), 1.31 * (1.0 + noise));
        assert!(
            (lo..=hi).contains(&c),
            "RTT {delay} x 4, p {p}: C = {c:.3} over {events} loss events, expected {lo:.2}-{hi:.2}"
        );
    }
}

/// Padhye, Firoiu, Towsley, Kurose, "Modeling TCP throughput: a simple model and its
/// empirical validation" (SIGCOMM 1998), the closed form of their model with timeouts (the
/// paper's "approximate" model, validated beside the full one): the send rate in packets per
/// second of a long flow with loss-indication rate `p` (triple duplicate ACKs and timeouts
/// per packet sent), `b` packets acknowledged per ACK and first timeout `t0`. The second term
/// is the timeouts' cost, a loss becoming one with probability min(1, 3 sqrt(3bp/8)); the
/// receive window's cap, min(Wmax / RTT, ...), is left out (64 MB never limits here).
fn padhye(p: f64, rtt: f64, t0: f64, b: f64) -> f64 {
    let timeout_share = (3.0 * (3.0 * b * p / 8.0).sqrt()).min(1.0);
    1.0 / (rtt * (2.0 * b * p / 3.0).sqrt() + t0 * timeout_share * p * (1.0 + 32.0 * p * p))
}

#[test]
fn newreno_follows_the_padhye_model_with_timeouts_at_loss_of_1_to_8_percent() {
    padhye_over_loss_rates(true);
}

/// Without SACK NewReno finds the holes of a window one per round trip (RFC 6582), and its
/// duplicate ACKs must let new data out while it does: each one says a segment has left.
#[test]
fn newreno_without_sack_follows_the_padhye_model_too() {
    padhye_over_loss_rates(false);
}

fn padhye_over_loss_rates(sack: bool) {
    // RTT 40 ms, RTOmin 200 ms: a constant RTT leaves srtt + 4 rttvar at most 3 RTTs (the
    // first sample's), so every first timeout lasts T0 = RTOmin = 5 RTTs. No delayed ACKs:
    // b = 1. (With them the model's b = 2 would not apply either: the sender counts bytes
    // acknowledged, so its window grows by a segment per RTT whatever the ACKs cover.)
    let (delay, rtt, t0) = ("10ms", 0.04, 0.2);
    let duration = 300.0; // 800-1500 loss events
    for rate in [0.01, 0.02, 0.03, 0.05, 0.08] {
        let text = lossy_path(delay, rate, &format!("{duration}s"), "").replace(
            "[tcp]\n",
            &format!("[tcp]\nrto_min = \"200ms\"\ndelayed_ack = false\nsack = {sack}\n"),
        );
        let (_, s) = run(&text);
        let f = flow(&s, "bulk");
        // Measured as Padhye et al. measured their traces: packets sent (retransmissions
        // included) per second, and p as loss indications per packet sent.
        let sent = f.bytes_delivered as f64 / 1460.0 + f.retransmits as f64;
        let indications = (f.fast_retransmits + f.timeouts) as f64;
        let p = indications / sent;
        let predicted = padhye(p, rtt, t0, 1.0);
        let ratio = sent / duration / predicted;
        // Padhye et al. judged the model by its mean relative error, |predicted - measured| /
        // measured, over each of their measured Reno traces: a few tenths for most of them
        // (the model without timeouts erred far more). That accuracy, 30%, is the tolerance;
        // the run's own noise (1 / sqrt(loss events)) is under 4%. A broken RTO fails it: one
        // without RTOmin times out spuriously and runs at over twice the prediction, and a
        // backed-off RTO that is never undone stalls the flow at 8% loss.
        assert!(
            (ratio - 1.0).abs() <= 0.3,
            "sack {sack}, loss {rate}: p = {p:.4}, {:.1} packets/s sent against {predicted:.1} predicted \
             ({ratio:.2}); {} fast retransmits, {} timeouts",
            sent / duration,
            f.fast_retransmits,
            f.timeouts
        );
        // The model's timeouts are Reno's over drop-tail, where the rest of a round is lost
        // with the first loss; SACK recovery of independent losses times out less often, which
        // is why tacc's flow is on the fast side of the prediction, and why the test stays at
        // T0 = 5 RTTs: with T0 = 20 RTTs the timeout term weighs four times as much and tacc's
        // flow runs 1.3-2.2 times the prediction.
        let model_share = (3.0 * (3.0 * p / 8.0).sqrt()).min(1.0);
        assert!(
            f.timeouts as f64 <= model_share * indications,
            "sack {sack}, loss {rate}: {} of {indications} loss indications were timeouts, the model's \
             Reno {model_share:.2}",
            f.timeouts
        );
    }
}

#[test]
fn bursty_loss_costs_less_than_the_same_rate_lost_independently() {
    // Gilbert-Elliott at the same mean rate (0.2%) in bursts of 4 packets on average: a
    // window that loses a burst halves once, so TCP sees a quarter of the loss events and,
    // by the same model, about twice the throughput (sqrt(4)).
    let independent = lossy_path("250us", 0.002, "8s", "");
    let bursty = independent.replace(
        "model = \"bernoulli\"\nports = [\"sw0->r0\"]\nrate = 0.002",
        "model = \"gilbert-elliott\"\nports = [\"sw0->r0\"]\np = 0.000501\nr = 0.25",
    );
    let (_, a) = run(&independent);
    let (_, b) = run(&bursty);
    let (pa, pb) = (port(&a, "sw0->r0"), port(&b, "sw0->r0"));
    let rate = |p: &tacc_sim::output::PortSummary| p.dropped_loss as f64 / p.enqueued as f64;
    assert!(
        (rate(pb) / rate(pa) - 1.0).abs() < 0.25,
        "{} vs {}",
        rate(pb),
        rate(pa)
    );
    let (ga, gb) = (flow(&a, "bulk").goodput_mbps, flow(&b, "bulk").goodput_mbps);
    assert!(
        (1.5..=2.6).contains(&(gb / ga)),
        "bursty {gb:.0} Mb/s against independent {ga:.0} Mb/s"
    );
}

#[test]
fn loss_keys_are_checked() {
    let bad = lossy_path("250us", 1.5, "1s", "")
        + "[[loss]]\nmodel = \"gilbert-elliott\"\nports = [\"all\", \"sw9->r0\"]\np = 0.1\nr = 0.5\n";
    let e = tacc_sim::load(&bad, "t.toml", &[], None)
        .err()
        .expect("errors")
        .to_string();
    for expected in [
        "loss[0].rate: expected a probability in [0, 1], got 1.5",
        "loss[1].ports[0]: port \"sw0->r0\" already has loss[0]'s model",
        "loss[1].ports[1]: no port named \"sw9->r0\"",
    ] {
        assert!(e.contains(expected), "{expected:?} not in:\n{e}");
    }
}
