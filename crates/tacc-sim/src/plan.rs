//! The built world as a [`Plan`]: what the testbed needs to build the same world from
//! namespaces and veths, and its agents to build the same mechanism.

use tacc_mech::plan::{
    Node, Plan, PlanApp, PlanFlow, PlanHost, PlanIncast, PlanOutput, PlanPort, PlanQueue,
    PlanRoute, PlanSwitch, PlanTcp, PlanVm,
};
use tacc_mech::MechanismConfig;

use crate::model::{App, Model};
use crate::scenario::QueueKind;
use crate::tcp::TcpConfig;
use crate::topology::NodeRef;
use crate::Prepared;

fn node(n: NodeRef) -> Node {
    match n {
        NodeRef::Host(h) => Node::Host(h),
        NodeRef::Switch(s) => Node::Switch(s),
    }
}

fn queue(m: &Model, port: usize) -> PlanQueue {
    let qd = &m.ports[port].qdisc;
    let (limit_packets, limit_bytes) = PlanQueue::fields(qd.limit.size());
    let marks = qd.kind == QueueKind::RedEcn;
    let (k_packets, k_bytes) = if marks {
        PlanQueue::fields(qd.k.size())
    } else {
        (None, None)
    };
    PlanQueue {
        kind: match qd.kind {
            QueueKind::Droptail => "droptail",
            QueueKind::RedEcn => "red-ecn",
            QueueKind::Red => "red",
        }
        .to_string(),
        limit_packets,
        limit_bytes,
        k_packets,
        k_bytes,
    }
}

fn ipv4(ip: u32) -> String {
    std::net::Ipv4Addr::from(ip).to_string()
}

/// The plan of a checked, built scenario.
pub fn plan(p: &Prepared) -> Plan {
    let m = &p.model;
    let tcp: &TcpConfig = &p.tcp;
    let switches = m.graph.switches.len() as u32;
    let routes = (0..switches)
        .flat_map(|s| (0..m.vms.len() as u32).map(move |v| (s, v)))
        .filter_map(|(s, v)| {
            let ports = m.route_ports(s, v);
            (!ports.is_empty()).then(|| PlanRoute {
                switch: s,
                vm: v,
                ports: ports.to_vec(),
            })
        })
        .collect();
    Plan {
        name: m.name.clone(),
        seed: m.seed,
        duration_ns: m.duration,
        hosts: m
            .hosts
            .iter()
            .map(|h| PlanHost {
                name: h.name.clone(),
                nic_port: h.nic_port,
            })
            .collect(),
        vms: m
            .vms
            .iter()
            .map(|v| PlanVm {
                name: v.name.clone(),
                host: v.host,
                address: ipv4(v.ip),
            })
            .collect(),
        switches: m
            .graph
            .switches
            .iter()
            .zip(&m.switch_salt)
            .map(|(name, &salt)| PlanSwitch {
                name: name.clone(),
                salt,
            })
            .collect(),
        ports: m
            .ports
            .iter()
            .enumerate()
            .map(|(i, port)| PlanPort {
                name: port.name.clone(),
                from: node(port.from),
                to: node(port.to()),
                rate_bps: port.rate_bps,
                delay_ns: port.delay_ns,
                queue: queue(m, i),
                loss_rate: port
                    .noise()
                    .and_then(|n| n.loss.as_ref())
                    .map(|l| l.mean_rate()),
            })
            .collect(),
        routes,
        flows: m
            .flows
            .iter()
            .map(|f| PlanFlow {
                name: f.name.clone(),
                group: f.group.clone(),
                src_vm: f.src_vm,
                dst_vm: f.dst_vm,
                start_ns: f.start,
                stop_ns: f.stop,
                bytes: f.bytes,
                transport: if f.udp.is_some() { "udp" } else { "tcp" }.to_string(),
                cc: f.cc.map(|c| c.name().to_string()),
                ecn: f.ecn,
                rate_bps: f.udp.as_ref().map(|u| u.rate_bps),
                packet_bytes: f.udp.as_ref().map(|u| u.packet_size),
                src_port: f.sport,
                dst_port: f.dport,
                forge: f
                    .udp
                    .as_ref()
                    .and_then(|u| u.forge)
                    .map(|k| k.name().to_string()),
                spoof_src: f
                    .udp
                    .as_ref()
                    .map(|u| u.src_ip)
                    .filter(|&ip| ip != m.vms[f.src_vm as usize].ip),
            })
            .collect(),
        apps: m
            .apps
            .iter()
            .map(|a| match a {
                App::Incast(i) => PlanApp {
                    kind: "incast".into(),
                    name: i.name.clone(),
                    incast: Some(PlanIncast {
                        aggregator: i.aggregator,
                        workers: i.workers.clone(),
                        bytes: i.bytes,
                        epochs: i.epochs,
                        start_ns: i.start,
                        interval_ns: i.interval,
                        jitter_ns: i.jitter,
                        cc: i.tcp.cc.name().to_string(),
                        ecn: i.tcp.ecn,
                    }),
                },
                App::Traffic(t) => PlanApp {
                    kind: "traffic".into(),
                    name: t.name.clone(),
                    incast: None,
                },
            })
            .collect(),
        tcp: plan_tcp(tcp),
        output: PlanOutput {
            goodput_bin_ns: m.goodput_bin,
            queue_sample_ns: m.queue_sample,
            ports: m.sampled_ports.clone(),
            pcap: m.pcap_ports.clone(),
            pcap_dropped: m.pcap_dropped,
        },
        mechanism: (!matches!(p.mechanism, MechanismConfig::None(_))).then(|| p.mechanism.clone()),
        mechanism_keys: p.mechanism_keys.clone(),
    }
}

/// A TCP configuration as the plan carries it to the testbed and the controller.
pub fn plan_tcp(tcp: &TcpConfig) -> PlanTcp {
    PlanTcp {
        mss: tcp.mss,
        init_cwnd: tcp.init_cwnd,
        rto_min_ns: tcp.rto_min,
        rcv_buf_bytes: tcp.rcv_buf,
        sack: tcp.sack,
        delack_count: tcp.delack_count,
        prr: tcp.prr,
        rack: tcp.rack,
        tlp: tcp.tlp,
        dsack: tcp.dsack,
        quickack: tcp.quickack,
        rto_linux: tcp.rto_linux,
        hystart: tcp.hystart,
        cubic_clamp: tcp.cubic_clamp,
        minshall: tcp.minshall,
        half_window: tcp.half_window,
        timestamps: tcp.timestamps,
    }
}

#[cfg(test)]
mod tests {
    use crate::packet::Packet;

    /// The plan's route choice is the engine's forwarding, ECMP included: the testbed's
    /// controller installs `route_port`, so its flows take the simulator's paths.
    #[test]
    fn the_plans_route_port_is_the_engines_ecmp_choice() {
        let text = "name = \"ft\"\nduration = \"1s\"\n[topology]\nkind = \"fat-tree\"\nk = 4\n\
                    link_rate = \"1Gbps\"\nlink_delay = \"1us\"\n";
        let p = crate::load(text, "ft.toml", &[], Some(7)).unwrap();
        let plan = super::plan(&p);
        let m = &p.model;
        let mut spread = std::collections::HashSet::new();
        for s in 0..plan.switches.len() as u32 {
            for (dst, vm) in m.vms.iter().enumerate() {
                for sport in 10_000..10_040u16 {
                    let src = m.vms[(dst + 1) % m.vms.len()].ip;
                    let mut pkt = Packet::new(src, vm.ip, 6, 1500);
                    (pkt.sport, pkt.dport) = (sport, 5001);
                    let port = plan.route_port(s, src, vm.ip, 6, sport, 5001);
                    assert_eq!(port, m.route(s, &pkt), "switch {s}, vm {dst}, port {sport}");
                    spread.insert((s, dst, port));
                }
            }
        }
        // ECMP sets are used whole: an edge switch reaches a host of another pod by 2 ports.
        assert!(spread.len() > plan.routes.len());
    }
}
