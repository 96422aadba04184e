//! Semantic checks of a scenario: ranges, times, names and references, made before anything is
//! built. Every error is reported, one per key (the first found). A table or list element with
//! schema errors gets none: its keys in error were left out, so they would be about values
//! the file does not hold.

use crate::build::{self, expand};
use crate::model::{self, PORTS_PER_VM};
use crate::queue::QSize;
use crate::scenario::{
    FlowCfg, HostSet, IncastCfg, Loaded, LossCfg, QueueKind, RuleCfg, Scenario, ScenarioError,
    TrafficCfg, Transport,
};
use crate::tcp::TcpConfig;
use crate::topology::{self, Graph, NodeRef};
use crate::units::Size;
use std::collections::{HashMap, HashSet};
use tacc_mech::MechanismConfig;

/// Output tables are dense over the run: bound them before a typo asks for billions of rows.
const MAX_GOODPUT_BINS: u64 = 1_000_000;
const MAX_QUEUE_SAMPLES: u64 = 10_000_000;

/// Every semantic error in `l`, in no particular order.
pub fn check(l: &Loaded) -> Vec<ScenarioError> {
    let s = &l.scenario;
    let mut r = Report {
        l,
        errors: Vec::new(),
        keys: HashSet::new(),
    };
    run(&mut r, s);
    tcp(&mut r, s);
    queue(&mut r, s);
    // Without a topology, nothing that names its hosts, switches or ports can be checked.
    let names = match topology::build(&s.topology) {
        Ok(g) => Some(Names::new(g)),
        Err((key, message)) => {
            r.error(&key, message);
            None
        }
    };
    if let Some(n) = &names {
        ports(&mut r, s, n);
    }
    loss(&mut r, s, names.as_ref());
    flows(&mut r, s, names.as_ref());
    for (i, ic) in s.incast.iter().enumerate() {
        incast(&mut r, s, i, ic, names.as_ref());
    }
    for (i, tc) in s.traffic.iter().enumerate() {
        traffic(&mut r, s, i, tc, names.as_ref());
    }
    for (i, rc) in s.rules.iter().enumerate() {
        rule(&mut r, s, i, rc, names.as_ref());
    }
    // The mechanism's VM names resolve to the addresses the model will give; without a
    // topology they cannot be checked and are taken as given.
    let vm_address = |name: &str| match &names {
        Some(n) => n.vm(name).map(model::vm_address),
        None => Some(0),
    };
    // A kind's checks read each key alone, and a key the parser refused is at its default: the
    // other keys' problems are found even in a misread table (`load` keeps one error per key).
    for p in s.mechanism.check(&vm_address) {
        if r.keys.insert(p.key.clone()) {
            r.errors.push(r.l.error(&p.key, p.message));
        }
    }
    r.errors
}

/// The errors found so far: the first per key, none in misread tables.
struct Report<'a> {
    l: &'a Loaded,
    errors: Vec<ScenarioError>,
    keys: HashSet<String>,
}

impl Report<'_> {
    fn error(&mut self, path: &str, message: impl Into<String>) {
        if !self.l.misread(path) && self.keys.insert(path.to_string()) {
            self.errors.push(self.l.error(path, message));
        }
    }

    /// A start or install time must fall within the run (a run of no time is an error itself).
    fn time(&mut self, s: &Scenario, path: &str, t: u64) {
        if s.duration.0 > 0 && t >= s.duration.0 {
            let end = s.duration.0 as f64 / 1e9;
            self.error(path, format!("is at or after the end of the run ({end} s)"));
        }
    }
}

/// The names a scenario refers to, and which hosts reach which.
struct Names {
    graph: Graph,
    vms: HashMap<String, u32>,
    ports: HashMap<String, u32>,
    /// Per host, where its one link leads: hosts behind connected switches reach each other.
    reach: Vec<Reach>,
}

#[derive(Clone, Copy, PartialEq)]
enum Reach {
    /// Through switches: the switch graph component (its smallest switch).
    Switches(u32),
    /// Straight to this host, and so to no other.
    Host(u32),
}

impl Names {
    fn new(graph: Graph) -> Names {
        let vms = build::vm_index(&graph, &build::vm_names(&graph));
        let ports = (0..graph.links.len() * 2)
            .map(|p| (topology::port_name(&graph, p), p as u32))
            .collect();
        // Union-find over switch-to-switch links; hosts do not forward.
        let mut root: Vec<u32> = (0..graph.switches.len() as u32).collect();
        fn find(root: &mut [u32], mut s: u32) -> u32 {
            while root[s as usize] != s {
                root[s as usize] = root[root[s as usize] as usize];
                s = root[s as usize];
            }
            s
        }
        for l in &graph.links {
            if let (NodeRef::Switch(a), NodeRef::Switch(b)) = (l.a, l.b) {
                let (a, b) = (find(&mut root, a), find(&mut root, b));
                root[a.max(b) as usize] = a.min(b);
            }
        }
        // topology::build gives every host exactly one link.
        let mut reach = vec![Reach::Host(u32::MAX); graph.hosts.len()];
        for l in &graph.links {
            for (end, other) in [(l.a, l.b), (l.b, l.a)] {
                if let NodeRef::Host(h) = end {
                    reach[h as usize] = match other {
                        NodeRef::Switch(s) => Reach::Switches(find(&mut root, s)),
                        NodeRef::Host(o) => Reach::Host(o),
                    };
                }
            }
        }
        Names {
            graph,
            vms,
            ports,
            reach,
        }
    }

    fn vm(&self, name: &str) -> Option<u32> {
        self.vms.get(name).copied()
    }

    fn host_of(&self, vm: u32) -> u32 {
        vm / self.graph.vms_per_host
    }

    fn vm_count(&self) -> usize {
        self.graph.hosts.len() * self.graph.vms_per_host as usize
    }

    /// Whether packets from VM `from` can reach VM `to`.
    fn reachable(&self, from: u32, to: u32) -> bool {
        let (a, b) = (self.host_of(from), self.host_of(to));
        match (self.reach[a as usize], self.reach[b as usize]) {
            (Reach::Switches(x), Reach::Switches(y)) => x == y,
            (Reach::Host(h), _) => h == b,
            (Reach::Switches(_), Reach::Host(_)) => false,
        }
    }

    /// The node port `p` leaves.
    fn port_from(&self, p: u32) -> NodeRef {
        let l = &self.graph.links[p as usize / 2];
        if p.is_multiple_of(2) {
            l.a
        } else {
            l.b
        }
    }
}

fn run(r: &mut Report, s: &Scenario) {
    if s.duration.0 == 0 {
        r.error("duration", "must be greater than zero");
    }
    let o = &s.output;
    for (key, step, most) in [
        ("output.goodput_bin", o.goodput_bin.0, MAX_GOODPUT_BINS),
        ("output.queue_sample", o.queue_sample.0, MAX_QUEUE_SAMPLES),
    ] {
        if step == 0 {
            r.error(key, "must be greater than zero");
            continue;
        }
        let n = s.duration.0.div_ceil(step);
        if n > most {
            r.error(
                key,
                format!(
                    "gives {n} rows per series over the run; at most {most}: choose a coarser step"
                ),
            );
        }
    }
}

fn tcp(r: &mut Report, s: &Scenario) {
    let t = &s.tcp;
    let mss = t.mss.map_or(TcpConfig::default().mss as u64, |b| b.0);
    let checks = [
        (
            "tcp.mss",
            (88..=65_495).contains(&mss),
            "between 88B (Linux's smallest MSS) and 65495B (a 65535-byte IPv4 packet)",
        ),
        (
            "tcp.init_cwnd",
            t.init_cwnd != Some(0),
            "at least 1 segment",
        ),
        (
            "tcp.rcv_buf",
            t.rcv_buf.is_none_or(|b| b.0 >= mss),
            "at least one segment (tcp.mss)",
        ),
        ("tcp.dupthresh", t.dupthresh != Some(0), "at least 1"),
        (
            "tcp.dctcp_g",
            t.dctcp_g.is_none_or(|g| g > 0.0 && g <= 1.0),
            "a gain in (0, 1]",
        ),
    ];
    for (key, ok, expected) in checks {
        if !ok {
            r.error(key, format!("must be {expected}"));
        }
    }
    // The engine clamps the RTO to [rto_min, rto_max]: a floor above the ceiling cannot hold.
    let rto_max = TcpConfig::default().rto_max;
    for (key, value, zero_ok) in [
        ("tcp.rto_min", t.rto_min, true),
        ("tcp.rto_init", t.rto_init, false),
    ] {
        let Some(d) = value else { continue };
        if d.0 == 0 && !zero_ok {
            r.error(key, "must be greater than zero");
        } else if d.0 > rto_max {
            let most = format!("at most {}s (the RTO ceiling)", rto_max / 1_000_000_000);
            r.error(key, most);
        }
    }
}

fn queue(r: &mut Report, s: &Scenario) {
    let q = &s.queue;
    if q.limit.is_zero() {
        r.error("queue.limit", "must be greater than zero");
    }
    // A port keeps its queue's sizes in 31 bits (`QSize`).
    let mut sizes = vec![
        ("queue.limit".to_string(), Some(q.limit)),
        ("queue.k".to_string(), q.k),
        ("nic.limit".to_string(), Some(s.nic.limit)),
    ];
    for (i, o) in q.overrides.iter().enumerate() {
        sizes.push((format!("queue.overrides[{i}].limit"), o.limit));
        sizes.push((format!("queue.overrides[{i}].k"), o.k));
    }
    for (key, size) in sizes {
        if size.is_some_and(|n| n.count() > QSize::MAX) {
            r.error(
                &key,
                format!("at most {} packets or bytes (2 GiB)", QSize::MAX),
            );
        }
    }
    // Classic RED's keys are checked wherever they are given, each by name, so that a value
    // out of range is an error whether or not this run's queues are RED.
    let red = build::red_params(q);
    if !(0.0..=1.0).contains(&red.max_p) {
        r.error(
            "queue.max_p",
            format!("expected a probability between 0 and 1, got {}", red.max_p),
        );
    }
    if !(red.weight > 0.0 && red.weight <= 1.0) {
        r.error(
            "queue.weight",
            format!("expected more than 0 and at most 1, got {}", red.weight),
        );
    }
    // RED's average counts what the port's limit counts; a threshold in the other unit would
    // be read as a count of that one (5pkt as 5 bytes).
    let bytes = |s: Size| matches!(s, Size::Bytes(_));
    let mut red_limits = vec![("queue.limit".to_string(), q.limit)];
    for (i, o) in q.overrides.iter().enumerate() {
        if let Some(limit) = o.limit {
            if o.kind.unwrap_or(q.kind) == QueueKind::Red {
                red_limits.push((format!("queue.overrides[{i}].limit"), limit));
            }
        }
    }
    for (key, th) in [("queue.min_th", q.min_th), ("queue.max_th", q.max_th)] {
        let Some(th) = th else { continue };
        if let Some((limit_key, limit)) = red_limits.iter().find(|(_, l)| bytes(*l) != bytes(th)) {
            r.error(
                key,
                format!(
                    "{th} is in another unit than {limit_key} ({limit}): RED's average counts \
                     what the limit counts; give both in packets or both in bytes"
                ),
            );
        }
    }
    let thresholds_given = q.min_th.is_some() || q.max_th.is_some();
    if (q.kind == QueueKind::Red || thresholds_given) && red.min_th >= red.max_th {
        let key = if q.min_th.is_some() {
            "queue.min_th"
        } else {
            "queue.max_th"
        };
        r.error(
            key,
            format!(
                "min_th ({}) must be below max_th ({})",
                red.min_th, red.max_th
            ),
        );
    }
}

/// Port names: queue overrides, the ports sampled into queues.csv and the captured ones.
fn ports(r: &mut Report, s: &Scenario, n: &Names) {
    let unknown = |name: &str| {
        if n.graph.links.is_empty() {
            format!("no port named {name:?} (the topology has no links)")
        } else {
            let like = topology::port_name(&n.graph, 0);
            format!("no port named {name:?} (ports are named like {like:?})")
        }
    };
    for (oi, o) in s.queue.overrides.iter().enumerate() {
        for (pi, name) in o.ports.iter().enumerate() {
            if !n.ports.contains_key(name) {
                r.error(&format!("queue.overrides[{oi}].ports[{pi}]"), unknown(name));
            }
        }
    }
    match &s.output.ports {
        None => {}
        Some(HostSet::Named(x)) if x == "switches" || x == "all" => {}
        Some(HostSet::Named(x)) => r.error(
            "output.ports",
            format!("expected \"switches\", \"all\" or a list of port names, got {x:?}"),
        ),
        Some(HostSet::List(names)) => {
            for (i, name) in names.iter().enumerate() {
                if !n.ports.contains_key(name) {
                    r.error(&format!("output.ports[{i}]"), unknown(name));
                }
            }
        }
    }
    for (i, name) in s.output.pcap.iter().enumerate() {
        if !n.ports.contains_key(name) {
            r.error(&format!("output.pcap[{i}]"), unknown(name));
        } else if s.output.pcap[..i].contains(name) {
            r.error(
                &format!("output.pcap[{i}]"),
                format!("{name:?} is listed twice"),
            );
        }
    }
    if s.output.pcap_dropped && s.output.pcap.is_empty() {
        r.error(
            "output.pcap_dropped",
            "set, but no port is captured (output.pcap is empty)",
        );
    }
}

/// Loss models: probabilities, and each port named or of a class, under one model at most.
fn loss(r: &mut Report, s: &Scenario, names: Option<&Names>) {
    let mut owner: HashMap<u32, usize> = HashMap::new();
    for (li, cfg) in s.loss.iter().enumerate() {
        let probabilities: &[(&str, f64)] = match *cfg {
            LossCfg::Bernoulli { rate, .. } => &[("rate", rate)],
            LossCfg::GilbertElliott {
                p,
                r,
                loss_good,
                loss_bad,
                ..
            } => &[
                ("p", p),
                ("r", r),
                ("loss_good", loss_good),
                ("loss_bad", loss_bad),
            ],
        };
        for &(key, v) in probabilities {
            if !(0.0..=1.0).contains(&v) {
                r.error(
                    &format!("loss[{li}].{key}"),
                    format!("expected a probability in [0, 1], got {v}"),
                );
            }
        }
        if let LossCfg::GilbertElliott { p, r: back, .. } = *cfg {
            if p + back <= 0.0 {
                r.error(
                    &format!("loss[{li}].p"),
                    "p and r cannot both be 0 (the chain would never move)",
                );
            }
        }
        let classes = format!("a class: {:?}", build::PORT_CLASSES).replace(['[', ']'], "");
        if cfg.ports().is_empty() {
            r.error(
                &format!("loss[{li}].ports"),
                format!("expected port names or {classes}"),
            );
        }
        let Some(n) = names else { continue };
        for (pi, selector) in cfg.ports().iter().enumerate() {
            let selected = build::ports_selected(&n.graph, &n.ports, selector);
            let key = format!("loss[{li}].ports[{pi}]");
            if selected.is_empty() && !build::PORT_CLASSES.contains(&selector.as_str()) {
                let like = topology::port_name(&n.graph, 0);
                r.error(
                    &key,
                    format!(
                        "no port named {selector:?} (ports are named like {like:?}, or {classes})"
                    ),
                );
            }
            for port in selected {
                if let Some(&other) = owner.get(&port) {
                    if other != li {
                        r.error(
                            &key,
                            format!(
                                "port {:?} already has loss[{other}]'s model (one model a port)",
                                topology::port_name(&n.graph, port as usize)
                            ),
                        );
                        break;
                    }
                }
                owner.insert(port, li);
            }
        }
    }
}

fn flows(r: &mut Report, s: &Scenario, names: Option<&Names>) {
    // Flows each VM sources, against its source ports.
    let mut sourced = vec![0u32; names.map_or(0, Names::vm_count)];
    for (fi, fc) in s.flows.iter().enumerate() {
        let path = |k: &str| format!("flows[{fi}].{k}");
        r.time(s, &path("start"), fc.start.0);
        if fc.stop.is_some_and(|stop| stop.0 <= fc.start.0) {
            r.error(&path("stop"), "must be after start");
        }
        if fc.return_delay.is_some() && !matches!(s.mechanism, MechanismConfig::None(_)) {
            // Its ACKs would skip the receiver's egress shim and reach the sender's ingress.
            r.error(
                &path("return_delay"),
                "cannot be combined with a [mechanism]",
            );
        }
        if fc.jitter.0 > 0 && fc.stop.is_some() {
            r.error(
                &path("jitter"),
                "cannot be combined with stop (a delayed start could pass the stop); give \
                 the flows bytes or let them run to the end",
            );
        }
        transport(r, fi, fc);
        let count = fc.count.unwrap_or(1);
        if count == 0 {
            r.error(&path("count"), "must be greater than zero");
            continue;
        }
        if count > PORTS_PER_VM {
            let m = format!("at most {PORTS_PER_VM} (the source ports of a VM), got {count}");
            r.error(&path("count"), m);
            continue;
        }
        let Some(n) = names else { continue };
        for i in 0..count {
            let (src_name, dst_name) = (expand(&fc.src, i), expand(&fc.dst, i));
            let (src, dst) = (n.vm(&src_name), n.vm(&dst_name));
            if src.is_none() {
                r.error(&path("src"), format!("no host or VM named {src_name:?}"));
            }
            if dst.is_none() {
                r.error(&path("dst"), format!("no host or VM named {dst_name:?}"));
            }
            if let Some(spoof) = &fc.spoof {
                let spoofed = expand(spoof, i);
                if n.vm(&spoofed).is_none() {
                    r.error(&path("spoof"), format!("no host or VM named {spoofed:?}"));
                }
            }
            let (Some(src), Some(dst)) = (src, dst) else {
                continue;
            };
            sourced[src as usize] += 1;
            if sourced[src as usize] > PORTS_PER_VM {
                r.error(
                    &path("count"),
                    format!("{src_name:?} would source more than {PORTS_PER_VM} flows (its source ports)"),
                );
            }
            if n.host_of(src) == n.host_of(dst) {
                r.error(
                    &path("dst"),
                    format!("{src_name:?} and {dst_name:?} are on the same host; flows must cross the network"),
                );
            } else if !n.reachable(src, dst) {
                r.error(
                    &path("dst"),
                    format!("{dst_name:?} is unreachable from {src_name:?}"),
                );
            }
        }
    }
}

/// A flow's keys that belong to its transport.
fn transport(r: &mut Report, fi: usize, fc: &FlowCfg) {
    let path = |k: &str| format!("flows[{fi}].{k}");
    match fc.transport {
        Transport::Tcp => {
            for (k, present) in [
                ("rate", fc.rate.is_some()),
                ("packet_size", fc.packet_size.is_some()),
                ("on", fc.on.is_some()),
                ("off", fc.off.is_some()),
                ("reply_size", fc.reply_size.is_some()),
                ("forge", fc.forge.is_some()),
                ("spoof", fc.spoof.is_some()),
            ] {
                if present {
                    r.error(&path(k), "only applies to UDP flows (transport = \"udp\")");
                }
            }
            if fc.bytes.is_some_and(|b| b.0 == 0) {
                r.error(&path("bytes"), "must be greater than zero");
            }
        }
        Transport::Udp => {
            for (k, present) in [
                ("bytes", fc.bytes.is_some()),
                ("cc", fc.cc.is_some()),
                ("drop_segments", !fc.drop_segments.is_empty()),
                ("return_delay", fc.return_delay.is_some()),
            ] {
                if present {
                    r.error(&path(k), "only applies to TCP flows");
                }
            }
            match fc.rate {
                None => r.error(&path("rate"), "a UDP flow needs a rate such as \"1Gbps\""),
                Some(rate) if rate.0 == 0 => r.error(&path("rate"), "must be greater than zero"),
                Some(_) => {}
            }
            if fc.on.is_some() != fc.off.is_some() {
                r.error(&path("on"), "an on/off source needs both on and off");
            } else if fc.on.is_some_and(|d| d.0 == 0) || fc.off.is_some_and(|d| d.0 == 0) {
                r.error(&path("on"), "on and off periods must be greater than zero");
            }
            // IP packets: at least a minimal Ethernet frame's worth, at most IPv4's limit.
            let ip_size = 64..=65535;
            if !ip_size.contains(&fc.packet_size.map_or(1500, |b| b.0)) {
                r.error(&path("packet_size"), "expected 64B to 65535B");
            }
            if fc.reply_size.is_some_and(|b| !ip_size.contains(&b.0)) {
                r.error(&path("reply_size"), "expected 64B to 65535B");
            }
            if fc.reply_size.is_some() && fc.spoof.is_some() {
                r.error(
                    &path("reply_size"),
                    "cannot be combined with spoof (the replies would go to the spoofed address)",
                );
            }
        }
    }
}

fn incast(r: &mut Report, s: &Scenario, ai: usize, ic: &IncastCfg, names: Option<&Names>) {
    let path = |k: &str| format!("incast[{ai}].{k}");
    r.time(s, &path("start"), ic.start.0);
    for (k, zero) in [
        ("count", ic.count == 0),
        ("bytes", ic.bytes.0 == 0),
        ("epochs", ic.epochs == 0),
        ("interval", ic.interval.is_some_and(|i| i.0 == 0)),
    ] {
        if zero {
            r.error(&path(k), "must be greater than zero");
        }
    }
    let Some(n) = names else { return };
    let aggregator = n.vm(&ic.aggregator);
    if aggregator.is_none() {
        let m = format!("no host or VM named {:?}", ic.aggregator);
        r.error(&path("aggregator"), m);
    }
    for i in 0..ic.count {
        let name = expand(&ic.workers, i);
        let Some(w) = n.vm(&name) else {
            r.error(&path("workers"), format!("no host or VM named {name:?}"));
            return;
        };
        let Some(a) = aggregator else { continue };
        if n.host_of(w) == n.host_of(a) {
            r.error(&path("workers"), "a worker shares the aggregator's host");
            return;
        }
        if !n.reachable(w, a) {
            r.error(&path("aggregator"), "is unreachable from a worker");
            return;
        }
    }
}

fn traffic(r: &mut Report, s: &Scenario, ti: usize, tc: &TrafficCfg, names: Option<&Names>) {
    let path = |k: &str| format!("traffic[{ti}].{k}");
    r.time(s, &path("start"), tc.start.0);
    if !(tc.load > 0.0 && tc.load <= 1.0) {
        let m = format!("expected a fraction in (0, 1], got {}", tc.load);
        r.error(&path("load"), m);
    }
    if let Some(n) = names {
        let (hosts, unknown) = match &tc.hosts {
            HostSet::Named(x) if x == "all" => (n.vm_count(), None),
            HostSet::Named(x) => (1, n.vm(x).is_none().then_some(x)),
            HostSet::List(list) => (list.len(), list.iter().find(|x| n.vm(x).is_none())),
        };
        if let Some(x) = unknown {
            r.error(&path("hosts"), format!("no host or VM named {x:?}"));
        } else if hosts < 2 {
            r.error(&path("hosts"), "needs at least two hosts");
        }
    }
    if let Err(e) = build::read_cdf(r.l, &path("cdf"), &tc.cdf) {
        r.error(&path("cdf"), e.message);
    }
}

fn rule(r: &mut Report, s: &Scenario, ri: usize, rc: &RuleCfg, names: Option<&Names>) {
    let path = |k: &str| format!("rules[{ri}].{k}");
    if let Some(x) = rc.protocol.as_deref() {
        if build::protocol_number(x).is_none() {
            let m = format!("expected \"tcp\", \"udp\" or a number 0-255, got {x:?}");
            r.error(&path("protocol"), m);
        }
    }
    if let Some(f) = rc.tcp_flags.iter().find(|f| build::tcp_flag(f).is_none()) {
        let m = format!("expected flag names like \"syn\" or \"!ack\", got {f:?}");
        r.error(&path("tcp_flags"), m);
    }
    if rc.hard_timeout.is_some_and(|t| t.0 == 0) {
        r.error(&path("hard_timeout"), "must be greater than zero");
    }
    r.time(s, &path("at"), rc.at.0);
    let Some(n) = names else { return };
    let switch = n.graph.switches.iter().position(|x| *x == rc.switch);
    if switch.is_none() {
        r.error(&path("switch"), format!("no switch named {:?}", rc.switch));
    }
    for (k, name) in [("src", &rc.src), ("dst", &rc.dst)] {
        if let Some(x) = name.as_ref().filter(|x| n.vm(x).is_none()) {
            r.error(&path(k), format!("no host or VM named {x:?}"));
        }
    }
    let port = match rc.forward.as_str() {
        "normal" | "drop" => return,
        name => n.ports.get(name),
    };
    match (port, switch) {
        (None, _) => r.error(
            &path("forward"),
            format!(
                "expected \"normal\", \"drop\" or a port name, got {:?}",
                rc.forward
            ),
        ),
        (Some(&p), Some(sw)) if n.port_from(p) != NodeRef::Switch(sw as u32) => r.error(
            &path("forward"),
            format!(
                "port {:?} does not leave switch {:?}",
                rc.forward, rc.switch
            ),
        ),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Validation's reachability agrees with the forwarding table's: VM `to` is reachable
    /// from VM `from` when the switch `from`'s NIC leads to has a route to it, or when that
    /// NIC leads straight to `to`'s host. Returns the number of unreachable pairs.
    fn assert_agrees_with_the_forwarding_table(text: &str, file: &str) -> usize {
        let p = crate::load(text, file, &[], None).unwrap_or_else(|e| panic!("{e}"));
        let m = &p.model;
        let names = Names::new(m.graph.clone());
        let mut unreachable = 0;
        for from in 0..m.vms.len() as u32 {
            let nic = m.hosts[m.vms[from as usize].host as usize].nic_port as usize;
            for to in 0..m.vms.len() as u32 {
                let routed = match m.ports[nic].to() {
                    NodeRef::Switch(s) => !m.route_ports(s, to).is_empty(),
                    NodeRef::Host(h) => h == m.vms[to as usize].host,
                };
                assert_eq!(names.reachable(from, to), routed, "{file}: {from} -> {to}");
                unreachable += usize::from(!routed);
            }
        }
        unreachable
    }

    #[test]
    fn reachability_agrees_with_the_forwarding_table_on_every_shipped_topology() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/tacc/scenarios");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .chain(std::fs::read_dir(dir.join("papers")).unwrap())
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        assert!(files.len() >= 10, "{files:?}");
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let file = f.display().to_string();
            assert_eq!(
                assert_agrees_with_the_forwarding_table(&text, &file),
                0,
                "{file}"
            );
        }
    }

    #[test]
    fn reachability_agrees_with_the_forwarding_table_across_islands_and_host_pairs() {
        // Switch islands {x} and {y, z}, and hosts e and f linked to each other.
        let link = |a: &str, b: &str| {
            format!("{{a = \"{a}\", b = \"{b}\", rate = \"1Gbps\", delay = \"1us\"}}")
        };
        let links = [
            link("a", "x"),
            link("b", "x"),
            link("c", "y"),
            link("y", "z"),
            link("d", "z"),
            link("e", "f"),
        ];
        // Reachable: within {a, b}, within {c, d}, e to f and f to e (per VM pair).
        for (vms, unreachable) in [(1, 36 - 10), (2, 144 - 40)] {
            let text = format!("duration = \"1s\"\n[topology]\nkind = \"explicit\"\nvms_per_host = {vms}\nhosts = [\"a\", \"b\", \"c\", \"d\", \"e\", \"f\"]\nswitches = [\"x\", \"y\", \"z\"]\nlinks = [{}]\n", links.join(", "));
            let n = assert_agrees_with_the_forwarding_table(&text, "islands.toml");
            assert_eq!(n, unreachable);
        }
    }
}
