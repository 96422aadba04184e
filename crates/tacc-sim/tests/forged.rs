//! A VM forging HyGenICC's signals (the shipped scenario papers/hygenicc_attack.toml): from 2
//! to 4 s a third tenant's VM sends the tagged flow's sender feedback packets and IPR bits,
//! each claiming one mark on its traffic to r0, 10 Mb/s of 64-byte packets of each kind.

mod common;
use common::*;

const ATTACK: &str = include_str!("../../../python/tacc/scenarios/papers/hygenicc_attack.toml");
/// HyGenICC's R_min: 1% of the VM's share, the whole 1 Gb/s NIC here.
const R_MIN_MBPS: f64 = 10.0;

fn attacked(scrub: bool) -> (tacc_sim::sim::Sim, tacc_sim::output::Summary) {
    let sets = [("mechanism.scrub".to_string(), scrub.to_string())];
    let p = tacc_sim::load(ATTACK, "hygenicc_attack.toml", &sets, None)
        .unwrap_or_else(|e| panic!("{e}"));
    let (sim, s) = tacc_sim::run(p, Default::default(), &mut |_, _| {});
    assert!(s.conservation.ok);
    (sim, s)
}

/// Packets of one forging flow: 2 s of 10 Mb/s in 64-byte packets (the gaps vary, the mean
/// rate is exact).
const FORGED_PER_KIND: f64 = 2.0 * 10e6 / (64.0 * 8.0);

#[test]
fn the_shims_drop_forged_feedback_and_clear_forged_ipr_bits_so_the_victim_keeps_its_share() {
    let (sim, s) = attacked(true);
    let before = goodput_between(&sim, "tagged", 1.0, 2.0);
    let during = goodput_between(&sim, "tagged", 2.0, 4.0);
    // The forged packets never cross the bottleneck: the victim's goodput is what it was.
    assert!(
        during >= 0.95 * before,
        "victim {during:.0} Mb/s under attack, {before:.0} before"
    );
    let c = &s.mechanism.counters;
    for kind in ["scrubbed_feedback", "scrubbed_ipr"] {
        assert!(
            (c[kind] - FORGED_PER_KIND).abs() <= 0.02 * FORGED_PER_KIND,
            "{kind} {} of about {FORGED_PER_KIND:.0} forged",
            c[kind]
        );
    }
    assert_eq!(c["feedback_packets_received"], c["feedback_packets_sent"]);
}

#[test]
fn without_the_protection_each_forged_mark_cuts_the_victim_to_r_min_until_the_attack_ends() {
    let (sim, s) = attacked(false);
    let before = goodput_between(&sim, "tagged", 1.0, 2.0);
    // About 20 forged marks per 500 us timer period cut C/1000 each, against a slow increase
    // of C/1000 a period: the rate sits at R_min within a few periods.
    let during = goodput_between(&sim, "tagged", 2.1, 4.0);
    assert!(
        during <= 1.5 * R_MIN_MBPS,
        "victim {during:.1} Mb/s under attack"
    );
    // The competitor takes the link meanwhile.
    let competitor = goodput_between(&sim, "competitor", 2.1, 4.0);
    assert!(
        competitor >= 1.9 * before,
        "competitor {competitor:.0} Mb/s"
    );
    // Fast increase (C/100 a period) brings the rate back to the share in about 25 ms.
    let after = goodput_between(&sim, "tagged", 4.5, 6.0);
    assert!(
        after >= 0.9 * before,
        "victim {after:.0} Mb/s after, {before:.0} before"
    );
    let c = &s.mechanism.counters;
    assert_eq!((c["scrubbed_feedback"], c["scrubbed_ipr"]), (0.0, 0.0));
    let forged = c["feedback_packets_received"] - c["feedback_packets_sent"];
    assert!(
        (forged - FORGED_PER_KIND).abs() <= 0.02 * FORGED_PER_KIND,
        "{forged} forged feedback packets consumed"
    );
}
