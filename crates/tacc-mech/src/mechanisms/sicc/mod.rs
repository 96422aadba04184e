//! SICC: SDN-based incast congestion control (PAPERS.md §3).
//!
//! - [`SiccController`] (Algorithm 1, with the EWMA "(fix)"): counts the connections opening
//!   through each ToR port (SYN copies) and samples the port's queue every T. When the coming
//!   volley (beta x IW) plus the smoothed queue reaches alpha2 x B it declares incast ON to
//!   every source of every destination behind the port; once the episode is DM old and the
//!   queue has drained to alpha1 x B it declares it OFF.
//! - [`SiccHypervisor`] (Algorithm 2): while incast is ON for a (source VM, destination) pair,
//!   clamps the receive window of every ACK delivered to the source VM to one MSS, so any TCP
//!   sends at most one segment per RTT; the flag lapses after DM even without an OFF.
//! - [`SiccSwitch`]: the authors' ns-2 module (PAPERS.md §6), reactive and inside the switch,
//!   with neither controller nor hypervisor. A port turns incast ON when a packet reaches its
//!   queue while it holds more than 95% of the buffer and OFF as soon as a departure leaves it
//!   below 20%; meanwhile the switch itself clamps the ACKs of the flows whose data leaves
//!   through that port to one segment.

mod build;
pub mod config;

pub use config::{SiccConfig, SiccCopyAt, SiccMode};

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;

use crate::vocab::control::HostMessage;
use crate::vocab::control::IncastMessage;
use crate::vocab::headers::{tcp_flags, FlowKey, PacketHeaders};
use crate::vocab::roles::WindowClamp;
use crate::vocab::roles::{
    Datapath, HostShim, HostShimCore, IngressVerdict, SwitchHook, SwitchHookCore,
};
use crate::vocab::units::Nanos;

/// The controller asks a switch for one port's current queue length in packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct QueueRequest {
    pub switch: u32,
    pub port: u32,
}

/// What the controller knows about one ToR port.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SiccPortView {
    /// beta: connections opened through the port since the last incast ON.
    pub new_connections: u32,
    /// Q: the smoothed queue, packets.
    pub smoothed_queue: f64,
    pub incast: bool,
}

#[derive(Clone, Debug)]
struct PortState {
    beta: u32,
    q_avg: f64,
    kappa_time: Nanos,
    incast: bool,
    buffer_pkts: u32,
    dsts: BTreeSet<u32>,
}

/// The SICC controller application.
#[derive(Clone, Debug)]
pub struct SiccController {
    config: SiccConfig,
    ports: BTreeMap<(u32, u32), PortState>,
    /// MSS and window scale of each (src, dst) connection pair.
    pairs: BTreeMap<(u32, u32), (u16, u8)>,
    dst_srcs: BTreeMap<u32, BTreeSet<u32>>,
    next_poll: Option<Nanos>,
}

impl SiccController {
    pub fn new(config: SiccConfig) -> SiccController {
        SiccController {
            config,
            ports: BTreeMap::new(),
            pairs: BTreeMap::new(),
            dst_srcs: BTreeMap::new(),
            next_poll: None,
        }
    }

    fn port(&mut self, switch: u32, port: u32) -> &mut PortState {
        let buffer_pkts = self.config.buffer_pkts;
        self.ports.entry((switch, port)).or_insert(PortState {
            beta: 0,
            q_avg: 0.0,
            kappa_time: 0,
            incast: false,
            buffer_pkts,
            dsts: BTreeSet::new(),
        })
    }

    /// Sets B for one port, in packets.
    pub fn set_port_buffer(&mut self, switch: u32, port: u32, buffer_pkts: u32) {
        self.port(switch, port).buffer_pkts = buffer_pkts;
    }

    /// A SYN copy from `src` to `dst` leaving `port` of ToR `switch` towards `dst`, with the
    /// window scale `src` announced: the clamp's until `dst`'s SYN-ACK gives the scale `src`
    /// applies to `dst`'s rwnd ([`SiccController::on_syn_ack`]), the same where both ends
    /// scale alike.
    #[allow(clippy::too_many_arguments)]
    pub fn on_syn(
        &mut self,
        now: Nanos,
        switch: u32,
        port: u32,
        src: u32,
        dst: u32,
        mss: u16,
        wscale: u8,
    ) -> Vec<IncastMessage> {
        let state = self.port(switch, port);
        state.beta += 1;
        state.dsts.insert(dst);
        self.pairs.insert((src, dst), (mss, wscale));
        self.dst_srcs.entry(dst).or_default().insert(src);
        self.next_poll
            .get_or_insert(now + self.config.monitor_interval);
        if !self.config.evaluate_on_syn {
            return Vec::new();
        }
        let config = self.config;
        let state = self.port(switch, port);
        let gamma = state.beta as f64 * config.initial_window_pkts + state.q_avg;
        if gamma < config.on_fraction() * state.buffer_pkts as f64 {
            return Vec::new();
        }
        state.incast = true;
        state.kappa_time = now;
        state.beta = 0;
        self.messages_for(switch, port, false, true)
    }

    /// A SYN-ACK copy from `responder` to `initiator`, announcing `wscale`: the scale of
    /// the windows the clamp rewrites (the ACKs `responder` sends). Sent again to the
    /// initiator's hypervisor where the pair is clamped already with another scale.
    pub fn on_syn_ack(&mut self, initiator: u32, responder: u32, wscale: u8) -> Vec<IncastMessage> {
        let Some((mss, scale)) = self.pairs.get_mut(&(initiator, responder)) else {
            return Vec::new();
        };
        if *scale == wscale {
            return Vec::new();
        }
        *scale = wscale;
        let mss = *mss;
        let clamped = self
            .ports
            .values()
            .any(|s| s.incast && s.dsts.contains(&responder));
        if !clamped {
            return Vec::new();
        }
        vec![IncastMessage::IncastOn {
            src: initiator,
            dst: responder,
            wscale,
            mss,
        }]
    }

    /// A FIN copy through `port` of `switch`.
    pub fn on_fin(&mut self, _now: Nanos, switch: u32, port: u32, _src: u32, _dst: u32) {
        if let Some(state) = self.ports.get_mut(&(switch, port)) {
            state.beta = state.beta.saturating_sub(1);
        }
    }

    pub fn port_view(&self, switch: u32, port: u32) -> Option<SiccPortView> {
        self.ports.get(&(switch, port)).map(|s| SiccPortView {
            new_connections: s.beta,
            smoothed_queue: s.q_avg,
            incast: s.incast,
        })
    }

    /// When the next queue sampling round is due.
    pub fn poll_at(&self) -> Option<Nanos> {
        self.next_poll
    }

    /// Every T: the queues to read (every port a SYN went through).
    pub fn on_timer(&mut self, now: Nanos) -> Vec<QueueRequest> {
        match self.next_poll {
            Some(t) if t <= now => {}
            _ => return Vec::new(),
        }
        self.next_poll = Some(now + self.config.monitor_interval);
        // A port no SYN went through has no sources to notify: reading it decides nothing.
        self.ports
            .iter()
            .filter(|(_, state)| !state.dsts.is_empty())
            .map(|(&(switch, port), _)| QueueRequest { switch, port })
            .collect()
    }

    /// A queue reading `q_pkts` of `port` of `switch`: the incast decisions it triggers.
    /// OFF is only sent for a port that is ON (Algorithm 1 would repeat it every T).
    pub fn on_queue_sample(
        &mut self,
        now: Nanos,
        switch: u32,
        port: u32,
        q_pkts: u32,
    ) -> Vec<IncastMessage> {
        let config = self.config;
        let state = self.port(switch, port);
        let q = q_pkts as f64;
        state.q_avg = state.q_avg / 4.0 + 3.0 * q / 4.0;
        let gamma = state.beta as f64 * config.initial_window_pkts + state.q_avg;
        let buffer = state.buffer_pkts as f64;
        let mut turn_off = false;
        if state.incast
            && now.saturating_sub(state.kappa_time) >= config.incast_duration
            && q <= config.off_fraction * buffer
        {
            state.incast = false;
            turn_off = true;
        }
        let mut turn_on = false;
        if state.beta > 0 && gamma >= config.on_fraction() * buffer {
            state.incast = true;
            state.kappa_time = now;
            state.beta = 0;
            turn_on = true;
        }
        self.messages_for(switch, port, turn_off, turn_on)
    }

    /// OFF and/or ON messages to every source of every destination behind the port.
    fn messages_for(
        &self,
        switch: u32,
        port: u32,
        turn_off: bool,
        turn_on: bool,
    ) -> Vec<IncastMessage> {
        let mut out = Vec::new();
        let Some(state) = self.ports.get(&(switch, port)) else {
            return out;
        };
        for &dst in &state.dsts {
            for &src in self.dst_srcs.get(&dst).into_iter().flatten() {
                if turn_off {
                    out.push(IncastMessage::IncastOff { src, dst });
                }
                if turn_on {
                    let (mss, wscale) = self.pairs[&(src, dst)];
                    out.push(IncastMessage::IncastOn {
                        src,
                        dst,
                        wscale,
                        mss,
                    });
                }
            }
        }
        out
    }
}

/// Counters of one hypervisor module.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiccHypervisorCounters {
    pub incast_on: u64,
    pub incast_off: u64,
    pub acks_seen_during_incast: u64,
    pub rwnd_rewrites: u64,
}

#[derive(Clone, Copy, Debug)]
struct Clamp {
    /// The window field of ACKs after the handshake (scaled by the receiver's shift).
    window: u16,
    /// The window field of a SYN-ACK, which is never scaled (RFC 7323 section 2.2).
    mss: u16,
    expires: Nanos,
}

impl Default for SiccHypervisor {
    fn default() -> Self {
        SiccHypervisor::new(&SiccConfig::default())
    }
}

/// The SICC module in one host's virtual switch.
#[derive(Clone, Debug)]
pub struct SiccHypervisor {
    /// How long an ON lasts without an OFF: DM.
    flag_lifetime: Nanos,
    /// Keyed by (local source VM, remote destination).
    clamps: BTreeMap<(u32, u32), Clamp>,
    counters: SiccHypervisorCounters,
}

impl SiccHypervisor {
    pub fn new(config: &SiccConfig) -> SiccHypervisor {
        SiccHypervisor {
            flag_lifetime: config.incast_duration,
            clamps: BTreeMap::new(),
            counters: SiccHypervisorCounters::default(),
        }
    }

    pub fn counters(&self) -> &SiccHypervisorCounters {
        &self.counters
    }

    /// True if ACKs from `dst` to local VM `src` are being clamped at `now`.
    pub fn is_clamping(&self, now: Nanos, src: u32, dst: u32) -> bool {
        self.clamps
            .get(&(src, dst))
            .is_some_and(|c| now < c.expires)
    }

    /// The clamps in force (some may have lapsed: see [`SiccHypervisor::on_timer`]).
    pub fn clamps(&self) -> impl Iterator<Item = WindowClamp> + '_ {
        self.clamps.iter().map(|(&(vm, remote), c)| WindowClamp {
            vm,
            remote,
            window: c.window,
            mss: c.mss,
            expires: c.expires,
        })
    }

    /// A message from the controller.
    pub fn on_message(&mut self, now: Nanos, msg: &IncastMessage) {
        match *msg {
            IncastMessage::IncastOn {
                src,
                dst,
                wscale,
                mss,
            } => {
                self.counters.incast_on += 1;
                self.clamps.insert(
                    (src, dst),
                    Clamp {
                        window: one_segment_window(mss, wscale),
                        mss,
                        expires: now + self.flag_lifetime,
                    },
                );
            }
            IncastMessage::IncastOff { src, dst } => {
                self.counters.incast_off += 1;
                self.clamps.remove(&(src, dst));
            }
        }
    }

    /// A packet about to be delivered to a local VM (its destination address): if it is a TCP
    /// ACK of a clamped pair whose window exceeds one MSS, lower the window (the checksum is
    /// patched by [`PacketHeaders::set_tcp_window`]). Returns true if it was rewritten.
    pub fn on_ack_to_vm(&mut self, now: Nanos, pkt: &mut (impl PacketHeaders + ?Sized)) -> bool {
        if !is_ack(pkt) {
            return false;
        }
        let key = (pkt.dst(), pkt.src());
        let Some(clamp) = self.clamps.get(&key).copied() else {
            return false;
        };
        if now >= clamp.expires {
            self.clamps.remove(&key);
            return false;
        }
        self.counters.acks_seen_during_incast += 1;
        let rewritten = lower_ack_window(pkt, clamp.window, clamp.mss);
        self.counters.rwnd_rewrites += u64::from(rewritten);
        rewritten
    }
}

/// The window field that holds exactly one segment: MSS >> WS rounded up (1460 >> 5 = 45
/// would allow 1440 bytes and stall the sender), at least 1.
fn one_segment_window(mss: u16, wscale: u8) -> u16 {
    let unit = 1u32 << wscale.min(14);
    u32::from(mss).div_ceil(unit).clamp(1, u32::from(u16::MAX)) as u16
}

fn is_ack(pkt: &(impl PacketHeaders + ?Sized)) -> bool {
    pkt.tcp_flags().is_some_and(|f| f & tcp_flags::ACK != 0)
}

/// Lowers the window of an ACK to `window`, or to `mss` on a SYN-ACK (whose window field is
/// never scaled, RFC 7323 section 2.2); a window is never raised. True if rewritten.
fn lower_ack_window(pkt: &mut (impl PacketHeaders + ?Sized), window: u16, mss: u16) -> bool {
    let syn = pkt.tcp_flags().is_some_and(|f| f & tcp_flags::SYN != 0);
    let limit = if syn { mss } else { window };
    match pkt.tcp_window() {
        Some(w) if w > limit => {
            pkt.set_tcp_window(limit);
            true
        }
        _ => false,
    }
}

/// Counters of one switch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiccSwitchCounters {
    pub incast_on: u64,
    pub incast_off: u64,
    pub rwnd_rewrites: u64,
}

#[derive(Clone, Copy, Debug)]
struct SwitchPortState {
    /// The thresholds in bytes.
    on_bytes: f64,
    off_bytes: f64,
    incast: bool,
}

/// SICC inside one switch.
#[derive(Clone, Debug, Default)]
pub struct SiccSwitch {
    config: SiccConfig,
    /// Looked up for every packet queued or sent (hashed: their order never matters).
    ports: FxHashMap<u32, SwitchPortState>,
    /// The output port of each open flow (keyed in its data direction), from its SYN: which
    /// ACKs a port's incast clamps. The module counts these flows and clamps while at least
    /// one is open.
    flows: FxHashMap<FlowKey, u32>,
    counters: SiccSwitchCounters,
}

impl SiccSwitch {
    pub fn new(config: SiccConfig) -> SiccSwitch {
        SiccSwitch {
            config,
            ..Default::default()
        }
    }

    pub fn counters(&self) -> &SiccSwitchCounters {
        &self.counters
    }

    /// Declares an output port with its buffer limit in bytes.
    pub fn add_port(&mut self, port: u32, limit_bytes: u64) {
        let limit = limit_bytes as f64;
        self.ports.insert(
            port,
            SwitchPortState {
                on_bytes: self.config.on_fraction() * limit,
                off_bytes: self.config.off_fraction * limit,
                incast: false,
            },
        );
    }

    pub fn is_incast(&self, port: u32) -> bool {
        self.ports.get(&port).is_some_and(|p| p.incast)
    }

    /// A packet is forwarded to output `port`: a SYN opens its flow there, a FIN or RST closes
    /// it.
    pub fn on_forward(&mut self, port: u32, pkt: &(impl PacketHeaders + ?Sized)) {
        let Some(flags) = pkt.tcp_flags() else { return };
        if flags & (tcp_flags::FIN | tcp_flags::RST) != 0 {
            self.flows.remove(&FlowKey::of(pkt));
        } else if flags & (tcp_flags::SYN | tcp_flags::ACK) == tcp_flags::SYN
            && self.ports.contains_key(&port)
        {
            self.flows.insert(FlowKey::of(pkt), port);
        }
    }

    /// A packet reaches `port`'s queue, which holds `queue_bytes` before it.
    pub fn on_enqueue(&mut self, port: u32, queue_bytes: u64) {
        if let Some(p) = self.ports.get_mut(&port) {
            if !p.incast && queue_bytes as f64 > p.on_bytes {
                p.incast = true;
                self.counters.incast_on += 1;
            }
        }
    }

    /// A packet left `port`'s queue; `queue_bytes` remain.
    pub fn on_dequeue(&mut self, port: u32, queue_bytes: u64) {
        if let Some(p) = self.ports.get_mut(&port) {
            if p.incast && (queue_bytes as f64) < p.off_bytes {
                p.incast = false;
                self.counters.incast_off += 1;
            }
        }
    }

    /// An ACK entering the switch: if its flow's data leaves through a port in incast, lower
    /// its window to one segment. True if rewritten.
    pub fn on_ack(&mut self, pkt: &mut (impl PacketHeaders + ?Sized)) -> bool {
        if !is_ack(pkt) {
            return false;
        }
        let Some(&port) = self.flows.get(&FlowKey::of(pkt).reversed()) else {
            return false;
        };
        if !self.is_incast(port) {
            return false;
        }
        let window = one_segment_window(self.config.mss, self.config.window_shift);
        let rewritten = lower_ack_window(pkt, window, self.config.mss);
        self.counters.rwnd_rewrites += u64::from(rewritten);
        rewritten
    }
}

impl SwitchHookCore for SiccSwitch {
    fn on_enqueue(&mut self, _now: Nanos, port: u32, queue_bytes: u64) {
        SiccSwitch::on_enqueue(self, port, queue_bytes);
    }
    fn on_dequeue(&mut self, _now: Nanos, port: u32, queue_bytes: u64) {
        SiccSwitch::on_dequeue(self, port, queue_bytes);
    }
    fn queue_events(&self) -> bool {
        true
    }
    fn counters(&self, out: &mut dyn FnMut(&'static str, f64)) {
        let k = self.counters();
        out("incast_on", k.incast_on as f64);
        out("incast_off", k.incast_off as f64);
        out("rwnd_rewrites", k.rwnd_rewrites as f64);
    }
}

impl<P: PacketHeaders + ?Sized> SwitchHook<P> for SiccSwitch {
    fn on_arrival(&mut self, _now: Nanos, _in_port: u32, _from_host: bool, pkt: &mut P) -> bool {
        self.on_ack(pkt);
        false
    }
    fn on_forward(&mut self, _now: Nanos, port: u32, pkt: &P) {
        SiccSwitch::on_forward(self, port, pkt);
    }
}

impl HostShimCore for SiccHypervisor {
    fn datapath(&self) -> Datapath {
        Datapath {
            clamp_window: true,
            ..Datapath::default()
        }
    }
    fn window_clamps(&self, out: &mut dyn FnMut(WindowClamp)) {
        for c in self.clamps() {
            out(c);
        }
    }
    fn on_message(&mut self, now: Nanos, msg: &HostMessage) {
        if let HostMessage::Incast(m) = msg {
            SiccHypervisor::on_message(self, now, m);
        }
    }

    /// Drops the flags that have lapsed at `now`.
    fn on_timer(&mut self, now: Nanos) {
        self.clamps.retain(|_, c| now < c.expires);
    }

    /// When the next flag lapses.
    fn poll_at(&self) -> Option<Nanos> {
        self.clamps.values().map(|c| c.expires).min()
    }
    fn counters(&self, out: &mut dyn FnMut(&'static str, f64)) {
        let k = SiccHypervisor::counters(self);
        out("incast_on_received", k.incast_on as f64);
        out("incast_off_received", k.incast_off as f64);
        out("rwnd_rewrites", k.rwnd_rewrites as f64);
    }
}

impl<P: PacketHeaders + ?Sized> HostShim<P> for SiccHypervisor {
    fn on_ingress(&mut self, now: Nanos, pkt: &mut P) -> IngressVerdict {
        self.on_ack_to_vm(now, pkt);
        IngressVerdict::Deliver
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::headers::{ip_proto, Ecn};
    use crate::vocab::wire::{emit, Ipv4Fields, Ipv4Packet, TcpFields};

    const MS: Nanos = 1_000_000;
    const DST: u32 = 0x0a03_0001;

    fn src(i: u32) -> u32 {
        0x0a01_0000 + i
    }

    fn controller() -> SiccController {
        let mut c = SiccController::new(SiccConfig {
            buffer_pkts: 100,
            ..Default::default()
        });
        for i in 1..=3 {
            c.on_syn(0, 7, 2, src(i), DST, 1460, 7);
        }
        c
    }

    #[test]
    fn the_queue_average_weighs_the_new_reading_three_quarters() {
        let mut c = controller();
        c.on_queue_sample(MS, 7, 2, 40);
        assert_eq!(c.port_view(7, 2).unwrap().smoothed_queue, 30.0);
        c.on_queue_sample(2 * MS, 7, 2, 10);
        assert_eq!(c.port_view(7, 2).unwrap().smoothed_queue, 15.0);
    }

    #[test]
    fn incast_turns_on_when_the_volley_plus_queue_fills_the_buffer() {
        let mut c = controller();
        // Q = 0.75 x 129 = 96.75, gamma = 3 x 1 + 96.75 = 99.75 < 100: nothing.
        assert!(c.on_queue_sample(MS, 7, 2, 129).is_empty());
        // Q = 96.75 / 4 + 0.75 x 130 = 121.6875, gamma = 124.6875 >= 100: ON.
        let msgs = c.on_queue_sample(2 * MS, 7, 2, 130);
        assert_eq!(msgs.len(), 3);
        assert_eq!(
            msgs[0],
            IncastMessage::IncastOn {
                src: src(1),
                dst: DST,
                wscale: 7,
                mss: 1460
            }
        );
        let view = c.port_view(7, 2).unwrap();
        assert!(view.incast);
        assert_eq!(view.new_connections, 0, "beta restarts after ON");
    }

    #[test]
    fn the_clamp_takes_the_window_scale_of_the_syn_ack() {
        let mut c = controller();
        // Before any ON: the scale is kept for the clamp to come, nothing is sent.
        assert!(c.on_syn_ack(src(1), DST, 9).is_empty());
        // The same scale again, or a pair the controller saw no SYN of: nothing.
        assert!(c.on_syn_ack(src(1), DST, 9).is_empty());
        assert!(c.on_syn_ack(src(9), DST, 3).is_empty());
        let on = c.on_queue_sample(MS, 7, 2, 200);
        assert!(on.contains(&IncastMessage::IncastOn {
            src: src(1),
            dst: DST,
            wscale: 9,
            mss: 1460
        }));
        assert!(on.contains(&IncastMessage::IncastOn {
            src: src(2),
            dst: DST,
            wscale: 7,
            mss: 1460
        }));
        // A SYN-ACK during the ON corrects that pair's clamp at once.
        assert_eq!(
            c.on_syn_ack(src(2), DST, 5),
            [IncastMessage::IncastOn {
                src: src(2),
                dst: DST,
                wscale: 5,
                mss: 1460
            }]
        );
    }

    #[test]
    fn incast_needs_new_connections_to_turn_on() {
        let mut c = controller();
        for _ in 1..=3 {
            c.on_fin(0, 7, 2, src(1), DST);
        }
        assert!(c.on_queue_sample(MS, 7, 2, 1000).is_empty());
        assert!(!c.port_view(7, 2).unwrap().incast);
    }

    #[test]
    fn incast_turns_off_only_after_dm_and_once_the_queue_drains() {
        let mut c = controller();
        assert_eq!(c.on_queue_sample(MS, 7, 2, 200).len(), 3);
        // Drained but the episode is younger than DM = 3 ms.
        assert!(c.on_queue_sample(3 * MS, 7, 2, 0).is_empty());
        // DM passed but the queue is above alpha1 x B = 20 packets.
        assert!(c.on_queue_sample(4 * MS, 7, 2, 21).is_empty());
        let msgs = c.on_queue_sample(5 * MS, 7, 2, 20);
        assert_eq!(
            msgs,
            (1..=3)
                .map(|i| IncastMessage::IncastOff {
                    src: src(i),
                    dst: DST
                })
                .collect::<Vec<_>>()
        );
        assert!(
            c.on_queue_sample(6 * MS, 7, 2, 0).is_empty(),
            "OFF is sent once"
        );
    }

    #[test]
    fn the_controller_samples_every_port_a_syn_crossed() {
        let mut c = controller();
        c.on_syn(0, 8, 1, src(9), 0x0a04_0001, 1460, 0);
        assert_eq!(c.poll_at(), Some(MS));
        assert_eq!(
            c.on_timer(MS),
            vec![
                QueueRequest { switch: 7, port: 2 },
                QueueRequest { switch: 8, port: 1 }
            ]
        );
        assert_eq!(c.poll_at(), Some(2 * MS));
    }

    /// An ACK of the flow src(1):5000 -> DST:80, from DST.
    fn ack(window: u16, flags: u8) -> Vec<u8> {
        segment(DST, src(1), (80, 5000), flags, window)
    }

    fn deliver(h: &mut SiccHypervisor, now: Nanos, window: u16) -> (bool, u16) {
        let mut b = ack(window, tcp_flags::ACK);
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        let rewritten = h.on_ack_to_vm(now, &mut p);
        assert!(p.checksums_valid());
        (rewritten, p.tcp_window().unwrap())
    }

    fn on(h: &mut SiccHypervisor, wscale: u8) {
        h.on_message(
            0,
            &IncastMessage::IncastOn {
                src: src(1),
                dst: DST,
                wscale,
                mss: 1460,
            },
        );
    }

    #[test]
    fn a_scaled_window_is_clamped_to_mss_shifted_by_the_scale_rounded_up() {
        let mut h = SiccHypervisor::default();
        on(&mut h, 7);
        // 1460 / 128 = 11.4: 12 units of 128 bytes, the smallest window holding one segment.
        assert_eq!(deliver(&mut h, 1, 500), (true, 12));
        assert_eq!(h.counters().rwnd_rewrites, 1);
    }

    #[test]
    fn a_syn_ack_is_clamped_to_one_unscaled_mss() {
        let mut h = SiccHypervisor::default();
        on(&mut h, 7);
        let mut b = ack(65535, tcp_flags::SYN | tcp_flags::ACK);
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        assert!(h.on_ack_to_vm(1, &mut p));
        assert!(p.checksums_valid());
        assert_eq!(
            p.tcp_window(),
            Some(1460),
            "a SYN's window field is never scaled"
        );
    }

    #[test]
    fn an_unscaled_window_is_clamped_to_one_mss_and_never_raised() {
        let mut h = SiccHypervisor::default();
        on(&mut h, 0);
        assert_eq!(deliver(&mut h, 1, 65535), (true, 1460));
        assert_eq!(deliver(&mut h, 1, 1000), (false, 1000));
    }

    #[test]
    fn a_huge_scale_still_leaves_a_one_unit_window() {
        let mut h = SiccHypervisor::default();
        on(&mut h, 14);
        assert_eq!(deliver(&mut h, 1, 100), (true, 1));
    }

    #[test]
    fn the_clamp_ends_with_off_or_after_dm() {
        let mut h = SiccHypervisor::default();
        on(&mut h, 0);
        assert_eq!(h.poll_at(), Some(3 * MS));
        assert_eq!(deliver(&mut h, 3 * MS - 1, 5000), (true, 1460));
        assert_eq!(deliver(&mut h, 3 * MS, 5000), (false, 5000));
        on(&mut h, 0);
        h.on_message(
            1,
            &IncastMessage::IncastOff {
                src: src(1),
                dst: DST,
            },
        );
        assert_eq!(deliver(&mut h, 2, 5000), (false, 5000));
        assert!(!h.is_clamping(2, src(1), DST));
    }

    #[test]
    fn only_acks_of_the_flagged_pair_are_touched() {
        let mut h = SiccHypervisor::default();
        on(&mut h, 0);
        let mut syn = ack(5000, tcp_flags::SYN);
        assert!(!h.on_ack_to_vm(1, &mut Ipv4Packet::new_checked(&mut syn[..]).unwrap()));
        h.on_message(
            0,
            &IncastMessage::IncastOn {
                src: src(2),
                dst: DST,
                wscale: 0,
                mss: 1460,
            },
        );
        h.on_message(
            0,
            &IncastMessage::IncastOff {
                src: src(1),
                dst: DST,
            },
        );
        assert_eq!(deliver(&mut h, 1, 5000), (false, 5000));
    }

    #[test]
    fn evaluate_on_syn_turns_incast_on_at_the_syn_that_fills_the_buffer() {
        let cfg = SiccConfig {
            evaluate_on_syn: true,
            initial_window_pkts: 2.0,
            buffer_pkts: 10,
            ..SiccConfig::default()
        };
        let mut c = SiccController::new(cfg);
        // gamma = 2 x beta + Q with Q = 0: the fifth SYN reaches B = 10.
        for i in 0..4u32 {
            assert!(c.on_syn(i as Nanos, 1, 2, 100 + i, 7, 1460, 5).is_empty());
        }
        let msgs = c.on_syn(4, 1, 2, 104, 7, 1460, 5);
        assert_eq!(msgs.len(), 5, "one ON per source of the destination");
        assert!(msgs.iter().all(|m| matches!(
            m,
            IncastMessage::IncastOn {
                dst: 7,
                wscale: 5,
                mss: 1460,
                ..
            }
        )));
        assert!(c.port_view(1, 2).unwrap().incast);
    }

    /// A switch whose port 3 has the dumbbell's 83-packet buffer, receivers scaling by 5.
    fn sicc_switch() -> SiccSwitch {
        let mut sw = SiccSwitch::new(SiccConfig {
            window_shift: 5,
            ..SiccConfig::switch()
        });
        sw.add_port(3, 83 * 1500);
        sw
    }

    fn segment(from: u32, to: u32, ports: (u16, u16), flags: u8, window: u16) -> Vec<u8> {
        emit(
            &Ipv4Fields {
                src: from,
                dst: to,
                protocol: ip_proto::TCP,
                ident: 0,
                ecn: Ecn::NotEct,
                total_len: 40,
                ttl: 64,
            },
            Some(&TcpFields {
                src_port: ports.0,
                dst_port: ports.1,
                seq: 0,
                ack: 1,
                flags,
                window,
            }),
        )
    }

    /// Flow `i` (src(i):5000 -> DST:80) opened through port 3.
    fn open(sw: &mut SiccSwitch, i: u32) {
        let b = segment(src(i), DST, (5000, 80), tcp_flags::SYN, 65535);
        sw.on_forward(3, &Ipv4Packet::new_checked(b).unwrap());
    }

    /// The ACK of flow `i` entering the switch: (rewritten, window field after).
    fn switch_ack(sw: &mut SiccSwitch, i: u32, flags: u8, window: u16) -> (bool, u16) {
        let mut b = segment(DST, src(i), (80, 5000), flags, window);
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        let rewritten = sw.on_ack(&mut p);
        assert!(p.checksums_valid());
        (rewritten, p.tcp_window().unwrap())
    }

    #[test]
    fn a_switch_port_turns_on_above_95_percent_at_an_arrival_and_off_below_20_at_a_departure() {
        let mut sw = sicc_switch();
        // 0.95 x 124500 B = 118275 B; departures never turn it on.
        sw.on_dequeue(3, 124_500);
        sw.on_enqueue(3, 118_275);
        assert!(!sw.is_incast(3));
        sw.on_enqueue(3, 118_276);
        assert!(sw.is_incast(3));
        // 0.2 x 124500 B = 24900 B; arrivals never turn it off.
        sw.on_enqueue(3, 0);
        sw.on_dequeue(3, 24_900);
        assert!(sw.is_incast(3));
        sw.on_dequeue(3, 24_899);
        assert!(!sw.is_incast(3));
        assert_eq!(
            *sw.counters(),
            SiccSwitchCounters {
                incast_on: 1,
                incast_off: 1,
                rwnd_rewrites: 0
            }
        );
    }

    #[test]
    fn during_incast_the_switch_clamps_acks_of_the_ports_flows_to_one_segment() {
        let mut sw = sicc_switch();
        open(&mut sw, 1);
        assert_eq!(switch_ack(&mut sw, 1, tcp_flags::ACK, 5000), (false, 5000));
        sw.on_enqueue(3, 120_000);
        // 1460 / 32 = 45.6: 46 units of 32 bytes; a SYN-ACK's window is never scaled.
        assert_eq!(switch_ack(&mut sw, 1, tcp_flags::ACK, 5000), (true, 46));
        assert_eq!(switch_ack(&mut sw, 1, tcp_flags::ACK, 20), (false, 20));
        let syn_ack = tcp_flags::SYN | tcp_flags::ACK;
        assert_eq!(switch_ack(&mut sw, 1, syn_ack, 65535), (true, 1460));
        // A flow whose SYN this switch never forwarded, and a closed one, are left alone.
        assert_eq!(switch_ack(&mut sw, 2, tcp_flags::ACK, 5000), (false, 5000));
        let fin = segment(src(1), DST, (5000, 80), tcp_flags::FIN | tcp_flags::ACK, 1);
        sw.on_forward(3, &Ipv4Packet::new_checked(fin).unwrap());
        assert_eq!(switch_ack(&mut sw, 1, tcp_flags::ACK, 5000), (false, 5000));
        assert_eq!(sw.counters().rwnd_rewrites, 2);
    }
}
