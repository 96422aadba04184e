//! Random loss on links, and TCP against the Mathis model (Mathis, Semke, Mahdavi, Ott, "The
//! macroscopic behavior of the TCP congestion avoidance algorithm", CCR 1997):
//! throughput = MSS / RTT x C / sqrt(p) for a long flow whose window is limited by random loss
//! alone (no queue, no receive window, no timeouts). The paper's constant is C = sqrt(3/2) =
//! 1.22 for periodic loss and 1.31 for random loss with an ACK per segment; the sender counts
//! bytes acknowledged (as Linux does), so delayed ACKs do not slow its growth and the
//! per-segment figure applies.

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
