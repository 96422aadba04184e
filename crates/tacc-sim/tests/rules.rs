//! Switch flow-table rules as a controller would install them.

mod common;
use common::*;

#[test]
fn syn_copy_rules_send_one_packet_in_per_connection() {
    let (sim, s) = run(&star(3, "1s", "[[flows]]\nname = \"f\"\ncount = 3\nsrc = \"s{i}\"\ndst = \"r0\"\nbytes = \"100KB\"\n[[rules]]\nswitch = \"sw0\"\npriority = 10\nprotocol = \"tcp\"\ntcp_flags = [\"syn\", \"!ack\"]\ncopy_to_controller = true\n"));
    assert_eq!(s.control.packet_ins, 3);
    assert!(sim
        .rec
        .packet_ins
        .iter()
        .all(|(_, sw, _, p)| *sw == 0 && p.flags & 0x12 == 0x02));
    assert!(
        s.flows.iter().all(|f| f.completed),
        "copying does not disturb forwarding"
    );
}

#[test]
fn a_ce_marking_rule_slows_an_ecn_flow_only_while_installed() {
    // Deep drop-tail buffer: without the rule nothing marks or drops. A rule that CE-marks the
    // flow from 1 s with a 1 s hard timeout makes the NewReno+ECN sender back off meanwhile.
    let text = star(1, "3s", "[tcp]\necn = true\n[[flows]]\nname = \"f\"\nsrc = \"s0\"\ndst = \"r0\"\n[[rules]]\nswitch = \"sw0\"\nat = \"1s\"\nhard_timeout = \"1s\"\npriority = 100\nsrc = \"s0\"\nset_ce = true\n").replace("kind = \"red-ecn\"", "kind = \"droptail\"");
    let (sim, s) = run(&text);
    assert_eq!(s.control.rules_installed, 1);
    assert_eq!(s.control.rules_expired, 1);
    let before = goodput_between(&sim, "f", 0.5, 1.0);
    let during = goodput_between(&sim, "f", 1.2, 2.0);
    let after = goodput_between(&sim, "f", 2.5, 3.0);
    assert!(
        before > 900.0 && after > 900.0,
        "before {before:.0} after {after:.0}"
    );
    // Every packet marked: one halving per RTT drives cwnd to its 2-segment floor.
    assert!(during < 400.0, "during {during:.0} Mb/s");
}

#[test]
fn a_drop_rule_blackholes_matching_traffic() {
    let (_, s) = run(&star(2, "1s", "[[flows]]\nname = \"u\"\nsrc = \"s0\"\ndst = \"r0\"\ntransport = \"udp\"\nrate = \"100Mbps\"\n[[flows]]\nname = \"v\"\nsrc = \"s1\"\ndst = \"r0\"\ntransport = \"udp\"\nrate = \"100Mbps\"\n[[rules]]\nswitch = \"sw0\"\nsrc = \"s0\"\nforward = \"drop\"\n"));
    assert_eq!(flow(&s, "u").bytes_delivered, 0);
    assert!(flow(&s, "v").goodput_mbps > 90.0);
    assert!(s.control.rule_dropped > 8000);
}
