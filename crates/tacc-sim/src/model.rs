//! The simulated world as the run's events touch it: ports, hosts, VMs, endpoints, flows,
//! apps, the forwarding table and the mechanism's slots. [`crate::build`] makes it from a
//! scenario [`crate::validate`] has checked.

use crate::cc::CcKind;
use crate::fifo::{PortQueue, Waiting};
use crate::loss::LinkLoss;
use crate::mechanism::{Control, HostSlot, SwitchSlot};
use crate::packet::{flow_hash, Packet, PktId, NO_EP};
use crate::queue::{Qdisc, Red};
use crate::rng::Rng;
use crate::rules::{FlowTable, Rule};
use crate::scenario::Forge;
use crate::tcp::{TcpConfig, TcpEndpoint, TcpStats};
use crate::topology::{self, Graph, NodeRef};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use tacc_mech::control::PacketInHeaders;
use tacc_mech::roles::PathOracle;

pub(crate) const IP_BASE: u32 = 0x0a00_0000; // 10.0.0.0

/// The address of the `vm`-th VM: 10.0.0.1 onwards.
pub(crate) fn vm_address(vm: u32) -> u32 {
    IP_BASE + 1 + vm
}

/// The counters a packet's passage updates (`repr(C)`: the end of `Port`'s third cache
/// line). Packets enqueued are those sent and those still queued (`Port::enqueued`).
#[derive(Clone, Debug, Default)]
#[repr(C)]
pub struct PortStats {
    /// Integral of the backlog (packets x ns) for the time-averaged queue. A u64 holds
    /// 10,000 packets queued for 21 days.
    pub backlog_integral: u64,
    last: u64,
    pub tx_bytes: u64,
    pub tx_pkts: u64,
    pub marked: u64,
}

impl PortStats {
    /// Accounts the backlog held since the last change.
    pub fn advance(&mut self, now: u64, backlog: u64) {
        self.backlog_integral += backlog * (now - self.last);
        self.last = now;
    }
}

/// A port's packets dropped, by cause.
#[derive(Clone, Debug, Default)]
pub struct PortDrops {
    pub overflow: u64,
    pub aqm: u64,
    pub scripted: u64,
    /// Lost on the link after being sent (random loss).
    pub loss: u64,
}

impl PortDrops {
    pub fn total(&self) -> u64 {
        self.overflow + self.aqm + self.scripted + self.loss
    }
}

/// What a link does to a packet besides serializing and delaying it: a host's transmit
/// timing noise and random loss. Only host NICs and lossy links have it.
#[derive(Debug)]
pub struct LinkNoise {
    /// Random extra delay in [0, jitter] per packet.
    pub jitter_ns: u64,
    /// The latest arrival scheduled: jittered packets still arrive in FIFO order.
    pub last_arrival: u64,
    pub loss: Option<LinkLoss>,
}

impl LinkNoise {
    /// Jitter of up to `jitter_ns` (0: none), no loss yet.
    pub fn new(jitter_ns: u64) -> LinkNoise {
        LinkNoise {
            jitter_ns,
            last_arrival: 0,
            loss: None,
        }
    }

    /// When a packet due at `at` arrives with the host's transmit timing noise.
    pub fn jitter(&mut self, at: u64, rng: &mut Rng) -> u64 {
        jittered(at, self.jitter_ns, &mut self.last_arrival, rng)
    }
}

/// `at` plus up to `jitter_ns` of noise, no earlier than `last` (the one before it): packets
/// stay in the order they were sent.
pub fn jittered(at: u64, jitter_ns: u64, last: &mut u64, rng: &mut Rng) -> u64 {
    if jitter_ns == 0 {
        return at;
    }
    *last = (at + rng.below(jitter_ns + 1)).max(*last);
    *last
}

/// `repr(C)`, aligned to a cache line: what a packet's passage reads and writes is in the
/// first three lines of the struct (the queue and its timing; where the link goes, the queue
/// discipline's admission fields, how packets leave and the per-packet counters), the rest
/// after. A large fabric's ports do not fit in the cache, and each line of a port a packet
/// touches is then a load from memory.
#[repr(C, align(64))]
pub struct Port {
    /// The packets admitted and not yet being serialized, first to leave first. Ids are kept
    /// where the port departs by event or holds its VM's vNIC (`Port::keep_ids`).
    pub queue: PortQueue,
    pub queue_bytes: u64,
    /// When the port has serialized every packet it holds.
    pub busy_until: u64,
    /// The start of the queue's head (`u64::MAX` when empty), kept here so that settling a
    /// port whose head has not started yet reads none of the queue's buffer: at k = 16 that
    /// buffer's load was 29% of an admission's samples.
    pub head_start: u64,
    /// Serialization cost in picoseconds per byte (8e12 / rate, rounded).
    pub ps_per_byte: u64,
    pub delay_ns: u64,
    pub(crate) to: PackedNode,
    pub qdisc: Qdisc,
    /// The most packets the queue has held.
    pub max_backlog: u32,
    /// Whether queued packets leave at a completion event each (pending while the queue
    /// holds any): ports of a switch with a mechanism's hook (SICC in the switch sees every
    /// departure as it happens, RWNDQ reads queues on its own timer). Elsewhere a queued
    /// packet's arrival is scheduled when it is admitted, its start being already known (the
    /// end of the packet ahead of it), and it leaves the queue when the port is next looked
    /// at (`settle`): no event for its departure at all. Set by `set_departs_by_event`.
    pub(crate) departs_by_event: bool,
    /// A host NIC whose queue is its one VM's vNIC (see `Vm::vnic_in_nic`): its waiting
    /// packets are the vNIC's, so the NIC's own queue, as reported, stays empty, and each
    /// packet that leaves leaves its endpoint's small queue. Set by `set_holds_vnic`.
    pub(crate) holds_vnic: bool,
    /// The link ends at a switch that forwards by its routing table alone: no mechanism's
    /// hook and no flow table that can ever hold a rule (`Model::mark_plain_far_ends`). A
    /// packet's output port there is then known as it leaves this port (routes are fixed),
    /// and its arrival is a `Forward`.
    pub plain_far_end: bool,
    /// [`Port::NOISE`]: `noise` is set (read first, so that ports without noise never load
    /// that field's line); [`Port::CAPTURED`]: the port's packets are written to a capture
    /// (`output.pcap`, in a run with an output directory). One byte for both: the hot lines
    /// are full.
    pub(crate) extras: u8,
    pub stats: PortStats,
    /// In the port, in the line after the hot ones: a host NIC reads it at every packet,
    /// where a box cost a load of the pointer and then one of the box. Set only through
    /// `Port::new` and `noise_or_default`, which keep `extras` with it.
    noise: Option<LinkNoise>,
    /// Read by classic RED only.
    pub red: Red,
    /// Read only where a switch's mechanism sees departures, so out of the hot lines.
    pub from: NodeRef,
    pub drops: PortDrops,
    pub rate_bps: u64,
    pub name: String,
}

/// A [`NodeRef`] in 4 bytes (the top bit marks a host), for `Port`'s hot lines.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PackedNode(u32);

impl PackedNode {
    const HOST: u32 = 1 << 31;

    fn new(n: NodeRef) -> PackedNode {
        match n {
            NodeRef::Host(h) => PackedNode(h | Self::HOST),
            NodeRef::Switch(s) => PackedNode(s),
        }
    }

    #[inline]
    fn get(self) -> NodeRef {
        if self.0 & Self::HOST != 0 {
            NodeRef::Host(self.0 & !Self::HOST)
        } else {
            NodeRef::Switch(self.0)
        }
    }
}

impl Port {
    /// The cache lines at its start that a packet's passage touches.
    pub const HOT_LINES: usize = 3;
    /// Bits of `extras`.
    pub(crate) const NOISE: u8 = 1;
    pub(crate) const CAPTURED: u8 = 2;

    /// Whether queued packets leave at a completion event each (`departs_by_event`). Before
    /// the run.
    pub fn set_departs_by_event(&mut self, on: bool) {
        self.departs_by_event = on;
        self.keep_ids();
    }

    /// Whether the port is a host NIC whose queue is its one VM's vNIC (`holds_vnic`).
    /// Before the run.
    pub fn set_holds_vnic(&mut self, on: bool) {
        self.holds_vnic = on;
        self.keep_ids();
    }

    pub fn holds_vnic(&self) -> bool {
        self.holds_vnic
    }

    /// The queue keeps its packets' ids where they are read: a port that departs by event
    /// launches each from the queue, a NIC holding its VM's vNIC tells each one's endpoint
    /// it left.
    fn keep_ids(&mut self) {
        self.queue
            .keep_ids(self.departs_by_event || self.holds_vnic);
    }

    /// Whether the port's packets are written to a capture.
    #[inline]
    pub fn captured(&self) -> bool {
        self.extras & Port::CAPTURED != 0
    }

    /// A port of the link from `from` to `to`, idle and empty (`ps_per_byte` from `rate_bps`).
    pub(crate) fn new(
        name: String,
        (from, to): (NodeRef, NodeRef),
        (rate_bps, delay_ns): (u64, u64),
        (qdisc, red): (Qdisc, Red),
        noise: Option<LinkNoise>,
    ) -> Port {
        Port {
            queue: PortQueue::default(),
            queue_bytes: 0,
            busy_until: 0,
            head_start: u64::MAX,
            ps_per_byte: (8_000_000_000_000u64 + rate_bps / 2) / rate_bps,
            delay_ns,
            to: PackedNode::new(to),
            qdisc,
            max_backlog: 0,
            departs_by_event: false,
            holds_vnic: false,
            plain_far_end: false,
            extras: if noise.is_some() { Port::NOISE } else { 0 },
            stats: PortStats::default(),
            noise,
            red,
            from,
            drops: PortDrops::default(),
            rate_bps,
            name,
        }
    }

    /// Where the link goes.
    #[inline]
    pub fn to(&self) -> NodeRef {
        self.to.get()
    }

    /// The link's noise, if any.
    pub fn noise(&self) -> Option<&LinkNoise> {
        self.noise.as_ref()
    }

    /// The link's noise, if any, its line read only where there is some.
    #[inline]
    pub fn noise_mut(&mut self) -> Option<&mut LinkNoise> {
        debug_assert_eq!(self.extras & Port::NOISE != 0, self.noise.is_some());
        if self.extras & Port::NOISE != 0 {
            self.noise.as_mut()
        } else {
            None
        }
    }

    /// The link's noise, made (without jitter) if it has none yet.
    pub(crate) fn noise_or_default(&mut self) -> &mut LinkNoise {
        self.extras |= Port::NOISE;
        self.noise.get_or_insert_with(|| LinkNoise::new(0))
    }

    /// Packets admitted so far: those sent and those still queued (a settled port's).
    pub fn enqueued(&self) -> u64 {
        self.stats.tx_pkts + self.queue.len() as u64
    }

    /// Serialization time of `len` bytes, from the port's picoseconds per byte.
    #[inline]
    pub fn ser(&self, len: u32) -> u64 {
        (len as u64 * self.ps_per_byte).div_ceil(1000)
    }

    /// Counts a packet whose serialization starts now.
    #[inline]
    pub fn count_tx(&mut self, len: u32) {
        self.stats.tx_bytes += len as u64;
        self.stats.tx_pkts += 1;
    }

    /// Takes out of the queue the packets whose serialization has begun by `now` (their
    /// arrivals are already scheduled), accounting each as of its start, and tells `left`
    /// the sending endpoint of each that leaves a NIC holding its VM's vNIC: the queue and its
    /// counters are then as the port holds them at `now`. Every read of a port's queue or
    /// transmit counters settles it first (`Model::settle`). Ports that depart by event need
    /// nothing.
    #[inline]
    pub fn settle(&mut self, now: u64, mut left: impl FnMut(u32)) {
        if self.departs_by_event {
            return;
        }
        while self.head_start <= now {
            let w = self.send_head();
            if self.holds_vnic {
                left(w.id);
            }
        }
    }

    /// The queue's head starts (at `head_start`): accounted as sent, out of the queue, and
    /// returned, with the next one's start in `head_start`.
    #[inline]
    pub fn send_head(&mut self) -> Waiting {
        let (held, _) = self.backlog();
        self.stats.advance(self.head_start, held as u64);
        let w = self
            .queue
            .pop_front()
            .expect("a head start is a queued packet's");
        self.queue_bytes -= w.len as u64;
        self.count_tx(w.len);
        let end = self.head_start + self.ser(w.len);
        if self.queue.is_empty() {
            self.head_start = u64::MAX;
            self.qdisc.on_idle(end, &mut self.red);
        } else {
            self.head_start = end;
        }
        w
    }

    /// The packets and bytes in the port's own queue: none at a NIC holding its VM's vNIC,
    /// whose waiting packets are still in the VM.
    #[inline]
    pub fn backlog(&self) -> (u32, u64) {
        if self.holds_vnic {
            (0, 0)
        } else {
            (self.queue.len() as u32, self.queue_bytes)
        }
    }

    /// Takes an admitted packet of `len` bytes: its start (now if the port is idle, else the
    /// end of the packet ahead of it) and end of serialization. A packet that starts at once
    /// is counted as sent; one that waits is for the caller to queue (`push_waiting`).
    #[inline]
    pub fn admit(&mut self, now: u64, len: u32) -> (u64, u64) {
        let start = now.max(self.busy_until);
        let end = start + self.ser(len);
        self.busy_until = end;
        if start == now {
            self.count_tx(len);
            self.qdisc.on_idle(end, &mut self.red);
        }
        (start, end)
    }

    /// Queues a packet that starts at `start` (from `admit`: the end of the one ahead, or of
    /// the one being sent).
    #[inline]
    pub fn push_waiting(&mut self, w: Waiting, start: u64) {
        if self.queue.is_empty() {
            self.head_start = start;
        }
        // Back to back, as `starts` takes them to be.
        debug_assert_eq!(
            start,
            self.starts()
                .last()
                .map_or(self.head_start, |(q, at)| at + self.ser(q.len))
        );
        self.queue.push_back(w);
        self.queue_bytes += w.len as u64;
    }

    /// The queued packets with their starts: the head's, then each at the end of the one
    /// ahead.
    fn starts(&self) -> impl Iterator<Item = (Waiting, u64)> + '_ {
        self.queue.iter().scan(self.head_start, |at, w| {
            let start = *at;
            *at += self.ser(w.len);
            Some((w, start))
        })
    }

    /// When the first packet of `id` in the queue starts, if one is there.
    pub fn start_of_first(&self, id: PktId) -> Option<u64> {
        self.starts().find(|(w, _)| w.id == id).map(|(_, at)| at)
    }
}

// The hot fields end within those lines, the noise is in the next one, and the queue takes
// 88 bytes of the first two.
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(offset_of!(Port, stats) + size_of::<PortStats>() <= Port::HOT_LINES * 64);
    assert!(
        offset_of!(Port, noise) == Port::HOT_LINES * 64 && size_of::<Option<LinkNoise>>() <= 64
    );
    assert!(size_of::<PortQueue>() == 88);
};

/// The default queue sample of a large fabric: every `every`-th of its `of` switch ports.
#[derive(Clone, Copy, Debug)]
pub struct PortSubset {
    pub every: usize,
    pub of: usize,
}

pub struct Host {
    pub name: String,
    pub nic_port: u32,
    /// When the last packet its flows' `return_delay` sent back left, noise included: they
    /// leave in order, apart from what its NIC sends.
    pub returned_last: u64,
}

pub struct Vm {
    pub name: String,
    pub host: u32,
    pub ip: u32,
    pub(crate) next_port: u16,
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
    /// The VM's vNIC is its host NIC's queue (`Port::holds_vnic`): the VM is alone on its
    /// host, with no shim between them (and no scripted drops in the run). The vNIC, a FIFO
    /// at the NIC's rate in front of a NIC it alone feeds, never leaves the NIC a packet to
    /// queue; a packet's start at the NIC is then known when the VM sends it, and its arrival
    /// is scheduled at once, with no event for it leaving the vNIC.
    pub vnic_in_nic: bool,
}

pub enum EpKind {
    Tcp(Box<TcpEndpoint>),
    /// A TCP endpoint of a connection closed at both ends, moved to `Model::closed` (at this
    /// index) out of the boxes of live ones: see `Model::closed`.
    TcpClosed(u32),
    UdpSink,
    UdpEcho {
        reply: u32,
    },
    /// The endpoint runs in another partition of a partitioned run (`crate::parallel`): its
    /// state lives there, and this partition's events never reach it.
    Elsewhere,
}

impl EpKind {
    /// The TCP endpoint of this slot, live or closed (`closed`: `Model::closed`).
    #[inline]
    pub fn tcp_mut<'a>(&'a mut self, closed: &'a mut [TcpEndpoint]) -> Option<&'a mut TcpEndpoint> {
        match self {
            EpKind::Tcp(t) => Some(t),
            EpKind::TcpClosed(i) => Some(&mut closed[*i as usize]),
            _ => None,
        }
    }
}

/// What a host event reads of its endpoint, in one cache line (`repr(C)`, aligned): the
/// optional fields are kept with sentinels (`u64::MAX`, `u32::MAX`) behind accessors.
#[repr(C, align(64))]
pub struct EpSlot {
    pub kind: EpKind,
    pub flow: u32,
    pub vm: u32,
    /// Time of the earliest pending timer event for this endpoint (`NO_TIMER`: none).
    pub timer_at: u64,
    pub last_delivered: u64,
    /// Packets this endpoint has in its VM's vNIC queue (TCP small queues).
    pub in_host: u32,
    /// Most packets the endpoint may keep in the vNIC queue.
    pub tsq_limit: u32,
    return_delay: u64,
    vnic_nic: u32,
    vnic_limit: u32,
}

const _: () = assert!(std::mem::size_of::<EpSlot>() == 64);

/// `EpSlot::timer_at` when no timer event is pending.
pub const NO_TIMER: u64 = u64::MAX;

impl EpSlot {
    /// An endpoint of flow `flow` in VM `vm`, with no timer pending and no return delay.
    fn new(
        kind: EpKind,
        (flow, vm): (u32, u32),
        tsq_limit: u32,
        vnic_in_nic: Option<VnicInNic>,
    ) -> EpSlot {
        let mut slot = EpSlot {
            kind,
            flow,
            vm,
            timer_at: NO_TIMER,
            last_delivered: 0,
            in_host: 0,
            tsq_limit,
            return_delay: u64::MAX,
            vnic_nic: u32::MAX,
            vnic_limit: 0,
        };
        slot.set_vnic_in_nic(vnic_in_nic);
        slot
    }

    /// The flow's `return_delay`, on its receiving end: what it sends reaches the sender
    /// this long after, outside the network.
    #[inline]
    pub fn return_delay(&self) -> Option<u64> {
        (self.return_delay != u64::MAX).then_some(self.return_delay)
    }

    pub fn set_return_delay(&mut self, delay: Option<u64>) {
        // A delay of u64::MAX ns (585 years) is past any run's end.
        self.return_delay = delay.map_or(u64::MAX, |d| d.min(u64::MAX - 1));
    }

    /// Its VM's vNIC as its host NIC's queue (`Vm::vnic_in_nic`), kept here so that an
    /// endpoint's segments reach the NIC without a read of the VM's or the host's record.
    #[inline]
    pub fn vnic_in_nic(&self) -> Option<VnicInNic> {
        (self.vnic_nic != u32::MAX).then_some(VnicInNic {
            nic: self.vnic_nic,
            limit: self.vnic_limit,
        })
    }

    fn set_vnic_in_nic(&mut self, v: Option<VnicInNic>) {
        (self.vnic_nic, self.vnic_limit) = v.map_or((u32::MAX, 0), |v| (v.nic, v.limit));
    }
}

/// The NIC whose queue is a VM's vNIC, and the vNIC's limit in packets (`Vm::vnic_limit`).
#[derive(Clone, Copy, Debug)]
pub struct VnicInNic {
    pub nic: u32,
    pub limit: u32,
}

pub struct UdpState {
    /// The source address written in the packets (the sender's, unless spoofed).
    pub src_ip: u32,
    pub forge: Option<Forge>,
    pub rate_bps: u64,
    pub packet_size: u32,
    pub on_mean: Option<u64>,
    pub off_mean: Option<u64>,
    pub is_on: bool,
    pub period_end: u64,
}

/// `repr(C)`, aligned to a cache line: what a delivery reads and writes (`Sim::credit`) is in
/// the first line. A large fabric's runs keep tens of thousands of flows, those with data in
/// flight scattered among them, and a delivery otherwise loaded two lines of its flow and
/// one of its goodput bins.
#[repr(C, align(64))]
pub struct Flow {
    pub delivered: u64,
    pub bytes: Option<u64>,
    pub end: Option<u64>,
    /// The goodput bin being filled and its bytes so far; earlier bins are in `bins`.
    bin_bytes: u64,
    bin_now: u32,
    pub completed: bool,
    pub stopped: bool,
    pub app: Option<u32>,
    /// Delivered bytes per goodput bin before `bin_now` (see `Flow::bin`).
    bins: Vec<u64>,
    pub name: String,
    pub group: String,
    pub src_vm: u32,
    pub dst_vm: u32,
    pub start: u64,
    pub stop: Option<u64>,
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
}

// What a credit reads and writes, in the first line, which a data segment's arrival asks the
// cache for.
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(align_of::<Flow>() == 64);
    // The last field of the line; `repr(C)` keeps the ones before it in order.
    assert!(offset_of!(Flow, app) + size_of::<Option<u32>>() <= 64);
};

impl Flow {
    /// Adds delivered bytes to goodput bin `b` (bins are filled in time order).
    #[inline]
    pub(crate) fn add_to_bin(&mut self, b: usize, bytes: u64) {
        if b != self.bin_now as usize {
            let done = self.bin_now as usize;
            if self.bin_bytes > 0 {
                if self.bins.len() <= done {
                    self.bins.resize(done + 1, 0);
                }
                self.bins[done] += self.bin_bytes;
            }
            self.bin_now = b as u32;
            self.bin_bytes = 0;
        }
        self.bin_bytes += bytes;
    }

    /// Bytes delivered in goodput bin `b`.
    pub fn bin(&self, b: usize) -> u64 {
        if b == self.bin_now as usize {
            self.bin_bytes
        } else {
            self.bins.get(b).copied().unwrap_or(0)
        }
    }
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
    /// Without an interval, each epoch's requests leave the aggregator when the last answer
    /// arrives (the first at `start`), and each worker answers when its request reaches it:
    /// this long later (`Model::flight_from`), by worker.
    pub request_ns: Vec<u64>,
    /// The shortest of them: the epoch begins (its flows are made) then, in every
    /// partition of a partitioned run, which is told as mail.
    pub request_min: u64,
    pub outstanding: u32,
    pub tcp: TcpConfig,
    /// The application's own random stream (its workers' answer delays), as a traffic
    /// source has (`Traffic::stream`): the same in every partition of a run.
    pub rng: Rng,
}

impl Incast {
    /// The random stream of the run's partition-aggregate application number `index`.
    pub fn stream(seed: u64, index: usize) -> Rng {
        const INCAST_STREAM: u64 = 0x696e_6361_7374_0000; // "incast\0\0"
        Rng::new(seed ^ INCAST_STREAM ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }
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
    /// The source's own random stream (see `Traffic::stream`): its arrivals do not depend on
    /// what else the run draws.
    pub rng: Rng,
}

/// One arrival of an open-loop source: sending and receiving VM, flow size, and the time to
/// the source's next arrival.
#[derive(Clone, Copy)]
pub struct Arrival {
    pub src: u32,
    pub dst: u32,
    pub bytes: u64,
    pub gap_ns: u64,
}

impl Traffic {
    /// The random stream of the run's traffic source number `index`: apart from the run's
    /// one stream (which also draws transmit jitter, sequence numbers and AQM decisions), so
    /// that a source offers the same flows whatever the network does with them. Runs of one
    /// seed with different mechanisms, queues or transports then carry the very same flows,
    /// and a workload drawn without a run (`workload::generate`) is the run's.
    pub fn stream(seed: u64, index: usize) -> Rng {
        const TRAFFIC_STREAM: u64 = 0x7472_6166_6669_6300; // "traffic\0"
        Rng::new(seed ^ TRAFFIC_STREAM ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// The source's next arrival, from its own stream.
    pub fn next_arrival(&mut self) -> Arrival {
        let mut rng = self.rng.clone();
        let arrival = self.draw(&mut rng);
        self.rng = rng;
        arrival
    }

    /// Draws an arrival: a random pair of distinct VMs, a size from the CDF, an exponential gap.
    pub(crate) fn draw(&self, rng: &mut Rng) -> Arrival {
        let n = self.vms.len() as u64;
        let src_i = rng.below(n);
        let mut dst_i = rng.below(n - 1);
        if dst_i >= src_i {
            dst_i += 1;
        }
        let bytes = self.cdf.sample(rng.uniform());
        Arrival {
            src: self.vms[src_i as usize],
            dst: self.vms[dst_i as usize],
            bytes,
            gap_ns: rng.exponential(self.mean_gap_ns) as u64,
        }
    }
}

pub enum App {
    Incast(Incast),
    Traffic(Traffic),
}

/// A controller with the global view of the ECMP hashes follows a flow's path.
impl PathOracle for Model {
    fn path(&self, mut s: u32, h: &PacketInHeaders) -> Vec<(u32, u32)> {
        let hash = |salt| flow_hash(salt, h.src, h.dst, h.protocol, h.src_port, h.dst_port);
        let mut hops = Vec::new();
        while let Some(port) = self.route_by(s, h.dst, hash) {
            hops.push((s, port));
            match self.ports[port as usize].to() {
                NodeRef::Switch(next) if hops.len() <= self.graph.switches.len() => s = next,
                _ => break,
            }
        }
        hops
    }
}

pub struct Model {
    pub name: String,
    pub seed: u64,
    pub duration: u64,
    pub graph: Graph,
    pub ports: Vec<Port>,
    pub hosts: Vec<Host>,
    pub vms: Vec<Vm>,
    /// Shared by the copies of a partitioned run: routing reads it at every hop, and one
    /// copy stays in the cache where several would not (a k = 32 fat tree's is 0.56 MB).
    pub(crate) fib: Arc<Fib>,
    pub switch_salt: Vec<u64>,
    pub eps: Vec<EpSlot>,
    /// The endpoints of connections closed at both ends with nothing left to do, by value. A
    /// long run's finished flows would otherwise leave their boxes among the live endpoints
    /// (36,000 finished and 2,400 live at the end of a k = 16 fat tree's second): moved here,
    /// their memory goes to new endpoints and the live ones stay together. They still answer
    /// a late segment (a retransmitted FIN) as before.
    pub closed: Vec<TcpEndpoint>,
    pub flows: Vec<Flow>,
    pub apps: Vec<App>,
    pub rng: Rng,
    pub goodput_bin: u64,
    pub queue_sample: u64,
    pub sampled_ports: Vec<u32>,
    /// Set when the default bound left switch ports out of `sampled_ports`.
    pub sampled_subset: Option<PortSubset>,
    /// The ports of `output.pcap`, and whether their drops are captured too.
    pub pcap_ports: Vec<u32>,
    pub pcap_dropped: bool,
    /// One flow table per switch (empty unless rules are installed).
    pub tables: Vec<FlowTable>,
    /// Rules from the scenario, with the switch and install time.
    pub pending_rules: Vec<(u32, u64, Rule)>,
    /// The TCP configurations of the run's flows, each once.
    pub tcp_cfgs: Vec<Arc<TcpConfig>>,
    /// One vswitch hook slot per host.
    pub shims: Vec<HostSlot>,
    /// Some host has a shim: only then is a delivered packet's host looked up.
    pub any_shim: bool,
    /// Some flow has segments to drop (`drop_segments`): only then is a sent packet's flow
    /// looked at (on a large fabric each look is a load from memory).
    pub scripted_drops: bool,
    /// TCP small-queue budget as time at the NIC rate.
    pub tsq_ns: u64,
    /// One mechanism hook slot per switch.
    pub switch_mech: Vec<SwitchSlot>,
    pub control: Control,
    /// In a partitioned run (`crate::parallel`), which partition this copy of the world is
    /// and each host's partition; `None` in a run of one.
    pub(crate) part: Option<Part>,
}

/// A copy of the world's place in a partitioned run: the partition it runs and where every
/// host and switch runs.
pub(crate) struct Part {
    pub id: u16,
    pub of_host: Arc<Vec<u16>>,
    pub of_switch: Arc<Vec<u16>>,
}

/// Forwarding table. A packet's egress port is a few loads from its address: the
/// destination VM's last hop (its host's switch and port) and, at any other switch, the
/// route towards the host's group (the hosts behind one switch share it). A switch's routes
/// are stored as its most common entry and the span of groups where others lie: in a fat
/// tree an edge switch sends every other rack to the same uplinks and an aggregation switch
/// differs from its uplinks only for its own pod, so a k = 32 fabric's table is 0.56 MB where
/// a full row per switch would be 2.6 MB, and more of it stays in the cache. An ECMP set is
/// stored once however many entries share it.
pub(crate) struct Fib {
    /// Per VM.
    dest: Vec<Dest>,
    /// Per switch.
    rows: Vec<FibRow>,
    /// The entries of every row's span, row after row.
    spans: Vec<FibEntry>,
    /// ECMP sets of two or more choices: (start in `ecmp`, length).
    sets: Vec<(u32, u32)>,
    ecmp: Vec<u32>,
}

/// One switch's routes: `default` towards every group outside `first..first + len`, whose
/// entries are `spans[at..at + len]`.
#[derive(Clone, Copy)]
struct FibRow {
    default: FibEntry,
    first: u32,
    len: u32,
    at: u32,
}

/// Where a VM is: its host's group, and the switch the host hangs off with that switch's
/// entry towards it, its one port (`topology::NONE` for a host linked straight to another).
struct Dest {
    group: u32,
    switch: u32,
    last_hop: FibEntry,
}

/// One port, an ECMP set (`SET` and the set's index) or no route (`NO_ROUTE`), in four
/// bytes: one is read at every hop, and the smaller the table the more of it stays in the
/// cache.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct FibEntry(u32);

const SET: u32 = 1 << 31;
const NO_ROUTE: u32 = u32::MAX;
const NONE_ENTRY: FibEntry = FibEntry(NO_ROUTE);

impl FibEntry {
    fn port(port: u32) -> FibEntry {
        assert!(
            port < SET || port == NO_ROUTE,
            "port index {port} out of range"
        );
        FibEntry(port)
    }

    fn set(set: u32) -> FibEntry {
        assert!(set < SET - 1, "ECMP set index {set} out of range");
        FibEntry(SET | set)
    }

    /// The ECMP set's index, if the entry is one.
    #[inline]
    fn ecmp_set(self) -> Option<u32> {
        (self.0 != NO_ROUTE && self.0 & SET != 0).then_some(self.0 & !SET)
    }
}

impl Fib {
    pub(crate) fn new(g: &Graph, vms: &[Vm]) -> Fib {
        let at = topology::attachments(g);
        let groups = at.roots.len();
        // Full rows first. A switch's entry towards its own hosts' group is never read (it
        // reaches them by their last hop), so it counts for nothing in the compression.
        let mut full = vec![NONE_ENTRY; g.switches.len() * groups];
        let mut own = vec![None; g.switches.len()];
        for (group, &root) in at.roots.iter().enumerate() {
            own[root as usize] = Some(group);
        }
        let (mut sets, mut ecmp) = (Vec::new(), Vec::new());
        let mut interned: HashMap<Vec<u32>, u32> = HashMap::new();
        topology::routes(g, &at, |group, s, choices| {
            let e = match choices {
                &[port] => FibEntry::port(port),
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
                    FibEntry::set(set)
                }
            };
            full[s as usize * groups + group as usize] = e;
        });
        let mut spans = Vec::new();
        let rows = (0..g.switches.len())
            .map(|s| FibRow::compress(&full[s * groups..(s + 1) * groups], own[s], &mut spans))
            .collect();
        let dest = vms
            .iter()
            .map(|vm| {
                let h = vm.host as usize;
                let (switch, port) = at.last_hop[h];
                Dest {
                    group: at.group[h],
                    switch,
                    last_hop: FibEntry::port(port),
                }
            })
            .collect();
        Fib {
            dest,
            rows,
            spans,
            sets,
            ecmp,
        }
    }

    /// Switch `s`'s entry towards VM `vm` (none for a VM that does not exist).
    #[inline]
    pub(crate) fn entry(&self, s: u32, vm: usize) -> Option<&FibEntry> {
        let d = self.dest.get(vm)?;
        Some(if s == d.switch {
            &d.last_hop
        } else if d.group == topology::NONE {
            &NONE_ENTRY
        } else {
            let r = &self.rows[s as usize];
            let i = d.group.wrapping_sub(r.first);
            if i < r.len {
                &self.spans[r.at as usize + i as usize]
            } else {
                &r.default
            }
        })
    }

    /// The egress ports of switch `s` towards VM `vm` (empty: unreachable).
    fn ports(&self, s: u32, vm: usize) -> &[u32] {
        let e = self.entry(s, vm).unwrap_or(&NONE_ENTRY);
        if let Some(set) = e.ecmp_set() {
            let (start, n) = self.sets[set as usize];
            &self.ecmp[start as usize..(start + n) as usize]
        } else if e.0 == NO_ROUTE {
            &[]
        } else {
            std::slice::from_ref(&e.0)
        }
    }
}

impl FibRow {
    /// The row of `full` whose entry at `own` (its own hosts' group, if any) is never read,
    /// its span's entries appended to `spans`. The default is the most common entry, the
    /// smallest of equals, so a table is the same from run to run.
    fn compress(full: &[FibEntry], own: Option<usize>, spans: &mut Vec<FibEntry>) -> FibRow {
        let read = |g: &usize| Some(*g) != own;
        let mut sorted: Vec<FibEntry> = (0..full.len()).filter(read).map(|g| full[g]).collect();
        sorted.sort_unstable();
        let default = sorted
            .chunk_by(|a, b| a == b)
            .fold((NONE_ENTRY, 0), |best, run| {
                if run.len() > best.1 {
                    (run[0], run.len())
                } else {
                    best
                }
            })
            .0;
        let differs = |g: &usize| read(g) && full[*g] != default;
        let Some(first) = (0..full.len()).find(differs) else {
            return FibRow {
                default,
                first: 0,
                len: 0,
                at: 0,
            };
        };
        let end = (0..full.len()).rfind(differs).unwrap() + 1;
        let at = u32::try_from(spans.len()).expect("a forwarding table under 2^32 entries");
        spans.extend((first..end).map(|g| if read(&g) { full[g] } else { default }));
        FibRow {
            default,
            first: first as u32,
            len: (end - first) as u32,
            at,
        }
    }
}

/// Source ports are allocated from here up, wrapping round: a VM can source this many flows
/// at once with distinct 5-tuples.
pub const FIRST_PORT: u16 = 10_000;
/// The destination port of every TCP flow.
pub const TCP_DPORT: u16 = 5001;
pub(crate) const PORTS_PER_VM: u32 = u16::MAX as u32 + 1 - FIRST_PORT as u32;

impl Model {
    /// Settles port `port` at `now` (`Port::settle`): the packets that left a NIC holding its
    /// VM's vNIC leave their endpoints' small queues.
    #[inline]
    pub fn settle(&mut self, port: u32, now: u64) {
        let eps = &mut self.eps;
        self.ports[port as usize].settle(now, |ep| {
            if ep != NO_EP {
                eps[ep as usize].in_host -= 1;
            }
        });
    }

    /// With `on`, makes the vNIC of every VM alone on its host, with no shim there, its NIC's
    /// queue (`Vm::vnic_in_nic`, `Port::holds_vnic`), once the mechanism is in place (as a run
    /// is built); without, gives every vNIC an event per packet leaving it (a reference for
    /// tests). Before the run only.
    pub fn put_vnics_in_nics(&mut self, on: bool) {
        let alone = self.graph.vms_per_host == 1 && !self.scripted_drops;
        for v in &mut self.vms {
            let host = v.host as usize;
            v.vnic_in_nic = on && alone && self.shims[host].shim.is_none();
            self.ports[self.hosts[host].nic_port as usize].set_holds_vnic(v.vnic_in_nic);
        }
        for i in 0..self.eps.len() {
            let vnic = self.vnic_in_nic(self.eps[i].vm);
            self.eps[i].set_vnic_in_nic(vnic);
        }
    }

    /// VM `vm`'s NIC and vNIC limit, if its vNIC is that NIC's queue.
    pub(crate) fn vnic_in_nic(&self, vm: u32) -> Option<VnicInNic> {
        let v = &self.vms[vm as usize];
        v.vnic_in_nic.then(|| VnicInNic {
            nic: self.hosts[v.host as usize].nic_port,
            // At most the NIC's limit in packets, below 2^31 (`QSize`).
            limit: u32::try_from(v.vnic_limit).unwrap_or(u32::MAX),
        })
    }

    /// Marks the ports whose link ends at a switch that forwards by its routing table alone
    /// (`Port::plain_far_end`), once the mechanism and the scripted rules are in place: a
    /// switch's table gets rules only from the script or from a controller app.
    pub(crate) fn mark_plain_far_ends(&mut self) {
        let plain = self.plain_switches();
        for p in &mut self.ports {
            p.plain_far_end = matches!(p.to(), NodeRef::Switch(s) if plain[s as usize]);
        }
    }

    /// Which switches forward by their routing table alone: no hook, and no flow table
    /// that can ever hold a rule (from the script or from a controller app).
    pub(crate) fn plain_switches(&self) -> Vec<bool> {
        let mut plain: Vec<bool> = self
            .switch_mech
            .iter()
            .map(|sm| sm.hook.is_none())
            .collect();
        if self.control.app.is_some() {
            plain.fill(false);
        }
        for &(sw, _, _) in &self.pending_rules {
            plain[sw as usize] = false;
        }
        plain
    }

    /// The output port switch `s` forwards `p` to by routing (ECMP by 5-tuple hash).
    #[inline]
    pub fn route(&self, s: u32, p: &Packet) -> Option<u32> {
        self.route_by(s, p.dst, |salt| p.flow_hash(salt))
    }

    /// The output port of switch `s` towards address `dst`, `hash(salt)` choosing among equal
    /// paths.
    #[inline]
    fn route_by(&self, s: u32, dst: u32, hash: impl Fn(u64) -> u64) -> Option<u32> {
        let e = self.fib.entry(s, dst.wrapping_sub(IP_BASE + 1) as usize)?;
        let Some(set) = e.ecmp_set() else {
            return (e.0 != NO_ROUTE).then_some(e.0);
        };
        let (start, n) = self.fib.sets[set as usize];
        let k = hash(self.switch_salt[s as usize]) % n as u64;
        Some(self.fib.ecmp[start as usize + k as usize])
    }

    pub fn host_of_ip(&self, ip: u32) -> Option<u32> {
        let i = ip.checked_sub(IP_BASE + 1)? as usize;
        self.vms.get(i).map(|v| v.host)
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
        let dport = TCP_DPORT;
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
        // Flows of one configuration share it (a run has a handful).
        let cfg = match self.tcp_cfgs.iter().find(|c| c.as_ref() == &cfg) {
            Some(shared) => shared.clone(),
            None => {
                let shared = Arc::new(cfg);
                self.tcp_cfgs.push(shared.clone());
                shared
            }
        };
        let client = || {
            let t = TcpEndpoint::client(cfg.clone(), (sip, sport), (dip, dport), rx, iss);
            EpKind::Tcp(Box::new(t))
        };
        let server = || {
            let t = TcpEndpoint::server(cfg.clone(), (dip, dport), (sip, sport), tx, riss);
            EpKind::Tcp(Box::new(t))
        };
        let here = |vm, end: &dyn Fn() -> EpKind| match self.vm_is_local(vm) {
            true => end(),
            false => EpKind::Elsewhere,
        };
        let kinds = (here(src, &client), here(dst, &server));
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
    pub(crate) fn push_flow(
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
            let vnic = self.vnic_in_nic(vm);
            self.eps.push(EpSlot::new(kind, (f, vm), tsq_limit, vnic));
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
            bin_now: 0,
            bin_bytes: 0,
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

    pub(crate) fn alloc_port(&mut self, vm: u32) -> u16 {
        let v = &mut self.vms[vm as usize];
        let p = v.next_port;
        v.next_port = if v.next_port == u16::MAX {
            FIRST_PORT
        } else {
            v.next_port + 1
        };
        p
    }

    /// The TCP endpoint `ep`, live or closed.
    pub fn tcp(&self, ep: u32) -> Option<&TcpEndpoint> {
        match &self.eps[ep as usize].kind {
            EpKind::Tcp(t) => Some(t),
            EpKind::TcpClosed(i) => Some(&self.closed[*i as usize]),
            _ => None,
        }
    }

    pub fn tcp_mut(&mut self, ep: u32) -> Option<&mut TcpEndpoint> {
        self.eps[ep as usize].kind.tcp_mut(&mut self.closed)
    }

    /// Whether VM `vm` runs in this copy of the world (always, in a run of one partition).
    #[inline]
    pub fn vm_is_local(&self, vm: u32) -> bool {
        self.part
            .as_ref()
            .is_none_or(|p| p.of_host[self.vms[vm as usize].host as usize] == p.id)
    }

    /// Whether host `h` runs in this copy of the world (always, in a run of one partition).
    pub fn host_is_local(&self, h: usize) -> bool {
        self.part.as_ref().is_none_or(|p| p.of_host[h] == p.id)
    }

    /// Whether switch `sw` runs in this copy of the world (always, in a run of one partition).
    pub fn switch_is_local(&self, sw: u32) -> bool {
        self.part
            .as_ref()
            .is_none_or(|p| p.of_switch[sw as usize] == p.id)
    }

    /// Moves both endpoints of TCP flow `f` to `closed` once both are closed, with no timer
    /// due and nothing waiting in their vNICs (an end in another partition closes there).
    pub fn close_if_done(&mut self, f: u32) {
        let flow = &self.flows[f as usize];
        let (tx, rx) = (flow.tx_ep, flow.rx_ep);
        let done = |ep: u32| {
            let slot = &self.eps[ep as usize];
            slot.in_host == 0
                && match &slot.kind {
                    EpKind::Tcp(t) => t.is_closed() && t.poll_at().is_none(),
                    EpKind::Elsewhere => true,
                    _ => false,
                }
        };
        if !(done(tx) && done(rx)) {
            return;
        }
        for ep in [tx, rx] {
            let slot = &mut self.eps[ep as usize].kind;
            if !matches!(slot, EpKind::Tcp(_)) {
                continue; // the other partition's end
            }
            let at = EpKind::TcpClosed(self.closed.len() as u32);
            if let EpKind::Tcp(mut t) = std::mem::replace(slot, at) {
                t.release_queues();
                self.closed.push(*t);
            }
        }
    }

    pub fn tcp_stats(&self, f: &Flow) -> TcpStats {
        match self.tcp(f.tx_ep) {
            Some(t) => t.stats.clone(),
            _ => TcpStats::default(),
        }
    }

    /// The ports a TCP flow's data packets cross from VM `src` to VM `dst`: the source host's
    /// NIC, then each switch's choice by routing (ECMP by the 5-tuple hash, as [`Self::route`]).
    pub fn tcp_path(&self, src: u32, dst: u32, sport: u16, dport: u16) -> Vec<u32> {
        let nic = self.hosts[self.vms[src as usize].host as usize].nic_port;
        let mut ports = vec![nic];
        if let NodeRef::Switch(s) = self.ports[nic as usize].to() {
            let headers = PacketInHeaders {
                src: self.vms[src as usize].ip,
                dst: self.vms[dst as usize].ip,
                protocol: tacc_mech::headers::ip_proto::TCP,
                src_port: sport,
                dst_port: dport,
                tcp_flags: 0,
                mss: None,
                wscale: None,
            };
            ports.extend(self.path(s, &headers).into_iter().map(|(_, port)| port));
        }
        ports
    }

    /// The egress ports of switch `s` towards VM `vm` on shortest paths (empty: unreachable).
    pub fn route_ports(&self, s: u32, vm: u32) -> &[u32] {
        self.fib.ports(s, vm as usize)
    }
}

#[cfg(test)]
mod tests {
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
        // An edge switch's routes are its uplinks' set alone; an aggregation switch's differ
        // from its uplinks' set for its own pod's k/2 racks; a core switch's span every rack
        // but the default pod's.
        let (edges, aggs, cores) = (k * k / 2, k * k / 2, k * k / 4);
        let spans = |prefix: &str| -> (usize, usize) {
            let rows = m.graph.switches.iter().zip(&m.fib.rows);
            let of = rows.filter(|(name, _)| name.starts_with(prefix));
            of.fold((0, 0), |(n, len), (_, r)| (n + 1, len + r.len as usize))
        };
        assert_eq!(spans("edge"), (edges, 0));
        assert_eq!(spans("agg"), (aggs, aggs * k / 2));
        let (n, core_len) = spans("core");
        // Pod 0's port, the smallest, is the default: a span over the other pods' racks.
        assert!(n == cores && core_len == cores * (k - 1) * k / 2);
        assert_eq!(m.fib.spans.len(), aggs * k / 2 + core_len);
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

    /// The compressed table answers what shortest-path routing computes, for every switch
    /// and VM, in a fat tree and in a graph with an ECMP diamond, a host linked straight to
    /// another and a switch no other reaches.
    #[test]
    fn forwarding_entries_are_the_shortest_paths() {
        let fat = "name = \"ft\"\nduration = \"1s\"\n[topology]\nkind = \"fat-tree\"\nk = 6\nlink_rate = \"1Gbps\"\nlink_delay = \"1us\"\n";
        // A diamond (an ECMP choice), a pair of hosts linked straight, and a switch no other
        // reaches.
        let link = |a: &str, b: &str| {
            format!("{{a = \"{a}\", b = \"{b}\", rate = \"1Gbps\", delay = \"1us\"}}")
        };
        let links = [
            ("a", "x"),
            ("x", "y"),
            ("x", "w"),
            ("y", "z"),
            ("w", "z"),
            ("b", "z"),
            ("c", "z"),
            ("d", "e"),
            ("f", "v"),
        ]
        .map(|(a, b)| link(a, b))
        .join(", ");
        let explicit = format!("name = \"x\"\nduration = \"1s\"\n[topology]\nkind = \"explicit\"\nhosts = [\"a\", \"b\", \"c\", \"d\", \"e\", \"f\"]\nswitches = [\"x\", \"y\", \"w\", \"z\", \"v\"]\nlinks = [{links}]\n");
        for text in [fat, &explicit] {
            let m = crate::load(text, "t.toml", &[], None).unwrap().model;
            let g = &m.graph;
            let at = crate::topology::attachments(g);
            let mut want = vec![Vec::new(); g.switches.len() * at.roots.len()];
            crate::topology::routes(g, &at, |group, s, choices| {
                want[s as usize * at.roots.len() + group as usize] = choices.to_vec();
            });
            for (vm, v) in m.vms.iter().enumerate() {
                let h = v.host as usize;
                for s in 0..g.switches.len() as u32 {
                    let expected: &[u32] = if at.last_hop[h].0 == s {
                        std::slice::from_ref(&at.last_hop[h].1)
                    } else if at.group[h] == crate::topology::NONE {
                        &[]
                    } else {
                        &want[s as usize * at.roots.len() + at.group[h] as usize]
                    };
                    assert_eq!(m.route_ports(s, vm as u32), expected, "switch {s}, vm {vm}");
                }
            }
        }
    }
}
