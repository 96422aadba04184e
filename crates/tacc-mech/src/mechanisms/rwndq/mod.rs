//! RWNDQ: a switch that writes a fair-share receive window into ACKs (PAPERS.md §3, §5 and the
//! prototype's control loop in §6). SICC's best baseline; it needs switch changes.
//!
//! Per output port the switch counts the active TCP flows N and keeps an aggregate window A
//! (bytes the port lets all its flows have in flight); each flow's share is W = A / N,
//! clamped to [1 MSS, max window]. ACKs of a flow crossing the port on its way out carry at
//! most W in their rwnd; a window is only ever lowered. The loop, every `tick` (200 us):
//! - slow start: no clamping until the queue passes `slow_start_exit_fraction` x limit (1/4);
//!   then A starts at the fair share's total, port BDP + target queue (target = limit / 8);
//! - every 16 ticks: A += (sum over those ticks of (target - queue)) / 16, i.e. each flow's
//!   window moves by the summed error / (16 N), as in the prototype;
//! - a queue above 15/16 of the limit for 16 ticks in a row resets A to N x MSS;
//! - a port without flows goes back to slow start.
//!
//! Keeping A rather than W means a volley of new flows divides the same aggregate as soon as
//! their SYNs pass, which is what lets the scheme absorb incast.

mod build;
pub mod config;

pub use config::RwndqConfig;

use rustc_hash::FxHashMap;

use crate::vocab::headers::{tcp_flags, FlowKey, PacketHeaders};
use crate::vocab::roles::{SwitchHook, SwitchHookCore};
use crate::vocab::units::Nanos;

/// The longest packet that can be a pure TCP ACK: 20 B IPv4 header + 60 B TCP header.
const PURE_ACK_MAX_BYTES: u16 = 80;

/// What one port's controller currently says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RwndqPortView {
    pub flows: u32,
    pub slow_start: bool,
    /// The per-flow window in bytes, `None` in slow start (no clamping).
    pub window_bytes: Option<u32>,
}

#[derive(Clone, Debug)]
struct PortState {
    rate_bps: u64,
    limit_bytes: u64,
    flows: u32,
    slow_start: bool,
    aggregate: f64,
    error_sum: f64,
    ticks: u32,
    overflow_ticks: u32,
}

#[derive(Clone, Copy, Debug)]
struct FlowEntry {
    port: u32,
    last_seen: Nanos,
}

/// Counters of one switch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RwndqCounters {
    pub rwnd_rewrites: u64,
    pub overflow_resets: u64,
}

/// The RWNDQ logic of one switch.
#[derive(Clone, Debug, Default)]
pub struct Rwndq {
    config: RwndqConfig,
    /// Looked up for every packet crossing the switch (its data's port, an ACK's window); the
    /// order of ports never matters (each port's loop is its own).
    ports: FxHashMap<u32, PortState>,
    /// Active flows by their data-direction key (looked up for every packet; the order of
    /// flows never matters).
    flows: FxHashMap<FlowKey, FlowEntry>,
    next_tick: Option<Nanos>,
    tick_count: u64,
    counters: RwndqCounters,
}

impl Rwndq {
    pub fn new(config: RwndqConfig) -> Rwndq {
        Rwndq {
            config,
            ..Default::default()
        }
    }

    pub fn counters(&self) -> &RwndqCounters {
        &self.counters
    }

    /// Declares an output port with its line rate (bits/s) and buffer limit (bytes).
    pub fn add_port(&mut self, now: Nanos, port: u32, rate_bps: u64, limit_bytes: u64) {
        self.ports.insert(
            port,
            PortState {
                rate_bps,
                limit_bytes,
                flows: 0,
                slow_start: true,
                aggregate: 0.0,
                error_sum: 0.0,
                ticks: 0,
                overflow_ticks: 0,
            },
        );
        self.next_tick.get_or_insert(now + self.config.tick);
    }

    fn window_of(&self, p: &PortState) -> Option<u32> {
        if p.slow_start || p.flows == 0 {
            return None;
        }
        let w = (p.aggregate / p.flows as f64) as u32;
        Some(w.clamp(self.config.mss_bytes, self.config.max_window_bytes))
    }

    pub fn port_view(&self, port: u32) -> Option<RwndqPortView> {
        self.ports.get(&port).map(|p| RwndqPortView {
            flows: p.flows,
            slow_start: p.slow_start,
            window_bytes: self.window_of(p),
        })
    }

    /// A packet is queued at output `port`: flow accounting. SYNs and segments with payload
    /// open a flow, FIN and RST close it.
    pub fn on_enqueue(&mut self, now: Nanos, port: u32, pkt: &(impl PacketHeaders + ?Sized)) {
        let Some(flags) = pkt.tcp_flags() else { return };
        if !self.ports.contains_key(&port) {
            return;
        }
        let key = FlowKey::of(pkt);
        if flags & (tcp_flags::FIN | tcp_flags::RST) != 0 {
            if let Some(entry) = self.flows.remove(&key) {
                self.ports
                    .get_mut(&entry.port)
                    .expect("flows point at ports")
                    .flows -= 1;
            }
            return;
        }
        if let Some(entry) = self.flows.get_mut(&key) {
            entry.last_seen = now;
            return;
        }
        if flags & tcp_flags::SYN != 0 || pkt.ip_len() > PURE_ACK_MAX_BYTES {
            self.flows.insert(
                key,
                FlowEntry {
                    port,
                    last_seen: now,
                },
            );
            let p = self.ports.get_mut(&port).expect("checked above");
            p.flows += 1;
            if !p.slow_start {
                // The aggregate is kept (the new flow takes its share of it), but it never
                // drops below one MSS per flow.
                p.aggregate = p
                    .aggregate
                    .max(p.flows as f64 * self.config.mss_bytes as f64);
            }
        }
    }

    /// The window field of ACKs of each port's flows, for the ports that clamp now.
    pub fn window_fields(&self) -> impl Iterator<Item = (u32, u16)> + '_ {
        self.ports
            .iter()
            .filter_map(|(&port, p)| Some((port, self.window_field(self.window_of(p)?))))
    }

    /// Rounded up to the scale's unit: rounded down, the smallest share (one MSS: 1,460 B
    /// as 45 x 32 = 1,440 B at a shift of 5) would be less than a segment, and a Linux
    /// sender waits for its persist timer on a window smaller than its segment.
    fn window_field(&self, window: u32) -> u16 {
        let unit = 1u64 << self.config.window_shift;
        (window as u64).div_ceil(unit).clamp(1, u16::MAX as u64) as u16
    }

    /// An ACK crossing the switch: lower its rwnd to the share of the port its flow's data
    /// leaves through. Returns true if rewritten.
    pub fn on_ack(&mut self, pkt: &mut (impl PacketHeaders + ?Sized)) -> bool {
        if pkt.tcp_flags().is_none_or(|f| f & tcp_flags::ACK == 0) {
            return false;
        }
        let Some(entry) = self.flows.get(&FlowKey::of(pkt).reversed()) else {
            return false;
        };
        let Some(window) = self.ports.get(&entry.port).and_then(|p| self.window_of(p)) else {
            return false;
        };
        let field = self.window_field(window);
        match pkt.tcp_window() {
            Some(w) if w > field => {
                pkt.set_tcp_window(field);
                self.counters.rwnd_rewrites += 1;
                true
            }
            _ => false,
        }
    }

    fn expire_idle_flows(&mut self, now: Nanos) {
        let timeout = self.config.flow_idle_timeout;
        let ports = &mut self.ports;
        self.flows.retain(|_, e| {
            let alive = now.saturating_sub(e.last_seen) < timeout;
            if !alive {
                ports.get_mut(&e.port).expect("flows point at ports").flows -= 1;
            }
            alive
        });
    }
}

impl SwitchHookCore for Rwndq {
    /// Runs one control-loop tick if due at `now`; `queue_bytes(port)` reads a port's queue.
    fn on_timer(&mut self, now: Nanos, queue_bytes: &dyn Fn(u32) -> u64) {
        match self.next_tick {
            Some(t) if t <= now => {}
            _ => return,
        }
        self.next_tick = Some(now + self.config.tick);
        self.tick_count += 1;
        let per_update = self.config.ticks_per_update.max(1);
        if self.tick_count.is_multiple_of(per_update as u64) {
            self.expire_idle_flows(now);
        }
        let config = self.config;
        for (&port, p) in self.ports.iter_mut() {
            let q = queue_bytes(port) as f64;
            let limit = p.limit_bytes as f64;
            let mss = config.mss_bytes as f64;
            if p.flows == 0 {
                p.slow_start = true;
                continue;
            }
            if p.slow_start {
                if q > config.slow_start_exit_fraction * limit {
                    // The fair share's total: the port's BDP at the base RTT plus the target
                    // queue.
                    let bdp = p.rate_bps as f64 * config.base_rtt as f64 / 8e9;
                    p.slow_start = false;
                    p.aggregate = bdp + limit * config.target_fraction;
                    p.error_sum = 0.0;
                    p.ticks = 0;
                    p.overflow_ticks = 0;
                }
                continue;
            }
            p.error_sum += config.target_fraction * limit - q;
            p.ticks += 1;
            p.overflow_ticks = if q > config.overflow_fraction * limit {
                p.overflow_ticks + 1
            } else {
                0
            };
            let flows = p.flows as f64;
            if p.overflow_ticks >= per_update {
                p.aggregate = flows * mss;
                p.overflow_ticks = 0;
                p.error_sum = 0.0;
                p.ticks = 0;
                self.counters.overflow_resets += 1;
            } else if p.ticks >= per_update {
                p.aggregate += p.error_sum / per_update as f64;
                p.aggregate = p
                    .aggregate
                    .clamp(flows * mss, flows * config.max_window_bytes as f64);
                p.error_sum = 0.0;
                p.ticks = 0;
            }
        }
    }

    /// When the control loop next runs.
    fn poll_at(&self) -> Option<Nanos> {
        self.next_tick
    }
    fn port_windows(&self, out: &mut dyn FnMut(u32, u16)) {
        for (port, field) in self.window_fields() {
            out(port, field);
        }
    }
    fn counters(&self, out: &mut dyn FnMut(&'static str, f64)) {
        out("rwnd_rewrites", self.counters().rwnd_rewrites as f64);
        out(
            "rwndq_overflow_resets",
            self.counters().overflow_resets as f64,
        );
    }
}

impl<P: PacketHeaders + ?Sized> SwitchHook<P> for Rwndq {
    fn on_arrival(&mut self, _now: Nanos, _in_port: u32, _from_host: bool, pkt: &mut P) -> bool {
        self.on_ack(pkt);
        false
    }
    fn on_forward(&mut self, now: Nanos, port: u32, pkt: &P) {
        self.on_enqueue(now, port, pkt);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::headers::{ip_proto, Ecn};
    use crate::vocab::wire::{emit, Ipv4Fields, Ipv4Packet, TcpFields};

    const GBPS: u64 = 1_000_000_000;
    const LIMIT: u64 = 150_000;
    const RECEIVER: u32 = 0x0a09_0001;

    fn segment(
        src: u32,
        dst: u32,
        sport: u16,
        dport: u16,
        flags: u8,
        len: u16,
        window: u16,
    ) -> Vec<u8> {
        emit(
            &Ipv4Fields {
                src,
                dst,
                protocol: ip_proto::TCP,
                ident: 0,
                ecn: Ecn::NotEct,
                total_len: len,
                ttl: 64,
            },
            Some(&TcpFields {
                src_port: sport,
                dst_port: dport,
                seq: 0,
                ack: 0,
                flags,
                window,
            }),
        )
    }

    /// A switch whose port 1 leads to RECEIVER and carries `n` data flows.
    fn switch_with_flows(n: u32) -> Rwndq {
        switch_of(RwndqConfig::default(), n)
    }

    fn switch_of(config: RwndqConfig, n: u32) -> Rwndq {
        let mut r = Rwndq::new(config);
        r.add_port(0, 1, GBPS, LIMIT);
        for i in 0..n {
            let b = segment(
                0x0a01_0000 + i,
                RECEIVER,
                1000 + i as u16,
                80,
                tcp_flags::SYN,
                40,
                65535,
            );
            r.on_enqueue(0, 1, &Ipv4Packet::new_checked(b).unwrap());
        }
        r
    }

    fn tick_with_queue(r: &mut Rwndq, ticks: u64, q: u64) {
        for _ in 0..ticks {
            let t = r.poll_at().unwrap();
            r.on_timer(t, &|_| q);
        }
    }

    /// The ACK RECEIVER sends back to flow `i`, after passing the switch.
    fn ack_to(r: &mut Rwndq, i: u32, window: u16) -> (bool, u16) {
        let mut b = segment(
            RECEIVER,
            0x0a01_0000 + i,
            80,
            1000 + i as u16,
            tcp_flags::ACK,
            40,
            window,
        );
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        let rewritten = r.on_ack(&mut p);
        assert!(p.checksums_valid());
        (rewritten, p.tcp_window().unwrap())
    }

    #[test]
    fn nothing_is_clamped_in_slow_start() {
        let mut r = switch_with_flows(10);
        tick_with_queue(&mut r, 5, 37_500);
        assert_eq!(r.port_view(1).unwrap().window_bytes, None);
        assert_eq!(ack_to(&mut r, 0, 65535), (false, 65535));
    }

    #[test]
    fn leaving_slow_start_writes_bdp_plus_target_over_n() {
        let mut r = switch_with_flows(10);
        // Queue above limit / 4 = 37.5 kB ends slow start. BDP = 1 Gb/s x 100 us = 12.5 kB,
        // target = 150 kB / 8 = 18.75 kB: W = 31.25 kB / 10 = 3125 B.
        tick_with_queue(&mut r, 1, 40_000);
        assert_eq!(r.port_view(1).unwrap().window_bytes, Some(3125));
        assert_eq!(ack_to(&mut r, 3, 65535), (true, 3125));
        assert_eq!(ack_to(&mut r, 3, 2000), (false, 2000), "never raised");
    }

    #[test]
    fn the_share_never_drops_below_one_mss() {
        let mut r = switch_with_flows(100);
        tick_with_queue(&mut r, 1, 40_000);
        // 31.25 kB / 100 = 312 B < 1 MSS.
        assert_eq!(r.port_view(1).unwrap().window_bytes, Some(1460));
        assert_eq!(ack_to(&mut r, 42, 65535), (true, 1460));
    }

    #[test]
    fn a_scaled_window_field_never_says_less_than_the_share() {
        // Receivers scaling by 2^5 (a 2 MB buffer): one MSS, 1,460 B, is 45.6 units of 32 B.
        // 45 would say 1,440 B, less than a segment, on which a sender stalls.
        let config = RwndqConfig {
            window_shift: 5,
            ..Default::default()
        };
        let mut r = switch_of(config, 100);
        tick_with_queue(&mut r, 1, 40_000);
        assert_eq!(r.port_view(1).unwrap().window_bytes, Some(1460));
        assert_eq!(ack_to(&mut r, 42, 65535), (true, 46));
    }

    #[test]
    fn every_16_ticks_the_window_moves_by_the_summed_error_over_16_n() {
        let mut r = switch_with_flows(10);
        tick_with_queue(&mut r, 1, 40_000);
        // 16 ticks at 8 kB above target: each flow loses 16 x 8000 / (16 x 10) = 800 B.
        tick_with_queue(&mut r, 15, 26_750);
        assert_eq!(r.port_view(1).unwrap().window_bytes, Some(3125));
        tick_with_queue(&mut r, 1, 26_750);
        assert_eq!(r.port_view(1).unwrap().window_bytes, Some(2325));
        // 16 ticks with an empty queue: + 18750 / 10 per flow.
        tick_with_queue(&mut r, 16, 0);
        assert_eq!(r.port_view(1).unwrap().window_bytes, Some(4200));
    }

    #[test]
    fn a_queue_near_the_limit_for_16_ticks_resets_windows_to_one_mss() {
        let mut r = switch_with_flows(10);
        tick_with_queue(&mut r, 1, 40_000);
        tick_with_queue(&mut r, 15, 141_000);
        tick_with_queue(&mut r, 1, 140_000);
        tick_with_queue(&mut r, 15, 141_000);
        assert_eq!(r.counters().overflow_resets, 0, "the streak was broken");
        tick_with_queue(&mut r, 1, 141_000);
        assert_eq!(r.port_view(1).unwrap().window_bytes, Some(1460));
        assert_eq!(r.counters().overflow_resets, 1);
    }

    #[test]
    fn new_flows_divide_the_same_aggregate() {
        let mut r = switch_with_flows(10);
        tick_with_queue(&mut r, 1, 40_000);
        for i in 10..20 {
            let b = segment(
                0x0a01_0000 + i,
                RECEIVER,
                1000 + i as u16,
                80,
                tcp_flags::SYN,
                40,
                65535,
            );
            r.on_enqueue(0, 1, &Ipv4Packet::new_checked(b).unwrap());
        }
        assert_eq!(r.port_view(1).unwrap().window_bytes, Some(1562));
    }

    #[test]
    fn flows_end_with_fin_or_silence_and_pure_acks_open_none() {
        let mut r = switch_with_flows(2);
        let fin = segment(
            0x0a01_0000,
            RECEIVER,
            1000,
            80,
            tcp_flags::FIN | tcp_flags::ACK,
            40,
            1,
        );
        r.on_enqueue(0, 1, &Ipv4Packet::new_checked(fin).unwrap());
        let ack = segment(0x0a02_0000, RECEIVER, 7, 80, tcp_flags::ACK, 52, 1);
        r.on_enqueue(0, 1, &Ipv4Packet::new_checked(ack).unwrap());
        assert_eq!(r.port_view(1).unwrap().flows, 1);
        let data = segment(0x0a02_0000, RECEIVER, 7, 80, tcp_flags::ACK, 1500, 1);
        r.on_enqueue(50_000_000, 1, &Ipv4Packet::new_checked(data).unwrap());
        assert_eq!(r.port_view(1).unwrap().flows, 2);
        // The SYN-opened flow (last seen at 0) expires at the first update check past 100 ms.
        tick_with_queue(&mut r, 512, 0);
        assert_eq!(r.port_view(1).unwrap().flows, 1);
    }
}
