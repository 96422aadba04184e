//! A scenario's world as plain data: what a driver outside the simulator (the testbed that
//! builds it from namespaces and veths, its host and switch agents) needs to know of it. The
//! simulator writes it from its model; the agents read it back and build their mechanism's
//! roles against it (it is a [`Fabric`]), so both sides build the same mechanism from the same
//! keys.

use serde::{Deserialize, Serialize};

use crate::registry::MechanismConfig;
use crate::vocab::roles::{Fabric, SwitchPort};
use crate::vocab::units::Size;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Plan {
    pub name: String,
    pub seed: u64,
    pub duration_ns: u64,
    pub hosts: Vec<PlanHost>,
    pub vms: Vec<PlanVm>,
    pub switches: Vec<PlanSwitch>,
    /// Every directed link end, in the simulator's port order.
    pub ports: Vec<PlanPort>,
    /// The output ports of each switch towards each VM on shortest paths.
    pub routes: Vec<PlanRoute>,
    pub flows: Vec<PlanFlow>,
    /// Application generators (incast, open-loop traffic), by kind and name.
    pub apps: Vec<PlanApp>,
    pub tcp: PlanTcp,
    pub output: PlanOutput,
    /// `None`: no mechanism.
    pub mechanism: Option<MechanismConfig>,
    /// The `[mechanism]` keys the file gives, `kind` aside: the parameters a run's
    /// summary.json reports.
    #[serde(default)]
    pub mechanism_keys: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlanHost {
    pub name: String,
    /// The port from the host into the network (its NIC).
    pub nic_port: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlanVm {
    pub name: String,
    pub host: u32,
    /// Dotted IPv4 address.
    pub address: String,
}

impl PlanVm {
    pub fn ip(&self) -> u32 {
        self.address
            .parse::<std::net::Ipv4Addr>()
            .map(u32::from)
            .unwrap_or(0)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlanSwitch {
    pub name: String,
    /// The switch's ECMP salt: among a route's equal ports it takes
    /// `ports[flow_hash(salt, 5-tuple) % ports.len()]`, as the engine's switches do.
    #[serde(default)]
    pub salt: u64,
}

/// The ECMP hash of a 5-tuple (transport ports for TCP and UDP alike); `salt` differs per
/// switch so that paths decorrelate across tiers.
#[inline]
pub fn flow_hash(salt: u64, src: u32, dst: u32, protocol: u8, sport: u16, dport: u16) -> u64 {
    let mut h = salt ^ 0x51_7c_c1_b7_27_22_0a_95;
    for v in [
        src as u64,
        dst as u64,
        protocol as u64,
        ((sport as u64) << 16) | dport as u64,
    ] {
        h = (h ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^= h >> 29;
    }
    h
}

/// One end of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Node {
    Host(u32),
    Switch(u32),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlanPort {
    pub name: String,
    pub from: Node,
    pub to: Node,
    pub rate_bps: u64,
    pub delay_ns: u64,
    pub queue: PlanQueue,
    /// The long-run fraction of its packets the port loses on the wire (random loss), if
    /// the scenario puts loss on it.
    #[serde(default)]
    pub loss_rate: Option<f64>,
}

/// A port's queue. Sizes are given as the scenario gave them: in packets or in bytes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlanQueue {
    /// "droptail", "red-ecn" or "red".
    pub kind: String,
    pub limit_packets: Option<u64>,
    pub limit_bytes: Option<u64>,
    /// The marking threshold of "red-ecn" (`None` otherwise).
    pub k_packets: Option<u64>,
    pub k_bytes: Option<u64>,
}

impl PlanQueue {
    pub fn limit(&self) -> Size {
        size_of(self.limit_packets, self.limit_bytes).unwrap_or(Size::Packets(0))
    }
    pub fn k(&self) -> Option<Size> {
        size_of(self.k_packets, self.k_bytes)
    }
    /// Splits a size into the (packets, bytes) pair of fields.
    pub fn fields(s: Size) -> (Option<u64>, Option<u64>) {
        match s {
            Size::Packets(n) => (Some(n), None),
            Size::Bytes(n) => (None, Some(n)),
        }
    }
}

fn size_of(packets: Option<u64>, bytes: Option<u64>) -> Option<Size> {
    packets.map(Size::Packets).or(bytes.map(Size::Bytes))
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlanRoute {
    pub switch: u32,
    pub vm: u32,
    pub ports: Vec<u32>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlanFlow {
    pub name: String,
    pub group: String,
    pub src_vm: u32,
    pub dst_vm: u32,
    pub start_ns: u64,
    pub stop_ns: Option<u64>,
    pub bytes: Option<u64>,
    /// "tcp" or "udp".
    pub transport: String,
    /// The TCP congestion control ("newreno", "cubic", "dctcp"); `None` for UDP.
    pub cc: Option<String>,
    pub ecn: bool,
    /// UDP: the constant bit rate and datagram size.
    pub rate_bps: Option<u64>,
    pub packet_bytes: Option<u32>,
    pub src_port: u16,
    pub dst_port: u16,
    /// UDP: the signal the packets forge ("feedback" or "ipr"), an attack on the mechanism.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forge: Option<String>,
    /// UDP: the source address the packets carry when it is not the sender's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spoof_src: Option<u32>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlanApp {
    pub kind: String,
    pub name: String,
    /// What a partition-aggregate app does (kind "incast"); a traffic source's flows are
    /// drawn by the engine's workload generator instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incast: Option<PlanIncast>,
}

/// A partition-aggregate app: in each of `epochs` epochs every worker opens a new
/// connection to the aggregator and sends `bytes`, after an exponential delay of mean
/// `jitter_ns`; flows are named `<name>.<worker index>.<epoch>`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlanIncast {
    pub aggregator: u32,
    pub workers: Vec<u32>,
    pub bytes: u64,
    pub epochs: u32,
    pub start_ns: u64,
    /// The epochs' period; without it an epoch starts when the last one's answers are in.
    pub interval_ns: Option<u64>,
    pub jitter_ns: u64,
    pub cc: String,
    pub ecn: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlanTcp {
    pub mss: u32,
    pub init_cwnd: u32,
    pub rto_min_ns: u64,
    pub rcv_buf_bytes: u64,
    pub sack: bool,
    /// ACK every this many full segments (1: no delayed ACK).
    pub delack_count: u32,
    /// Proportional rate reduction (RFC 6937) in loss recovery and after an ECN reduction;
    /// without it, RFC 6675's recovery.
    pub prr: bool,
    /// RACK's time-based loss detection (RFC 8985); without it, RFC 6675's DupThresh rule.
    pub rack: bool,
    /// Tail loss probes (RFC 8985).
    pub tlp: bool,
    /// Receivers report duplicates in D-SACK blocks (RFC 2883).
    pub dsack: bool,
    /// Linux's quick-ACK mode at a connection's start.
    pub quickack: bool,
    /// Linux's RTO formula (SRTT + max(4 RTTVAR, rto_min)); without it, RFC 6298's.
    pub rto_linux: bool,
    /// HyStart for Cubic.
    pub hystart: bool,
    /// Linux's floor on Cubic's growth before its first loss.
    pub cubic_clamp: bool,
    /// Segments cut short by the window go out under Minshall's rule.
    pub minshall: bool,
    /// Segments at most half the peer's largest window.
    pub half_window: bool,
    /// RTT samples from the echoed timestamps, retransmissions' included.
    pub timestamps: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlanOutput {
    pub goodput_bin_ns: u64,
    pub queue_sample_ns: u64,
    /// The ports whose queues are sampled.
    pub ports: Vec<u32>,
    /// The ports whose packets are captured (`output.pcap`), and whether their drops too.
    pub pcap: Vec<u32>,
    pub pcap_dropped: bool,
}

impl Plan {
    /// The VM index of an address.
    pub fn vm_by_ip(&self, ip: u32) -> Option<u32> {
        self.vms.iter().position(|v| v.ip() == ip).map(|i| i as u32)
    }

    /// The port switch `switch` sends a packet of this 5-tuple out of, choosing among a
    /// route's equal ports by the switch's hash as the engine does; `None` without a route.
    pub fn route_port(
        &self,
        switch: u32,
        src: u32,
        dst: u32,
        protocol: u8,
        sport: u16,
        dport: u16,
    ) -> Option<u32> {
        let vm = self.vm_by_ip(dst)?;
        let r = self
            .routes
            .iter()
            .find(|r| r.switch == switch && r.vm == vm)?;
        let salt = self.switches[switch as usize].salt;
        let k = flow_hash(salt, src, dst, protocol, sport, dport) % r.ports.len().max(1) as u64;
        r.ports.get(k as usize).copied()
    }
}

impl Fabric for Plan {
    fn hosts(&self) -> u32 {
        self.hosts.len() as u32
    }
    fn nic_rate_bps(&self, host: u32) -> u64 {
        self.ports[self.hosts[host as usize].nic_port as usize].rate_bps
    }
    fn vms(&self) -> Vec<(u32, u32)> {
        self.vms.iter().map(|v| (v.host, v.ip())).collect()
    }
    fn vm_address(&self, name: &str) -> Option<u32> {
        let vm = self.vms.iter().find(|v| v.name == name).or_else(|| {
            // A host's name stands for its first VM.
            let host = self.hosts.iter().position(|h| h.name == name)? as u32;
            self.vms.iter().find(|v| v.host == host)
        })?;
        Some(vm.ip())
    }
    fn switches(&self) -> u32 {
        self.switches.len() as u32
    }
    fn switch_ports(&self) -> Vec<SwitchPort> {
        self.ports
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p.from {
                Node::Switch(switch) => Some(SwitchPort {
                    switch,
                    port: i as u32,
                    rate_bps: p.rate_bps,
                    buffer: p.queue.limit(),
                    to_host: matches!(p.to, Node::Host(_)),
                }),
                Node::Host(_) => None,
            })
            .collect()
    }
    fn route_ports(&self, switch: u32, vm: u32) -> &[u32] {
        self.routes
            .iter()
            .find(|r| r.switch == switch && r.vm == vm)
            .map(|r| &r.ports[..])
            .unwrap_or(&[])
    }
    fn receiver_window(&self) -> (u64, u8) {
        (
            self.tcp.rcv_buf_bytes,
            window_scale_for(self.tcp.rcv_buf_bytes),
        )
    }
}

/// The TCP window scale a receive buffer implies (RFC 7323: the smallest shift that fits the
/// buffer in the 16-bit window field).
pub fn window_scale_for(rcv_buf: u64) -> u8 {
    let mut shift = 0u8;
    while (rcv_buf >> shift) > 65535 && shift < 14 {
        shift += 1;
    }
    shift
}
