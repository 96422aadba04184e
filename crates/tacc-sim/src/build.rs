//! The build layer: a checked scenario becomes the world. Ports with their queues, hosts and
//! VMs, the forwarding table, endpoints, flows, applications, the switches' initial rules and
//! the mechanism's roles (built through `tacc_mech::roles::Fabric`) are made here, once;
//! [`crate::model`] holds only what the run's events touch.

use crate::cc::CcKind;
use crate::loss::LinkLoss;
use crate::mechanism::{Control, HostSlot, SwitchSlot};
use crate::model::{
    vm_address, App, Cdf, EpKind, Fib, Host, Incast, LinkNoise, Model, Port, PortSubset, Traffic,
    UdpState, Vm, FIRST_PORT,
};
use crate::packet::{Packet, MIN_PACKET};
use crate::queue::{Qdisc, Red, RedParams};
use crate::rng::Rng;
use crate::rules::{FlowTable, Forward, Rule, RuleActions, RuleMatch};
use crate::scenario::{
    HostSet, IncastCfg, Loaded, QueueCfg, QueueKind, RtoFormula, Scenario, ScenarioError, TcpCfg,
    TcpProfile, TrafficCfg, Transport,
};
use crate::tcp::TcpConfig;
use crate::topology::{self, Graph, NodeRef};
use crate::units::{self, Size};
use std::collections::{HashMap, VecDeque};
use tacc_mech::control::ControlMessage;
use tacc_mech::roles::{Fabric, SwitchPort};

pub const WEBSEARCH_CDF: &str = include_str!("../data/websearch.cdf");
pub const DATAMINING_CDF: &str = include_str!("../data/datamining.cdf");

/// VM names in VM order (each host's VMs in turn): the host's name when it has one VM,
/// "host/v" when it has several.
pub(crate) fn vm_names(g: &Graph) -> Vec<String> {
    let mut names = Vec::with_capacity(g.hosts.len() * g.vms_per_host as usize);
    for host in &g.hosts {
        for v in 0..g.vms_per_host {
            names.push(if g.vms_per_host == 1 {
                host.clone()
            } else {
                format!("{host}/{v}")
            });
        }
    }
    names
}

/// The names a scenario may use for a VM: its own, and for a host with several VMs the host's
/// name for the first of them.
pub(crate) fn vm_index(g: &Graph, names: &[String]) -> HashMap<String, u32> {
    let mut index: HashMap<String, u32> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), i as u32))
        .collect();
    if g.vms_per_host > 1 {
        for (h, host) in g.hosts.iter().enumerate() {
            index.insert(host.clone(), h as u32 * g.vms_per_host);
        }
    }
    index
}

/// A rule's protocol match: "tcp", "udp" or an IP protocol number.
pub(crate) fn protocol_number(name: &str) -> Option<u8> {
    match name {
        "tcp" => Some(6),
        "udp" => Some(17),
        x => x.parse().ok(),
    }
}

/// A rule's TCP flag condition, "syn" (set) or "!ack" (clear): (negated, the flag's bit).
pub(crate) fn tcp_flag(condition: &str) -> Option<(bool, u8)> {
    use tacc_mech::headers::tcp_flags as F;
    let (neg, name) = match condition.strip_prefix('!') {
        Some(n) => (true, n),
        None => (false, condition),
    };
    let bit = match name {
        "fin" => F::FIN,
        "syn" => F::SYN,
        "rst" => F::RST,
        "psh" => F::PSH,
        "ack" => F::ACK,
        "ece" => F::ECE,
        "cwr" => F::CWR,
        _ => return None,
    };
    Some((neg, bit))
}

/// A traffic source's flow sizes (`key` is its `cdf` key): a shipped distribution or a file
/// next to the scenario.
pub(crate) fn read_cdf(l: &Loaded, key: &str, cdf: &str) -> Result<Cdf, ScenarioError> {
    let text = match cdf {
        "websearch" => WEBSEARCH_CDF.to_string(),
        "datamining" => DATAMINING_CDF.to_string(),
        file => {
            let base = std::path::Path::new(&l.file)
                .parent()
                .unwrap_or(std::path::Path::new("."));
            std::fs::read_to_string(base.join(file)).map_err(|e| {
                l.error(
                    key,
                    format!("expected \"websearch\", \"datamining\" or a readable CDF file: {e}"),
                )
            })?
        }
    };
    Cdf::parse(&text).map_err(|e| l.error(key, e))
}

/// Expands "{i}" and "{i+K}" in a flow-group name pattern.
pub fn expand(pattern: &str, i: u32) -> String {
    let mut out = String::new();
    let mut rest = pattern;
    while let Some(a) = rest.find("{i") {
        out.push_str(&rest[..a]);
        let Some(b) = rest[a..].find('}') else { break };
        let inner = &rest[a + 2..a + b];
        let off: i64 = inner
            .trim()
            .trim_start_matches('+')
            .trim()
            .parse()
            .unwrap_or(0);
        out.push_str(&(i as i64 + off).to_string());
        rest = &rest[a + b + 1..];
    }
    out.push_str(rest);
    out
}

impl Model {
    pub(crate) fn tcp_config(base: &TcpCfg, cc: Option<CcKind>, ecn: Option<bool>) -> TcpConfig {
        let d = match base.profile.unwrap_or_default() {
            TcpProfile::Classic => TcpConfig::default(),
            TcpProfile::Linux => TcpConfig::linux(),
        };
        let cc = cc.or(base.cc).unwrap_or(d.cc);
        let delack_count = match base.delayed_ack {
            Some(true) => 2,
            Some(false) => 1,
            None => d.delack_count,
        };
        TcpConfig {
            mss: base.mss.map(|b| b.0 as u32).unwrap_or(d.mss),
            init_cwnd: base.init_cwnd.unwrap_or(d.init_cwnd),
            rto_min: base.rto_min.map(|x| x.0).unwrap_or(d.rto_min),
            rto_init: base.rto_init.map(|x| x.0).unwrap_or(d.rto_init),
            rto_max: d.rto_max,
            delack_count,
            delack_timeout: base.delack_timeout.map(|x| x.0).unwrap_or(d.delack_timeout),
            sack: base.sack.unwrap_or(d.sack),
            // DCTCP needs ECN; otherwise ECN is off unless asked for.
            ecn: cc == CcKind::Dctcp || ecn.or(base.ecn).unwrap_or(false),
            ecn_syn: base.ecn_syn.unwrap_or(d.ecn_syn),
            ecn_retransmit: base.ecn_retransmit.unwrap_or(d.ecn_retransmit),
            cwnd_validation: base.cwnd_validation.unwrap_or(d.cwnd_validation),
            prr: base.prr.unwrap_or(d.prr),
            rack: base.rack.unwrap_or(d.rack),
            tlp: base.tlp.unwrap_or(d.tlp),
            dsack: base.dsack.unwrap_or(d.dsack),
            quickack: base.quickack.unwrap_or(d.quickack),
            rto_linux: base
                .rto_formula
                .map_or(d.rto_linux, |f| f == RtoFormula::Linux),
            hystart: base.hystart.unwrap_or(d.hystart),
            cubic_clamp: base.cubic_clamp.unwrap_or(d.cubic_clamp),
            minshall: base.minshall.unwrap_or(d.minshall),
            half_window: base.half_window.unwrap_or(d.half_window),
            timestamps: base.timestamps.unwrap_or(d.timestamps),
            rcv_buf: base.rcv_buf.map(|b| b.0).unwrap_or(d.rcv_buf),
            cc,
            dctcp_g: base.dctcp_g.unwrap_or(d.dctcp_g),
            dupthresh: base.dupthresh.unwrap_or(d.dupthresh),
            ..d
        }
    }

    /// Builds the world from a scenario that [`crate::validate::check`] accepted.
    pub fn build(l: &Loaded, seed: u64) -> Result<Model, ScenarioError> {
        let s = &l.scenario;
        let graph = topology::build(&s.topology).map_err(|(k, m)| l.error(&k, m))?;
        let duration = s.duration.0;
        if Port::outgrow_l2(graph.links.len() * 2) {
            crate::heap::use_huge_pages();
        }
        let (ports, port_index) = build_ports(s, &graph);
        // A host's NIC is the port leaving it (topology::build gives every host one link).
        let mut nics = vec![u32::MAX; graph.hosts.len()];
        for (i, p) in ports.iter().enumerate() {
            if let NodeRef::Host(h) = p.from {
                nics[h as usize] = i as u32;
            }
        }
        let mut hosts = Vec::new();
        for (name, &nic) in graph.hosts.iter().zip(&nics) {
            hosts.push(Host {
                name: name.clone(),
                nic_port: nic,
                returned_last: 0,
            });
        }
        let nic_limit_pkts = match s.nic.limit {
            Size::Packets(n) => n,
            Size::Bytes(b) => b / 1500,
        };
        let vm_names = vm_names(&graph);
        let vm_index = vm_index(&graph, &vm_names);
        let vms: Vec<Vm> = vm_names
            .into_iter()
            .enumerate()
            .map(|(i, name)| Vm {
                name,
                host: i as u32 / graph.vms_per_host,
                ip: vm_address(i as u32),
                next_port: FIRST_PORT,
                vnic: VecDeque::new(),
                vnic_free_at: 0,
                vnic_busy: false,
                vnic_limit: nic_limit_pkts,
                vnic_in_nic: false,
            })
            .collect();
        let switch_salt = (0..graph.switches.len() as u64)
            .map(|i| i.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ seed)
            .collect();
        let switch_ports = || {
            (0..ports.len() as u32)
                .filter(|&p| matches!(ports[p as usize].from, NodeRef::Switch(_)))
        };
        let (sampled_ports, sampled_subset) = match &s.output.ports {
            None => default_sampled_ports(switch_ports().collect()),
            Some(HostSet::Named(n)) if n == "switches" => (switch_ports().collect(), None),
            Some(HostSet::Named(n)) if n == "all" => ((0..ports.len() as u32).collect(), None),
            Some(HostSet::Named(n)) => unreachable!("validated: output.ports = {n:?}"),
            Some(HostSet::List(names)) => (names.iter().map(|n| port_index[n]).collect(), None),
        };
        let fib = std::sync::Arc::new(Fib::new(&graph, &vms));
        let mut m = Model {
            name: s.name.clone().unwrap_or_else(|| {
                std::path::Path::new(&l.file)
                    .file_stem()
                    .map(|x| x.to_string_lossy().into_owned())
                    .unwrap_or_default()
            }),
            seed,
            duration,
            graph,
            ports,
            hosts,
            vms,
            fib,
            switch_salt,
            eps: Vec::new(),
            closed: Vec::new(),
            flows: Vec::new(),
            apps: Vec::new(),
            rng: Rng::new(seed),
            goodput_bin: s.output.goodput_bin.0,
            queue_sample: s.output.queue_sample.0,
            sampled_ports,
            sampled_subset,
            pcap_ports: s.output.pcap.iter().map(|n| port_index[n]).collect(),
            pcap_dropped: s.output.pcap_dropped,
            tables: Vec::new(),
            pending_rules: Vec::new(),
            shims: Vec::new(),
            any_shim: false,
            tcp_cfgs: Vec::new(),
            scripted_drops: false,
            tsq_ns: s.tcp.small_queue.map(|d| d.0).unwrap_or(1_000_000),
            switch_mech: Vec::new(),
            control: Control::default(),
            part: None,
        };
        m.shims = (0..m.hosts.len()).map(|_| HostSlot::default()).collect();
        m.switch_mech = (0..m.graph.switches.len())
            .map(|_| SwitchSlot::default())
            .collect();
        m.tables = vec![FlowTable::default(); m.graph.switches.len()];
        m.add_flows(s, &vm_index);
        for (ii, ic) in s.incast.iter().enumerate() {
            m.add_incast(l, ii, ic, &vm_index);
        }
        for (ti, tc) in s.traffic.iter().enumerate() {
            m.add_traffic(l, ti, tc, &vm_index)?;
        }
        for rc in &s.rules {
            let rule = m.rule_from(rc, &vm_index, &port_index);
            m.pending_rules.push(rule);
        }
        m.install_mechanism(s, &vm_index);
        m.put_vnics_in_nics(true);
        m.mark_plain_far_ends();
        Ok(m)
    }

    /// The flows the scenario lists, in order (their endpoints draw initial sequence numbers
    /// from the run's RNG).
    fn add_flows(&mut self, s: &Scenario, vm_index: &HashMap<String, u32>) {
        let m = self;
        for fc in &s.flows {
            for i in 0..fc.count.unwrap_or(1) {
                let src = vm_index[&expand(&fc.src, i)];
                let dst = vm_index[&expand(&fc.dst, i)];
                let name = if fc.count.is_some() {
                    format!("{}.{i}", fc.name)
                } else {
                    fc.name.clone()
                };
                let start = if fc.jitter.0 > 0 {
                    fc.start.0 + m.rng.exponential(fc.jitter.0 as f64) as u64
                } else {
                    fc.start.0
                };
                let f = match fc.transport {
                    Transport::Tcp => {
                        let cfg = Model::tcp_config(&s.tcp, fc.cc, fc.ecn);
                        let f = m.add_tcp_flow(
                            name,
                            fc.name.clone(),
                            src,
                            dst,
                            start,
                            fc.bytes.map(|b| b.0),
                            cfg,
                            None,
                        );
                        m.flows[f as usize].drop_segments = fc.drop_segments.clone();
                        m.scripted_drops |= !fc.drop_segments.is_empty();
                        let rx = m.flows[f as usize].rx_ep;
                        m.eps[rx as usize].set_return_delay(fc.return_delay.map(|d| d.0));
                        f
                    }
                    Transport::Udp => {
                        let f = m.add_udp_flow(
                            name,
                            fc.name.clone(),
                            src,
                            dst,
                            start,
                            fc.rate.expect("validated: a UDP flow has a rate").0,
                            fc.packet_size.map_or(1500, |b| b.0 as u32),
                            fc.on.map(|d| d.0),
                            fc.off.map(|d| d.0),
                            fc.reply_size.map(|b| b.0 as u32),
                        );
                        let udp = m.flows[f as usize].udp.as_mut().expect("a UDP flow");
                        udp.forge = fc.forge;
                        if let Some(spoof) = &fc.spoof {
                            udp.src_ip = m.vms[vm_index[&expand(spoof, i)] as usize].ip;
                        }
                        f
                    }
                };
                m.flows[f as usize].stop = fc.stop.map(|d| d.0);
            }
        }
    }

    /// The mechanism's roles, built for this world and put in their slots; its rules join the
    /// switches' initial rules.
    fn install_mechanism(&mut self, s: &Scenario, vm_index: &HashMap<String, u32>) {
        let m = self;
        let mech = &s.mechanism;
        let rcv_buf = s
            .tcp
            .rcv_buf
            .map(|b| b.0)
            .unwrap_or(TcpConfig::default().rcv_buf);
        let inst = mech.build::<Packet>(&ModelFabric {
            m,
            vm_index,
            receiver_window: (rcv_buf, crate::tcp::window_scale_for(rcv_buf)),
        });
        for (slot, shim) in m.shims.iter_mut().zip(inst.shims) {
            slot.shim = shim;
        }
        m.any_shim = m.shims.iter().any(|s| s.shim.is_some());
        for (slot, hook) in m.switch_mech.iter_mut().zip(inst.switch_hooks) {
            slot.queue_events = hook.as_ref().is_some_and(|h| h.queue_events());
            slot.hook = hook;
        }
        for p in &mut m.ports {
            if let NodeRef::Switch(sw) = p.from {
                p.set_departs_by_event(m.switch_mech[sw as usize].hook.is_some());
            }
        }
        m.control.app = inst.controller;
        m.control.latency = inst.control_latency;
        for f in inst.initial_rules {
            // Proactive rules, in the tables before any traffic; their flow-mods still cross
            // the control channel and count in its totals.
            m.control.account(&ControlMessage::FlowMod(f.clone()));
            let rule = Rule {
                m: f.rule_match,
                priority: f.priority,
                actions: f.actions,
                expires_at: f.hard_timeout,
                packets: 0,
                bytes: 0,
            };
            m.pending_rules.push((f.switch, 0, rule));
        }
    }

    fn rule_from(
        &self,
        rc: &crate::scenario::RuleCfg,
        vm_index: &HashMap<String, u32>,
        ports: &HashMap<String, u32>,
    ) -> (u32, u64, Rule) {
        let sw = self
            .graph
            .switches
            .iter()
            .position(|n| *n == rc.switch)
            .expect("validated: the rule's switch exists") as u32;
        let ip = |n: &Option<String>| n.as_ref().map(|n| self.vms[vm_index[n] as usize].ip);
        let (mut mask, mut value) = (0u8, 0u8);
        for f in &rc.tcp_flags {
            let (neg, bit) = tcp_flag(f).expect("validated: TCP flag conditions parse");
            mask |= bit;
            if !neg {
                value |= bit;
            }
        }
        let forward = match rc.forward.as_str() {
            "normal" => Forward::Normal,
            "drop" => Forward::Drop,
            name => Forward::Port(ports[name]),
        };
        let m = RuleMatch {
            src: ip(&rc.src),
            dst: ip(&rc.dst),
            protocol: rc
                .protocol
                .as_deref()
                .map(|p| protocol_number(p).expect("validated: the protocol parses")),
            sport: rc.sport,
            dport: rc.dport,
            flags_mask: mask,
            flags_value: value,
        };
        let rule = Rule {
            m,
            priority: rc.priority,
            actions: RuleActions {
                forward,
                set_ce: rc.set_ce,
                copy_to_controller: rc.copy_to_controller,
            },
            expires_at: rc.hard_timeout.map(|t| rc.at.0 + t.0),
            packets: 0,
            bytes: 0,
        };
        (sw, rc.at.0, rule)
    }

    #[allow(clippy::too_many_arguments)]
    fn add_udp_flow(
        &mut self,
        name: String,
        group: String,
        src: u32,
        dst: u32,
        start: u64,
        rate_bps: u64,
        size: u32,
        on: Option<u64>,
        off: Option<u64>,
        reply: Option<u32>,
    ) -> u32 {
        let sport = self.alloc_port(src);
        // The sender's endpoint receives replies (request/reply mode).
        let rx_kind = match reply {
            Some(r) => EpKind::UdpEcho { reply: r },
            None => EpKind::UdpSink,
        };
        let kinds = (EpKind::UdpSink, rx_kind);
        let f = self.push_flow(name, group, (src, dst), start, kinds, u32::MAX, (sport, 9));
        self.flows[f as usize].udp = Some(UdpState {
            src_ip: self.vms[src as usize].ip,
            forge: None,
            rate_bps,
            packet_size: size,
            on_mean: on,
            off_mean: off,
            is_on: false,
            period_end: start,
        });
        f
    }

    fn add_incast(
        &mut self,
        l: &Loaded,
        ii: usize,
        ic: &IncastCfg,
        vm_index: &HashMap<String, u32>,
    ) {
        let workers: Vec<u32> = (0..ic.count)
            .map(|i| vm_index[&expand(&ic.workers, i)])
            .collect();
        let tcp = Model::tcp_config(&l.scenario.tcp, ic.cc, ic.ecn);
        let aggregator = vm_index[&ic.aggregator];
        let request_ns: Vec<u64> = match ic.interval {
            // An interval's epochs start their workers on the clock, as the papers' scripts do.
            Some(_) => vec![0; workers.len()],
            None => {
                let flight = self.flight_from(self.vms[aggregator as usize].host);
                workers
                    .iter()
                    .map(|&w| flight[self.vms[w as usize].host as usize])
                    .collect()
            }
        };
        self.apps.push(App::Incast(Incast {
            name: ic.name.clone(),
            aggregator,
            request_min: request_ns.iter().copied().min().unwrap_or(0),
            request_ns,
            workers,
            bytes: ic.bytes.0,
            epochs: ic.epochs,
            epoch: 0,
            start: ic.start.0,
            interval: ic.interval.map(|d| d.0),
            jitter: ic.jitter.0,
            outstanding: 0,
            tcp,
            rng: Incast::stream(self.seed, ii),
        }));
    }

    /// How long the smallest packet takes from host `from` to each host (by host index;
    /// `u64::MAX` if none is reached): each link's delay and serialization on the quickest
    /// path through the switches, queues empty. A request's flight.
    pub fn flight_from(&self, from: u32) -> Vec<u64> {
        let hosts = self.hosts.len();
        let index = |n: NodeRef| match n {
            NodeRef::Host(h) => h as usize,
            NodeRef::Switch(s) => hosts + s as usize,
        };
        let mut out: Vec<Vec<u32>> = vec![Vec::new(); hosts + self.graph.switches.len()];
        for (i, p) in self.ports.iter().enumerate() {
            out[index(p.from)].push(i as u32);
        }
        let mut best = vec![u64::MAX; out.len()];
        let mut heap = std::collections::BinaryHeap::new();
        best[from as usize] = 0;
        heap.push(std::cmp::Reverse((0u64, from as usize)));
        while let Some(std::cmp::Reverse((t, n))) = heap.pop() {
            // Another host is where a path ends, never a hop.
            if t > best[n] || (n < hosts && n != from as usize) {
                continue;
            }
            for &i in &out[n] {
                let p = &self.ports[i as usize];
                let (to, at) = (index(p.to()), t + p.delay_ns + p.ser(MIN_PACKET));
                if at < best[to] {
                    best[to] = at;
                    heap.push(std::cmp::Reverse((at, to)));
                }
            }
        }
        best.truncate(hosts);
        best
    }

    /// Adds a traffic source; its CDF file is read again here, and may have changed since.
    fn add_traffic(
        &mut self,
        l: &Loaded,
        ti: usize,
        tc: &TrafficCfg,
        vm_index: &HashMap<String, u32>,
    ) -> Result<(), ScenarioError> {
        let vms: Vec<u32> = match &tc.hosts {
            HostSet::Named(n) if n == "all" => (0..self.vms.len() as u32).collect(),
            HostSet::Named(n) => vec![vm_index[n]],
            HostSet::List(names) => names.iter().map(|n| vm_index[n]).collect(),
        };
        let cdf = read_cdf(l, &format!("traffic[{ti}].cdf"), &tc.cdf)?;
        // Poisson arrivals: every host offers `load` of its link on average.
        let host_rate = self.ports
            [self.hosts[self.vms[vms[0] as usize].host as usize].nic_port as usize]
            .rate_bps as f64;
        let per_second = tc.load * host_rate * vms.len() as f64 / (8.0 * cdf.mean());
        let tcp = Model::tcp_config(&l.scenario.tcp, tc.cc, tc.ecn);
        self.apps.push(App::Traffic(Traffic {
            name: tc.name.clone(),
            vms,
            cdf,
            mean_gap_ns: 1e9 / per_second,
            start: tc.start.0,
            stop: tc.stop.map(|d| d.0),
            count: 0,
            tcp,
            rng: Traffic::stream(self.seed, ti),
        }));
        Ok(())
    }
}

/// One port per link direction, each with its queue discipline (a host's NIC drop-tail, a
/// switch port as the scenario says, then its overrides), and the ports by name.
fn build_ports(s: &Scenario, graph: &Graph) -> (Vec<Port>, HashMap<String, u32>) {
    let q = &s.queue;
    let red = red_params(q);
    let k = q.k.unwrap_or(Size::Packets(20));
    let mut ports = Vec::with_capacity(graph.links.len() * 2);
    for i in 0..graph.links.len() * 2 {
        let link = &graph.links[i / 2];
        let (from, to) = topology::port_ends(graph, i);
        let name = topology::port_name(graph, i);
        // Time to send a full 1500-byte packet: RED's idle decay unit and the default jitter.
        let pkt_time_ns = units::ser_ns(link.rate_bps, 1500);
        let red = RedParams {
            pkt_time_ns,
            ..red.clone()
        };
        let (qdisc, jitter_ns) = match from {
            NodeRef::Host(_) => (
                Qdisc::new(QueueKind::Droptail, s.nic.limit, k, &red),
                s.nic.jitter.map(|d| d.0).unwrap_or(pkt_time_ns),
            ),
            NodeRef::Switch(_) => (Qdisc::new(q.kind, q.limit, k, &red), 0),
        };
        ports.push(Port::new(
            name,
            (from, to),
            (link.rate_bps, link.delay_ns),
            (qdisc, Red::new(red)),
            (jitter_ns > 0).then(|| LinkNoise::new(jitter_ns)),
        ));
    }
    let port_index: HashMap<String, u32> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| (p.name.clone(), i as u32))
        .collect();
    for o in &q.overrides {
        for name in &o.ports {
            let qd = &mut ports[port_index[name] as usize].qdisc;
            if let Some(kind) = o.kind {
                qd.kind = kind;
            }
            if let Some(lim) = o.limit {
                qd.limit = lim.into();
            }
            if let Some(k) = o.k {
                qd.k = k.into();
            }
        }
    }
    for cfg in &s.loss {
        for selector in cfg.ports() {
            for port in ports_selected(graph, &port_index, selector) {
                ports[port as usize].noise_or_default().loss = Some(LinkLoss::new(cfg));
            }
        }
    }
    (ports, port_index)
}

/// The classes of ports a loss entry may name instead of a port.
pub(crate) const PORT_CLASSES: [&str; 4] =
    ["all", "host->switch", "switch->host", "switch->switch"];

/// The ports a loss entry names: one by name, or a class of links by their ends.
/// Queue samples per sampling time without `output.ports`: every switch port up to this many.
/// A larger fabric (a k = 16 fat tree has 5,120 switch ports, k = 32 40,960) is sampled at
/// every n-th switch port in index order, the smallest n that keeps it within this bound: an
/// even spread over every tier, the same ports in every run.
pub const DEFAULT_SAMPLED_PORTS: usize = 1024;

/// The default sample of `switch_ports` (in index order) and, when it is a subset, which.
fn default_sampled_ports(switch_ports: Vec<u32>) -> (Vec<u32>, Option<PortSubset>) {
    let of = switch_ports.len();
    if of <= DEFAULT_SAMPLED_PORTS {
        return (switch_ports, None);
    }
    let every = of.div_ceil(DEFAULT_SAMPLED_PORTS);
    let sampled = switch_ports.into_iter().step_by(every).collect();
    (sampled, Some(PortSubset { every, of }))
}

pub(crate) fn ports_selected(
    graph: &Graph,
    port_index: &HashMap<String, u32>,
    selector: &str,
) -> Vec<u32> {
    if let Some(&i) = port_index.get(selector) {
        return vec![i];
    }
    let class = |from: NodeRef, to: NodeRef| match (from, to) {
        (NodeRef::Host(_), _) => "host->switch",
        (_, NodeRef::Host(_)) => "switch->host",
        _ => "switch->switch",
    };
    (0..graph.links.len() * 2)
        .filter(|&i| {
            let (from, to) = topology::port_ends(graph, i);
            selector == "all" || selector == class(from, to)
        })
        .map(|i| i as u32)
        .collect()
}

/// The model as a mechanism sees it when it is built.
struct ModelFabric<'a> {
    m: &'a Model,
    vm_index: &'a HashMap<String, u32>,
    receiver_window: (u64, u8),
}

impl Fabric for ModelFabric<'_> {
    fn hosts(&self) -> u32 {
        self.m.hosts.len() as u32
    }
    fn nic_rate_bps(&self, host: u32) -> u64 {
        self.m.ports[self.m.hosts[host as usize].nic_port as usize].rate_bps
    }
    fn vms(&self) -> Vec<(u32, u32)> {
        self.m.vms.iter().map(|v| (v.host, v.ip)).collect()
    }
    fn vm_address(&self, name: &str) -> Option<u32> {
        self.vm_index.get(name).map(|&v| self.m.vms[v as usize].ip)
    }
    fn switches(&self) -> u32 {
        self.m.graph.switches.len() as u32
    }
    fn switch_ports(&self) -> Vec<SwitchPort> {
        self.m
            .ports
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p.from {
                NodeRef::Switch(switch) => Some(SwitchPort {
                    switch,
                    port: i as u32,
                    rate_bps: p.rate_bps,
                    buffer: p.qdisc.limit.size(),
                    to_host: matches!(p.to(), NodeRef::Host(_)),
                }),
                NodeRef::Host(_) => None,
            })
            .collect()
    }
    fn route_ports(&self, switch: u32, vm: u32) -> &[u32] {
        self.m.route_ports(switch, vm)
    }
    fn receiver_window(&self) -> (u64, u8) {
        self.receiver_window
    }
}

/// Classic RED's parameters from the queue table, with their defaults (the packet time is
/// each port's own). The average and the thresholds count what the limit counts: the default
/// thresholds, 5 and 15 packets, are 1,500 bytes a packet where the limit is in bytes (the
/// checks refuse thresholds given in the other unit).
pub(crate) fn red_params(q: &QueueCfg) -> RedParams {
    let size = |s: Size| s.count() as f64;
    let packet = if matches!(q.limit, Size::Bytes(_)) {
        1500.0
    } else {
        1.0
    };
    RedParams {
        min_th: q.min_th.map_or(5.0 * packet, size),
        max_th: q.max_th.map_or(15.0 * packet, size),
        max_p: q.max_p.unwrap_or(0.1),
        weight: q.weight.unwrap_or(0.002),
        ecn: q.ecn,
        pkt_time_ns: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn red_default_thresholds_count_what_the_limit_counts() {
        let packets = red_params(&QueueCfg::default());
        assert_eq!((packets.min_th, packets.max_th), (5.0, 15.0));
        let bytes = red_params(&QueueCfg {
            limit: Size::Bytes(150_000),
            ..QueueCfg::default()
        });
        assert_eq!((bytes.min_th, bytes.max_th), (7500.0, 22500.0));
    }

    #[test]
    fn group_patterns_expand_with_offsets() {
        assert_eq!(expand("s{i}", 3), "s3");
        assert_eq!(expand("s{i+1}", 3), "s4");
        assert_eq!(expand("h0_{i}", 2), "h0_2");
    }

    #[test]
    fn shipped_cdfs_parse_and_have_the_published_means() {
        // Web search (DCTCP paper) averages about 1.6 MB; data mining (VL2) about 7.4 MB.
        let ws = Cdf::parse(WEBSEARCH_CDF).unwrap().mean();
        let dm = Cdf::parse(DATAMINING_CDF).unwrap().mean();
        assert!((1.4e6..1.8e6).contains(&ws), "websearch mean {ws}");
        assert!((6.0e6..8.5e6).contains(&dm), "datamining mean {dm}");
    }
}
