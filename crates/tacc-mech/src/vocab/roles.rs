//! The mechanism interface: the three roles a mechanism can play, and the fabric it is built
//! for. A driver (the simulator, the Linux host and switch agents, the testbed's SDN
//! controller) moves packets, time and control messages through these traits and never
//! names a mechanism.
//!
//! - [`HostShim`]: in each host's virtual switch, between the VMs and the NIC. Egress and
//!   ingress hooks return a verdict and may rewrite header fields; a timer; messages from the
//!   controller in; in-band packets of its own out.
//! - [`SwitchHook`]: in each switch, on every packet it forwards; per-flow counters for the
//!   controller's statistics requests.
//! - [`ControllerApp`]: in the controller: packet-ins, statistics replies and a timer in;
//!   statistics requests, rule changes and notifications to host shims out
//!   ([`ControlMessage`]).
//!
//! Hooks are generic over the packet representation `P` (the simulator's packet struct, or
//! [`crate::vocab::wire::Ipv4Packet`] over real bytes), so header access stays static while the
//! roles themselves are trait objects. Every method has a neutral default: a mechanism
//! implements the hooks it uses.

use crate::vocab::control::{
    ControlMessage, FlowMod, FlowSample, HostMessage, PacketIn, PacketInHeaders,
};
use crate::vocab::headers::{ip_proto, Ecn, PacketHeaders};
use crate::vocab::units::{Nanos, Size, NS_PER_SEC};
use crate::vocab::wire::{emit, Ipv4Fields};

/// What to do with a packet that finds too few tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ShortagePolicy {
    /// Drop it (the papers' default).
    #[default]
    Drop,
    /// Hold it in a per-VM queue kept by the caller (the papers' "slightly better, more memory"
    /// variant); the verdict says when to offer it again.
    Queue,
}

/// Token-bucket sizing and shortage behaviour shared by every limiter in this crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketConfig {
    /// Smallest bucket depth in bytes: one maximum-size Ethernet frame, so that a full-size
    /// packet can always pass at any rate.
    pub min_depth_bytes: u64,
    /// Burst the bucket may accumulate, in nanoseconds of tokens at the current rate: depth =
    /// max(`min_depth_bytes`, rate x `burst_ns`). The papers do not state a depth. The default,
    /// 1 ms, absorbs ten 100 us RTTs of a window-limited flow yet stays well under the 100-packet
    /// switch buffers of the experiments; the authors' prototype used 100 timer periods (25 ms),
    /// which lets a limited VM burst several buffers' worth into the fabric.
    pub burst_ns: Nanos,
    /// Drop or queue on token shortage.
    pub on_shortage: ShortagePolicy,
}

impl Default for BucketConfig {
    fn default() -> Self {
        BucketConfig {
            min_depth_bytes: 1514,
            burst_ns: 1_000_000,
            on_shortage: ShortagePolicy::Drop,
        }
    }
}

impl BucketConfig {
    /// Bucket depth in bytes for a bucket running at `rate_bps`.
    pub fn depth_for(&self, rate_bps: u64) -> u64 {
        let burst = (rate_bps as u128 * self.burst_ns as u128 / (8 * NS_PER_SEC as u128)) as u64;
        burst.max(self.min_depth_bytes)
    }
}

/// Why a limiter refused a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// Not enough tokens and the policy is to drop.
    NoTokens,
    /// The packet is larger than the bucket could ever hold, or the rate is zero.
    NeverFits,
    /// HyGenICC admission control refused a new connection towards a congested destination.
    Admission,
    /// A VM sent a signal only a shim may send (forged feedback).
    Forged,
}

/// The decision of a rate limiter about one outgoing packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EgressVerdict {
    /// Transmit now (tokens have been taken).
    Pass,
    /// Keep the packet at the head of the VM's queue and offer it again at `until`
    /// ([`ShortagePolicy::Queue`] only; no tokens have been taken).
    Hold { until: Nanos },
    /// Discard the packet.
    Drop(DropReason),
}

/// An explicit feedback packet the caller must send: an IPv4 packet with protocol
/// [`ip_proto::FEEDBACK`], the mark count in the IP ID, from the receiving VM's address to the
/// source VM's (36 B on the wire: Ethernet + IPv4 + 2 bytes of payload).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedbackPacket {
    /// The receiving VM (source address of the feedback packet).
    pub src: u32,
    /// The sending VM whose traffic was marked (destination of the feedback packet).
    pub dst: u32,
    pub count: u16,
}

impl FeedbackPacket {
    /// Size of the feedback frame on the wire in bytes (Ethernet + IPv4 + 2-byte payload).
    pub const WIRE_BYTES: u64 = 36;

    /// The IPv4 packet (header and the 2-byte payload, which repeats the count) with valid
    /// checksum, for callers that transmit real bytes.
    pub fn to_ipv4_bytes(&self) -> Vec<u8> {
        let mut b = emit(
            &Ipv4Fields {
                src: self.src,
                dst: self.dst,
                protocol: ip_proto::FEEDBACK,
                ident: self.count,
                ecn: Ecn::NotEct,
                total_len: 22,
                ttl: 64,
            },
            None,
        );
        b[20..22].copy_from_slice(&self.count.to_be_bytes());
        b
    }
}

/// What to do with a packet arriving from the network for a local VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IngressVerdict {
    /// Hand it to the VM (possibly rewritten).
    Deliver,
    /// It was a feedback packet for the shim; discard it.
    Consume,
}

/// The per-packet work of a host shim done by a kernel datapath (the Linux agent's eBPF
/// programs) for one (local VM, remote VM) pair, reported to the shim as counts since the last
/// report. The datapath applies the header rewrites the shim's rules ask for; the shim keeps
/// its state and its timers as if it had seen the packets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairCounts {
    pub vm: u32,
    pub remote: u32,
    /// Packets and bytes the VM sent to the remote.
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// CE marks on packets from the remote, cleared before delivery to the VM.
    pub ce_cleared: u64,
    /// Of those, the marks echoed in the IPR bit of packets to the remote.
    pub ipr_set: u64,
    /// IPR bits seen (and cleared) on packets from the remote.
    pub ipr_seen: u64,
    /// Feedback packets from the remote consumed, and the marks they carried.
    pub feedback_packets: u64,
    pub feedback_marks: u64,
}

/// The per-packet work a host shim asks of a kernel datapath (see [`PairCounts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Datapath {
    /// Send the VMs' packets as ECT(0).
    pub set_ect: bool,
    /// Count the CE marks on packets for a VM and clear them.
    pub clear_ce: bool,
    /// Echo pending marks in the IPR bit of packets to their source; read (and clear) the IPR
    /// bits of arriving packets.
    pub echo_ipr: bool,
    /// Consume the feedback packets of [`FeedbackPacket`]'s protocol.
    pub feedback: bool,
    /// Clamp the window of ACKs to VMs as [`HostShimCore::window_clamps`] says.
    pub clamp_window: bool,
    /// The shim acts on the per-pair counts ([`HostShimCore::on_datapath`]): a driver that
    /// reads them from a kernel map must read them often.
    pub pair_counts: bool,
    /// Drop the VMs' packets of the feedback protocol and clear the IPR bits they set.
    pub scrub: bool,
    /// Enforce [`HostShimCore::rates`] with token buckets of this depth, dropping or queueing
    /// what finds too few tokens (the scenario's `burst` and `on_shortage`).
    pub limiter: Option<BucketConfig>,
    /// Drop the VMs' connection requests (SYN without ACK) to the destinations of
    /// [`HostShimCore::refused_destinations`].
    pub admission_control: bool,
}

/// ACKs from `remote` to the local `vm` carry at most `window` in their window field (`mss`
/// on a SYN-ACK, whose window is never scaled) until `expires`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowClamp {
    pub vm: u32,
    pub remote: u32,
    pub window: u16,
    pub mss: u16,
    pub expires: Nanos,
}

/// A mechanism's part in one host's virtual switch (it serves every VM of the host).
/// What a host shim does besides packets: the work it asks of a kernel datapath, controller
/// messages, its timer and packets of its own, what it reports. Apart from [`HostShim`] (the
/// packets, generic over their representation) so that these are called on a state machine
/// without naming a packet type.
pub trait HostShimCore: Send {
    /// The per-packet work a kernel datapath must do for this shim.
    fn datapath(&self) -> Datapath {
        Datapath::default()
    }
    /// The window clamps in force, for a kernel datapath.
    fn window_clamps(&self, _out: &mut dyn FnMut(WindowClamp)) {}
    /// The destinations towards which no VM may open a connection at `now`, for a kernel
    /// datapath (each once).
    fn refused_destinations(&self, _now: Nanos, _out: &mut dyn FnMut(u32)) {}
    /// What a kernel datapath did for one pair since its last report, instead of
    /// [`HostShim::on_egress`] and [`HostShim::on_ingress`] per packet.
    fn on_datapath(&mut self, _now: Nanos, _counts: &PairCounts) {}
    /// `vm`'s rate for `key` that a previous instance of the shim had in force when it
    /// stopped (a restarted agent reads it from the datapath): the shim starts the key from
    /// it instead of from the VM's share, so that a restart lets no burst through. Shims
    /// whose rates hold no state ignore it.
    fn resume_rate(&mut self, _now: Nanos, _vm: u32, _key: u32, _bps: u64) {}
    /// A message from the controller about one of the host's VMs.
    fn on_message(&mut self, _now: Nanos, _msg: &HostMessage) {}
    /// The timer asked for by [`HostShimCore::poll_at`] is due (it may be called early).
    fn on_timer(&mut self, _now: Nanos) {}
    /// When the shim next needs [`HostShimCore::on_timer`] or has a packet to send.
    fn poll_at(&self) -> Option<Nanos> {
        None
    }
    /// A packet of the shim's own (in-band feedback) due at `now`; call until `None`.
    fn poll_transmit(&mut self, _now: Nanos) -> Option<FeedbackPacket> {
        None
    }
    /// The rates the shim enforces now, as (VM, destination or path or 0, bits/s).
    fn rates(&self, _out: &mut dyn FnMut(u32, u32, u64)) {}
    /// Event counters by name, summed over hosts in results.
    fn counters(&self, _out: &mut dyn FnMut(&'static str, f64)) {}
}

pub trait HostShim<P: PacketHeaders + ?Sized>: HostShimCore {
    /// A packet leaves a local VM for the network.
    fn on_egress(&mut self, _now: Nanos, _pkt: &mut P) -> EgressVerdict {
        EgressVerdict::Pass
    }
    /// A packet arrives from the network for a local VM.
    fn on_ingress(&mut self, _now: Nanos, _pkt: &mut P) -> IngressVerdict {
        IngressVerdict::Deliver
    }
}

/// A mechanism's part in one switch.
/// What a switch hook does besides the packets it sees: queue events, its timer, what it
/// tells a kernel datapath and the controller, what it reports. Apart from [`SwitchHook`]
/// (generic over the packet representation) for the reason [`HostShimCore`] is.
pub trait SwitchHookCore: Send {
    /// A packet reaches output `port`'s queue, which holds `queue_bytes` before it (after
    /// [`SwitchHook::on_forward`], before the queue admits or drops it). For a mechanism that
    /// reacts to every change of a queue ([`SwitchHookCore::queue_events`]); a driver without
    /// per-packet queue events never calls it.
    fn on_enqueue(&mut self, _now: Nanos, _port: u32, _queue_bytes: u64) {}
    /// A packet leaves output `port`'s queue for the wire; `queue_bytes` remain (as
    /// [`SwitchHookCore::on_enqueue`]).
    fn on_dequeue(&mut self, _now: Nanos, _port: u32, _queue_bytes: u64) {}
    /// Whether the hook wants [`SwitchHookCore::on_enqueue`] and [`SwitchHookCore::on_dequeue`]: a
    /// driver asks once and spares the others two calls per packet.
    fn queue_events(&self) -> bool {
        false
    }
    /// The timer asked for by [`SwitchHookCore::poll_at`]; `queue_bytes(port)` reads a queue.
    fn on_timer(&mut self, _now: Nanos, _queue_bytes: &dyn Fn(u32) -> u64) {}
    fn poll_at(&self) -> Option<Nanos> {
        None
    }
    /// The window field ACKs get at most, per output port their flow's data leaves through,
    /// for a kernel datapath that rewrites them (RWNDQ); ports without a limit are left out.
    fn port_windows(&self, _out: &mut dyn FnMut(u32, u16)) {}
    /// Per-flow byte counters, for a [`crate::vocab::control::StatsRequest::Switch`] reply.
    fn flow_stats(&self, _out: &mut Vec<FlowSample>) {}
    fn counters(&self, _out: &mut dyn FnMut(&'static str, f64)) {}
}

pub trait SwitchHook<P: PacketHeaders + ?Sized>: SwitchHookCore {
    /// A packet enters on `in_port` (`from_host`: the link's far end is a host), before the
    /// flow table and routing. Returns true to send the controller a packet-in for it (the
    /// table miss of reactive forwarding).
    fn on_arrival(&mut self, _now: Nanos, _in_port: u32, _from_host: bool, _pkt: &mut P) -> bool {
        false
    }
    /// The packet is forwarded to output `port` (before that port's queue).
    fn on_forward(&mut self, _now: Nanos, _port: u32, _pkt: &P) {}
}

/// What a controller app may ask of the network it controls besides messages.
pub trait PathOracle {
    /// The (switch, output port) hops a packet with these headers takes from `switch` to its
    /// destination: a controller that knows every switch's ECMP hash can follow a flow.
    fn path(&self, switch: u32, headers: &PacketInHeaders) -> Vec<(u32, u32)>;
}

/// A mechanism's controller application.
pub trait ControllerApp: Send {
    fn on_packet_in(
        &mut self,
        _now: Nanos,
        _packet_in: &PacketIn,
        _paths: &dyn PathOracle,
        _out: &mut Vec<ControlMessage>,
    ) {
    }
    fn on_stats_reply(
        &mut self,
        _now: Nanos,
        _reply: &crate::vocab::control::StatsReply,
        _out: &mut Vec<ControlMessage>,
    ) {
    }
    /// The timer asked for by [`ControllerApp::poll_at`] (it may be called early).
    fn on_timer(&mut self, _now: Nanos, _out: &mut Vec<ControlMessage>) {}
    fn poll_at(&self) -> Option<Nanos> {
        None
    }
}

/// One port leaving a switch, as a mechanism sees it when it is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchPort {
    pub switch: u32,
    pub port: u32,
    pub rate_bps: u64,
    /// The port's buffer limit.
    pub buffer: Size,
    /// The link's far end is a host (the switch is that host's ToR).
    pub to_host: bool,
}

impl SwitchPort {
    /// The buffer in packets, full-size (1500 B) packets where it is given in bytes.
    pub fn buffer_pkts(&self) -> u64 {
        match self.buffer {
            Size::Packets(n) => n,
            Size::Bytes(b) => b / 1500,
        }
    }
    /// The buffer in bytes, full-size (1500 B) packets where it is given in packets.
    pub fn buffer_bytes(&self) -> u64 {
        match self.buffer {
            Size::Packets(n) => n * 1500,
            Size::Bytes(b) => b,
        }
    }
}

/// The network a mechanism is built for, as its driver knows it.
pub trait Fabric {
    fn hosts(&self) -> u32;
    /// The nominal rate of a host's NIC.
    fn nic_rate_bps(&self, host: u32) -> u64;
    /// Every VM as (host, address), in the fabric's VM order.
    fn vms(&self) -> Vec<(u32, u32)>;
    /// The address of a VM by its scenario name (a host's name stands for its first VM).
    fn vm_address(&self, name: &str) -> Option<u32>;
    fn switches(&self) -> u32;
    /// Every port leaving a switch, in port order.
    fn switch_ports(&self) -> Vec<SwitchPort>;
    /// The output ports of `switch` towards the `vm`-th VM on shortest paths.
    fn route_ports(&self, switch: u32, vm: u32) -> &[u32];
    /// The receive buffer of the tenants' TCP and the window scale it implies.
    fn receiver_window(&self) -> (u64, u8);

    /// The switches hosts hang off (ToRs), in order.
    fn tors(&self) -> Vec<u32> {
        let mut tors: Vec<u32> = self
            .switch_ports()
            .iter()
            .filter(|p| p.to_host)
            .map(|p| p.switch)
            .collect();
        tors.sort_unstable();
        tors.dedup();
        tors
    }
}

/// A mechanism built for a fabric: every role it plays, where it plays it.
pub struct Instance<P: PacketHeaders + ?Sized> {
    /// One per host (`None`: no hook on that host).
    pub shims: Vec<Option<Box<dyn HostShim<P>>>>,
    /// One per switch (`None`: no hook in that switch).
    pub switch_hooks: Vec<Option<Box<dyn SwitchHook<P>>>>,
    pub controller: Option<Box<dyn ControllerApp>>,
    /// Rules installed in the switches at the start, before any traffic.
    pub initial_rules: Vec<FlowMod>,
    /// One-way latency of the control channel.
    pub control_latency: Nanos,
}

impl<P: PacketHeaders + ?Sized> Instance<P> {
    /// No mechanism: no hook anywhere.
    pub fn none(fabric: &dyn Fabric) -> Instance<P> {
        Instance {
            shims: (0..fabric.hosts()).map(|_| None).collect(),
            switch_hooks: (0..fabric.switches()).map(|_| None).collect(),
            controller: None,
            initial_rules: Vec::new(),
            control_latency: 0,
        }
    }
}
