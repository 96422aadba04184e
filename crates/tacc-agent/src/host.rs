//! The host agent: in a hypervisor namespace, under the VMs of one host. It attaches
//! `host.bpf.c` to the VMs' ports and the NIC (the uplink), and runs the host shim the
//! scenario's mechanism builds for the host: the datapath's per-pair counts go into
//! [`HostShim::on_datapath`], the shim's timers run here, its feedback packets leave through a
//! raw socket, its rates become HTB classes on the uplink and its window clamps a map.
//! Messages for the shim (a controller's, or written by hand) arrive as datagrams on a Unix
//! socket, signed with the run's key ([`crate::control`]). Its counters and the socket's go to
//! a JSON file for the run's summary.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use aya::maps::{Array, HashMap as BpfHashMap, MapData};
use aya::programs::TcAttachType;
use aya::Ebpf;
use serde::Deserialize;
use tacc_mech::roles::{BucketConfig, ShortagePolicy};
use tacc_mech::roles::{Datapath, FeedbackPacket, HostShim, PairCounts};
use tacc_mech::wire::Ipv4Packet;
use tacc_mech::Nanos;

use crate::control::ControlSocket;
use crate::records::Records;
use crate::tc::{attach, load as load_programs, Htb};
use crate::{
    default_scale, realtime, signal_ready, sleep_ns, take_map, wait_readable, Clock, Plan,
    HOST_OBJECT, HOST_PINNED_OBJECT,
};

#[derive(Deserialize)]
pub struct HostConfig {
    pub plan: Plan,
    pub host: u32,
    /// The NIC: the hypervisor's port to its switch.
    pub uplink: String,
    /// VM index -> the VM's port in the hypervisor namespace.
    pub vm_ports: BTreeMap<String, String>,
    /// The run's time 0 on CLOCK_MONOTONIC.
    pub start_mono_ns: u64,
    /// The rates the shim enforces over time (the simulator's rates.csv columns).
    pub out: PathBuf,
    pub ready: PathBuf,
    /// Drop what only a shim may send (feedback packets, IPR bits) when a VM sends it, if the
    /// mechanism has such signals and scrubs them ([`Datapath::scrub`]); false lifts it.
    #[serde(default = "yes")]
    pub scrub: bool,
    /// The testbed runs links below their nominal rate; the mechanism runs at the nominal
    /// rates and its rates are scaled by this when they become HTB classes.
    #[serde(default = "default_scale")]
    pub rate_scale: f64,
    /// The shim's time runs at this times real time ([`Clock`]).
    #[serde(default = "default_scale")]
    pub time_scale: f64,
    /// A Unix datagram socket for messages to the shim.
    #[serde(default)]
    pub control: Option<PathBuf>,
    /// The key the socket's datagrams are signed with (32 bytes); required with `control`.
    #[serde(default)]
    pub control_key: Option<PathBuf>,
    /// Where the shim's and the control socket's counters are written (a JSON object, name to
    /// value, replaced whole while they change).
    #[serde(default)]
    pub counts: Option<PathBuf>,
    #[serde(default = "default_sample")]
    pub sample_ns: u64,
    /// SCHED_FIFO priority the agent takes when its shim does not poll the datapath (SICC's
    /// clamps, static limits): it then sleeps until a controller message or its own timer and
    /// takes the CPU only for them. Beside VMs whose traffic runs at a real-time priority, at
    /// normal priority it waited 5-10 ms for a core after SICC's controller spoke, and the
    /// clamps came that late (docs/testbed.md). A polling agent keeps normal priority: it
    /// would take the VMs' CPU.
    #[serde(default)]
    pub realtime_priority: Option<u8>,
}

fn yes() -> bool {
    true
}

fn default_sample() -> u64 {
    10_000_000
}

/// How often the counters are read where the shim acts on them, in the shim's time: well
/// below every timer of the mechanisms (HyGenICC's feedback timeout is 100 us).
const POLL_NS: u64 = 50_000;
/// How long the agent of a shim that does not act on the counters (SICC's clamps) sleeps
/// between its own timers and the controller's messages, which wake it at once: what it
/// polls for is only a VM it has not learnt yet and the counts file (COUNTS_EVERY_NS).
/// Polling at POLL_NS there would cost a core for every twenty hosts; at 10 ms, the 28
/// agents of a four-rack testbed took a fifth of a core, each round walking the pairs map.
const IDLE_POLL_NS: u64 = 100_000_000;

/// How often the counts file is rewritten, at most.
const COUNTS_EVERY_NS: u64 = 100_000_000;

/// Datapath flags (`config` map of host.bpf.c).
const F_SET_ECT: u32 = 1 << 0;
const F_COUNT_CE: u32 = 1 << 1;
const F_IPR: u32 = 1 << 2;
const F_FEEDBACK: u32 = 1 << 3;
pub(crate) const F_SCRUB: u32 = 1 << 4;
const F_CLAMP: u32 = 1 << 5;
const F_BUCKET: u32 = 1 << 6;
const F_ADMISSION: u32 = 1 << 7;
/// Learn the VMs' addresses by port and the remotes' MACs (`tacc agent`: the testbed knows
/// both, and its datapath spares the lookups).
pub(crate) const F_LEARN: u32 = 1 << 8;
pub(crate) const F_SCRUB_EGRESS: u32 = 1 << 9;
/// skb->mark of the agent's feedback packets: the egress scrub lets them pass.
const FEEDBACK_MARK: u32 = 0x7acc_0fb0;

pub(crate) fn flags(d: Datapath, scrub: bool) -> u32 {
    let drops = d
        .limiter
        .is_some_and(|b| b.on_shortage == ShortagePolicy::Drop);
    [
        (d.set_ect, F_SET_ECT),
        (d.clear_ce, F_COUNT_CE),
        (d.echo_ipr, F_IPR),
        (d.feedback, F_FEEDBACK),
        (scrub, F_SCRUB),
        (d.clamp_window, F_CLAMP),
        (drops, F_BUCKET),
        (d.admission_control, F_ADMISSION),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .fold(0, |f, (_, bit)| f | bit)
}

/// Addresses in network byte order, as the programs read them from packets.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct PairKey {
    vm: u32,
    remote: u32,
}

impl PairKey {
    fn new(vm: u32, remote: u32) -> PairKey {
        PairKey {
            vm: vm.to_be(),
            remote: remote.to_be(),
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct RawCounts {
    tx_packets: u64,
    tx_bytes: u64,
    ce_cleared: u64,
    ipr_set: u64,
    ipr_seen: u64,
    feedback_packets: u64,
    feedback_marks: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct RawClamp {
    window: u16,
    mss: u16,
    pad: u32,
    expires_ns: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct RawMac {
    addr: [u8; 6],
    pad: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct BucketRate {
    bytes_per_sec: u64,
    burst_bytes: u64,
}

// SAFETY: plain C structs without padding holes the kernel could read uninitialised
// (RawClamp's is explicit).
unsafe impl aya::Pod for PairKey {}
unsafe impl aya::Pod for RawCounts {}
unsafe impl aya::Pod for RawClamp {}
unsafe impl aya::Pod for BucketRate {}
unsafe impl aya::Pod for RawMac {}

/// What the counts of a pair grew by since `before`.
fn delta(key: PairKey, now: RawCounts, before: RawCounts) -> PairCounts {
    PairCounts {
        vm: u32::from_be(key.vm),
        remote: u32::from_be(key.remote),
        tx_packets: now.tx_packets - before.tx_packets,
        tx_bytes: now.tx_bytes - before.tx_bytes,
        ce_cleared: now.ce_cleared - before.ce_cleared,
        ipr_set: now.ipr_set - before.ipr_set,
        ipr_seen: now.ipr_seen - before.ipr_seen,
        feedback_packets: now.feedback_packets - before.feedback_packets,
        feedback_marks: now.feedback_marks - before.feedback_marks,
    }
}

pub(crate) struct Maps {
    pairs: BpfHashMap<MapData, PairKey, RawCounts>,
    flushed: BpfHashMap<MapData, PairKey, u64>,
    classes: BpfHashMap<MapData, PairKey, u32>,
    clamps: BpfHashMap<MapData, PairKey, RawClamp>,
    bucket_rates: BpfHashMap<MapData, PairKey, BucketRate>,
    /// Destinations (network byte order) the VMs may open no connection to.
    refused: BpfHashMap<MapData, u32, u8>,
    /// What the programs did on their own, indexed by `enum counter` of host.bpf.c.
    counters: Array<MapData, u64>,
    /// Source address (network byte order) -> the VM port (ifindex) it was sent from.
    pub vm_sources: BpfHashMap<MapData, u32, u32>,
    /// Remote address (network byte order) -> the source MAC of its last packet.
    remote_macs: BpfHashMap<MapData, u32, RawMac>,
}

/// The names of host.bpf.c's counters, in the order of its `enum counter`. Its window clamps
/// are SICC's ACK rewrites and its refused connection requests HyGenICC's admission drops, so
/// they add to the shim's own counts of them (which stay 0 where the datapath does the work).
const DATAPATH_COUNTERS: [&str; 6] = [
    "scrubbed_feedback",
    "scrubbed_ipr",
    "rwnd_rewrites",
    "unknown_pairs",
    "bucket_drops",
    "admission_drops",
];

/// The programs' own counters, by name.
fn datapath_counts(maps: &Maps, add: &mut impl FnMut(&'static str, f64)) -> Result<(), String> {
    for (i, name) in (0u32..).zip(DATAPATH_COUNTERS) {
        let n = maps
            .counters
            .get(&i, 0)
            .map_err(|e| format!("counters map: {e}"))?;
        add(name, n as f64);
    }
    Ok(())
}

/// The host programs, loaded with their flags set, and their maps.
pub(crate) fn load(flags: u32) -> Result<(Ebpf, Maps), String> {
    let bpf = Ebpf::load(HOST_OBJECT).map_err(|e| format!("loading host.bpf.o: {e}"))?;
    with_maps(bpf, flags)
}

/// As [`load`], with every map pinned by name in `dir` (a BPF filesystem): maps pinned there
/// already, by an agent that died, are taken over as they are.
pub(crate) fn load_pinned(flags: u32, dir: &Path) -> Result<(Ebpf, Maps), String> {
    let bpf = aya::EbpfLoader::new()
        .map_pin_path(dir)
        .load(HOST_PINNED_OBJECT)
        .map_err(|e| format!("loading host.bpf.o with its maps in {}: {e}", dir.display()))?;
    with_maps(bpf, flags)
}

fn with_maps(mut bpf: Ebpf, flags: u32) -> Result<(Ebpf, Maps), String> {
    load_programs(&mut bpf, &["vm_ingress", "uplink_egress", "uplink_ingress"])?;
    let mut config: Array<MapData, u32> = take_map(&mut bpf, "config")?;
    config
        .set(0, flags, 0)
        .map_err(|e| format!("config map: {e}"))?;
    let maps = Maps {
        pairs: take_map(&mut bpf, "pairs")?,
        flushed: take_map(&mut bpf, "flushed")?,
        classes: take_map(&mut bpf, "classes")?,
        clamps: take_map(&mut bpf, "clamps")?,
        bucket_rates: take_map(&mut bpf, "bucket_rates")?,
        refused: take_map(&mut bpf, "refused")?,
        counters: take_map(&mut bpf, "counters")?,
        vm_sources: take_map(&mut bpf, "vm_sources")?,
        remote_macs: take_map(&mut bpf, "remote_macs")?,
    };
    Ok((bpf, maps))
}

/// The rate limiters, one per (VM, key) the shim reports, as the shim's buckets say: what
/// exceeds a rate waits in an HTB class's FIFO (`on_shortage = "queue"`) or is dropped by a
/// token bucket in the egress program ("drop").
pub(crate) struct Limiters {
    kind: LimiterKind,
    /// The shim's buckets, their burst in real time (a dilated shim's is that much longer).
    bucket: BucketConfig,
    /// (VM, key) -> (HTB minor id, or 0 for a BPF bucket; rate applied).
    made: HashMap<(u32, u32), (u16, u64)>,
}

enum LimiterKind {
    Htb {
        htb: Htb,
        next_minor: u16,
        limit_bytes: u64,
    },
    Bpf,
}

impl Limiters {
    fn sync(&mut self, rates: &[(u32, u32, u64)], maps: &mut Maps) -> Result<(), String> {
        for &(vm, key, bps) in rates {
            let made = self.made.get(&(vm, key)).copied();
            if made.is_some_and(|(_, applied)| applied == bps) {
                continue;
            }
            let burst = self.bucket.depth_for(bps);
            // The BPF limiter's rates, and with HTB classes (whose program ignores them) the
            // record of the rates in force that a restarted agent resumes from.
            let rate = BucketRate {
                bytes_per_sec: bps / 8,
                burst_bytes: burst,
            };
            maps.bucket_rates
                .insert(PairKey::new(vm, key), rate, 0)
                .map_err(|e| format!("bucket_rates map: {e}"))?;
            let minor = match &mut self.kind {
                LimiterKind::Bpf => 0,
                LimiterKind::Htb {
                    htb,
                    next_minor,
                    limit_bytes,
                } => match made {
                    Some((minor, _)) => {
                        htb.change(minor, bps, burst)?;
                        minor
                    }
                    None => {
                        let minor = *next_minor;
                        *next_minor = minor
                            .checked_add(1)
                            .ok_or("out of HTB class ids on the uplink")?;
                        htb.add(minor, bps, burst, *limit_bytes)?;
                        maps.classes
                            .insert(PairKey::new(vm, key), (1u32 << 16) | minor as u32, 0)
                            .map_err(|e| format!("classes map: {e}"))?;
                        minor
                    }
                },
            };
            self.made.insert((vm, key), (minor, bps));
        }
        Ok(())
    }
}

/// Sends the shim's feedback packets as they are (their own IPv4 header).
pub(crate) struct RawSocket(i32);

impl RawSocket {
    pub fn new() -> Result<RawSocket, String> {
        // SAFETY: plain socket(2); IPPROTO_RAW implies IP_HDRINCL.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW) };
        if fd < 0 {
            return Err(format!("raw socket: {}", std::io::Error::last_os_error()));
        }
        Ok(RawSocket(fd))
    }

    fn send(&self, bytes: &[u8], dst: u32) -> Result<(), String> {
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: dst.to_be(),
            },
            sin_zero: [0; 8],
        };
        send_to(self.0, bytes, &addr)
    }
}

/// sendto(2) of `bytes` on `fd` to `addr` (a `sockaddr_*`).
fn send_to<A>(fd: i32, bytes: &[u8], addr: &A) -> Result<(), String> {
    // SAFETY: the buffer and the address outlive the call; the length is the address's.
    let n = unsafe {
        libc::sendto(
            fd,
            bytes.as_ptr().cast(),
            bytes.len(),
            0,
            (addr as *const A).cast(),
            std::mem::size_of::<A>() as u32,
        )
    };
    if n < 0 {
        return Err(format!("feedback: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Sends the shim's feedback packets as Ethernet frames out of one interface, to the MAC the
/// destination's packets last came from (the datapath's `remote_macs`): for a hypervisor
/// whose VMs sit on a bridge, which has no route of its own to them.
pub(crate) struct LinkSocket {
    fd: i32,
    ifindex: u32,
    mac: [u8; 6],
}

impl LinkSocket {
    pub fn new(dev: &str) -> Result<LinkSocket, String> {
        let ifindex = crate::ifindex(dev)?;
        let text = std::fs::read_to_string(format!("/sys/class/net/{dev}/address"))
            .map_err(|e| format!("{dev}: its MAC address: {e}"))?;
        let mut mac = [0u8; 6];
        let parts: Vec<u8> = text
            .trim()
            .split(':')
            .filter_map(|h| u8::from_str_radix(h, 16).ok())
            .collect();
        if parts.len() != 6 {
            return Err(format!(
                "{dev}: not an Ethernet interface (address {:?})",
                text.trim()
            ));
        }
        mac.copy_from_slice(&parts);
        // Protocol 0: the socket sends and receives nothing.
        // SAFETY: plain socket(2).
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
        if fd < 0 {
            return Err(format!(
                "packet socket: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: setsockopt(2) with a u32 it reads.
        let marked = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_MARK,
                (&FEEDBACK_MARK as *const u32).cast(),
                4,
            )
        };
        if marked != 0 {
            let err = std::io::Error::last_os_error();
            // SAFETY: our own descriptor.
            unsafe { libc::close(fd) };
            return Err(format!("packet socket: SO_MARK: {err}"));
        }
        Ok(LinkSocket { fd, ifindex, mac })
    }

    fn send(&self, ip: &[u8], to: [u8; 6]) -> Result<(), String> {
        let mut frame = Vec::with_capacity(14 + ip.len());
        frame.extend_from_slice(&to);
        frame.extend_from_slice(&self.mac);
        frame.extend_from_slice(&0x0800u16.to_be_bytes());
        frame.extend_from_slice(ip);
        // SAFETY: sockaddr_ll is plain data, valid all zero.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = self.ifindex as i32;
        addr.sll_halen = 6;
        addr.sll_addr[..6].copy_from_slice(&to);
        send_to(self.fd, &frame, &addr)
    }
}

/// Where the shim's feedback packets leave.
pub(crate) enum FeedbackOut {
    /// Routed by the host's IP stack (the testbed's hosts route).
    Routed(RawSocket),
    /// As frames out of the uplink (a bridged hypervisor).
    Link(LinkSocket),
}

impl FeedbackOut {
    /// Sends one feedback packet; false if there is no way to its destination yet (a link
    /// socket that has seen no packet from it).
    fn send(&self, fb: &FeedbackPacket, maps: &Maps) -> Result<bool, String> {
        let bytes = fb.to_ipv4_bytes();
        match self {
            FeedbackOut::Routed(raw) => raw.send(&bytes, fb.dst).map(|_| true),
            FeedbackOut::Link(link) => match maps.remote_macs.get(&fb.dst.to_be(), 0) {
                Ok(mac) => link.send(&bytes, mac.addr).map(|_| true),
                Err(_) => Ok(false),
            },
        }
    }
}

pub fn run(cfg: HostConfig) -> Result<(), String> {
    let plan = &cfg.plan;
    let shim: Option<Box<dyn HostShim<Ipv4Packet<Vec<u8>>>>> = plan
        .mechanism
        .as_ref()
        .and_then(|m| {
            m.build::<Ipv4Packet<Vec<u8>>>(plan)
                .shims
                .into_iter()
                .nth(cfg.host as usize)
        })
        .flatten();
    let datapath = shim.as_ref().map(|s| s.datapath()).unwrap_or_default();

    let clock = Clock::new(cfg.start_mono_ns, cfg.time_scale);
    let (mut bpf, mut maps) = load(flags(datapath, cfg.scrub && datapath.scrub))?;
    for port in cfg.vm_ports.values() {
        attach(&mut bpf, "vm_ingress", port, TcAttachType::Ingress)?;
    }
    attach(&mut bpf, "uplink_egress", &cfg.uplink, TcAttachType::Egress)?;
    attach(
        &mut bpf,
        "uplink_ingress",
        &cfg.uplink,
        TcAttachType::Ingress,
    )?;
    let nic = &plan.ports[plan.hosts[cfg.host as usize].nic_port as usize];
    let limit_bytes = nic
        .queue
        .limit_bytes
        .unwrap_or(0)
        .max(nic.queue.limit_packets.unwrap_or(0) * 1514);
    let limiters = Limiters::for_datapath(datapath, &cfg.uplink, limit_bytes, &clock)?;
    let mut control = match (&cfg.control, &cfg.control_key) {
        (Some(path), Some(key)) => Some(ControlSocket::bind(path, key)?),
        (Some(_), None) => return Err("config: control needs control_key".into()),
        (None, _) => None,
    };
    let records = Records::create(&cfg.out, "time_s,vm,dst,rate_mbps")?;
    signal_ready(&cfg.ready)?;

    let Some(shim) = shim else {
        // Nothing to run.
        loop {
            sleep_ns(1_000_000_000);
        }
    };
    let feedback = FeedbackOut::Routed(RawSocket::new()?);
    let mut driver = ShimDriver::new(shim, limiters, feedback, cfg.rate_scale);
    // Set up at normal priority; only the loop runs at the real-time one.
    if let Some(priority) = cfg.realtime_priority.filter(|_| !datapath.pair_counts) {
        realtime(priority);
    }
    let names: HashMap<u32, &str> = plan.vms.iter().map(|v| (v.ip(), v.name.as_str())).collect();
    let mut next_sample: Nanos = 0;
    let mut next_counts: Nanos = 0;
    let mut written = BTreeMap::new();
    loop {
        let elapsed = clock.elapsed();
        let rates = driver.round(clock.at(elapsed), &clock, &mut maps, control.as_mut())?;
        // The samples are on the real clock, as the run's other records.
        if elapsed >= next_sample {
            let mut lines = String::new();
            for &(vm, key, bps) in &rates {
                let dst = names.get(&key).copied().unwrap_or("");
                let vm = names.get(&vm).copied().unwrap_or("");
                let (t, mbps) = (elapsed as f64 / 1e9, bps as f64 / 1e6);
                lines.push_str(&format!("{t},{vm},{dst},{mbps}\n"));
            }
            if !lines.is_empty() {
                records.append(lines)?;
            }
            next_sample = elapsed + cfg.sample_ns;
        }
        if let Some(path) = cfg.counts.as_deref().filter(|_| elapsed >= next_counts) {
            let counts = driver.counts(&maps, control.as_ref())?;
            if counts != written {
                records.replace_json(path, &counts)?;
                written = counts;
            }
            next_counts = elapsed + COUNTS_EVERY_NS;
        }
        let fds: Vec<_> = control.iter().map(|c| c.socket().as_raw_fd()).collect();
        wait_readable(&fds, driver.wait_ns(&clock));
    }
}

impl Limiters {
    /// The limiters a shim's datapath asks for on `uplink`, if any: HTB classes under the
    /// uplink's root class 1:1 (whose FIFOs hold `limit_bytes`), or the egress program's
    /// buckets. A bucket's burst is in real time (a dilated shim's is that much longer).
    pub(crate) fn for_datapath(
        datapath: Datapath,
        uplink: &str,
        limit_bytes: u64,
        clock: &Clock,
    ) -> Result<Option<Limiters>, String> {
        let Some(bucket) = datapath.limiter else {
            return Ok(None);
        };
        Ok(Some(Limiters {
            kind: match bucket.on_shortage {
                ShortagePolicy::Drop => LimiterKind::Bpf,
                ShortagePolicy::Queue => LimiterKind::Htb {
                    htb: Htb::new(uplink)?,
                    next_minor: 0x10,
                    limit_bytes,
                },
            },
            bucket: BucketConfig {
                burst_ns: clock.real(bucket.burst_ns),
                ..bucket
            },
            made: HashMap::new(),
        }))
    }
}

impl Limiters {
    /// Takes over the HTB classes a dead agent made (the pinned `classes` map says which),
    /// so that the first rates change them rather than add them again.
    pub(crate) fn resume(&mut self, maps: &Maps) {
        let LimiterKind::Htb { next_minor, .. } = &mut self.kind else {
            return;
        };
        for (key, class) in maps.classes.iter().filter_map(Result::ok) {
            let minor = (class & 0xffff) as u16;
            *next_minor = (*next_minor).max(minor.saturating_add(1));
            let (vm, remote) = (u32::from_be(key.vm), u32::from_be(key.remote));
            self.made.insert((vm, remote), (minor, 0));
        }
    }
}

/// A host shim driven by the datapath, one round at a time: what the testbed's agent and the
/// `tacc agent` daemon both run.
pub(crate) struct ShimDriver {
    pub shim: Box<dyn HostShim<Ipv4Packet<Vec<u8>>>>,
    datapath: Datapath,
    limiters: Option<Limiters>,
    feedback: FeedbackOut,
    /// Feedback packets that had no way to their destination.
    feedback_unsent: u64,
    rate_scale: f64,
    seen: HashMap<PairKey, RawCounts>,
    /// The VMs whose pairs the shim hears of (`None`: every source, as on the testbed, where
    /// every address is a VM's). On a real hypervisor other sources leave the uplink too (a
    /// bridge's IGMP reports from 0.0.0.0), and the shim would count each as a VM.
    pub vms: Option<HashSet<u32>>,
    /// A source outside `vms` sent since the flag was last cleared (a VM not learned yet?).
    pub unknown_sources: bool,
    refused: HashSet<u32>,
    flushed: HashMap<PairKey, u64>,
    buf: Vec<u8>,
}

impl ShimDriver {
    pub fn new(
        shim: Box<dyn HostShim<Ipv4Packet<Vec<u8>>>>,
        limiters: Option<Limiters>,
        feedback: FeedbackOut,
        rate_scale: f64,
    ) -> ShimDriver {
        ShimDriver {
            datapath: shim.datapath(),
            shim,
            limiters,
            feedback,
            feedback_unsent: 0,
            rate_scale,
            seen: HashMap::new(),
            vms: None,
            unknown_sources: false,
            refused: HashSet::new(),
            flushed: HashMap::new(),
            buf: vec![0; 65536],
        }
    }

    /// One round at the shim's time `now`: the datapath's new counts and the controller's
    /// messages in, the timer, feedback packets out, rates, clamps and refusals written back.
    /// Returns the rates in force (scaled), as (VM, key, bits/s).
    pub fn round(
        &mut self,
        now: Nanos,
        clock: &Clock,
        maps: &mut Maps,
        control: Option<&mut ControlSocket>,
    ) -> Result<Vec<(u32, u32, u64)>, String> {
        let shim = &mut self.shim;
        for entry in maps.pairs.iter() {
            let (key, counts) = entry.map_err(|e| format!("pairs map: {e}"))?;
            let before = self.seen.insert(key, counts).unwrap_or_default();
            let known = self
                .vms
                .as_ref()
                .is_none_or(|v| v.contains(&u32::from_be(key.vm)));
            self.unknown_sources |= !known && counts.tx_packets != before.tx_packets;
            if counts != before && known {
                shim.on_datapath(now, &delta(key, counts, before));
            }
        }
        if let Some(sock) = control {
            sock.drain(now, &mut self.buf, &mut |msg| shim.on_message(now, msg));
        }
        if shim.poll_at().is_some_and(|t| t <= now) {
            shim.on_timer(now);
        }
        while let Some(fb) = shim.poll_transmit(now) {
            if !self.feedback.send(&fb, maps)? {
                self.feedback_unsent += 1;
                continue;
            }
            let key = PairKey::new(fb.src, fb.dst);
            let total = self.flushed.entry(key).or_default();
            *total += fb.count as u64;
            maps.flushed
                .insert(key, *total, 0)
                .map_err(|e| format!("flushed map: {e}"))?;
        }
        let mut rates = Vec::new();
        shim.rates(&mut |vm, key, bps| {
            rates.push((vm, key, (bps as f64 * self.rate_scale) as u64));
        });
        if let Some(limiters) = &mut self.limiters {
            limiters.sync(&rates, maps)?;
        }
        if self.datapath.clamp_window {
            sync_clamps(&**shim, &mut maps.clamps, clock)?;
        }
        if self.datapath.admission_control {
            sync_refused(&**shim, now, &mut maps.refused, &mut self.refused)?;
        }
        Ok(rates)
    }

    /// The shim's counters, the datapath's and the control socket's, by name.
    pub fn counts(
        &self,
        maps: &Maps,
        control: Option<&ControlSocket>,
    ) -> Result<BTreeMap<&'static str, f64>, String> {
        let mut counts = BTreeMap::new();
        let mut add = |k: &'static str, v: f64| *counts.entry(k).or_insert(0.0) += v;
        self.shim.counters(&mut add);
        add("feedback_unsent", self.feedback_unsent as f64);
        datapath_counts(maps, &mut add)?;
        if let Some(sock) = control {
            sock.counts.each(&mut add);
        }
        Ok(counts)
    }

    /// Takes the datapath's counts and the marks flushed so far as already seen: an agent
    /// that took over the maps of one that died hands the shim only what comes after.
    pub fn baseline(&mut self, maps: &Maps) {
        for (key, counts) in maps.pairs.iter().filter_map(Result::ok) {
            self.seen.insert(key, counts);
        }
        for (key, total) in maps.flushed.iter().filter_map(Result::ok) {
            self.flushed.insert(key, total);
        }
    }

    /// Hands the shim the rates in force in the datapath (`bucket_rates`, at the rate
    /// scale) of the VMs `known` says are there: a shim built anew (a restarted agent, a
    /// changed set of VMs) goes on from them.
    pub fn resume(&mut self, now: Nanos, maps: &Maps, known: impl Fn(u32) -> bool) {
        for (key, rate) in maps.bucket_rates.iter().filter_map(Result::ok) {
            let bps = (rate.bytes_per_sec * 8) as f64 / self.rate_scale;
            let (vm, remote) = (u32::from_be(key.vm), u32::from_be(key.remote));
            if known(vm) {
                self.shim.resume_rate(now, vm, remote, bps as u64);
            }
        }
    }

    /// Lifts every limit (fail-open): each rate's class goes to `line_rate_bps`, each BPF
    /// bucket away, and no window is clamped, until the next round applies the shim's rates
    /// again.
    pub fn lift(&mut self, maps: &mut Maps, line_rate_bps: u64) -> Result<(), String> {
        if let Some(Limiters { kind, bucket, made }) = &mut self.limiters {
            for (&(vm, key), (minor, applied)) in made.iter_mut() {
                match kind {
                    LimiterKind::Bpf => {
                        let _ = maps.bucket_rates.remove(&PairKey::new(vm, key));
                    }
                    LimiterKind::Htb { htb, .. } => {
                        htb.change(*minor, line_rate_bps, bucket.depth_for(line_rate_bps))?
                    }
                }
                *applied = 0;
            }
        }
        let clamped: Vec<PairKey> = maps.clamps.keys().filter_map(Result::ok).collect();
        for k in clamped {
            let _ = maps.clamps.remove(&k);
        }
        Ok(())
    }

    /// Every pair's counts since the datapath first saw it (as of the last round).
    pub fn pair_totals(&self) -> Vec<PairCounts> {
        self.seen
            .iter()
            .map(|(&key, &counts)| delta(key, counts, RawCounts::default()))
            .collect()
    }

    /// Real nanoseconds until the next round: the shim's timer, or the poll of the datapath's
    /// counts (a dilated shim's timers are that much longer, and so is the poll).
    pub fn wait_ns(&self, clock: &Clock) -> u64 {
        let poll = if self.datapath.pair_counts {
            clock.real(POLL_NS)
        } else {
            IDLE_POLL_NS
        };
        let timer = self
            .shim
            .poll_at()
            .map_or(u64::MAX, |t| clock.real(t.saturating_sub(clock.now())));
        timer.min(poll).max(10_000)
    }
}

/// Replaces a file whole with `text`: a reader never sees half of it.
pub(crate) fn write_json_text(path: &Path, text: &str) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The refused map holds exactly the shim's refused destinations (`applied`: what it holds,
/// so that an unchanged list costs no system call).
fn sync_refused(
    shim: &dyn HostShim<Ipv4Packet<Vec<u8>>>,
    now: Nanos,
    map: &mut BpfHashMap<MapData, u32, u8>,
    applied: &mut HashSet<u32>,
) -> Result<(), String> {
    let mut want = HashSet::new();
    shim.refused_destinations(now, &mut |dst| {
        want.insert(dst.to_be());
    });
    for k in applied.difference(&want) {
        let _ = map.remove(k);
    }
    for &k in want.difference(applied) {
        map.insert(k, 1, 0)
            .map_err(|e| format!("refused map: {e}"))?;
    }
    *applied = want;
    Ok(())
}

/// The clamps map holds exactly the shim's clamps, expiry on CLOCK_MONOTONIC.
fn sync_clamps(
    shim: &dyn HostShim<Ipv4Packet<Vec<u8>>>,
    map: &mut BpfHashMap<MapData, PairKey, RawClamp>,
    clock: &Clock,
) -> Result<(), String> {
    let mut want = HashMap::new();
    shim.window_clamps(&mut |c| {
        want.insert(
            PairKey::new(c.vm, c.remote),
            RawClamp {
                window: c.window,
                mss: c.mss,
                pad: 0,
                expires_ns: clock.monotonic(c.expires),
            },
        );
    });
    let stale: Vec<PairKey> = map
        .keys()
        .filter_map(Result::ok)
        .filter(|k| !want.contains_key(k))
        .collect();
    for k in stale {
        let _ = map.remove(&k);
    }
    for (k, v) in want {
        map.insert(k, v, 0)
            .map_err(|e| format!("clamps map: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The programs run by the kernel on real frames (BPF_PROG_TEST_RUN), their rewrites
    //! checked byte for byte against tacc-mech's wire code on the same bytes.
    use super::*;
    use crate::testrun::{frame, require_root, run, run_marked, TC_ACT_OK, TC_ACT_SHOT};
    use tacc_mech::headers::{ip_proto, tcp_flags, Ecn, PacketHeaders};
    use tacc_mech::wire::{emit, Ipv4Fields, TcpFields};

    const VM: u32 = 0x0a00_0001;
    const REMOTE: u32 = 0x0a00_0102;
    const ALL: u32 = F_SET_ECT | F_COUNT_CE | F_IPR | F_FEEDBACK | F_SCRUB | F_CLAMP;

    fn packet(
        src: u32,
        dst: u32,
        protocol: u8,
        ecn: Ecn,
        ident: u16,
        tcp: Option<TcpFields>,
    ) -> Vec<u8> {
        emit(
            &Ipv4Fields {
                src,
                dst,
                protocol,
                ident,
                ecn,
                total_len: if tcp.is_some() { 52 } else { 100 },
                ttl: 64,
            },
            tcp.as_ref(),
        )
    }

    fn ack(flags: u8, window: u16) -> Option<TcpFields> {
        Some(TcpFields {
            src_port: 5001,
            dst_port: 40000,
            seq: 7,
            ack: 9,
            flags,
            window,
        })
    }

    /// `ip` after `edit` through the wire code, as a frame.
    fn expected(ip: &[u8], edit: impl FnOnce(&mut Ipv4Packet<&mut [u8]>)) -> Vec<u8> {
        let mut b = ip.to_vec();
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        edit(&mut p);
        assert!(p.checksums_valid());
        frame(&b)
    }

    fn counts(maps: &Maps) -> RawCounts {
        maps.pairs
            .get(&PairKey::new(VM, REMOTE), 0)
            .unwrap_or_default()
    }

    #[test]
    #[ignore = "needs root (BPF_PROG_TEST_RUN): make test runs it as root"]
    fn arriving_marks_are_counted_and_cleared_with_the_wire_codes_checksum() {
        require_root("arriving_marks_are_counted_and_cleared_with_the_wire_codes_checksum");
        let (mut bpf, maps) = load(ALL).unwrap();
        let ce = packet(
            REMOTE,
            VM,
            ip_proto::TCP,
            Ecn::Ce,
            1,
            ack(tcp_flags::ACK, 500),
        );
        let out = run(&mut bpf, "uplink_ingress", &frame(&ce));
        assert_eq!(out.verdict, TC_ACT_OK);
        assert_eq!(out.frame, expected(&ce, |p| p.set_ecn(Ecn::Ect0)));

        let mut ipr = packet(REMOTE, VM, ip_proto::UDP, Ecn::Ect0, 2, None);
        Ipv4Packet::new_checked(&mut ipr[..])
            .unwrap()
            .set_reserved_bit(true);
        let out = run(&mut bpf, "uplink_ingress", &frame(&ipr));
        assert_eq!(out.frame, expected(&ipr, |p| p.set_reserved_bit(false)));

        let fb = tacc_mech::FeedbackPacket {
            src: REMOTE,
            dst: VM,
            count: 7,
        }
        .to_ipv4_bytes();
        assert_eq!(
            run(&mut bpf, "uplink_ingress", &frame(&fb)).verdict,
            TC_ACT_SHOT
        );

        let c = counts(&maps);
        assert_eq!(
            (
                c.ce_cleared,
                c.ipr_seen,
                c.feedback_packets,
                c.feedback_marks
            ),
            (1, 1, 1, 7)
        );
    }

    #[test]
    #[ignore = "needs root (BPF_PROG_TEST_RUN): make test runs it as root"]
    fn pending_marks_are_echoed_once_each_and_packets_leave_ect0_in_their_class() {
        require_root("pending_marks_are_echoed_once_each_and_packets_leave_ect0_in_their_class");
        let (mut bpf, mut maps) = load(ALL).unwrap();
        let ce = packet(REMOTE, VM, ip_proto::UDP, Ecn::Ce, 1, None);
        run(&mut bpf, "uplink_ingress", &frame(&ce));
        maps.classes
            .insert(PairKey::new(VM, REMOTE), 0x1_0010, 0)
            .unwrap();
        let out_pkt = packet(VM, REMOTE, ip_proto::UDP, Ecn::NotEct, 3, None);
        let first = run(&mut bpf, "uplink_egress", &frame(&out_pkt));
        assert_eq!(
            first.frame,
            expected(&out_pkt, |p| {
                p.set_ecn(Ecn::Ect0);
                p.set_reserved_bit(true);
            })
        );
        assert_eq!(first.priority, 0x1_0010);
        let second = run(&mut bpf, "uplink_egress", &frame(&out_pkt));
        assert_eq!(second.frame, expected(&out_pkt, |p| p.set_ecn(Ecn::Ect0)));
        let c = counts(&maps);
        assert_eq!((c.ipr_set, c.tx_packets), (1, 2));

        // A mark the agent sent back in a feedback packet is no longer echoed.
        run(&mut bpf, "uplink_ingress", &frame(&ce));
        maps.flushed.insert(PairKey::new(VM, REMOTE), 1, 0).unwrap();
        let third = run(&mut bpf, "uplink_egress", &frame(&out_pkt));
        assert_eq!(third.frame, expected(&out_pkt, |p| p.set_ecn(Ecn::Ect0)));
    }

    #[test]
    #[ignore = "needs root (BPF_PROG_TEST_RUN): make test runs it as root"]
    fn admission_control_drops_only_connection_requests_to_refused_destinations() {
        require_root("admission_control_drops_only_connection_requests_to_refused_destinations");
        let (mut bpf, mut maps) = load(ALL | F_ADMISSION).unwrap();
        maps.refused.insert(REMOTE.to_be(), 1, 0).unwrap();
        let verdict = |bpf: &mut Ebpf, dst: u32, flags: u8| {
            let p = packet(VM, dst, ip_proto::TCP, Ecn::NotEct, 1, ack(flags, 100));
            run(bpf, "uplink_egress", &frame(&p)).verdict
        };
        assert_eq!(verdict(&mut bpf, REMOTE, tcp_flags::SYN), TC_ACT_SHOT);
        // A connection already open, and its SYN-ACK, go on; so does a SYN elsewhere.
        assert_eq!(verdict(&mut bpf, REMOTE, tcp_flags::ACK), TC_ACT_OK);
        assert_eq!(
            verdict(&mut bpf, REMOTE, tcp_flags::SYN | tcp_flags::ACK),
            TC_ACT_OK
        );
        assert_eq!(verdict(&mut bpf, REMOTE + 1, tcp_flags::SYN), TC_ACT_OK);
        let mut counts = BTreeMap::new();
        datapath_counts(&maps, &mut |k, v| {
            counts.insert(k, v);
        })
        .unwrap();
        assert_eq!(counts["admission_drops"], 1.0);
        // Without the flag nothing is refused.
        let (mut bpf, mut maps) = load(ALL).unwrap();
        maps.refused.insert(REMOTE.to_be(), 1, 0).unwrap();
        assert_eq!(verdict(&mut bpf, REMOTE, tcp_flags::SYN), TC_ACT_OK);
    }

    #[test]
    #[ignore = "needs root (BPF_PROG_TEST_RUN): make test runs it as root"]
    fn the_bpf_limiter_drops_what_the_pairs_bucket_cannot_pay() {
        require_root("the_bpf_limiter_drops_what_the_pairs_bucket_cannot_pay");
        let (mut bpf, mut maps) = load(ALL | F_BUCKET).unwrap();
        // 100-byte packets against a bucket of 250 bytes refilling at 1 byte a second: two
        // pass, the third finds 50 bytes.
        let rate = BucketRate {
            bytes_per_sec: 1,
            burst_bytes: 250,
        };
        maps.bucket_rates
            .insert(PairKey::new(VM, REMOTE), rate, 0)
            .unwrap();
        let out_pkt = packet(VM, REMOTE, ip_proto::UDP, Ecn::NotEct, 3, None);
        let verdicts: Vec<u32> = (0..3)
            .map(|_| run(&mut bpf, "uplink_egress", &frame(&out_pkt)).verdict)
            .collect();
        assert_eq!(verdicts, [TC_ACT_OK, TC_ACT_OK, TC_ACT_SHOT]);
        // A pair without a rate is not limited.
        let other = packet(VM, REMOTE + 1, ip_proto::UDP, Ecn::NotEct, 4, None);
        assert!((0..5).all(|_| run(&mut bpf, "uplink_egress", &frame(&other)).verdict == TC_ACT_OK));
    }

    #[test]
    #[ignore = "needs root (BPF_PROG_TEST_RUN): make test runs it as root"]
    fn a_packet_longer_than_the_burst_passes_a_full_bucket_and_leaves_it_in_debt() {
        require_root("a_packet_longer_than_the_burst_passes_a_full_bucket_and_leaves_it_in_debt");
        let (mut bpf, mut maps) = load(ALL | F_BUCKET).unwrap();
        // A GSO packet (here 1000 bytes) against a 250-byte bucket: it never fits, so it
        // passes a full bucket, and the next (100 bytes) waits for 750 bytes of debt.
        let rate = BucketRate {
            bytes_per_sec: 1,
            burst_bytes: 250,
        };
        maps.bucket_rates
            .insert(PairKey::new(VM, REMOTE), rate, 0)
            .unwrap();
        let mut long = packet(VM, REMOTE, ip_proto::UDP, Ecn::Ect0, 3, None);
        long.resize(1000, 0);
        long[2..4].copy_from_slice(&1000u16.to_be_bytes());
        let short = packet(VM, REMOTE, ip_proto::UDP, Ecn::Ect0, 4, None);
        let verdicts: Vec<u32> = [&long, &short, &long]
            .iter()
            .map(|p| run(&mut bpf, "uplink_egress", &frame(p)).verdict)
            .collect();
        assert_eq!(verdicts, [TC_ACT_OK, TC_ACT_SHOT, TC_ACT_SHOT]);
    }

    #[test]
    #[ignore = "needs root (BPF_PROG_TEST_RUN): make test runs it as root"]
    fn the_vms_addresses_are_learned_by_port_and_the_remotes_macs_on_the_uplink() {
        require_root("the_vms_addresses_are_learned_by_port_and_the_remotes_macs_on_the_uplink");
        let (mut bpf, maps) = load(ALL | F_LEARN).unwrap();
        let from_vm = packet(VM, REMOTE, ip_proto::UDP, Ecn::NotEct, 3, None);
        crate::testrun::run_on(&mut bpf, "vm_ingress", &frame(&from_vm), 1);
        assert_eq!(maps.vm_sources.get(&VM.to_be(), 0).unwrap(), 1);
        let from_remote = packet(REMOTE, VM, ip_proto::UDP, Ecn::NotEct, 4, None);
        run(&mut bpf, "uplink_ingress", &frame(&from_remote));
        // frame() writes the source MAC 02:00:00:00:00:02.
        let mac = maps.remote_macs.get(&REMOTE.to_be(), 0).unwrap();
        assert_eq!(mac.addr, [2, 0, 0, 0, 0, 2]);
        assert!(maps.remote_macs.get(&VM.to_be(), 0).is_err());
    }

    #[test]
    #[ignore = "needs root (BPF_PROG_TEST_RUN): make test runs it as root"]
    fn acks_of_a_clamped_pair_get_the_window_and_syn_acks_the_mss() {
        require_root("acks_of_a_clamped_pair_get_the_window_and_syn_acks_the_mss");
        let (mut bpf, mut maps) = load(ALL).unwrap();
        let clamp = RawClamp {
            window: 100,
            mss: 1460,
            pad: 0,
            expires_ns: u64::MAX,
        };
        maps.clamps
            .insert(PairKey::new(VM, REMOTE), clamp, 0)
            .unwrap();
        let big = packet(
            REMOTE,
            VM,
            ip_proto::TCP,
            Ecn::Ect0,
            4,
            ack(tcp_flags::ACK, 5000),
        );
        let out = run(&mut bpf, "uplink_ingress", &frame(&big));
        assert_eq!(out.frame, expected(&big, |p| p.set_tcp_window(100)));
        let small = packet(
            REMOTE,
            VM,
            ip_proto::TCP,
            Ecn::Ect0,
            5,
            ack(tcp_flags::ACK, 50),
        );
        assert_eq!(
            run(&mut bpf, "uplink_ingress", &frame(&small)).frame,
            frame(&small)
        );
        let syn_ack = packet(
            REMOTE,
            VM,
            ip_proto::TCP,
            Ecn::NotEct,
            6,
            ack(tcp_flags::SYN | tcp_flags::ACK, 64240),
        );
        let out = run(&mut bpf, "uplink_ingress", &frame(&syn_ack));
        assert_eq!(out.frame, expected(&syn_ack, |p| p.set_tcp_window(1460)));
        // Lapsed: left alone.
        let lapsed = RawClamp {
            expires_ns: 1,
            ..clamp
        };
        maps.clamps
            .insert(PairKey::new(VM, REMOTE), lapsed, 0)
            .unwrap();
        assert_eq!(
            run(&mut bpf, "uplink_ingress", &frame(&big)).frame,
            frame(&big)
        );
        // The agent reports the two rewrites (the ACK and the SYN-ACK) under the shim's name.
        let mut counts = BTreeMap::new();
        datapath_counts(&maps, &mut |k, v| {
            counts.insert(k, v);
        })
        .unwrap();
        assert_eq!(counts["rwnd_rewrites"], 2.0);
        assert_eq!(counts["bucket_drops"], 0.0);
    }

    #[test]
    #[ignore = "needs root (BPF_PROG_TEST_RUN): make test runs it as root"]
    fn a_vm_cannot_send_feedback_packets_or_ipr_bits() {
        require_root("a_vm_cannot_send_feedback_packets_or_ipr_bits");
        let (mut bpf, _maps) = load(ALL).unwrap();
        let forged = tacc_mech::FeedbackPacket {
            src: VM,
            dst: REMOTE,
            count: 500,
        }
        .to_ipv4_bytes();
        assert_eq!(
            run(&mut bpf, "vm_ingress", &frame(&forged)).verdict,
            TC_ACT_SHOT
        );
        let mut ipr = packet(
            VM,
            REMOTE,
            ip_proto::TCP,
            Ecn::Ect0,
            8,
            ack(tcp_flags::ACK, 100),
        );
        Ipv4Packet::new_checked(&mut ipr[..])
            .unwrap()
            .set_reserved_bit(true);
        let out = run(&mut bpf, "vm_ingress", &frame(&ipr));
        assert_eq!(out.verdict, TC_ACT_OK);
        assert_eq!(out.frame, expected(&ipr, |p| p.set_reserved_bit(false)));
        // Scrubbing off: both pass untouched.
        let (mut open, _maps) = load(ALL & !F_SCRUB).unwrap();
        assert_eq!(
            run(&mut open, "vm_ingress", &frame(&forged)).verdict,
            TC_ACT_OK
        );
        assert_eq!(
            run(&mut open, "vm_ingress", &frame(&ipr)).frame,
            frame(&ipr)
        );
        // Where the VMs' packets reach the uplink unscrubbed (Open vSwitch's userspace
        // datapath), the uplink's egress scrubs them: a VM's feedback is dropped, the
        // agent's own (marked by its socket) leaves, a VM's IPR bit is cleared.
        let (mut egress, _maps) = load(ALL | F_SCRUB_EGRESS).unwrap();
        assert_eq!(
            run(&mut egress, "uplink_egress", &frame(&forged)).verdict,
            TC_ACT_SHOT
        );
        let own = run_marked(
            &mut egress,
            "uplink_egress",
            &frame(&forged),
            0,
            FEEDBACK_MARK,
        );
        assert_eq!((own.verdict, own.frame), (TC_ACT_OK, frame(&forged)));
        let out = run(&mut egress, "uplink_egress", &frame(&ipr));
        assert_eq!(out.verdict, TC_ACT_OK);
        assert!(!Ipv4Packet::new_checked(&out.frame[14..])
            .unwrap()
            .reserved_bit());
        // Without it (a Linux bridge: vm_ingress scrubbed them), feedback leaves as it is.
        assert_eq!(
            run(&mut open, "uplink_egress", &frame(&forged)).verdict,
            TC_ACT_OK
        );
    }
}
