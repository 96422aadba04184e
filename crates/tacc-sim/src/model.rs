//! The simulated world built from a scenario: ports, hosts, VMs, endpoints, flows and apps.
//! It is built from a scenario [`crate::validate`] has checked.

use crate::cc::CcKind;
use crate::mechanism::{Control, HostShim, Shim, SwitchMech};
use crate::packet::{Packet, PktId};
use crate::queue::{Qdisc, RedParams};
use crate::rng::Rng;
use crate::rules::{Actions, FlowTable, Forward, Match, Rule};
use crate::scenario::{
    HostSet, IncastCfg, Loaded, QueueCfg, QueueKind, ScenarioError, TcpCfg, TrafficCfg, Transport,
};
use crate::tcp::{TcpConfig, TcpEndpoint, TcpStats};
use crate::topology::{self, Graph, NodeRef};
use crate::units::{self, Size};
use std::collections::{HashMap, VecDeque};

const IP_BASE: u32 = 0x0a00_0000; // 10.0.0.0

#[derive(Clone, Debug, Default)]
pub struct PortStats {
    pub enqueued: u64,
    pub dropped_overflow: u64,
    pub dropped_aqm: u64,
    pub dropped_scripted: u64,
    pub marked: u64,
    pub tx_bytes: u64,
    pub tx_pkts: u64,
    pub max_backlog: u64,
    /// Integral of the backlog (packets x ns) for the time-averaged queue.
    pub backlog_integral: u128,
    last: u64,
}

impl PortStats {
    /// Accounts the backlog held since the last change.
    pub fn advance(&mut self, now: u64, backlog: u64) {
        self.backlog_integral += backlog as u128 * (now - self.last) as u128;
        self.last = now;
    }
    pub fn dropped(&self) -> u64 {
        self.dropped_overflow + self.dropped_aqm + self.dropped_scripted
    }
}

pub struct Port {
    pub name: String,
    pub from: NodeRef,
    pub to: NodeRef,
    pub rate_bps: u64,
    pub delay_ns: u64,
    pub queue: VecDeque<PktId>,
    pub queue_bytes: u64,
    pub qdisc: Qdisc,
    pub busy: bool,
    pub stats: PortStats,
    /// Serialization cost in picoseconds per byte (8e12 / rate, rounded).
    pub ps_per_byte: u64,
    /// When the packet being serialized (if any) has left.
    pub busy_until: u64,
    /// Random extra delay in [0, jitter] per packet (host NICs only).
    pub jitter_ns: u64,
    pub last_arrival: u64,
}

pub struct Host {
    pub name: String,
    pub nic_port: u32,
}

pub struct Vm {
    pub name: String,
    pub host: u32,
    pub ip: u32,
    next_port: u16,
    /// The VM's virtual NIC: packets (in the arena) waiting to reach the vswitch, with their
    /// sending endpoint (`NO_EP` for packets no endpoint sent). It serializes at the host NIC's
    /// rate; its head may be held by a queueing limiter.
    pub vnic: VecDeque<(PktId, u32)>,
    /// A VnicDone event is pending.
    pub vnic_busy: bool,
    /// When the vNIC has finished serializing the last packet it handed over.
    pub vnic_free_at: u64,
    /// Drop-tail limit of the vNIC queue, in packets.
    pub vnic_limit: u64,
}

pub enum EpKind {
    Tcp(Box<TcpEndpoint>),
    UdpSink,
    UdpEcho { reply: u32 },
}

pub struct EpSlot {
    pub kind: EpKind,
    pub flow: u32,
    pub vm: u32,
    /// Time of the earliest pending timer event for this endpoint.
    pub timer_at: Option<u64>,
    pub last_delivered: u64,
    /// Packets this endpoint has in its VM's vNIC queue (TCP small queues).
    pub in_host: u32,
    /// Most packets the endpoint may keep in the vNIC queue.
    pub tsq_limit: u32,
}

pub struct UdpState {
    pub rate_bps: u64,
    pub packet_size: u32,
    pub on_mean: Option<u64>,
    pub off_mean: Option<u64>,
    pub is_on: bool,
    pub period_end: u64,
}

pub struct Flow {
    pub name: String,
    pub group: String,
    pub src_vm: u32,
    pub dst_vm: u32,
    pub start: u64,
    pub stop: Option<u64>,
    pub bytes: Option<u64>,
    pub delivered: u64,
    pub end: Option<u64>,
    pub completed: bool,
    pub stopped: bool,
    /// Delivered bytes per goodput bin.
    pub bins: Vec<u64>,
    pub tx_ep: u32,
    pub rx_ep: u32,
    pub sport: u16,
    pub dport: u16,
    pub cc: Option<CcKind>,
    pub ecn: bool,
    pub udp: Option<UdpState>,
    pub drop_segments: Vec<u64>,
    pub iss: u32,
    pub mss: u32,
    pub app: Option<u32>,
}

pub struct Incast {
    pub name: String,
    pub aggregator: u32,
    pub workers: Vec<u32>,
    pub bytes: u64,
    pub epochs: u32,
    pub epoch: u32,
    pub start: u64,
    pub interval: Option<u64>,
    pub jitter: u64,
    pub outstanding: u32,
    pub tcp: TcpConfig,
}

/// A flow-size distribution: piecewise-linear inverse CDF.
pub struct Cdf {
    points: Vec<(f64, f64)>,
}

impl Cdf {
    pub fn parse(text: &str) -> Result<Cdf, String> {
        let mut points = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut it = line.split_whitespace().map(str::parse::<f64>);
            match (it.next(), it.next(), it.next()) {
                (Some(Ok(b)), Some(Ok(p)), None) if b >= 0.0 && (0.0..=1.0).contains(&p) => {
                    points.push((b, p))
                }
                _ => return Err(format!("line {}: expected \"bytes probability\"", n + 1)),
            }
        }
        if points.len() < 2
            || points
                .windows(2)
                .any(|w| w[1].0 < w[0].0 || w[1].1 < w[0].1)
            || points.last().unwrap().1 != 1.0
        {
            return Err(
                "expected at least two non-decreasing points ending at probability 1".into(),
            );
        }
        Ok(Cdf { points })
    }

    pub fn sample(&self, u: f64) -> u64 {
        let i = self
            .points
            .partition_point(|p| p.1 < u)
            .min(self.points.len() - 1);
        if i == 0 {
            return self.points[0].0.max(1.0) as u64;
        }
        let (b0, p0) = self.points[i - 1];
        let (b1, p1) = self.points[i];
        let b = if p1 > p0 {
            b0 + (b1 - b0) * (u - p0) / (p1 - p0)
        } else {
            b1
        };
        b.round().max(1.0) as u64
    }

    pub fn mean(&self) -> f64 {
        let mut m = self.points[0].0 * self.points[0].1;
        for w in self.points.windows(2) {
            m += (w[0].0 + w[1].0) / 2.0 * (w[1].1 - w[0].1);
        }
        m
    }
}

pub struct Traffic {
    pub name: String,
    pub vms: Vec<u32>,
    pub cdf: Cdf,
    pub mean_gap_ns: f64,
    pub start: u64,
    pub stop: Option<u64>,
    pub count: u32,
    pub tcp: TcpConfig,
}

pub enum App {
    Incast(Incast),
    Traffic(Traffic),
}

pub struct Model {
    pub name: String,
    pub seed: u64,
    pub duration: u64,
    pub graph: Graph,
    pub ports: Vec<Port>,
    pub hosts: Vec<Host>,
    pub vms: Vec<Vm>,
    fib: Fib,
    pub switch_salt: Vec<u64>,
    pub eps: Vec<EpSlot>,
    pub flows: Vec<Flow>,
    pub apps: Vec<App>,
    pub rng: Rng,
    pub goodput_bin: u64,
    pub queue_sample: u64,
    pub sampled_ports: Vec<u32>,
    /// One flow table per switch (empty unless rules are installed).
    pub tables: Vec<FlowTable>,
    /// Rules from the scenario, with the switch and install time.
    pub pending_rules: Vec<(u32, u64, Rule)>,
    /// One vswitch shim per host.
    pub shims: Vec<HostShim>,
    /// TCP small-queue budget as time at the NIC rate.
    pub tsq_ns: u64,
    pub switch_mech: Vec<SwitchMech>,
    pub control: Control,
}

/// Forwarding table. A packet's egress port is a load or two from its address: the
/// destination VM's last hop (its host's switch and port) and, at any other switch, the
/// route towards the host's group (the hosts behind one switch share it), one flat array. An
/// ECMP set is stored once however many entries share it (in a fat tree every edge switch
/// sends all other racks' hosts to the same uplinks).
struct Fib {
    groups: usize,
    /// Per VM.
    dest: Vec<Dest>,
    /// At `switch * groups + group`.
    entries: Vec<FibEntry>,
    /// ECMP sets of two or more choices: (start in `ecmp`, length).
    sets: Vec<(u32, u32)>,
    ecmp: Vec<u32>,
}

/// Where a VM is: its host's group, and the switch the host hangs off with that switch's
/// entry towards it, its one port (`topology::NONE` for a host linked straight to another).
struct Dest {
    group: u32,
    switch: u32,
    last_hop: FibEntry,
}

#[derive(Clone, Copy)]
struct FibEntry {
    /// The only choice (`NO_ROUTE`: none) when `set` is `NO_SET`.
    port: u32,
    set: u32,
}

const NO_ROUTE: u32 = u32::MAX;
const NO_SET: u32 = u32::MAX;
const NONE_ENTRY: FibEntry = FibEntry {
    port: NO_ROUTE,
    set: NO_SET,
};

impl Fib {
    fn new(g: &Graph, vms: &[Vm]) -> Fib {
        let at = topology::attachments(g);
        let groups = at.roots.len();
        let mut entries = vec![NONE_ENTRY; g.switches.len() * groups];
        let (mut sets, mut ecmp) = (Vec::new(), Vec::new());
        let mut interned: HashMap<Vec<u32>, u32> = HashMap::new();
        topology::routes(g, &at, |group, s, choices| {
            let e = match choices {
                &[port] => FibEntry { port, set: NO_SET },
                _ => {
                    let set = match interned.get(choices) {
                        Some(&set) => set,
                        None => {
                            let set = sets.len() as u32;
                            sets.push((ecmp.len() as u32, choices.len() as u32));
                            ecmp.extend_from_slice(choices);
                            interned.insert(choices.to_vec(), set);
                            set
                        }
                    };
                    FibEntry {
                        port: NO_ROUTE,
                        set,
                    }
                }
            };
            entries[s as usize * groups + group as usize] = e;
        });
        let dest = vms
            .iter()
            .map(|vm| {
                let h = vm.host as usize;
                let (switch, port) = at.last_hop[h];
                Dest {
                    group: at.group[h],
                    switch,
                    last_hop: FibEntry { port, set: NO_SET },
                }
            })
            .collect();
        Fib {
            groups,
            dest,
            entries,
            sets,
            ecmp,
        }
    }

    /// Switch `s`'s entry towards VM `vm` (none for a VM that does not exist).
    #[inline]
    fn entry(&self, s: u32, vm: usize) -> Option<&FibEntry> {
        let d = self.dest.get(vm)?;
        Some(if s == d.switch {
            &d.last_hop
        } else if d.group == topology::NONE {
            &NONE_ENTRY
        } else {
            &self.entries[s as usize * self.groups + d.group as usize]
        })
    }

    /// The egress ports of switch `s` towards VM `vm` (empty: unreachable).
    fn ports(&self, s: u32, vm: usize) -> &[u32] {
        let e = self.entry(s, vm).unwrap_or(&NONE_ENTRY);
        if e.set != NO_SET {
            let (start, n) = self.sets[e.set as usize];
            &self.ecmp[start as usize..(start + n) as usize]
        } else if e.port == NO_ROUTE {
            &[]
        } else {
            std::slice::from_ref(&e.port)
        }
    }
}

/// Source ports are allocated from here up, wrapping round: a VM can source this many flows
/// at once with distinct 5-tuples.
const FIRST_PORT: u16 = 10_000;
pub(crate) const PORTS_PER_VM: u32 = u16::MAX as u32 + 1 - FIRST_PORT as u32;

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
    /// The output port switch `s` forwards `p` to by routing (ECMP by 5-tuple hash).
    pub fn route(&self, s: u32, p: &Packet) -> Option<u32> {
        let e = self
            .fib
            .entry(s, p.dst.wrapping_sub(IP_BASE + 1) as usize)?;
        if e.set == NO_SET {
            return (e.port != NO_ROUTE).then_some(e.port);
        }
        let (start, n) = self.fib.sets[e.set as usize];
        let k = p.flow_hash(self.switch_salt[s as usize]) % n as u64;
        Some(self.fib.ecmp[start as usize + k as usize])
    }

    /// The (switch, output port) hops a packet takes from switch `s` to its destination host.
    pub fn path_of(&self, mut s: u32, p: &Packet) -> Vec<(u32, u32)> {
        let mut hops = Vec::new();
        while let Some(port) = self.route(s, p) {
            hops.push((s, port));
            match self.ports[port as usize].to {
                NodeRef::Switch(next) if hops.len() <= self.graph.switches.len() => s = next,
                _ => break,
            }
        }
        hops
    }

    pub fn host_of_ip(&self, ip: u32) -> Option<u32> {
        let i = ip.checked_sub(IP_BASE + 1)? as usize;
        self.vms.get(i).map(|v| v.host)
    }

    fn tcp_config(base: &TcpCfg, cc: Option<CcKind>, ecn: Option<bool>) -> TcpConfig {
        let d = TcpConfig::default();
        let cc = cc.or(base.cc).unwrap_or(d.cc);
        let delayed = base.delayed_ack.unwrap_or(false);
        TcpConfig {
            mss: base.mss.map(|b| b.0 as u32).unwrap_or(d.mss),
            init_cwnd: base.init_cwnd.unwrap_or(d.init_cwnd),
            rto_min: base.rto_min.map(|x| x.0).unwrap_or(d.rto_min),
            rto_init: base.rto_init.map(|x| x.0).unwrap_or(d.rto_init),
            rto_max: d.rto_max,
            delack_count: if delayed { 2 } else { 1 },
            delack_timeout: base.delack_timeout.map(|x| x.0).unwrap_or(d.delack_timeout),
            sack: base.sack.unwrap_or(d.sack),
            // DCTCP needs ECN; otherwise ECN is off unless asked for.
            ecn: cc == CcKind::Dctcp || ecn.or(base.ecn).unwrap_or(false),
            ecn_syn: base.ecn_syn.unwrap_or(false),
            ecn_retransmit: base.ecn_retransmit.unwrap_or(false),
            cwnd_validation: base.cwnd_validation.unwrap_or(false),
            rcv_buf: base.rcv_buf.map(|b| b.0).unwrap_or(d.rcv_buf),
            cc,
            dctcp_g: base.dctcp_g.unwrap_or(d.dctcp_g),
            dupthresh: base.dupthresh.unwrap_or(d.dupthresh),
        }
    }

    /// Creates a TCP flow with its two endpoints (not started).
    #[allow(clippy::too_many_arguments)]
    pub fn add_tcp_flow(
        &mut self,
        name: String,
        group: String,
        src: u32,
        dst: u32,
        start: u64,
        bytes: Option<u64>,
        cfg: TcpConfig,
        app: Option<u32>,
    ) -> u32 {
        let sport = self.alloc_port(src);
        let dport = 5001;
        let tx = self.eps.len() as u32;
        let rx = tx + 1;
        let iss = self.rng.next_u64() as u32;
        let riss = self.rng.next_u64() as u32;
        let (sip, dip) = (self.vms[src as usize].ip, self.vms[dst as usize].ip);
        let cc = cfg.cc;
        let ecn = cfg.ecn;
        let mss = cfg.mss;
        // TCP small queues: at most ~1 ms of the NIC's line rate waiting in the host, >= 2 packets.
        let nic_rate =
            self.ports[self.hosts[self.vms[src as usize].host as usize].nic_port as usize].rate_bps;
        let tsq_limit = ((nic_rate as u128 * self.tsq_ns as u128
            / 8_000_000_000
            / (cfg.mss as u128 + 40)) as u32)
            .max(2);
        let client = TcpEndpoint::client(cfg.clone(), (sip, sport), (dip, dport), rx, iss);
        let server = TcpEndpoint::server(cfg, (dip, dport), (sip, sport), tx, riss);
        let kinds = (EpKind::Tcp(Box::new(client)), EpKind::Tcp(Box::new(server)));
        let f = self.push_flow(
            name,
            group,
            (src, dst),
            start,
            kinds,
            tsq_limit,
            (sport, dport),
        );
        let flow = &mut self.flows[f as usize];
        flow.bytes = bytes;
        flow.cc = Some(cc);
        flow.ecn = ecn;
        flow.iss = iss;
        flow.mss = mss;
        flow.app = app;
        f
    }

    /// Registers a flow with its sending endpoint at `src` and receiving endpoint at `dst`;
    /// transport-specific fields keep neutral values for the caller to fill in.
    #[allow(clippy::too_many_arguments)]
    fn push_flow(
        &mut self,
        name: String,
        group: String,
        (src, dst): (u32, u32),
        start: u64,
        (tx_kind, rx_kind): (EpKind, EpKind),
        tsq_limit: u32,
        (sport, dport): (u16, u16),
    ) -> u32 {
        let f = self.flows.len() as u32;
        let tx = self.eps.len() as u32;
        for (kind, vm) in [(tx_kind, src), (rx_kind, dst)] {
            self.eps.push(EpSlot {
                kind,
                flow: f,
                vm,
                timer_at: None,
                last_delivered: 0,
                in_host: 0,
                tsq_limit,
            });
        }
        self.flows.push(Flow {
            name,
            group,
            src_vm: src,
            dst_vm: dst,
            start,
            stop: None,
            bytes: None,
            delivered: 0,
            end: None,
            completed: false,
            stopped: false,
            bins: Vec::new(),
            tx_ep: tx,
            rx_ep: tx + 1,
            sport,
            dport,
            cc: None,
            ecn: false,
            udp: None,
            drop_segments: Vec::new(),
            iss: 0,
            mss: 0,
            app: None,
        });
        f
    }

    fn alloc_port(&mut self, vm: u32) -> u16 {
        let v = &mut self.vms[vm as usize];
        let p = v.next_port;
        v.next_port = if v.next_port == u16::MAX {
            FIRST_PORT
        } else {
            v.next_port + 1
        };
        p
    }

    pub fn tcp_stats(&self, f: &Flow) -> TcpStats {
        match &self.eps[f.tx_ep as usize].kind {
            EpKind::Tcp(t) => t.stats.clone(),
            _ => TcpStats::default(),
        }
    }

    /// Builds the world from a scenario that [`crate::validate::check`] accepted.
    pub fn build(l: &Loaded, seed: u64) -> Result<Model, ScenarioError> {
        let s = &l.scenario;
        let graph = topology::build(&s.topology).map_err(|(k, m)| l.error(&k, m))?;
        let duration = s.duration.0;
        let q = &s.queue;
        let red = red_params(q);
        let k = q.k.unwrap_or(Size::Packets(20));
        let mut ports = Vec::with_capacity(graph.links.len() * 2);
        for i in 0..graph.links.len() * 2 {
            let link = &graph.links[i / 2];
            let (from, to) = if i % 2 == 0 {
                (link.a, link.b)
            } else {
                (link.b, link.a)
            };
            let name = topology::port_name(&graph, i);
            // Time to send a full 1500-byte packet: RED's idle decay unit and the default jitter.
            let pkt_time_ns = units::ser_ns(link.rate_bps, 1500);
            let red = RedParams {
                pkt_time_ns,
                ..red.clone()
            };
            let (qdisc, jitter_ns) = match from {
                NodeRef::Host(_) => (
                    Qdisc::new(QueueKind::Droptail, s.nic.limit, k, red),
                    s.nic.jitter.map(|d| d.0).unwrap_or(pkt_time_ns),
                ),
                NodeRef::Switch(_) => (Qdisc::new(q.kind, q.limit, k, red), 0),
            };
            ports.push(Port {
                name,
                from,
                to,
                rate_bps: link.rate_bps,
                delay_ns: link.delay_ns,
                queue: VecDeque::new(),
                queue_bytes: 0,
                qdisc,
                busy: false,
                stats: PortStats::default(),
                jitter_ns,
                last_arrival: 0,
                ps_per_byte: (8_000_000_000_000u64 + link.rate_bps / 2) / link.rate_bps,
                busy_until: 0,
            });
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
                    qd.limit = lim;
                }
                if let Some(k) = o.k {
                    qd.k = k;
                }
            }
        }
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
                ip: IP_BASE + 1 + i as u32,
                next_port: FIRST_PORT,
                vnic: VecDeque::new(),
                vnic_free_at: 0,
                vnic_busy: false,
                vnic_limit: nic_limit_pkts,
            })
            .collect();
        let switch_salt = (0..graph.switches.len() as u64)
            .map(|i| i.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ seed)
            .collect();
        let sampled_ports = match &s.output.ports {
            HostSet::Named(n) if n == "switches" => (0..ports.len() as u32)
                .filter(|&p| matches!(ports[p as usize].from, NodeRef::Switch(_)))
                .collect(),
            HostSet::Named(n) if n == "all" => (0..ports.len() as u32).collect(),
            HostSet::Named(n) => unreachable!("validated: output.ports = {n:?}"),
            HostSet::List(names) => names.iter().map(|n| port_index[n]).collect(),
        };
        let fib = Fib::new(&graph, &vms);
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
            flows: Vec::new(),
            apps: Vec::new(),
            rng: Rng::new(seed),
            goodput_bin: s.output.goodput_bin.0,
            queue_sample: s.output.queue_sample.0,
            sampled_ports,
            tables: Vec::new(),
            pending_rules: Vec::new(),
            shims: Vec::new(),
            tsq_ns: s.tcp.small_queue.map(|d| d.0).unwrap_or(1_000_000),
            switch_mech: Vec::new(),
            control: Control::default(),
        };
        m.shims = (0..m.hosts.len())
            .map(|_| HostShim {
                shim: Shim::None,
                timer_at: None,
            })
            .collect();
        m.switch_mech = (0..m.graph.switches.len())
            .map(|_| SwitchMech::default())
            .collect();
        m.tables = vec![FlowTable::default(); m.graph.switches.len()];
        for fc in &s.flows {
            for i in 0..fc.count.unwrap_or(1) {
                let src = vm_index[&expand(&fc.src, i)];
                let dst = vm_index[&expand(&fc.dst, i)];
                let name = if fc.count.is_some() {
                    format!("{}.{i}", fc.name)
                } else {
                    fc.name.clone()
                };
                let f = match fc.transport {
                    Transport::Tcp => {
                        let cfg = Model::tcp_config(&s.tcp, fc.cc, fc.ecn);
                        let f = m.add_tcp_flow(
                            name,
                            fc.name.clone(),
                            src,
                            dst,
                            fc.start.0,
                            fc.bytes.map(|b| b.0),
                            cfg,
                            None,
                        );
                        m.flows[f as usize].drop_segments = fc.drop_segments.clone();
                        f
                    }
                    Transport::Udp => m.add_udp_flow(
                        name,
                        fc.name.clone(),
                        src,
                        dst,
                        fc.start.0,
                        fc.rate.expect("validated: a UDP flow has a rate").0,
                        fc.packet_size.map_or(1500, |b| b.0 as u32),
                        fc.on.map(|d| d.0),
                        fc.off.map(|d| d.0),
                        fc.reply_size.map(|b| b.0 as u32),
                    ),
                };
                m.flows[f as usize].stop = fc.stop.map(|d| d.0);
            }
        }
        for ic in &s.incast {
            m.add_incast(l, ic, &vm_index);
        }
        for (ti, tc) in s.traffic.iter().enumerate() {
            m.add_traffic(l, ti, tc, &vm_index)?;
        }
        for rc in &s.rules {
            let rule = m.rule_from(rc, &vm_index, &port_index);
            m.pending_rules.push(rule);
        }
        let find_vm = |path: &str, name: &str| -> Result<u32, ScenarioError> {
            vm_index
                .get(name)
                .copied()
                .ok_or_else(|| l.error(path, format!("no host or VM named {name:?}")))
        };
        crate::mechanism::install(&mut m, l, &find_vm)?;
        Ok(m)
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
        let m = Match {
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
            actions: Actions {
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

    /// The egress ports of switch `s` towards VM `vm` on shortest paths (empty: unreachable).
    pub fn route_ports(&self, s: u32, vm: u32) -> &[u32] {
        self.fib.ports(s, vm as usize)
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
            rate_bps,
            packet_size: size,
            on_mean: on,
            off_mean: off,
            is_on: false,
            period_end: start,
        });
        f
    }

    fn add_incast(&mut self, l: &Loaded, ic: &IncastCfg, vm_index: &HashMap<String, u32>) {
        let workers = (0..ic.count)
            .map(|i| vm_index[&expand(&ic.workers, i)])
            .collect();
        let tcp = Model::tcp_config(&l.scenario.tcp, ic.cc, ic.ecn);
        self.apps.push(App::Incast(Incast {
            name: ic.name.clone(),
            aggregator: vm_index[&ic.aggregator],
            workers,
            bytes: ic.bytes.0,
            epochs: ic.epochs,
            epoch: 0,
            start: ic.start.0,
            interval: ic.interval.map(|d| d.0),
            jitter: ic.jitter.0,
            outstanding: 0,
            tcp,
        }));
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
        }));
        Ok(())
    }
}

/// Classic RED's parameters from the queue table, with their defaults (the packet time is
/// each port's own).
pub(crate) fn red_params(q: &QueueCfg) -> RedParams {
    let size = |s: Size| match s {
        Size::Packets(n) | Size::Bytes(n) => n as f64,
    };
    RedParams {
        min_th: q.min_th.map_or(5.0, size),
        max_th: q.max_th.map_or(15.0, size),
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

    #[test]
    fn fat_tree_forwarding_stores_each_ecmp_set_once() {
        let k = 8;
        let text = format!("name = \"ft\"\nduration = \"1s\"\n[topology]\nkind = \"fat-tree\"\nk = {k}\nlink_rate = \"1Gbps\"\nlink_delay = \"1us\"\n");
        let m = crate::load(&text, "ft.toml", &[], None).unwrap().model;
        // Each edge switch has one set (its k/2 aggregation uplinks, for every host outside
        // its rack) and each aggregation switch one (its k/2 core uplinks, for every host
        // outside its pod); every other route has one port.
        assert_eq!(m.fib.sets.len(), k * k);
        assert!(m.fib.sets.iter().all(|&(_, n)| n as usize == k / 2));
        assert_eq!(m.fib.ecmp.len(), k * k * k / 2);
        // One entry per switch and edge switch (k/2 hosts behind each), not per host.
        assert_eq!(m.fib.entries.len(), m.graph.switches.len() * k * k / 2);
        let hosts = k * k * k / 4;
        let edge0 = m
            .graph
            .switches
            .iter()
            .position(|s| s == "edge0_0")
            .unwrap() as u32;
        let last = (hosts - 1) as u32;
        assert_eq!(m.route_ports(edge0, last).len(), k / 2);
        assert_eq!(m.route_ports(edge0, 0).len(), 1);
    }
}
