//! The mechanisms of tacc_mech driven by the simulator, on the papers' dumbbell (1 Gb/s,
//! RTT 100 us, 100-packet buffer, RED marking at K = 20).
//!
//! Rate-limiter scenarios use the limiter's queueing option and a 20-segment receive window
//! (ns-2's default `window_`): with Linux-sized windows and drop-on-shortage, a NewReno flow
//! that cannot see the (hidden) ECN marks overflows the 100-packet buffer in slow start and
//! spends its time in RTO backoff; see the mechanism notes in ARCHITECTURE.md.

mod common;
use common::*;

const LIMITED_TCP: &str = "[tcp]\nrcv_buf = \"29200B\"\n";

fn tagged_vs(competitors: u32, mechanism: &str) -> String {
    star(
        competitors + 1,
        "15s",
        &format!("{LIMITED_TCP}[[flows]]\nname = \"competitor\"\ncount = {competitors}\nsrc = \"s{{i+1}}\"\ndst = \"r0\"\ntransport = \"udp\"\nrate = \"1Gbps\"\nstop = \"10s\"\n[[flows]]\nname = \"tagged\"\nsrc = \"s0\"\ndst = \"r0\"\nstart = \"5s\"\n[mechanism]\n{mechanism}\n"),
    )
}

#[test]
fn hygenicc_gives_a_tagged_tcp_flow_its_share_against_line_rate_udp() {
    let (sim, s) = run(&tagged_vs(
        1,
        "kind = \"hygenicc\"\non_shortage = \"queue\"",
    ));
    let both = goodput_between(&sim, "tagged", 6.0, 10.0);
    let alone = goodput_between(&sim, "tagged", 11.0, 15.0);
    assert!(
        both >= 400.0,
        "tagged {both:.0} Mb/s next to UDP (ideal 487)"
    );
    assert!(alone >= 850.0, "tagged {alone:.0} Mb/s alone");
    let util = port(&s, "sw0->r0").utilization;
    assert!(util >= 0.9, "utilization {util:.3}");
    let c = &s.mechanism.counters;
    assert!(c["feedback_packets_sent"] > 0.0 && c["ipr_bits_set"] > 0.0 && c["ce_cleared"] > 0.0);
    assert_eq!(c["feedback_packets_sent"], c["feedback_packets_received"]);
    // In-band feedback is control traffic too.
    assert_eq!(
        s.mechanism.control_messages["in_band_feedback"] as f64,
        c["feedback_packets_sent"]
    );
    assert_eq!(
        s.mechanism.control_messages_total,
        s.mechanism.control_messages["in_band_feedback"]
    );
}

/// Four window-limited TCP flows into r0 (0-2 s) hold its queue above K, so HyGenICC cuts
/// every sender's pair towards r0 to R_min and keeps it there; at 0.5 s s0 opens one more
/// connection to r0 for 2 MB. R_min is 30% of the share so that four senders at R_min
/// (1.2 Gb/s) still overload the link, the state admission control acts on (at the default
/// 1% that takes more than 100 senders).
fn newcomer_during_congestion(admission: bool) -> String {
    star(
        4,
        "4s",
        &format!("{LIMITED_TCP}[[flows]]\nname = \"established\"\ncount = 4\nsrc = \"s{{i}}\"\ndst = \"r0\"\nstop = \"2s\"\n[[flows]]\nname = \"newcomer\"\nsrc = \"s0\"\ndst = \"r0\"\nstart = \"500ms\"\nbytes = \"2MB\"\n[mechanism]\nkind = \"hygenicc\"\non_shortage = \"queue\"\nmin_rate_fraction = 0.3\nadmission_control = {admission}\n"),
    )
}

#[test]
fn hygenicc_admission_control_holds_a_new_connection_back_until_the_congestion_ends() {
    let (start, stop, rto_init) = (0.5, 2.0, 1.0);
    let link_payload = 1000.0 * 1460.0 / 1500.0; // Mb/s of TCP payload
    let transfer = 2e6 * 8.0 / (link_payload * 1e6); // 2 MB alone on the link: 16 ms

    let (sim, s) = run(&newcomer_during_congestion(true));
    // The SYN leaves at 0.5 s and, refused by s0's shim, again after the initial RTO and
    // after twice that: at 1.5 s, the established flows still running (refused again), and
    // at 3.5 s, long after they stopped and the 1 ms congestion timeout passed (admitted).
    assert_eq!(s.mechanism.counters["admission_drops"], 2.0);
    let newcomer = flow(&s, "newcomer");
    assert_eq!(newcomer.timeouts, 2, "the SYN's two timeouts");
    let first_try = start + 3.0 * rto_init;
    assert_eq!(goodput_between(&sim, "newcomer", 0.0, first_try), 0.0);
    // Then alone on the link; as much time again for the handshake and slow start.
    let fct = newcomer.fct.expect("the newcomer finishes");
    assert!(
        (3.0 * rto_init + transfer..=3.0 * rto_init + 2.0 * transfer).contains(&fct),
        "newcomer FCT {fct:.4} s, expected 3 initial RTOs + {transfer:.4} s"
    );
    // The established flows keep their quarter of the link while the newcomer waits (equal
    // 20-segment windows through one FIFO queue take equal shares; 5% is room for their ACK
    // clocks' phases).
    for i in 0..4 {
        let name = format!("established.{i}");
        let before = goodput_between(&sim, &name, 0.1, start);
        let during = goodput_between(&sim, &name, start, stop);
        assert!(
            [before, during]
                .iter()
                .all(|g| (g / (link_payload / 4.0) - 1.0).abs() <= 0.05),
            "{name}: {before:.0} Mb/s before the request, {during:.0} after (share {:.0})",
            link_payload / 4.0
        );
    }

    // Without admission control the SYN goes through at once and the newcomer shares s0's
    // pair, held at R_min (300 Mb/s), with established.0: about 150 Mb/s each, so 2 MB in
    // about 0.11 s, while established.0 drops from its quarter of the link to about 150.
    let (sim, s) = run(&newcomer_during_congestion(false));
    assert_eq!(s.mechanism.counters["admission_drops"], 0.0);
    let newcomer = flow(&s, "newcomer");
    assert_eq!(newcomer.timeouts, 0);
    let half_pair = 0.3 * link_payload / 2.0;
    let fct = newcomer.fct.expect("the newcomer finishes");
    assert!(
        fct <= 2.0 * 2e6 * 8.0 / (half_pair * 1e6),
        "newcomer FCT {fct:.3} s without admission control"
    );
    let before = goodput_between(&sim, "established.0", 0.1, start);
    let shared = goodput_between(&sim, "established.0", start, start + 0.1);
    assert!(
        shared <= 0.75 * before,
        "established.0: {before:.0} Mb/s, then {shared:.0} next to the newcomer"
    );
}

#[test]
fn sdn_gcc_protects_a_tagged_flow_against_three_udp_flows_and_stays_work_conserving() {
    let (sim, s) = run(&tagged_vs(
        3,
        "kind = \"sdn-gcc\"\ninterval = \"5ms\"\non_shortage = \"queue\"",
    ));
    let both = goodput_between(&sim, "tagged", 6.0, 10.0);
    let alone = goodput_between(&sim, "tagged", 11.0, 15.0);
    assert!(
        both >= 200.0,
        "tagged {both:.0} Mb/s next to 3 UDP (ideal 243)"
    );
    assert!(alone >= 850.0, "tagged {alone:.0} Mb/s alone");
    // One port-stats request and reply per monitored port every 5 ms, plus notifications.
    let m = &s.mechanism;
    assert!(
        m.control_messages["stats_request"] >= 1000,
        "{:?}",
        m.control_messages
    );
    assert_eq!(
        m.control_messages["stats_request"],
        m.control_messages["stats_reply"]
    );
    assert!(m.counters["notifications_received"] > 0.0);
    assert!(m.control_bytes_total > 0);
}

#[test]
fn static_limits_give_the_exact_rate_and_are_not_work_conserving() {
    let (sim, _) = run(&tagged_vs(
        1,
        "kind = \"static-rate\"\nrate = \"500Mbps\"\non_shortage = \"queue\"",
    ));
    let tcp_payload = 500.0 * 1460.0 / 1500.0;
    let udp_payload = 500.0 * 1472.0 / 1500.0;
    let udp = goodput_between(&sim, "competitor.0", 1.0, 10.0);
    assert!(
        (udp - udp_payload).abs() <= 0.03 * udp_payload,
        "UDP {udp:.1} Mb/s, limit {udp_payload:.1}"
    );
    let both = goodput_between(&sim, "tagged", 6.0, 10.0);
    assert!(
        (both - tcp_payload).abs() <= 0.03 * tcp_payload,
        "tagged {both:.1} Mb/s, limit {tcp_payload:.1}"
    );
    let alone = goodput_between(&sim, "tagged", 11.0, 15.0);
    assert!(
        alone <= tcp_payload * 1.01,
        "tagged {alone:.1} Mb/s alone: a static limit is not work-conserving"
    );
}

fn weighted(kind: &str) -> String {
    format!(
        "name = \"w\"\nduration = \"3s\"\n[topology]\nkind = \"star\"\nsenders = 1\nreceivers = 1\nlink_rate = \"1Gbps\"\nlink_delay = \"25us\"\nvms_per_host = 2\n[queue]\nkind = \"red-ecn\"\nlimit = \"100pkt\"\nk = \"20pkt\"\n[[flows]]\nname = \"heavy\"\nsrc = \"s0/0\"\ndst = \"r0/0\"\ntransport = \"udp\"\nrate = \"1Gbps\"\n[[flows]]\nname = \"light\"\nsrc = \"s0/1\"\ndst = \"r0/1\"\ntransport = \"udp\"\nrate = \"1Gbps\"\n[mechanism]\nkind = \"{kind}\"\nweights = {{ \"s0/0\" = 2, \"s0/1\" = 1 }}\n"
    )
}

#[test]
fn vms_sharing_a_nic_get_shares_proportional_to_their_weights() {
    for kind in ["hygenicc", "sdn-gcc"] {
        let (sim, _) = run(&weighted(kind));
        let heavy = goodput_between(&sim, "heavy", 1.0, 3.0);
        let light = goodput_between(&sim, "light", 1.0, 3.0);
        // Shares 2/3 and 1/3 of the NIC: 654 and 327 Mb/s of UDP payload.
        assert!(
            (heavy / light - 2.0).abs() < 0.1,
            "{kind}: heavy {heavy:.0} light {light:.0}"
        );
        assert!(
            heavy + light > 0.95 * 1000.0 * 1472.0 / 1500.0,
            "{kind}: total {:.0}",
            heavy + light
        );
    }
}

#[test]
fn sdn_gcc_degrades_as_the_control_latency_grows() {
    let mut tagged = Vec::new();
    for latency in ["0ms", "1ms", "10ms", "50ms"] {
        let (sim, s) = run(&tagged_vs(3, &format!("kind = \"sdn-gcc\"\ninterval = \"5ms\"\non_shortage = \"queue\"\nlatency = \"{latency}\"")));
        assert!((s.mechanism.control_latency_s - crate::common::secs(latency)).abs() < 1e-9);
        tagged.push(goodput_between(&sim, "tagged", 6.0, 10.0));
    }
    assert!(
        tagged[3] < tagged[0] - 20.0,
        "tagged goodput by latency 0/1/10/50 ms: {tagged:?}"
    );
    assert!(
        tagged.windows(2).all(|w| w[1] <= w[0] + 15.0),
        "not monotone within noise: {tagged:?}"
    );
}

/// The paper's bufferbloat: a 3000-packet drop-tail queue (360 ms at 100 Mb/s) behind two
/// Cubic bulk flows; a 2 MB interactive flow starts at 5 s. SDN-ECN probes every 100 ms with
/// 50 ms rules (with the paper's 2 s probes the rules come too seldom to drain the queue here).
#[test]
fn sdn_ecn_marks_the_top_flows_and_drains_a_bloated_drop_tail_queue() {
    let scenario = |mechanism: &str| {
        format!(
            "name = \"e\"\nduration = \"20s\"\n[topology]\nkind = \"star\"\nsenders = 3\nreceivers = 1\nlink_rate = \"100Mbps\"\nlink_delay = \"1ms\"\n[queue]\nkind = \"droptail\"\nlimit = \"3000pkt\"\n[tcp]\ncc = \"cubic\"\necn = true\n[[flows]]\nname = \"bulk\"\ncount = 2\nsrc = \"s{{i}}\"\ndst = \"r0\"\n[[flows]]\nname = \"interactive\"\nsrc = \"s2\"\ndst = \"r0\"\nstart = \"5s\"\nbytes = \"2MB\"\n[mechanism]\n{mechanism}\n"
        )
    };
    let (_, plain) = run(&scenario("kind = \"none\""));
    let (_, sdn) = run(&scenario(
        "kind = \"sdn-ecn\"\ninterval = \"100ms\"\nrule_timeout = \"50ms\"",
    ));
    let (q0, q1) = (
        port(&plain, "sw0->r0").mean_backlog_pkts,
        port(&sdn, "sw0->r0").mean_backlog_pkts,
    );
    assert!(q1 * 3.0 < q0, "mean queue {q0:.0} -> {q1:.0} packets");
    let (f0, f1) = (
        flow(&plain, "interactive").fct.unwrap(),
        flow(&sdn, "interactive").fct.unwrap(),
    );
    assert!(f1 * 5.0 < f0, "2 MB FCT {f0:.3} s -> {f1:.3} s");
    assert!(
        sdn.control.rules_installed > 10
            && sdn.mechanism.control_messages["flow_mod"] == sdn.control.rules_installed
    );
}

fn incast_over_elephants(mechanism: &str) -> String {
    format!(
        "name = \"sicc\"\nduration = \"5s\"\n[topology]\nkind = \"star\"\nsenders = 80\nreceivers = 1\nlink_rate = \"1Gbps\"\nlink_delay = \"25us\"\n[queue]\nkind = \"red-ecn\"\nlimit = \"83pkt\"\nk = \"20pkt\"\n[tcp]\necn = true\necn_syn = true\nrto_init = \"300us\"\n[[flows]]\nname = \"elephant\"\ncount = 20\nsrc = \"s{{i}}\"\ndst = \"r0\"\n[[incast]]\nname = \"mice\"\naggregator = \"r0\"\nworkers = \"s{{i+20}}\"\ncount = 60\nbytes = \"10KB\"\nepochs = 5\ninterval = \"0.98s\"\njitter = \"24us\"\n[mechanism]\n{mechanism}\n"
    )
}

fn elephant_goodput(s: &tacc_sim::output::Summary) -> f64 {
    s.flows
        .iter()
        .filter(|f| f.group == "elephant")
        .map(|f| f.goodput_mbps)
        .sum()
}

/// A run without a mechanism and one with it, on the same seed.
type Pair = (tacc_sim::output::Summary, tacc_sim::output::Summary);

fn mice_mean_fct(s: &tacc_sim::output::Summary) -> f64 {
    let mice: Vec<f64> = s
        .flows
        .iter()
        .filter(|f| f.group == "mice")
        .map(|f| f.fct.unwrap_or(2.0))
        .collect();
    mice.iter().sum::<f64>() / mice.len() as f64
}

#[test]
fn sicc_clamps_windows_during_incast_so_mice_finish_sooner_without_hurting_elephants() {
    // The controller assumes the senders' initial window (2 segments) and tests its ON
    // condition on each SYN copy: with a 1 ms poll alone the mice's first windows (RTT
    // 100 us) leave before the controller acts.
    let (_, plain) = run(&incast_over_elephants("kind = \"none\""));
    let (_, sicc) = run(&incast_over_elephants(
        "kind = \"sicc\"\ninitial_window = 2.0\nevaluate_on_syn = true",
    ));
    let c = &sicc.mechanism.counters;
    assert!(
        c["incast_on_received"] >= 5.0 && c["rwnd_rewrites"] > 0.0,
        "{c:?}"
    );
    assert!(
        sicc.mechanism.control_messages["packet_in"] >= 600,
        "SYN and FIN copies"
    );
    // The copy rules (SYN and FIN at the one ToR) are flow-mods too, counted with the
    // incast flags' messages.
    assert!(
        sicc.mechanism.control_messages["flow_mod"] == 2,
        "{:?}",
        sicc.mechanism.control_messages
    );
    let (m0, m1) = (mice_mean_fct(&plain), mice_mean_fct(&sicc));
    assert!(m1 < 0.9 * m0, "mice mean FCT {m0:.3} s -> {m1:.3} s");
    let retx = |s: &tacc_sim::output::Summary| {
        s.flows
            .iter()
            .filter(|f| f.group == "mice")
            .map(|f| f.retransmits)
            .sum::<u64>()
    };
    // Fewer mouse drops; not many fewer: the mice's first segments leave before any clamped
    // ACK reaches their senders.
    assert!(
        retx(&sicc) < retx(&plain),
        "mice retransmissions (their drops) {} -> {}",
        retx(&plain),
        retx(&sicc)
    );
    assert!(
        elephant_goodput(&sicc) >= 0.9 * elephant_goodput(&plain),
        "elephants {:.0} -> {:.0}",
        elephant_goodput(&plain),
        elephant_goodput(&sicc)
    );
}

/// Two racks of four servers send one elephant each to the third rack's servers through one
/// aggregation switch: the bottleneck is agg0 -> tor2, between switches, where a volley of 8
/// mice (20 KB each, from the same servers to h2_0) meets the elephants' full 100-packet
/// buffer; the ToRs' ports to the hosts carry two elephants each and hold no queue.
fn incast_behind_a_core_bottleneck(mechanism: &str) -> String {
    let racks = "[topology]\nkind = \"racks\"\nracks = 3\nservers_per_rack = 4\naggs = 1\n\
                 cores = 1\nhost_rate = \"1Gbps\"\ntor_rate = \"1Gbps\"\nagg_rate = \"1Gbps\"\n\
                 link_delay = \"25us\"\n[queue]\nkind = \"droptail\"\nlimit = \"150000B\"\n\
                 [tcp]\nprofile = \"linux\"\n";
    let mut text = format!("name = \"core\"\nduration = \"1.2s\"\n{racks}");
    for r in 0..2 {
        text += &format!(
            "[[flows]]\nname = \"elephant_r{r}\"\ncount = 4\nsrc = \"h{r}_{{i}}\"\n\
             dst = \"h2_{{i}}\"\n[[incast]]\nname = \"mice_r{r}\"\naggregator = \"h2_0\"\n\
             workers = \"h{r}_{{i}}\"\ncount = 4\nbytes = \"20KB\"\nepochs = 5\n\
             start = \"300ms\"\ninterval = \"150ms\"\n"
        );
    }
    text + &format!("[mechanism]\n{mechanism}\n")
}

#[test]
fn sicc_sees_a_bottleneck_between_switches_only_with_copies_at_every_switch() {
    let sicc = |copy_at: &str| {
        run(&incast_behind_a_core_bottleneck(&format!(
            "kind = \"sicc\"\ninitial_window = 10.0\nevaluate_on_syn = true\n\
             copy_at = \"{copy_at}\""
        )))
        .1
    };
    let (tors, all) = (sicc("tors"), sicc("all"));
    let sum = |s: &tacc_sim::output::Summary,
               prefix: &str,
               f: &dyn Fn(&tacc_sim::output::FlowSummary) -> f64| {
        s.flows
            .iter()
            .filter(|x| x.group.starts_with(prefix))
            .map(f)
            .sum::<f64>()
    };
    let retx = |s| sum(s, "mice", &|f| f.retransmits as f64);
    let fct = |s| sum(s, "mice", &|f| f.fct.unwrap_or(2.0)) / 40.0;
    let elephants = |s| sum(s, "elephant", &|f| f.goodput_mbps);
    // At the ToRs the controller counts the SYNs at tor2's port to h2_0, whose queue is
    // empty: 8 SYNs x IW 10 stay under its 100 packets, and the volley meets the full
    // buffer of agg0 unclamped and loses segments. Copied at agg0 too, the SYNs and that
    // port's full queue turn the incast on before the mice's data leave.
    assert!(retx(&tors) > 0.0, "mice retransmissions at the ToRs alone");
    assert_eq!(
        retx(&all),
        0.0,
        "mice retransmissions with copies everywhere"
    );
    assert!(
        fct(&all) < 0.5 * fct(&tors),
        "mice mean FCT {:.4} s (ToRs) -> {:.4} s (every switch)",
        fct(&tors),
        fct(&all)
    );
    assert!(all.mechanism.counters["incast_on_received"] > 0.0);
    assert!(
        elephants(&all) >= 0.9 * elephants(&tors),
        "elephants {:.0} -> {:.0} Mb/s",
        elephants(&tors),
        elephants(&all)
    );
    // A copy rule per flag in every switch: 5 switches, against the ToRs' 3.
    assert_eq!(tors.mechanism.control_messages["flow_mod"], 6);
    assert_eq!(all.mechanism.control_messages["flow_mod"], 10);
}

/// The same incast behind a drop-tail buffer, as the authors' in-switch module ran: with
/// RED-ECN at K = 20 the elephants hold the queue near K and it seldom reaches the module's
/// 95% trigger.
fn incast_over_droptail(mechanism: &str) -> String {
    let text = incast_over_elephants(mechanism);
    let red = "kind = \"red-ecn\"\nlimit = \"83pkt\"\nk = \"20pkt\"";
    assert!(text.contains(red));
    text.replace(red, "kind = \"droptail\"\nlimit = \"83pkt\"")
}

#[test]
fn sicc_in_the_switch_clamps_windows_while_the_queue_is_full_so_mice_finish_sooner() {
    // One seed's mean FCT is how many of its 300 mice wait out a 200 ms RTO: SICC's over
    // none's spread 0.16-0.70 over seeds 1-8 (0.29-0.70 before the incast's answer delays
    // came from a stream of its own, 0.16-0.66 after), so the claim is judged on seeds 1-7
    // pooled.
    let runs: Vec<_> = (1..=7)
        .map(|seed| {
            let seeded = |m: &str| format!("seed = {seed}\n{}", incast_over_droptail(m));
            let (_, plain) = run(&seeded("kind = \"none\""));
            let (_, sicc) = run(&seeded("kind = \"sicc\"\nmode = \"switch\""));
            (plain, sicc)
        })
        .collect();
    for (_, sicc) in &runs {
        let c = &sicc.mechanism.counters;
        // At least one episode per epoch, each ended by the queue draining; no controller.
        assert!(
            c["incast_on"] >= 5.0
                && c["incast_on"] - c["incast_off"] <= 1.0
                && c["rwnd_rewrites"] > 0.0,
            "{c:?}"
        );
        assert_eq!(sicc.mechanism.control_messages_total, 0);
    }
    let mean = |which: fn(&Pair) -> &tacc_sim::output::Summary| {
        runs.iter().map(|r| mice_mean_fct(which(r))).sum::<f64>() / runs.len() as f64
    };
    let (m0, m1) = (mean(|r| &r.0), mean(|r| &r.1));
    assert!(m1 < 0.5 * m0, "mice mean FCT {m0:.3} s -> {m1:.3} s");
    // A clamped mouse sends its 7 segments one per RTT of a full queue (100 us + 83 x 12 us):
    // about 8 ms, so the median mouse no longer waits out a 200 ms RTOmin.
    let mut fcts: Vec<f64> = runs
        .iter()
        .flat_map(|(_, sicc)| sicc.flows.iter().filter(|f| f.group == "mice"))
        .map(|f| f.fct.unwrap_or(2.0))
        .collect();
    fcts.sort_by(f64::total_cmp);
    let median = fcts[fcts.len() / 2];
    assert!(median < 0.05, "median mouse FCT {median:.4} s");
    let drops = |which: fn(&Pair) -> &tacc_sim::output::Summary| -> u64 {
        runs.iter().map(|r| port(which(r), "sw0->r0").dropped).sum()
    };
    assert!(
        drops(|r| &r.1) < drops(|r| &r.0),
        "{} -> {}",
        drops(|r| &r.0),
        drops(|r| &r.1)
    );
    // The link stays full: incast ends with 20% of the buffer still queued (17 packets, twice
    // the 8-packet BDP), so the clamped senders are back before it drains. Elephants get the
    // link's 1460/1500 payload share less the mice's 5 Mb/s.
    for (_, sicc) in &runs {
        let elephants = elephant_goodput(sicc);
        assert!(
            elephants >= 0.95 * 1000.0 * 1460.0 / 1500.0,
            "elephants {elephants:.0} Mb/s"
        );
    }
}

#[test]
fn rwndq_lets_incast_mice_finish_sooner_and_keeps_elephants_busy() {
    let (_, plain) = run(&incast_over_elephants("kind = \"none\""));
    let (_, rwndq) = run(&incast_over_elephants("kind = \"rwndq\""));
    let (m0, m1) = (mice_mean_fct(&plain), mice_mean_fct(&rwndq));
    assert!(m1 < 0.5 * m0, "mice mean FCT {m0:.3} s -> {m1:.3} s");
    let drops = |s: &tacc_sim::output::Summary| port(s, "sw0->r0").dropped;
    assert!(drops(&rwndq) < drops(&plain));
    assert!(elephant_goodput(&rwndq) >= 0.9 * elephant_goodput(&plain));
}

/// Leaf-spine with two spines: s0's eight flows to r0 spread over spines X and Y by ECMP; a
/// line-rate UDP source attached to X congests only the X -> L2 link.
fn leaf_spine(keying: &str) -> String {
    format!(
        "name = \"ls\"\nduration = \"3s\"\n[topology]\nkind = \"explicit\"\nhosts = [\"s0\", \"u0\", \"r0\", \"r1\"]\nswitches = [\"L1\", \"L2\", \"X\", \"Y\"]\nlinks = [\n{}]\n[queue]\nkind = \"red-ecn\"\nlimit = \"100pkt\"\nk = \"20pkt\"\n{LIMITED_TCP}[[flows]]\nname = \"tcp\"\ncount = 8\nsrc = \"s0\"\ndst = \"r0\"\n[[flows]]\nname = \"udp\"\nsrc = \"u0\"\ndst = \"r1\"\ntransport = \"udp\"\nrate = \"1Gbps\"\n[mechanism]\nkind = \"sdn-gcc\"\non_shortage = \"queue\"\nkeying = \"{keying}\"\n",
        [("s0", "L1"), ("L1", "X"), ("L1", "Y"), ("X", "L2"), ("Y", "L2"), ("L2", "r0"), ("L2", "r1"), ("u0", "X")]
            .iter()
            .map(|(a, b)| format!("  {{ a = \"{a}\", b = \"{b}\", rate = \"1Gbps\", delay = \"10us\" }},\n"))
            .collect::<String>()
    )
}

#[test]
fn per_path_attribution_beats_per_vm_when_one_ecmp_path_is_congested() {
    let total = |s: &tacc_sim::output::Summary| {
        s.flows
            .iter()
            .filter(|f| f.group == "tcp")
            .map(|f| f.goodput_mbps)
            .sum::<f64>()
    };
    let (_, per_vm) = run(&leaf_spine("vm"));
    let (_, per_path) = run(&leaf_spine("path"));
    // Both spines carry some of s0's flows.
    assert!(port(&per_path, "L1->X").tx_bytes > 0 && port(&per_path, "L1->Y").tx_bytes > 0);
    // Per VM, marks at X -> L2 slow all of s0's flows; per path, only those crossing X.
    let (vm, path) = (total(&per_vm), total(&per_path));
    assert!(
        path > 1.15 * vm,
        "s0's goodput: per VM {vm:.0} Mb/s, per path {path:.0} Mb/s"
    );
}
