//! Bad scenarios give errors naming file, line and key, every one of them, one a line; no input
//! makes the loader panic.

mod common;
use proptest::prelude::*;

fn err(text: &str) -> String {
    match tacc_sim::load(text, "bad.toml", &[], None) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => {
            let s = e.to_string();
            assert!(!s.contains('\n'), "multi-line error: {s}");
            s
        }
    }
}

fn base(flows: &str) -> String {
    common::star(2, "1s", flows)
}

const FLOW: &str = "[[flows]]\nname = \"f\"\nsrc = \"s0\"\ndst = \"r0\"\n";

#[test]
fn red_thresholds_in_another_unit_than_the_limit_are_refused_by_key() {
    // The shared base's [queue] table comes last, so these lines add to (or replace in) it.
    let red = |queue: &str| base("").replace("kind = \"red-ecn\"\nlimit = \"100pkt\"\n", queue);
    let e = err(&red(
        "kind = \"red\"\nlimit = \"150KB\"\nmin_th = \"5pkt\"\nmax_th = \"30000B\"\n",
    ));
    assert!(
        e.contains("queue.min_th: 5pkt is in another unit than queue.limit (150000B)"),
        "{e}"
    );
    let e = err(&format!(
        "{}[[queue.overrides]]\nports = [\"sw0->r0\"]\nlimit = \"150KB\"\n",
        red("kind = \"red\"\nlimit = \"100pkt\"\nmin_th = \"10pkt\"\n")
    ));
    assert!(
        e.contains("queue.min_th: 10pkt is in another unit than queue.overrides[0].limit"),
        "{e}"
    );
    let e = err(&red(
        "kind = \"red-ecn\"\nlimit = \"100pkt\"\nmax_p = -0.5\n",
    ));
    assert!(
        e.contains("queue.max_p: expected a probability between 0 and 1, got -0.5"),
        "{e}"
    );
}

#[test]
fn each_kind_of_bad_input_is_reported_with_its_location() {
    let cases: Vec<(String, &str)> = vec![
        (
            base(&FLOW.replace("s0", "s9")),
            "bad.toml:15: flows[0].src: no host or VM named \"s9\"",
        ),
        (
            base(&format!("{FLOW}start = \"2s\"\n")),
            "bad.toml:17: flows[0].start: is at or after the end of the run",
        ),
        (
            base(&format!("{FLOW}start = \"0.5s\"\nstop = \"0.2s\"\n")),
            "bad.toml:18: flows[0].stop: must be after start",
        ),
        (
            base(&format!("{FLOW}jitter = \"1ms\"\nstop = \"0.5s\"\n")),
            "bad.toml:17: flows[0].jitter: cannot be combined with stop",
        ),
        (
            base(&format!("{FLOW}rate = \"1Gbps\"\n")),
            "bad.toml:17: flows[0].rate: only applies to UDP flows",
        ),
        (
            base(&format!("{FLOW}transport = \"udp\"\n")),
            "flows[0].rate: a UDP flow needs a rate",
        ),
        (
            base(&format!("{FLOW}transport = \"udp\"\nrate = \"0Gbps\"\n")),
            "bad.toml:18: flows[0].rate: must be greater than zero",
        ),
        (
            base(&format!("{FLOW}transport = \"udp\"\nrate = \"-1Gbps\"\n")),
            "bad.toml:18: flows[0].rate: expected a rate such as",
        ),
        (
            base(&format!(
                "{FLOW}transport = \"udp\"\nrate = \"1Mbps\"\nreturn_delay = \"50us\"\n"
            )),
            "bad.toml:19: flows[0].return_delay: only applies to TCP flows",
        ),
        (
            base(&format!(
                "{FLOW}return_delay = \"50us\"\n[mechanism]\nkind = \"static-rate\"\nrate = \"500Mbps\"\n"
            )),
            "bad.toml:17: flows[0].return_delay: cannot be combined with a [mechanism]",
        ),
        (
            base(&format!("{FLOW}return_delay = \"50\"\n")),
            "bad.toml:17: flows[0].return_delay: expected a duration",
        ),
        (
            base(&format!("{FLOW}forge = \"ipr\"\n")),
            "bad.toml:17: flows[0].forge: only applies to UDP flows",
        ),
        (
            base(&format!("{FLOW}transport = \"udp\"\nrate = \"1Mbps\"\nforge = \"ecn\"\n")),
            "bad.toml:19: flows[0].forge: unknown variant `ecn`, expected `feedback` or `ipr`",
        ),
        (
            base(&format!("{FLOW}transport = \"udp\"\nrate = \"1Mbps\"\nspoof = \"h9\"\n")),
            "flows[0].spoof: no host or VM named \"h9\"",
        ),
        (
            base(&format!(
                "{FLOW}transport = \"udp\"\nrate = \"1Mbps\"\nspoof = \"s1\"\nreply_size = \"64B\"\n"
            )),
            "flows[0].reply_size: cannot be combined with spoof",
        ),
        (
            base(&format!("{FLOW}bytes = \"lots\"\n")),
            "bad.toml:17: flows[0].bytes: expected a size",
        ),
        (
            base(&format!("{FLOW}colour = \"red\"\n")),
            "bad.toml:17: flows[0].colour: unknown field `colour`",
        ),
        (
            base(&FLOW.replace("r0", "s0")),
            "flows[0].dst: \"s0\" and \"s0\" are on the same host",
        ),
        (
            base(FLOW).replace("duration = \"1s\"", "duration = \"0s\""),
            "bad.toml:2: duration: must be greater than zero",
        ),
        (
            base(FLOW).replace("link_rate = \"1Gbps\"", "link_rate = \"0Mbps\""),
            "bad.toml:7: topology.link_rate: must be greater than zero",
        ),
        (
            base(FLOW).replace("kind = \"star\"", "kind = \"ring\""),
            "bad.toml:4: topology.kind: unknown variant `ring`",
        ),
        (
            base(FLOW).replace("duration = \"1s\"\n", ""),
            "missing field `duration`",
        ),
        (
            base(FLOW).replace("name = \"t\"", "name = \"t"),
            "bad.toml:1: ",
        ),
        // A port keeps a queue's sizes in 31 bits.
        (
            base(FLOW).replace("limit = \"100pkt\"", "limit = \"3GB\""),
            "bad.toml:11: queue.limit: at most 2147483647 packets or bytes (2 GiB)",
        ),
        (
            base(&format!("{FLOW}[nic]\nlimit = \"3000000000pkt\"\n")),
            "bad.toml:18: nic.limit: at most 2147483647 packets or bytes (2 GiB)",
        ),
        // The engine's clamp to [rto_min, 60 s] would panic on an RTO floor above the ceiling.
        (
            base(&format!("{FLOW}[tcp]\nrto_min = \"100s\"\n")),
            "bad.toml:18: tcp.rto_min: at most 60s (the RTO ceiling)",
        ),
        // A zero initial RTO would retransmit the SYN at the same instant forever.
        (
            base(&format!("{FLOW}[tcp]\nrto_init = \"0us\"\n")),
            "bad.toml:18: tcp.rto_init: must be greater than zero",
        ),
        (
            base(&format!("{FLOW}[tcp]\nmss = \"70000B\"\n")),
            "bad.toml:18: tcp.mss: must be between 88B (Linux's smallest MSS) and 65495B",
        ),
        (
            base(&format!("{FLOW}[tcp]\nrcv_buf = \"1000B\"\n")),
            "bad.toml:18: tcp.rcv_buf: must be at least one segment (tcp.mss)",
        ),
        (
            base(&format!("{FLOW}[tcp]\ndctcp_g = 1.5\n")),
            "bad.toml:18: tcp.dctcp_g: must be a gain in (0, 1]",
        ),
        (
            base(&format!("{FLOW}[tcp]\ninit_cwnd = 0\n")),
            "bad.toml:18: tcp.init_cwnd: must be at least 1 segment",
        ),
        (
            base(&format!("{FLOW}count = 4294967295\n")),
            "bad.toml:17: flows[0].count: at most 55536 (the source ports of a VM)",
        ),
        (
            base(&format!("{FLOW}[output]\ngoodput_bin = \"1ns\"\n")),
            "bad.toml:18: output.goodput_bin: gives 1000000000 rows per series over the run; at most 1000000",
        ),
        (
            base(&format!("{FLOW}[output]\nqueue_sample = \"10ns\"\n")),
            "bad.toml:18: output.queue_sample: gives 100000000 rows per series over the run; at most 10000000",
        ),
    ];
    for (text, expected) in cases {
        let e = err(&text);
        assert!(e.contains(expected), "expected {expected:?} in {e:?}");
    }
}

#[test]
fn a_vm_sources_at_most_as_many_flows_as_it_has_source_ports() {
    let group = |n: &str, count: u32| {
        format!("[[flows]]\nname = \"{n}\"\ncount = {count}\nsrc = \"s0\"\ndst = \"r0\"\n")
    };
    let text = base(&format!("{}{}", group("a", 55_000), group("b", 536)));
    assert!(tacc_sim::load(&text, "ok.toml", &[], None).is_ok());
    let e = err(&base(&format!("{}{}", group("a", 55_000), group("b", 537))));
    assert!(
        e.contains("flows[1].count: \"s0\" would source more than 55536 flows"),
        "{e}"
    );
}

#[test]
fn unreachable_destination_in_an_explicit_topology_is_an_error() {
    let text = "name = \"x\"\nduration = \"1s\"\n[topology]\nkind = \"explicit\"\nhosts = [\"a\", \"b\"]\nswitches = [\"x\", \"y\"]\nlinks = [{a = \"a\", b = \"x\", rate = \"1Gbps\", delay = \"1us\"}, {a = \"b\", b = \"y\", rate = \"1Gbps\", delay = \"1us\"}]\n[[flows]]\nname = \"f\"\nsrc = \"a\"\ndst = \"b\"\n";
    assert!(
        err(text).contains("flows[0].dst: \"b\" is unreachable from \"a\""),
        "{}",
        err(text)
    );
}

#[test]
fn overrides_are_checked_like_the_file() {
    let text = base(FLOW);
    let sets = vec![("flows[0].start".to_string(), "\"5s\"".to_string())];
    let e = tacc_sim::load(&text, "bad.toml", &sets, None)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.starts_with("bad.toml (--set): flows[0].start: is at or after"),
        "{e}"
    );
    let sets = vec![("flows[3].start".to_string(), "\"5s\"".to_string())];
    let e = tacc_sim::load(&text, "bad.toml", &sets, None)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("cannot apply --set: flows has no element 3"),
        "{e}"
    );
}

fn valid() -> String {
    base(&format!("{FLOW}[[flows]]\nname = \"u\"\nsrc = \"s1\"\ndst = \"r0\"\ntransport = \"udp\"\nrate = \"10Mbps\"\n[[incast]]\nname = \"q\"\naggregator = \"r0\"\nworkers = \"s{{i}}\"\ncount = 2\nbytes = \"10KB\"\n"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// Random edits of a valid file (byte flips, deletions, insertions of TOML-ish tokens)
    /// never panic the loader: they load or they give an error.
    #[test]
    fn loader_never_panics_on_mutated_scenarios(edits in proptest::collection::vec((0usize..2000, 0u8..4, proptest::sample::select(vec!["0", "-1", "\"", "[", "]", "=", "\n", "1e999", "\"0s\"", "\"1Tbps\"", "{i+", "count = 0", "\"s{i+99}\"", "k = \"0pkt\"", "9999999999999999999999"])), 1..6)) {
        let mut text = valid().into_bytes();
        for (pos, op, tok) in edits {
            let pos = pos % (text.len() + 1);
            match op {
                0 => { text.insert(pos, b'x'); }
                1 => { if pos < text.len() { text.remove(pos); } }
                2 => { for (i, b) in tok.bytes().enumerate() { text.insert(pos + i, b); } }
                _ => { if pos < text.len() { text[pos] ^= 0x20; } }
            }
        }
        let text = String::from_utf8_lossy(&text).into_owned();
        let _ = tacc_sim::load(&text, "fuzz.toml", &[], None);
    }

    /// Whatever TCP parameters the loader accepts, a run with them ends without a panic and
    /// with every packet accounted for.
    #[test]
    fn accepted_tcp_parameters_run_to_the_end(
        rto_min in proptest::sample::select(vec!["0us", "1us", "200ms", "60s", "61s", "1000s"]),
        rto_init in proptest::sample::select(vec!["0us", "1ns", "300us", "1s", "60s", "61s"]),
        init_cwnd in 0u32..12,
        mss in proptest::sample::select(vec!["0B", "1B", "100B", "1460B", "9000B", "70000B"]),
        rcv_buf in proptest::sample::select(vec!["0B", "1B", "1500B", "64KB", "16MB"]),
        dupthresh in 0u32..5,
        dctcp_g in proptest::sample::select(vec![-1.0, 0.0, 0.0625, 1.0, 2.0]),
        small_queue in proptest::sample::select(vec!["0us", "1ns", "1ms"]),
        delayed in any::<bool>(),
    ) {
        let tcp = format!("[tcp]\ncc = \"dctcp\"\nrto_min = \"{rto_min}\"\nrto_init = \"{rto_init}\"\ninit_cwnd = {init_cwnd}\nmss = \"{mss}\"\nrcv_buf = \"{rcv_buf}\"\ndupthresh = {dupthresh}\ndctcp_g = {dctcp_g:?}\nsmall_queue = \"{small_queue}\"\ndelayed_ack = {delayed}\n");
        let text = common::star(2, "5ms", &format!("{tcp}[[flows]]\nname = \"f\"\ncount = 2\nsrc = \"s{{i}}\"\ndst = \"r0\"\nbytes = \"30KB\"\n"));
        if let Ok(p) = tacc_sim::load(&text, "fuzz.toml", &[], None) {
            let (sim, s) = tacc_sim::run(p, Default::default(), &mut |_, _| {});
            prop_assert!(s.conservation.ok, "{:?} for\n{text}", sim.rec.cons);
        }
    }

    /// Random values for numeric keys never panic the loader either.
    #[test]
    fn loader_never_panics_on_extreme_numbers(senders in 0u32..5, rate in "[0-9]{1,25}(Mbps|Gbps|bps)", delay in "[0-9]{1,22}(us|s|ns)", count in 0u32..4) {
        let text = format!("name = \"x\"\nduration = \"{delay}\"\n[topology]\nkind = \"star\"\nsenders = {senders}\nreceivers = 1\nlink_rate = \"{rate}\"\nlink_delay = \"{delay}\"\n[[flows]]\nname = \"f\"\ncount = {count}\nsrc = \"s{{i}}\"\ndst = \"r0\"\ntransport = \"udp\"\nrate = \"{rate}\"\n");
        let _ = tacc_sim::load(&text, "fuzz.toml", &[], None);
    }
}

#[test]
fn a_mechanism_key_of_another_kind_is_an_error_naming_the_kind_and_its_keys() {
    let e = err(&base(&format!(
        "{FLOW}[mechanism]\nkind = \"hygenicc\"\ninterval = \"5ms\"\n"
    )));
    assert!(
        e.starts_with("bad.toml:19: mechanism.interval: does not apply to kind \"hygenicc\""),
        "{e}"
    );
    assert!(e.contains("feedback_timeout"), "{e}");
}

#[test]
fn sdn_gcc_takes_a_mark_rate_unit_or_a_cut_per_mark_not_both() {
    let e = err(&base(&format!(
        "{FLOW}[mechanism]\nkind = \"sdn-gcc\"\ncut_per_mark = \"5Mbps\"\nrate_unit = \"2ms\"\n"
    )));
    assert!(
        e.starts_with("bad.toml:20: mechanism.rate_unit: the mark-rate rule's unit"),
        "{e}"
    );
}

/// Every error in `text`, one a line.
fn errors(text: &str) -> Vec<String> {
    match tacc_sim::load(text, "bad.toml", &[], None) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string().lines().map(str::to_string).collect(),
    }
}

#[test]
fn independent_mistakes_are_all_reported_in_file_order() {
    let text = base(&format!(
        "{FLOW}colour = \"red\"\n[[flows]]\nname = \"g\"\nsrc = \"s1\"\ndst = \"r7\"\n"
    ))
    .replace("link_rate = \"1Gbps\"", "link_rate = \"1Gbit\"");
    let e = errors(&text);
    assert_eq!(e.len(), 3, "{e:#?}");
    for (e, expected) in e.iter().zip([
        "bad.toml:7: topology.link_rate: expected a rate such as \"1Gbps\" or \"500Mbps\", got \"1Gbit\"",
        "bad.toml:17: flows[0].colour: unknown field `colour`",
        "bad.toml:21: flows[1].dst: no host or VM named \"r7\"",
    ]) {
        assert!(e.starts_with(expected), "expected {expected:?}, got {e:?}");
    }
}

#[test]
fn an_unreadable_list_element_does_not_shift_the_others_numbers() {
    let text = base(&format!(
        "{}[[flows]]\nname = \"g\"\nsrc = \"s1\"\ndst = \"r7\"\n",
        FLOW.replace("src = \"s0\"", "src = 0")
    ));
    assert_eq!(
        errors(&text),
        [
            "bad.toml:15: flows[0].src: invalid type: integer `0`, expected a string",
            "bad.toml:20: flows[1].dst: no host or VM named \"r7\"",
        ]
    );
}

#[test]
fn misplaced_tables_are_reported_at_their_headers() {
    let e = errors(&format!("[scenario]\n{}", base(FLOW)));
    assert!(
        e[0].starts_with("bad.toml:1: scenario: unknown field `scenario`, expected one of `name`"),
        "{e:#?}"
    );
    // The misplaced table took the keys under it.
    assert_eq!(e[1], "bad.toml: missing field `duration`");
    let e = errors(&base(&format!("{FLOW}[[flow]]\nname = \"g\"\n")));
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(
        e[0].starts_with("bad.toml:17: flow: unknown field `flow`"),
        "{e:#?}"
    );
}

#[test]
fn each_missing_required_key_is_reported() {
    assert_eq!(
        errors("name = \"x\"\n"),
        [
            "bad.toml: missing field `duration`",
            "bad.toml: missing field `topology`"
        ]
    );
}

#[test]
fn the_first_twenty_errors_are_shown_then_how_many_more() {
    let flows: String = (0..30)
        .map(|i| format!("{FLOW}bytes = \"{i} lots\"\n"))
        .collect();
    let e = tacc_sim::load(&base(&flows), "bad.toml", &[], None)
        .err()
        .unwrap();
    assert_eq!(e.0.len(), 30);
    let shown = errors(&base(&flows));
    assert_eq!(shown.len(), 21, "{shown:#?}");
    let expected = |i: usize| {
        let line = 17 + 5 * i;
        format!("bad.toml:{line}: flows[{i}].bytes: expected a size such as \"1460B\", \"64KB\" or \"2MB\", got \"{i} lots\"")
    };
    assert_eq!(shown[0], expected(0));
    assert_eq!(shown[19], expected(19));
    assert_eq!(shown[20], "... and 10 more errors");
}

#[test]
fn every_problem_of_the_mechanism_table_is_reported_with_the_rest() {
    // Lines 13-16 hold the flow (its dst wrong), 17-21 the mechanism with three mistakes.
    let text = base(&format!(
        "{}[mechanism]\nkind = \"sdn-gcc\"\ninterval = \"1ns\"\nweights = {{ s9 = 2 }}\nkeying = \"flow\"\n",
        FLOW.replace("r0", "r7")
    ));
    let e = errors(&text);
    assert_eq!(e.len(), 4, "{e:#?}");
    assert!(
        e[0].starts_with("bad.toml:16: flows[0].dst: no host or VM named \"r7\""),
        "{e:#?}"
    );
    assert!(
        e[1].starts_with("bad.toml:19: mechanism.interval: must be at least 10us"),
        "{e:#?}"
    );
    assert!(
        e[2].starts_with("bad.toml:20: mechanism.weights: no host or VM named \"s9\""),
        "{e:#?}"
    );
    assert!(
        e[3].starts_with(
            "bad.toml:21: mechanism.keying: unknown variant `flow`, expected one of `vm`"
        ),
        "{e:#?}"
    );
}
