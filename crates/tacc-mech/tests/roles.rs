//! The mechanism interface driven as a Linux agent and a controller process will drive it:
//! configurations read from the scenario's keys, roles built for a fabric, real IPv4 bytes
//! through the host hooks, control messages carried as JSON.

use tacc_mech::control::{
    ControlMessage, HostMessage, PacketIn, PacketInHeaders, StatsReply, StatsRequest,
};
use tacc_mech::headers::{ip_proto, tcp_flags, Ecn, PacketHeaders};
use tacc_mech::roles::EgressVerdict;
use tacc_mech::roles::{Fabric, IngressVerdict, PathOracle, SwitchPort};
use tacc_mech::units::Size;
use tacc_mech::wire::{emit, Ipv4Fields, Ipv4Packet, TcpFields};
use tacc_mech::MechanismConfig;

const A: u32 = 0x0a00_0001;
const B: u32 = 0x0a00_0002;

/// Two hosts (one VM each, "a" and "b") on one switch: port 0 leads to a, port 1 to b.
struct TwoHosts;

impl Fabric for TwoHosts {
    fn hosts(&self) -> u32 {
        2
    }
    fn nic_rate_bps(&self, _host: u32) -> u64 {
        1_000_000_000
    }
    fn vms(&self) -> Vec<(u32, u32)> {
        vec![(0, A), (1, B)]
    }
    fn vm_address(&self, name: &str) -> Option<u32> {
        match name {
            "a" => Some(A),
            "b" => Some(B),
            _ => None,
        }
    }
    fn switches(&self) -> u32 {
        1
    }
    fn switch_ports(&self) -> Vec<SwitchPort> {
        (0..2)
            .map(|port| SwitchPort {
                switch: 0,
                port,
                rate_bps: 1_000_000_000,
                buffer: Size::Packets(100),
                to_host: true,
            })
            .collect()
    }
    fn route_ports(&self, _switch: u32, vm: u32) -> &[u32] {
        [&[0u32][..], &[1u32][..]][vm as usize]
    }
    fn receiver_window(&self) -> (u64, u8) {
        (65_535, 0)
    }
}

struct NoPaths;

impl PathOracle for NoPaths {
    fn path(&self, _switch: u32, _h: &PacketInHeaders) -> Vec<(u32, u32)> {
        Vec::new()
    }
}

type Wire = Ipv4Packet<Vec<u8>>;

fn config(json: &str) -> MechanismConfig {
    let c: MechanismConfig = serde_json::from_str(json).unwrap();
    assert!(c.check(&|n| TwoHosts.vm_address(n)).is_empty());
    c
}

fn packet(src: u32, dst: u32, ecn: Ecn, tcp: Option<TcpFields>) -> Wire {
    let protocol = if tcp.is_some() {
        ip_proto::TCP
    } else {
        ip_proto::UDP
    };
    let ip = Ipv4Fields {
        src,
        dst,
        protocol,
        ident: 7,
        ecn,
        total_len: 1500,
        ttl: 64,
    };
    Ipv4Packet::new_checked(emit(&ip, tcp.as_ref())).unwrap()
}

#[test]
fn hygenicc_on_real_bytes_marks_ect_hides_ce_and_echoes_it_in_the_reserved_bit() {
    let mut inst = config(r#"{"kind": "hygenicc", "weights": {"a": 2}}"#).build::<Wire>(&TwoHosts);
    let [Some(sender), Some(receiver)] = &mut inst.shims[..] else {
        panic!("a shim on each host");
    };
    // A VM's UDP packet leaves as ECT(0), checksum kept valid.
    let mut p = packet(A, B, Ecn::NotEct, None);
    assert_eq!(sender.on_egress(0, &mut p), EgressVerdict::Pass);
    assert_eq!(p.ecn(), Ecn::Ect0);
    assert!(p.checksums_valid());
    // A switch marked it: the receiving shim counts the mark and hides it from the VM...
    p.set_ecn(Ecn::Ce);
    assert_eq!(receiver.on_ingress(10, &mut p), IngressVerdict::Deliver);
    assert_eq!(p.ecn(), Ecn::Ect0);
    // ...and echoes it on the next packet back, in the IPv4 reserved flag.
    let mut back = packet(B, A, Ecn::NotEct, None);
    assert_eq!(receiver.on_egress(20, &mut back), EgressVerdict::Pass);
    assert!(back.reserved_bit());
    assert!(back.checksums_valid());
    assert_eq!(sender.on_ingress(30, &mut back), IngressVerdict::Deliver);
    assert!(!back.reserved_bit(), "the sender's shim consumes the echo");
    let mut counters = Vec::new();
    sender.counters(&mut |k, v| counters.push((k, v)));
    assert!(counters.contains(&("ipr_bits_seen", 1.0)), "{counters:?}");
}

#[test]
fn sicc_controller_and_hypervisor_talk_through_serialized_messages() {
    let mut inst = config(r#"{"kind": "sicc", "initial_window": 100.0, "evaluate_on_syn": true}"#)
        .build::<Wire>(&TwoHosts);
    // The ToR copies SYN and FIN to the controller.
    assert_eq!(inst.initial_rules.len(), 2);
    assert!(inst
        .initial_rules
        .iter()
        .all(|r| r.actions.copy_to_controller));
    let app = inst.controller.as_mut().unwrap();
    // A SYN from b to a crosses port 0: with IW = 100 packets one connection fills the
    // 100-packet buffer, so the controller declares incast on that port at once.
    let syn = ControlMessage::PacketIn(PacketIn {
        switch: 0,
        in_port: 1,
        out_port: Some(0),
        headers: PacketInHeaders {
            src: B,
            dst: A,
            protocol: ip_proto::TCP,
            src_port: 40_000,
            dst_port: 5001,
            tcp_flags: tcp_flags::SYN,
            mss: Some(1460),
            wscale: Some(0),
        },
    });
    let syn: ControlMessage = serde_json::from_str(&serde_json::to_string(&syn).unwrap()).unwrap();
    let ControlMessage::PacketIn(pi) = syn else {
        unreachable!()
    };
    let mut out = Vec::new();
    app.on_packet_in(0, &pi, &NoPaths, &mut out);
    let to_host = out
        .iter()
        .find_map(|m| match m {
            ControlMessage::ToHost(h) => Some(*h),
            _ => None,
        })
        .expect("an incast ON for the source");
    assert_eq!(to_host.vm(), B);
    // The source's hypervisor gets it over the wire and clamps the ACKs towards its VM.
    let json = serde_json::to_string(&to_host).unwrap();
    let msg: HostMessage = serde_json::from_str(&json).unwrap();
    let hyp = inst.shims[1].as_mut().unwrap();
    hyp.on_message(0, &msg);
    let ack = TcpFields {
        src_port: 5001,
        dst_port: 40_000,
        seq: 1,
        ack: 1,
        flags: tcp_flags::ACK,
        window: 60_000,
    };
    let mut p = packet(A, B, Ecn::NotEct, Some(ack));
    hyp.on_ingress(1, &mut p);
    assert_eq!(p.tcp_window(), Some(1460));
    assert!(p.checksums_valid(), "RFC 1624 update on real bytes");
    // Every interval the controller reads the ToR's queues.
    let mut out = Vec::new();
    app.on_timer(app.poll_at().unwrap(), &mut out);
    assert!(
        out.contains(&ControlMessage::StatsRequest(StatsRequest::QueueLength {
            switch: 0,
            port: 0
        }))
    );
    let mut out = Vec::new();
    let reply = StatsReply::QueueLength {
        switch: 0,
        port: 0,
        pkts: 0,
    };
    app.on_stats_reply(5_000_000, &reply, &mut out);
    assert!(out
        .iter()
        .any(|m| matches!(m, ControlMessage::ToHost(HostMessage::Incast(_)))));
}

#[test]
fn a_mechanism_without_a_controller_builds_none() {
    let inst = config(r#"{"kind": "rwndq"}"#).build::<Wire>(&TwoHosts);
    assert!(inst.controller.is_none());
    assert!(inst.shims.iter().all(Option::is_none));
    assert_eq!(inst.switch_hooks.len(), 1);
    assert!(inst.switch_hooks[0].is_some());
}
