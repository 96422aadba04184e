//! The switch agent: in a switch namespace. It attaches `switch.bpf.c` to every port,
//! configures each port's marking (the buffer, K where the port marks)
//! and samples the ports' counters to a CSV file. Where the mechanism has a switch hook
//! (RWNDQ), the agent runs it: the flows the datapath saw leaving each port go into
//! [`SwitchHook::on_forward`], the ports' backlogs into its timer, and its per-port windows
//! back into the map the ACK rewrite reads.

use std::collections::{BTreeMap, HashMap};
use std::io::ErrorKind;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;

use aya::maps::{Array, HashMap as BpfHashMap, MapData, RingBuf};
use aya::programs::TcAttachType;
use aya::Ebpf;
use serde::Deserialize;
use tacc_mech::control::{FlowMod, StatsReply, StatsRequest};
use tacc_mech::headers::{ip_proto, tcp_flags, Ecn};
use tacc_mech::roles::SwitchHook;
use tacc_mech::units::Size;
use tacc_mech::wire::{emit, Ipv4Fields, Ipv4Packet, TcpFields};

use crate::channel::{constant_time_eq, mac, MAC_LEN, NONCE_LEN};
use crate::records::Records;
use crate::tc::{attach, load};
use crate::{
    default_scale, ifindex, monotonic_ns, signal_ready, take_map, wait_readable, Clock, Plan,
    SWITCH_OBJECT,
};

#[derive(Deserialize)]
pub struct SwitchConfig {
    pub plan: Plan,
    pub switch: u32,
    /// Port index -> the port's interface in the switch namespace.
    pub ports: BTreeMap<String, String>,
    pub start_mono_ns: u64,
    pub sample_ns: u64,
    /// Port counters over time: `time_s,port,tx_bytes,tx_pkts,marks,aqm_drops,queue_bytes`.
    pub out: PathBuf,
    pub ready: PathBuf,
    /// Ports run at their nominal rate times this.
    #[serde(default = "default_scale")]
    pub rate_scale: f64,
    /// The hook's time runs at this times real time ([`Clock`]).
    #[serde(default = "default_scale")]
    pub time_scale: f64,
    /// What OpenFlow cannot give a controller: a socket that takes a `StatsRequest` (JSON)
    /// for a port of this switch and answers the sender with the `StatsReply`: the port's
    /// count of ECN marks, or its queue in full-size packets. A Unix datagram socket's path,
    /// or with `stats_key` the address and port of a UDP socket ([`StatsSocket`]).
    #[serde(default)]
    pub stats: Option<String>,
    /// The switch's key (hex, 32 bytes) that signs the requests and replies over UDP.
    #[serde(default)]
    pub stats_key: Option<String>,
    /// The controller's Unix datagram socket for the copies the ports make in place of the
    /// mechanism's flags-only copy rules ([`FlowMod::tcp_flags_copy`]): each datagram is
    /// [`REPORT_MAGIC`] || switch (u32, big-endian) || output port (u32) || the packet's IPv4
    /// and TCP headers. Without it the switch makes the copies (OpenFlow packet-ins).
    #[serde(default)]
    pub reports: Option<PathBuf>,
}

pub const REPORT_MAGIC: &[u8] = b"TACCP1";

type Hook = Box<dyn SwitchHook<Ipv4Packet<Vec<u8>>>>;

/// How long the agent waits for room in the controller's socket for a copy.
const REPORT_SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(50);

/// Copies sent per wake-up of the agent's loop: the rest wait in the ring, so that a slow
/// controller never holds up the stats it asks for.
const COPIES_PER_WAKE: usize = 64;

/// The stats socket. Over UDP (a controller on another machine) each datagram is signed
/// with the switch's key, and the controller's nonce ties a reply to its request:
///
/// ```text
/// controller -> agent   "TACCS1" || nonce (16) || HMAC(key, "request" || nonce || JSON) || JSON
/// agent -> controller   nonce (16) || HMAC(key, "reply" || nonce || JSON) || JSON
/// ```
///
/// A request that does not verify gets no answer; a reply recorded earlier carries an old
/// nonce, which the controller no longer waits for. (A recorded request replayed only has
/// the counters read again, signed for a nonce nobody waits for.)
pub enum StatsSocket {
    Unix(UnixDatagram),
    Udp(UdpSocket, Vec<u8>),
}

pub const STATS_MAGIC: &[u8] = b"TACCS1";

/// Requests answered per wake-up of the agent's loop: a controller asks for a port or two
/// each interval.
const SERVED_PER_WAKE: usize = 64;

impl StatsSocket {
    fn open(cfg: &SwitchConfig) -> Result<Option<StatsSocket>, String> {
        let Some(at) = &cfg.stats else {
            return Ok(None);
        };
        let sock = match &cfg.stats_key {
            None => StatsSocket::Unix(
                UnixDatagram::bind(at).map_err(|e| format!("stats socket {at}: {e}"))?,
            ),
            Some(hex) => {
                let key = unhex(hex)
                    .filter(|k| k.len() == 32)
                    .ok_or("stats_key: expected 64 hex digits")?;
                let sock = UdpSocket::bind(at).map_err(|e| format!("stats address {at}: {e}"))?;
                StatsSocket::Udp(sock, key)
            }
        };
        match &sock {
            StatsSocket::Unix(s) => s.set_nonblocking(true),
            StatsSocket::Udp(s, _) => s.set_nonblocking(true),
        }
        .map_err(|e| e.to_string())?;
        Ok(Some(sock))
    }

    fn fd(&self) -> RawFd {
        match self {
            StatsSocket::Unix(s) => s.as_raw_fd(),
            StatsSocket::Udp(s, _) => s.as_raw_fd(),
        }
    }

    /// Answers the waiting requests with `answer`'s reply, if it has one: at most
    /// [`SERVED_PER_WAKE`], so that a flood of datagrams never holds up the switch hook.
    fn serve(&self, answer: &dyn Fn(&[u8]) -> Option<Vec<u8>>) {
        let mut buf = [0u8; 2048];
        match self {
            StatsSocket::Unix(sock) => {
                for _ in 0..SERVED_PER_WAKE {
                    let Ok((n, from)) = sock.recv_from(&mut buf) else {
                        break;
                    };
                    if let (Some(path), Some(reply)) = (from.as_pathname(), answer(&buf[..n])) {
                        let _ = sock.send_to(&reply, path);
                    }
                }
            }
            StatsSocket::Udp(sock, key) => {
                for _ in 0..SERVED_PER_WAKE {
                    let Ok((n, from)) = sock.recv_from(&mut buf) else {
                        break;
                    };
                    let Some((nonce, request)) = open_request(key, &buf[..n]) else {
                        continue;
                    };
                    if let Some(reply) = answer(request) {
                        let tag = mac(key, &[b"reply", nonce, &reply]);
                        let _ = sock.send_to(&[nonce, &tag[..], &reply].concat(), from);
                    }
                }
            }
        }
    }
}

/// The nonce and JSON of a signed request, if its tag verifies under `key`.
fn open_request<'a>(key: &[u8], datagram: &'a [u8]) -> Option<(&'a [u8], &'a [u8])> {
    let rest = datagram.strip_prefix(STATS_MAGIC)?;
    if rest.len() < NONCE_LEN + MAC_LEN {
        return None;
    }
    let (nonce, rest) = rest.split_at(NONCE_LEN);
    let (tag, request) = rest.split_at(MAC_LEN);
    constant_time_eq(tag, &mac(key, &[b"request", nonce, request])).then_some((nonce, request))
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    text.len().is_multiple_of(2).then_some(())?;
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Bytes per packet where the scenario sizes a queue in packets: a full packet's IP bytes,
/// as htb and bfifo count them on a veth.
const PACKET_BYTES: u64 = 1500;

fn bytes(s: Size) -> u64 {
    match s {
        Size::Packets(n) => n * PACKET_BYTES,
        Size::Bytes(b) => b,
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct PortConfig {
    k_bytes: u64,
    limit_bytes: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct PortState {
    queue_bytes: u64,
    last_ns: u64,
    tx_packets: u64,
    tx_bytes: u64,
    marks: u64,
    drops: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct CopyRule {
    mask: u8,
    value: u8,
}

// SAFETY: plain C structs of u64 fields, without padding; CopyRule is two bytes.
unsafe impl aya::Pod for PortConfig {}
unsafe impl aya::Pod for PortState {}
unsafe impl aya::Pod for CopyRule {}

/// The ports' copies on their way to the controller.
struct Reports {
    ring: RingBuf<MapData>,
    lost: Array<MapData, u64>,
    lost_told: u64,
    /// Copies the controller's socket had no room for.
    unsent: u64,
    unsent_told: u64,
    sock: UnixDatagram,
    to: PathBuf,
    switch: u32,
}

impl Reports {
    /// The copies the mechanism's rules ask of `switch`, made by its ports: None where the
    /// agent has no controller socket or the rules ask for none.
    fn open(
        bpf: &mut Ebpf,
        cfg: &SwitchConfig,
        rules: &[FlowMod],
    ) -> Result<Option<Reports>, String> {
        let copies: Vec<(u8, u8)> = rules
            .iter()
            .filter(|r| r.switch == cfg.switch)
            .filter_map(FlowMod::tcp_flags_copy)
            .collect();
        let Some(to) = cfg.reports.clone().filter(|_| !copies.is_empty()) else {
            return Ok(None);
        };
        let mut map: Array<MapData, CopyRule> = take_map(bpf, "copy_rules")?;
        if copies.len() > map.len() as usize {
            return Err(format!(
                "the mechanism asks switch {} for {} copy rules; its ports make at most {}",
                cfg.switch,
                copies.len(),
                map.len()
            ));
        }
        for (i, &(mask, value)) in copies.iter().enumerate() {
            map.set(i as u32, CopyRule { mask, value }, 0)
                .map_err(|e| format!("copy_rules map: {e}"))?;
        }
        let sock = UnixDatagram::unbound().map_err(|e| format!("reports socket: {e}"))?;
        // A controller's queue holds few datagrams (net.unix.max_dgram_qlen, 10 by default)
        // and a volley brings dozens of SYNs at once: the agent waits for room, for a while.
        sock.set_write_timeout(Some(REPORT_SEND_TIMEOUT))
            .map_err(|e| e.to_string())?;
        Ok(Some(Reports {
            ring: take_map(bpf, "reports")?,
            lost: take_map(bpf, "reports_lost")?,
            lost_told: 0,
            unsent: 0,
            unsent_told: 0,
            sock,
            to,
            switch: cfg.switch,
        }))
    }

    /// Sends the controller the copies the ports made since the last call: at most
    /// [`COPIES_PER_WAKE`], and none more once one found no room in the controller's socket.
    fn forward(&mut self, port_of: &HashMap<u32, u32>) {
        for _ in 0..COPIES_PER_WAKE {
            let Some(item) = self.ring.next() else {
                break;
            };
            let Some((ifindex, headers)) = parse_report(&item) else {
                continue;
            };
            let Some(&port) = port_of.get(&ifindex) else {
                continue;
            };
            let datagram = [
                REPORT_MAGIC,
                &self.switch.to_be_bytes(),
                &port.to_be_bytes(),
                headers,
            ]
            .concat();
            // A controller not listening (yet, or any more) misses the copy, as it misses
            // a packet-in while it is down; one that does not read is counted.
            if let Err(e) = self.sock.send_to(&datagram, &self.to) {
                if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) {
                    self.unsent += 1;
                    break;
                }
            }
        }
        let lost = self.lost.get(&0, 0).unwrap_or(0);
        if lost > self.lost_told || self.unsent > self.unsent_told {
            eprintln!(
                "switch {}: copies lost: {} to a full ring (the agent fell behind), {} to a \
                 controller that did not read them for {} ms",
                self.switch,
                lost - self.lost_told,
                self.unsent - self.unsent_told,
                REPORT_SEND_TIMEOUT.as_millis()
            );
            (self.lost_told, self.unsent_told) = (lost, self.unsent);
        }
    }
}

/// `struct report` of switch.bpf.c: the output port's ifindex and the headers.
fn parse_report(item: &[u8]) -> Option<(u32, &[u8])> {
    let ifindex = u32::from_ne_bytes(item.get(0..4)?.try_into().ok()?);
    let len = u32::from_ne_bytes(item.get(4..8)?.try_into().ok()?) as usize;
    let headers = item.get(8..8 + len).filter(|h| !h.is_empty())?;
    Some((ifindex, headers))
}

pub fn run(cfg: SwitchConfig) -> Result<(), String> {
    let plan = &cfg.plan;
    let mut bpf = Ebpf::load(SWITCH_OBJECT).map_err(|e| format!("loading switch.bpf.o: {e}"))?;
    load(&mut bpf, &["port_egress", "port_ingress"])?;
    let mut config: BpfHashMap<MapData, u32, PortConfig> = take_map(&mut bpf, "port_config")?;
    let mut state: BpfHashMap<MapData, u32, PortState> = take_map(&mut bpf, "ports")?;
    let mut flows: BpfHashMap<MapData, FlowKey, FlowSeen> = take_map(&mut bpf, "flows")?;
    let mut windows: BpfHashMap<MapData, u32, u32> = take_map(&mut bpf, "windows")?;
    let mut ports = Vec::new();
    let mut drains = HashMap::new();
    for (index, ifname) in &cfg.ports {
        let port: usize = index
            .parse()
            .map_err(|_| format!("bad port index {index:?}"))?;
        let p = plan
            .ports
            .get(port)
            .ok_or_else(|| format!("no port {port} in the plan"))?;
        let ifx = ifindex(ifname)?;
        let marking = p.queue.kind == "red-ecn";
        let pc = PortConfig {
            k_bytes: p
                .queue
                .k()
                .filter(|_| marking)
                .map(bytes)
                .unwrap_or(u64::MAX),
            limit_bytes: bytes(p.queue.limit()),
        };
        config
            .insert(ifx, pc, 0)
            .map_err(|e| format!("port_config: {e}"))?;
        state
            .insert(ifx, PortState::default(), 0)
            .map_err(|e| format!("ports: {e}"))?;
        attach(&mut bpf, "port_egress", ifname, TcAttachType::Egress)?;
        attach(&mut bpf, "port_ingress", ifname, TcAttachType::Ingress)?;
        ports.push((ifx, port as u32, p.name.clone()));
        drains.insert(ifx, (p.rate_bps as f64 * cfg.rate_scale / 8.0) as u64);
    }
    let records = Records::create(
        &cfg.out,
        "time_s,port,tx_bytes,tx_pkts,marks,aqm_drops,queue_bytes",
    )?;
    let stats = StatsSocket::open(&cfg)?;
    // The mechanism's hook in this switch, and the rules its controller installs.
    let (mut hook, rules): (Option<Hook>, Vec<FlowMod>) = match &plan.mechanism {
        Some(m) => {
            let inst = m.build::<Ipv4Packet<Vec<u8>>>(plan);
            let hook = inst
                .switch_hooks
                .into_iter()
                .nth(cfg.switch as usize)
                .flatten();
            (hook, inst.initial_rules)
        }
        None => (None, Vec::new()),
    };
    let mut reports = Reports::open(&mut bpf, &cfg, &rules)?;
    signal_ready(&cfg.ready)?;

    let port_of: HashMap<u32, u32> = ports.iter().map(|&(ifx, port, _)| (ifx, port)).collect();
    let clock = Clock::new(cfg.start_mono_ns, cfg.time_scale);
    let sample = cfg.sample_ns.max(1_000_000);
    let mut next_sample = 0;
    let mut packets_seen = HashMap::new();
    let mut written = HashMap::new();
    loop {
        let elapsed = clock.elapsed();
        let now = clock.at(elapsed);
        // The hook learns what happened since its last tick at its next one: its state only
        // matters at its ticks, and reading the maps more often would cost the CPU the
        // traffic needs.
        if let Some(hook) = hook
            .as_mut()
            .filter(|h| h.poll_at().is_some_and(|t| t <= now))
        {
            feed_flows(&mut **hook, now, &mut flows, &port_of, &mut packets_seen)?;
            let mut queue = HashMap::new();
            for &(ifx, port, _) in &ports {
                let s = state.get(&ifx, 0).map_err(|e| format!("ports map: {e}"))?;
                queue.insert(port, queue_now(&s, drains[&ifx]));
            }
            hook.on_timer(now, &|port| queue.get(&port).copied().unwrap_or(0));
            let mut fields = HashMap::new();
            hook.port_windows(&mut |port, field| {
                fields.insert(port, field);
            });
            for &(ifx, port, _) in &ports {
                let field = fields.get(&port).copied().unwrap_or(0) as u32;
                if written.insert(ifx, field) != Some(field) {
                    windows
                        .insert(ifx, field, 0)
                        .map_err(|e| format!("windows map: {e}"))?;
                }
            }
        }
        // The samples are on the real clock, as the run's other records.
        if elapsed >= next_sample {
            let mut lines = String::new();
            for (ifx, _, name) in &ports {
                let s = state.get(ifx, 0).map_err(|e| format!("ports map: {e}"))?;
                lines.push_str(&format!(
                    "{},{name},{},{},{},{},{}\n",
                    elapsed as f64 / 1e9,
                    s.tx_bytes,
                    s.tx_packets,
                    s.marks,
                    s.drops,
                    queue_now(&s, drains[ifx])
                ));
            }
            records.append(lines)?;
            next_sample = (elapsed / sample + 1) * sample;
        }
        let timer = hook
            .as_ref()
            .and_then(|h| h.poll_at())
            .map_or(u64::MAX, |t| clock.real(t.saturating_sub(now)));
        let nap = timer.min(next_sample.saturating_sub(elapsed)).max(10_000);
        let fds: Vec<RawFd> = stats
            .iter()
            .map(StatsSocket::fd)
            .chain(reports.iter().map(|r| r.ring.as_raw_fd()))
            .collect();
        if wait_readable(&fds, nap) {
            if let Some(sock) = &stats {
                sock.serve(&|request| answer_stats(request, &cfg, &ports, &drains, &state));
            }
            if let Some(r) = reports.as_mut() {
                r.forward(&port_of);
            }
        }
    }
}

/// A port's backlog now: what its last packet left, less what the port has sent at its rate
/// since (the datapath sees the backlog only when a packet comes).
fn queue_now(s: &PortState, drain_bytes_per_sec: u64) -> u64 {
    let idle_ns = monotonic_ns().saturating_sub(s.last_ns) as u128;
    let drained = idle_ns * drain_bytes_per_sec as u128 / 1_000_000_000;
    s.queue_bytes
        .saturating_sub(drained.min(u64::MAX as u128) as u64)
}

/// The reply (JSON) to a request (JSON). A request that cannot be answered (not JSON,
/// another switch's port) gets none: the controller times out and carries on.
fn answer_stats(
    request: &[u8],
    cfg: &SwitchConfig,
    ports: &[(u32, u32, String)],
    drains: &HashMap<u32, u64>,
    state: &BpfHashMap<MapData, u32, PortState>,
) -> Option<Vec<u8>> {
    let request = serde_json::from_slice::<StatsRequest>(request).ok()?;
    let (switch, port) = match request {
        StatsRequest::PortMarks { switch, port } | StatsRequest::QueueLength { switch, port } => {
            (switch, port)
        }
        StatsRequest::Switch { .. } => return None,
    };
    let &(ifx, ..) = ports
        .iter()
        .find(|p| p.1 == port)
        .filter(|_| switch == cfg.switch)?;
    let s = state.get(&ifx, 0).ok()?;
    let queue = queue_now(&s, drains[&ifx]);
    let reply = match request {
        StatsRequest::PortMarks { .. } => StatsReply::PortMarks {
            switch,
            port,
            marks: s.marks,
        },
        _ => StatsReply::QueueLength {
            switch,
            port,
            pkts: queue.div_ceil(PACKET_BYTES) as u32,
        },
    };
    serde_json::to_vec(&reply).ok()
}

const SEEN_SYN: u32 = 1 << 0;
const SEEN_DATA: u32 = 1 << 1;
const SEEN_END: u32 = 1 << 2;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct FlowKey {
    saddr: u32,
    daddr: u32,
    sport: u16,
    dport: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct FlowSeen {
    packets: u64,
    ifindex: u32,
    seen: u32,
}

// SAFETY: plain C structs without padding.
unsafe impl aya::Pod for FlowKey {}
unsafe impl aya::Pod for FlowSeen {}

/// Hands the hook what the datapath saw of each TCP flow since the last call, as the
/// segments it stands for: a SYN, a data segment, a FIN, in that order. A flow that ended is
/// taken out of the datapath's table (a new connection on the same ports starts afresh).
fn feed_flows(
    hook: &mut dyn SwitchHook<Ipv4Packet<Vec<u8>>>,
    now: u64,
    flows: &mut BpfHashMap<MapData, FlowKey, FlowSeen>,
    port_of: &HashMap<u32, u32>,
    packets_seen: &mut HashMap<FlowKey, u64>,
) -> Result<(), String> {
    let entries: Vec<(FlowKey, FlowSeen)> = flows.iter().filter_map(Result::ok).collect();
    // Only the flows still in the datapath's table are remembered.
    let before = std::mem::take(packets_seen);
    for (key, mut f) in entries {
        let Some(&port) = port_of.get(&f.ifindex) else {
            continue;
        };
        let sent = before.get(&key) != Some(&f.packets);
        packets_seen.insert(key, f.packets);
        if f.seen != 0 {
            // Take the flags: the program only ORs new ones in.
            let seen = f.seen;
            f.seen = 0;
            flows
                .insert(key, f, 0)
                .map_err(|e| format!("flows map: {e}"))?;
            for (bit, flags, len) in [
                (SEEN_SYN, tcp_flags::SYN, 40),
                (SEEN_DATA, tcp_flags::ACK, 1500),
                (SEEN_END, tcp_flags::FIN | tcp_flags::ACK, 40),
            ] {
                if seen & bit != 0 {
                    hook.on_forward(now, port, &segment(key, flags, len));
                }
            }
            if seen & SEEN_END != 0 {
                let _ = flows.remove(&key);
                packets_seen.remove(&key);
            }
        } else if sent {
            // Still sending: keeps the flow alive in the hook.
            hook.on_forward(now, port, &segment(key, tcp_flags::ACK, 1500));
        }
    }
    Ok(())
}

fn segment(key: FlowKey, flags: u8, len: u16) -> Ipv4Packet<Vec<u8>> {
    let bytes = emit(
        &Ipv4Fields {
            src: u32::from_be(key.saddr),
            dst: u32::from_be(key.daddr),
            protocol: ip_proto::TCP,
            ident: 0,
            ecn: Ecn::NotEct,
            total_len: len,
            ttl: 64,
        },
        Some(&TcpFields {
            src_port: u16::from_be(key.sport),
            dst_port: u16::from_be(key.dport),
            seq: 0,
            ack: 0,
            flags,
            window: 0,
        }),
    );
    Ipv4Packet::new_checked(bytes).expect("a well-formed segment")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testrun::{frame, require_root, run, run_on, TC_ACT_OK, TC_ACT_SHOT};
    use tacc_mech::headers::{ip_proto, Ecn, PacketHeaders};
    use tacc_mech::wire::{emit, Ipv4Fields, Ipv4Packet};

    /// BPF_PROG_TEST_RUN runs a frame on the loopback device.
    const LOOPBACK: u32 = 1;

    /// Sends `request` signed with `key` (or `tamper`ed after signing) to a UDP stats
    /// socket of key [7; 32] and returns the reply's nonce, tag and JSON, if any came.
    fn ask_udp(key: [u8; 32], request: &[u8], tamper: bool) -> Option<(Vec<u8>, Vec<u8>, Vec<u8>)> {
        let served = StatsSocket::Udp(UdpSocket::bind("127.0.0.1:0").unwrap(), vec![7; 32]);
        let StatsSocket::Udp(sock, _) = &served else {
            unreachable!()
        };
        sock.set_nonblocking(true).unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client
            .set_read_timeout(Some(std::time::Duration::from_millis(200)))
            .unwrap();
        let nonce = [3u8; NONCE_LEN];
        let tag = mac(&key, &[b"request", &nonce, request]);
        let mut datagram = [STATS_MAGIC, &nonce, &tag, request].concat();
        if tamper {
            *datagram.last_mut().unwrap() ^= 1;
        }
        client
            .send_to(&datagram, sock.local_addr().unwrap())
            .unwrap();
        assert!(
            wait_readable(&[served.fd()], 1_000_000_000),
            "the request arrived"
        );
        served.serve(&|json| Some([b"re: ", json].concat()));
        let mut buf = [0u8; 2048];
        let n = client.recv(&mut buf).ok()?;
        let (nonce, rest) = buf[..n].split_at(NONCE_LEN);
        let (tag, json) = rest.split_at(MAC_LEN);
        Some((nonce.to_vec(), tag.to_vec(), json.to_vec()))
    }

    #[test]
    fn a_signed_request_over_udp_gets_a_reply_signed_for_its_nonce_and_no_other_does() {
        let (nonce, tag, json) = ask_udp([7; 32], b"{}", false).expect("a reply");
        assert_eq!(
            (nonce.as_slice(), json.as_slice()),
            (&[3u8; NONCE_LEN][..], &b"re: {}"[..])
        );
        assert_eq!(tag, mac(&[7; 32], &[b"reply", &nonce, &json]).to_vec());
        // Another key, or a request changed after it was signed: no answer.
        assert!(ask_udp([8; 32], b"{}", false).is_none());
        assert!(ask_udp([7; 32], b"{}", true).is_none());
    }

    fn full_frame(ecn: Ecn) -> Vec<u8> {
        frame(&emit(
            &Ipv4Fields {
                src: 0x0a00_0001,
                dst: 0x0a00_0002,
                protocol: ip_proto::UDP,
                ident: 1,
                ecn,
                total_len: 1500,
                ttl: 64,
            },
            None,
        ))
    }

    /// A veth `tq0` (peer `tq1`) in a network namespace of the calling thread's own, whose
    /// root qdisc (htb at 8 bit/s) holds every frame after the first: the namespace and
    /// everything in it go when the thread ends.
    fn held_port() -> u32 {
        // SAFETY: unshare has no memory preconditions; only this test's thread moves.
        assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0, "unshare");
        let sh = |args: &str| {
            let ok = std::process::Command::new(args.split(' ').next().unwrap())
                .args(args.split(' ').skip(1))
                .status()
                .unwrap()
                .success();
            assert!(ok, "{args}");
        };
        sh("ip link add tq0 type veth peer name tq1");
        for dev in ["tq0", "tq1"] {
            // No IPv6 autoconfiguration: its packets would join the queue.
            std::fs::write(format!("/proc/sys/net/ipv6/conf/{dev}/disable_ipv6"), "1").unwrap();
            sh(&format!("ip link set {dev} up"));
        }
        sh("tc qdisc add dev tq0 root handle 1: htb default 1");
        sh("tc class add dev tq0 parent 1: classid 1:1 htb rate 8bit burst 1600 cburst 1600");
        ifindex("tq0").unwrap()
    }

    /// Sends `n` copies of `frame` out of interface `ifx` (AF_PACKET): they pass its
    /// qdisc as any packet does.
    fn send(ifx: u32, frame: &[u8], n: usize) {
        // SAFETY: plain socket calls on buffers that outlive them.
        unsafe {
            let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0);
            assert!(fd >= 0, "AF_PACKET socket");
            let mut addr: libc::sockaddr_ll = std::mem::zeroed();
            addr.sll_family = libc::AF_PACKET as u16;
            addr.sll_ifindex = ifx as i32;
            addr.sll_halen = 6;
            for _ in 0..n {
                let sent = libc::sendto(
                    fd,
                    frame.as_ptr().cast(),
                    frame.len(),
                    0,
                    (&addr as *const libc::sockaddr_ll).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                );
                assert_eq!(sent, frame.len() as isize, "sendto");
            }
            libc::close(fd);
        }
    }

    /// `port_egress` loaded, with port `port` configured as `pc` and its state zeroed; the
    /// port's state map.
    fn egress_on(port: u32, pc: PortConfig) -> (Ebpf, BpfHashMap<MapData, u32, PortState>) {
        let mut bpf = Ebpf::load(SWITCH_OBJECT).unwrap();
        load(&mut bpf, &["port_egress"]).unwrap();
        let mut config: BpfHashMap<MapData, u32, PortConfig> =
            take_map(&mut bpf, "port_config").unwrap();
        let mut state: BpfHashMap<MapData, u32, PortState> = take_map(&mut bpf, "ports").unwrap();
        config.insert(port, pc, 0).unwrap();
        state.insert(port, PortState::default(), 0).unwrap();
        (bpf, state)
    }

    #[test]
    #[ignore = "needs root (BPF_PROG_TEST_RUN): make test runs it as root"]
    fn at_k_in_the_ports_own_queue_ect_frames_are_marked_and_not_ect_frames_dropped() {
        require_root(
            "at_k_in_the_ports_own_queue_ect_frames_are_marked_and_not_ect_frames_dropped",
        );
        let port = held_port();
        let pc = PortConfig {
            k_bytes: 2 * PACKET_BYTES,
            limit_bytes: 10 * PACKET_BYTES,
        };
        let (mut bpf, state) = egress_on(port, pc);

        let ect = full_frame(Ecn::Ect0);
        // The first frame leaves on the class's burst; the next waits: one packet queued.
        send(port, &ect, 2);
        let out = run_on(&mut bpf, "port_egress", &ect, port);
        assert_eq!(out.verdict, TC_ACT_OK);
        assert!(out.frame == ect, "below K: untouched");
        // The backlog the program read is the one tc shows; the frame joins it.
        let one_queued = tc_backlog("tq0");
        assert!(one_queued > 0 && one_queued < pc.k_bytes, "{one_queued}");
        assert_eq!(
            state.get(&port, 0).unwrap().queue_bytes,
            one_queued + PACKET_BYTES
        );

        send(port, &ect, 1);
        let out = run_on(&mut bpf, "port_egress", &ect, port);
        let mut marked = ect[14..].to_vec();
        Ipv4Packet::new_checked(&mut marked[..])
            .unwrap()
            .set_ecn(Ecn::Ce);
        // At K: CE, the checksum patched as the wire code does.
        assert!(out.frame == frame(&marked));
        assert_eq!(
            run_on(&mut bpf, "port_egress", &full_frame(Ecn::NotEct), port).verdict,
            TC_ACT_SHOT
        );
        let s = state.get(&port, 0).unwrap();
        assert_eq!((s.tx_packets, s.marks, s.drops), (2, 1, 1));
        assert_eq!(s.tx_bytes, 2 * PACKET_BYTES);
        assert_eq!(
            s.queue_bytes,
            tc_backlog("tq0"),
            "the dropped frame joined no queue"
        );
    }

    /// The backlog `tc` shows for an interface's root qdisc, bytes.
    fn tc_backlog(dev: &str) -> u64 {
        let out = std::process::Command::new("tc")
            .args(["-s", "-j", "qdisc", "show", "dev", dev])
            .output()
            .unwrap();
        let qdiscs: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        qdiscs
            .iter()
            .find(|q| q["root"] == true)
            .and_then(|q| q["backlog"].as_u64())
            .unwrap()
    }

    /// A TCP segment of `len` IPv4 bytes from 10.0.0.1:40000 to 10.0.0.2:5001 with `flags`;
    /// a SYN carries Linux's 20 B of options (MSS 1460, window scale 7).
    fn tcp_segment(flags: u8, len: u16) -> Vec<u8> {
        let key = FlowKey {
            saddr: 0x0a00_0001u32.to_be(),
            daddr: 0x0a00_0002u32.to_be(),
            sport: 40000u16.to_be(),
            dport: 5001u16.to_be(),
        };
        let mut ip = segment(key, flags, len).into_inner();
        if flags & tcp_flags::SYN != 0 {
            ip[32] = 10 << 4;
            ip[40..60].copy_from_slice(&[
                2, 4, 5, 180, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
            ]);
        }
        ip
    }

    #[test]
    #[ignore = "needs root (BPF_PROG_TEST_RUN): make test runs it as root"]
    fn a_port_reports_the_headers_of_the_segments_a_copy_rule_matches_to_the_controller() {
        require_root(
            "a_port_reports_the_headers_of_the_segments_a_copy_rule_matches_to_the_controller",
        );
        let (mut bpf, _) = egress_on(
            LOOPBACK,
            PortConfig {
                k_bytes: u64::MAX,
                limit_bytes: 100 * PACKET_BYTES,
            },
        );
        let syn = tcp_segment(tcp_flags::SYN, 60);
        let last = tcp_segment(tcp_flags::FIN | tcp_flags::ACK, 1500);
        let ack = tcp_segment(tcp_flags::ACK, 40);
        // No copy rule: no reports.
        run_on(&mut bpf, "port_egress", &frame(&syn), LOOPBACK);
        let mut copy_rules: Array<MapData, CopyRule> = take_map(&mut bpf, "copy_rules").unwrap();
        for (i, (mask, value)) in [
            (tcp_flags::SYN, tcp_flags::SYN),
            (tcp_flags::FIN, tcp_flags::FIN),
        ]
        .into_iter()
        .enumerate()
        {
            copy_rules
                .set(i as u32, CopyRule { mask, value }, 0)
                .unwrap();
        }
        for ip in [&syn, &ack, &last] {
            let out = run_on(&mut bpf, "port_egress", &frame(ip), LOOPBACK);
            assert_eq!(out.verdict, TC_ACT_OK);
        }
        let dir = std::env::temp_dir().join(format!("tacc-reports-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let to = dir.join("controller.sock");
        let _ = std::fs::remove_file(&to);
        let controller = UnixDatagram::bind(&to).unwrap();
        controller.set_nonblocking(true).unwrap();
        let mut reports = Reports {
            ring: take_map(&mut bpf, "reports").unwrap(),
            lost: take_map(&mut bpf, "reports_lost").unwrap(),
            lost_told: 0,
            unsent: 0,
            unsent_told: 0,
            sock: UnixDatagram::unbound().unwrap(),
            to,
            switch: 3,
        };
        reports.forward(&HashMap::from([(LOOPBACK, 5)]));
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        while let Ok(n) = controller.recv(&mut buf) {
            got.push(buf[..n].to_vec());
        }
        std::fs::remove_dir_all(&dir).unwrap();
        // The SYN whole (its options too), the last segment's headers alone, no pure ACK;
        // each with the switch and the port it left by.
        let head = [REPORT_MAGIC, &3u32.to_be_bytes(), &5u32.to_be_bytes()].concat();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0], [&head[..], &syn[..]].concat());
        assert_eq!(got[1], [&head[..], &last[..40]].concat());
        assert_eq!(reports.lost.get(&0, 0).unwrap(), 0);
    }

    #[test]
    #[ignore = "needs root (BPF_PROG_TEST_RUN): make test runs it as root"]
    fn acks_of_a_flow_leaving_a_port_with_a_window_get_that_window() {
        require_root("acks_of_a_flow_leaving_a_port_with_a_window_get_that_window");
        let mut bpf = Ebpf::load(SWITCH_OBJECT).unwrap();
        load(&mut bpf, &["port_egress", "port_ingress"]).unwrap();
        let mut config: BpfHashMap<MapData, u32, PortConfig> =
            take_map(&mut bpf, "port_config").unwrap();
        let mut state: BpfHashMap<MapData, u32, PortState> = take_map(&mut bpf, "ports").unwrap();
        let mut windows: BpfHashMap<MapData, u32, u32> = take_map(&mut bpf, "windows").unwrap();
        let flows: BpfHashMap<MapData, FlowKey, FlowSeen> = take_map(&mut bpf, "flows").unwrap();
        let pc = PortConfig {
            k_bytes: u64::MAX,
            limit_bytes: 100 * PACKET_BYTES,
        };
        config.insert(LOOPBACK, pc, 0).unwrap();
        state.insert(LOOPBACK, PortState::default(), 0).unwrap();
        let key = FlowKey {
            saddr: 0x0a00_0001u32.to_be(),
            daddr: 0x0a00_0002u32.to_be(),
            sport: 40000u16.to_be(),
            dport: 5001u16.to_be(),
        };
        let syn = segment(key, tcp_flags::SYN, 40).into_inner();
        run(&mut bpf, "port_egress", &frame(&syn));
        let seen = flows.get(&key, 0).unwrap();
        assert_eq!(
            (seen.ifindex, seen.seen, seen.packets),
            (LOOPBACK, SEEN_SYN, 1)
        );

        let reverse = FlowKey {
            saddr: key.daddr,
            daddr: key.saddr,
            sport: key.dport,
            dport: key.sport,
        };
        let mut ack = segment(reverse, tcp_flags::ACK, 40).into_inner();
        Ipv4Packet::new_checked(&mut ack[..])
            .unwrap()
            .set_tcp_window(5000);
        // No window for the port yet: untouched.
        assert!(run(&mut bpf, "port_ingress", &frame(&ack)).frame == frame(&ack));
        windows.insert(LOOPBACK, 100, 0).unwrap();
        let out = run(&mut bpf, "port_ingress", &frame(&ack));
        let mut want = ack.clone();
        let mut p = Ipv4Packet::new_checked(&mut want[..]).unwrap();
        p.set_tcp_window(100);
        assert!(p.checksums_valid());
        assert!(
            out.frame == frame(&want),
            "window 100, checksum patched as the wire code does"
        );
    }
}
