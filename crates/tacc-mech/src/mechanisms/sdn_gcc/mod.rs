//! SDN-GCC: HyGenICC's rate limiters driven by an SDN controller (PAPERS.md §2).
//!
//! - [`SdnGccShim`] (Algorithm 3, with the paper's "(fix)"): per host NIC, each VM is policed at
//!   its share E(i) and, below it, at an adaptive rate R per *rate key*. A congestion
//!   notification from the controller cuts R; a state-update timer raises it again once no
//!   notification has come for Tc. The rate key is (VM, path) where the path part is chosen by
//!   [`RateKeying`]: nothing (one rate per VM, the paper) or the destination (so a VM's
//!   uncongested destinations keep their rate; the hook for per-path attribution).
//! - [`SdnGccController`] (Algorithm 4): learns which sources send to which destinations from
//!   packet-ins, polls every known switch port's ECN-mark counter every Ti, and spreads each
//!   port's new marks evenly over the sources sending through it.

mod build;
pub mod config;

pub use config::{Decrease, MarkResponse, MarkSplit, RateKeying, SdnGccConfig};

use std::collections::{BTreeMap, BTreeSet};

use crate::limiters::rate_alloc::KeyedLimiter;
use crate::vocab::control::HostMessage;
use crate::vocab::control::Notify;
use crate::vocab::headers::{Ecn, FlowKey, PacketHeaders};
use crate::vocab::roles::EgressVerdict;
use crate::vocab::roles::PairCounts;
use crate::vocab::roles::{Datapath, HostShim, HostShimCore, IngressVerdict};
use crate::vocab::units::Nanos;

/// Event counters of one shim.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SdnGccShimCounters {
    pub notifications: u64,
    /// Notifications for a VM or key with no traffic (nothing to slow down).
    pub notifications_ignored: u64,
    pub marks: f64,
    /// Packets the limiters dropped (token shortage or a packet larger than the bucket).
    pub drops: u64,
    /// CE marks cleared before delivery to a VM.
    pub ce_cleared: u64,
}

/// The congestion state of one rate key.
#[derive(Clone, Debug)]
struct Congestion {
    cong_time: Nanos,
    congested: bool,
}

/// The SDN-GCC shim of one host NIC.
#[derive(Clone, Debug)]
pub struct SdnGccShim {
    config: SdnGccConfig,
    /// Tc and the cut, from the config.
    grace: Nanos,
    response: MarkResponse,
    /// Keyed by (VM, path), the path part as [`RateKeying`] says.
    limiter: KeyedLimiter<Congestion>,
    next_tick: Option<Nanos>,
    counters: SdnGccShimCounters,
}

impl SdnGccShim {
    pub fn new(config: SdnGccConfig, nic_rate_bps: u64) -> SdnGccShim {
        SdnGccShim {
            grace: config.congestion_grace(),
            response: config.response(),
            limiter: KeyedLimiter::new(config.alloc(), nic_rate_bps),
            config,
            next_tick: None,
            counters: SdnGccShimCounters::default(),
        }
    }

    pub fn config(&self) -> &SdnGccConfig {
        &self.config
    }

    pub fn counters(&self) -> &SdnGccShimCounters {
        &self.counters
    }

    /// Declares a local VM and its weight; unregistered VMs get weight 1 on their first packet.
    pub fn register_vm(&mut self, now: Nanos, vm: u32, weight: u32) {
        self.limiter.register_vm(now, vm, weight);
    }

    /// The VM's share E(i) in bits/s (0 while inactive).
    pub fn vm_share_bps(&self, vm: u32) -> u64 {
        self.limiter.share_bps(vm)
    }

    /// (VM, share E(i) in bits/s) of every known VM, in address order.
    pub fn vm_shares(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.limiter.shares()
    }

    /// The adaptive rate R in bits/s applying to traffic from `vm` to `dst`, if active.
    pub fn rate_bps(&self, vm: u32, dst: u32) -> Option<u64> {
        self.limiter.rate_bps(vm, self.path(dst))
    }

    /// (VM, path, rate in bits/s) of every active rate key, in key order.
    pub fn rates(&self) -> impl Iterator<Item = (u32, u32, u64)> + '_ {
        self.limiter.rates()
    }

    /// The path part of the rate key of traffic towards `dst` (or of a notification naming it).
    fn path(&self, dst: u32) -> u32 {
        match self.config.keying {
            RateKeying::PerVm => 0,
            RateKeying::PerDestination | RateKeying::PerPath => dst,
        }
    }

    fn admit(&mut self, now: Nanos, vm: u32, path: u32, bytes: u64) -> EgressVerdict {
        self.next_tick
            .get_or_insert(now + self.config.update_interval);
        let grace = self.grace;
        self.limiter.admit(now, vm, path, bytes, || Congestion {
            // No notification yet: the first mark rate is measured over the longest
            // interval, the grace period, not over the key's few microseconds of life.
            cong_time: now.saturating_sub(grace),
            congested: false,
        })
    }

    /// A packet arriving for a local VM: hides the congestion marks if configured to.
    pub fn on_ingress(&mut self, pkt: &mut (impl PacketHeaders + ?Sized)) {
        if self.config.clear_ce && pkt.ecn() == Ecn::Ce {
            pkt.set_ecn(Ecn::Ect0);
            self.counters.ce_cleared += 1;
        }
    }

    /// A congestion notification from the controller: `marks` attributed to traffic from local
    /// `vm` to `from_dst`.
    pub fn on_notification(&mut self, now: Nanos, vm: u32, from_dst: u32, marks: f64) {
        self.counters.notifications += 1;
        self.counters.marks += marks;
        let path = self.path(from_dst);
        let nic_rate = self.limiter.nic_rate_bps() as f64;
        let scale = nic_rate * self.config.scale;
        let (grace, min_fraction) = (self.grace, self.config.min_rate_fraction);
        let known = self.limiter.update(now, vm, path, |share, rate, entry| {
            let cut = match self.response {
                MarkResponse::MarkRate {
                    rate_unit,
                    multiplicative,
                } => {
                    let interval = now
                        .saturating_sub(entry.cong_time)
                        .clamp(rate_unit, grace.max(rate_unit));
                    let cut = marks * rate_unit as f64 / interval as f64 * scale;
                    if multiplicative {
                        cut * rate as f64 / nic_rate
                    } else {
                        cut
                    }
                }
                MarkResponse::PerMark { cut_bps } => marks * cut_bps as f64,
            };
            let min_rate = (share as f64 * min_fraction) as u64;
            entry.congested = true;
            entry.cong_time = now;
            Some(rate.saturating_sub(cut as u64).max(min_rate))
        });
        if !known {
            self.counters.notifications_ignored += 1;
        }
    }
}

/// The controller asks a switch for one port's cumulative ECN-mark counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PortStatsRequest {
    pub switch: u32,
    pub port: u32,
}

/// The SDN-GCC controller application.
#[derive(Clone, Debug)]
pub struct SdnGccController {
    /// Ti.
    interval: Nanos,
    split: MarkSplit,
    /// DST_SRC: the sources seen sending to each destination.
    dst_srcs: BTreeMap<u32, BTreeSet<u32>>,
    /// The destinations reached through each (switch, port).
    routes: BTreeMap<(u32, u32), BTreeSet<u32>>,
    /// The mark counter at the previous reading of each (switch, port).
    last_marks: BTreeMap<(u32, u32), u64>,
    /// The (source, flow id) pairs whose path crosses each (switch, port), for per-path marks.
    paths: BTreeMap<(u32, u32), BTreeSet<(u32, u32)>>,
    next_poll: Option<Nanos>,
}

impl SdnGccController {
    pub fn new(config: &SdnGccConfig) -> SdnGccController {
        SdnGccController {
            interval: config.monitor_interval,
            split: config.mark_split(),
            dst_srcs: BTreeMap::new(),
            routes: BTreeMap::new(),
            last_marks: BTreeMap::new(),
            paths: BTreeMap::new(),
            next_poll: None,
        }
    }

    /// Declares that `dst` is reached through `port` of `switch` (from the topology or routing).
    pub fn register_route(&mut self, switch: u32, port: u32, dst: u32) {
        self.routes.entry((switch, port)).or_default().insert(dst);
    }

    /// A packet-in for a new (src, dst) pair: remember the source and start monitoring.
    /// The ingress port names where `src` attaches; marks are read on the egress ports that
    /// [`SdnGccController::register_route`] names, so only the pair is kept.
    pub fn on_packet_in(&mut self, now: Nanos, _switch: u32, _in_port: u32, src: u32, dst: u32) {
        self.dst_srcs.entry(dst).or_default().insert(src);
        self.next_poll.get_or_insert(now + self.interval);
    }

    /// When the next poll is due.
    pub fn poll_at(&self) -> Option<Nanos> {
        self.next_poll
    }

    /// Every Ti: the mark counters to read (every port through which a destination is reached).
    pub fn on_timer(&mut self, now: Nanos) -> Vec<PortStatsRequest> {
        match self.next_poll {
            Some(t) if t <= now => {}
            _ => return Vec::new(),
        }
        self.next_poll = Some(now + self.interval);
        let ports: BTreeSet<(u32, u32)> = self
            .routes
            .keys()
            .chain(self.paths.keys())
            .copied()
            .collect();
        ports
            .into_iter()
            .map(|(switch, port)| PortStatsRequest { switch, port })
            .collect()
    }

    /// A port's cumulative mark counter: notifications for the new marks since the last
    /// reading. The first reading of a port (or one below the last, after a counter reset)
    /// only sets the baseline.
    /// Records that flow `flow_id` ([`FlowKey::id`]) of source `src` crosses every
    /// (switch, port) of `hops`, as a controller with a global view of the ECMP hashes knows.
    pub fn register_path(&mut self, src: u32, flow_id: u32, hops: &[(u32, u32)]) {
        for &hop in hops {
            self.paths.entry(hop).or_default().insert((src, flow_id));
        }
    }

    pub fn on_port_stats(
        &mut self,
        _now: Nanos,
        switch: u32,
        port: u32,
        marks_total: u64,
    ) -> Vec<Notify> {
        let previous = self.last_marks.insert((switch, port), marks_total);
        let alpha = match previous {
            Some(p) if marks_total > p => marks_total - p,
            _ => return Vec::new(),
        };
        if self.split == MarkSplit::PerPath {
            let Some(flows) = self.paths.get(&(switch, port)).filter(|f| !f.is_empty()) else {
                return Vec::new();
            };
            let m = alpha as f64 / flows.len() as f64;
            return flows
                .iter()
                .map(|&(src, flow_id)| Notify {
                    to_src: src,
                    from_dst: flow_id,
                    marks: m,
                })
                .collect();
        }
        let Some(dsts) = self.routes.get(&(switch, port)) else {
            return Vec::new();
        };
        let sources = |dst: &u32| self.dst_srcs.get(dst).map_or(0, BTreeSet::len);
        let beta: usize = dsts.iter().map(sources).sum();
        let mut out = Vec::new();
        for &dst in dsts {
            let Some(srcs) = self.dst_srcs.get(&dst) else {
                continue;
            };
            let share = match self.split {
                MarkSplit::AllSourcesBehindPort | MarkSplit::PerPath => beta,
                MarkSplit::SourcesOfEachDestination => srcs.len(),
            };
            let m = alpha as f64 / share as f64;
            out.extend(srcs.iter().map(|&src| Notify {
                to_src: src,
                from_dst: dst,
                marks: m,
            }));
        }
        out
    }
}

impl HostShimCore for SdnGccShim {
    /// The per-packet work done by a kernel datapath for one pair, in counts (it sets ECT(0)
    /// and clears CE; it enforces [`SdnGccShim::rates`]). A datapath that reports pairs keys
    /// rates per destination, whatever the keying: per-path keys need each flow's ports.
    fn on_datapath(&mut self, now: Nanos, c: &PairCounts) {
        if c.tx_packets > 0 {
            let path = self.path(c.remote);
            self.admit(now, c.vm, path, 0);
        }
        self.counters.ce_cleared += c.ce_cleared;
    }
    fn datapath(&self) -> Datapath {
        Datapath {
            set_ect: true,
            clear_ce: self.config().clear_ce,
            pair_counts: true,
            limiter: Some(self.config.alloc().bucket),
            ..Datapath::default()
        }
    }
    fn on_message(&mut self, now: Nanos, msg: &HostMessage) {
        if let HostMessage::Congestion(n) = msg {
            self.on_notification(now, n.to_src, n.from_dst, n.marks);
        }
    }

    /// Runs the state-update timer if due at `now`.
    fn on_timer(&mut self, now: Nanos) {
        match self.next_tick {
            Some(t) if t <= now => {}
            _ => return,
        }
        self.limiter.expire_idle(now);
        let step = (self.limiter.nic_rate_bps() as f64 * self.config.scale) as u64;
        let grace = self.grace;
        self.limiter.update_all(now, |share, rate, entry| {
            if now.saturating_sub(entry.cong_time) >= grace {
                entry.congested = false;
            }
            (!entry.congested && rate < share).then(|| (rate + step).min(share))
        });
        self.next_tick = (!self.limiter.is_empty()).then_some(now + self.config.update_interval);
    }

    /// When the state-update timer next needs to run.
    fn poll_at(&self) -> Option<Nanos> {
        self.next_tick
    }
    fn rates(&self, out: &mut dyn FnMut(u32, u32, u64)) {
        for (vm, path, bps) in SdnGccShim::rates(self) {
            out(vm, path, bps);
        }
    }
    fn counters(&self, out: &mut dyn FnMut(&'static str, f64)) {
        let k = SdnGccShim::counters(self);
        out("notifications_received", k.notifications as f64);
        out("notifications_ignored", k.notifications_ignored as f64);
        out("notified_marks", k.marks);
        out("limiter_drops", k.drops as f64);
        out("ce_cleared", k.ce_cleared as f64);
    }
}

impl<P: PacketHeaders + ?Sized> HostShim<P> for SdnGccShim {
    /// A packet leaves a local VM (its source address): police it, and mark it ECT(0) if sent.
    fn on_egress(&mut self, now: Nanos, pkt: &mut P) -> EgressVerdict {
        let path = match self.config.keying {
            RateKeying::PerPath => FlowKey::of(pkt).id(),
            _ => self.path(pkt.dst()),
        };
        let verdict = self.admit(now, pkt.src(), path, pkt.ip_len() as u64);
        match verdict {
            EgressVerdict::Pass if pkt.ecn() != Ecn::Ect0 => pkt.set_ecn(Ecn::Ect0),
            EgressVerdict::Drop(_) => self.counters.drops += 1,
            _ => {}
        }
        verdict
    }
    fn on_ingress(&mut self, _now: Nanos, pkt: &mut P) -> IngressVerdict {
        SdnGccShim::on_ingress(self, pkt);
        IngressVerdict::Deliver
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::headers::ip_proto;
    use crate::vocab::wire::{emit, Ipv4Fields, Ipv4Packet};

    const GBPS: u64 = 1_000_000_000;
    const MBPS: u64 = 1_000_000;
    const MS: Nanos = 1_000_000;
    const TU: Nanos = 500_000;
    const VM: u32 = 0x0a00_0001;
    const VM2: u32 = 0x0a00_0002;
    const D1: u32 = 0x0a01_0001;
    const D2: u32 = 0x0a01_0002;

    fn send(shim: &mut SdnGccShim, now: Nanos, src: u32, dst: u32) -> (EgressVerdict, Ecn) {
        let mut b = emit(
            &Ipv4Fields {
                src,
                dst,
                protocol: ip_proto::UDP,
                ident: 0,
                ecn: Ecn::NotEct,
                total_len: 1500,
                ttl: 64,
            },
            None,
        );
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        let v = shim.on_egress(now, &mut p);
        (v, p.ecn())
    }

    fn run_until(shim: &mut SdnGccShim, until: Nanos) {
        while let Some(t) = shim.poll_at().filter(|&t| t <= until) {
            shim.on_timer(t);
        }
    }

    #[test]
    fn the_shim_sends_ect0_at_the_full_share_until_notified() {
        let mut s = SdnGccShim::new(SdnGccConfig::default(), GBPS);
        assert_eq!(send(&mut s, 0, VM, D1), (EgressVerdict::Pass, Ecn::Ect0));
        assert_eq!(s.rate_bps(VM, D1), Some(GBPS));
        assert_eq!(s.vm_share_bps(VM), GBPS);
    }

    /// The cut in proportion to R (`decrease = "multiplicative"`).
    fn multiplicative() -> SdnGccConfig {
        SdnGccConfig {
            decrease: Decrease::Multiplicative,
            ..SdnGccConfig::default()
        }
    }

    #[test]
    fn a_notification_cuts_mark_rate_times_scale() {
        let mut s = SdnGccShim::new(SdnGccConfig::default(), GBPS);
        send(&mut s, 0, VM, D1);
        // First notification 5 ms after activation: 10 marks over 5 ms = 2 marks per ms,
        // times scale(C) = 10 Mb/s: -20 Mb/s.
        s.on_notification(5 * MS, VM, D1, 10.0);
        assert_eq!(s.rate_bps(VM, D1), Some(980 * MBPS));
        // The next one 2 ms later: 4 marks / 2 ms x 10 Mb/s = -20 Mb/s.
        s.on_notification(7 * MS, VM, D1, 4.0);
        assert_eq!(s.rate_bps(VM, D1), Some(960 * MBPS));
        // Same instant (another destination's message): the interval counts as 1 ms.
        s.on_notification(7 * MS, VM, D2, 1.5);
        assert_eq!(
            s.rate_bps(VM, D1),
            Some(945 * MBPS),
            "per-VM keying: D2's marks slow VM too"
        );
        // Long quiet spell: the interval is capped at Tc = 10 ms.
        s.on_notification(500 * MS, VM, D1, 100.0);
        assert_eq!(s.rate_bps(VM, D1), Some(845 * MBPS));
    }

    #[test]
    fn the_multiplicative_cut_is_algorithm_3s_times_r_over_c() {
        let mut s = SdnGccShim::new(multiplicative(), GBPS);
        send(&mut s, 0, VM, D1);
        // At R = C the same cut as Algorithm 3's: 10 marks over 5 ms x 10 Mb/s = -20 Mb/s.
        s.on_notification(5 * MS, VM, D1, 10.0);
        assert_eq!(s.rate_bps(VM, D1), Some(980 * MBPS));
        // Then 4 marks / 2 ms x 10 Mb/s x 980/1000 = -19.6 Mb/s.
        s.on_notification(7 * MS, VM, D1, 4.0);
        assert_eq!(s.rate_bps(VM, D1), Some(960_400_000));
        // 50 marks a millisecond would cut Algorithm 3's R by 500 Mb/s, whatever R is;
        // here by half of R.
        s.on_notification(17 * MS, VM, D1, 500.0);
        assert_eq!(s.rate_bps(VM, D1), Some(480_200_000));
    }

    /// Two senders on hosts of their own behind one port, one cut to 100 Mb/s and the other
    /// to 700 (it joined later), then given the same notifications (Algorithm 4 splits a
    /// port's marks evenly), `marks` every 20 ms: each a cut, then a climb of 21 ticks past
    /// the grace period. Their rates' difference after `cycles` such cuts.
    fn difference_after(config: SdnGccConfig, marks: f64, cycles: u64) -> i64 {
        let (mut a, mut b) = (
            SdnGccShim::new(config.clone(), GBPS),
            SdnGccShim::new(config, GBPS),
        );
        send(&mut a, 0, VM, D1);
        send(&mut b, 0, VM2, D1);
        // Over Tc = 10 ms: 900 marks cut 900 Mb/s at R = C, 300 marks 300 Mb/s.
        a.on_notification(10 * MS, VM, D1, 900.0);
        b.on_notification(10 * MS, VM2, D1, 300.0);
        let mut t = 10 * MS;
        for _ in 0..cycles {
            t += 20 * MS;
            run_until(&mut a, t);
            run_until(&mut b, t);
            a.on_notification(t, VM, D1, marks);
            b.on_notification(t, VM2, D1, marks);
        }
        a.rate_bps(VM, D1).unwrap() as i64 - b.rate_bps(VM2, D1).unwrap() as i64
    }

    #[test]
    fn equal_notifications_even_out_multiplicative_rates_but_not_additive_ones() {
        let start = -600 * MBPS as i64;
        assert_eq!(difference_after(SdnGccConfig::default(), 0.0, 0), start);
        assert_eq!(difference_after(multiplicative(), 0.0, 0), start);
        // Additive: 210 marks over 10 ms cut both by the 210 Mb/s their climb gave them; the
        // lead stays (until a rate meets R_min or its share).
        assert_eq!(difference_after(SdnGccConfig::default(), 210.0, 20), start);
        // Multiplicative: 420 marks cut 42% of each rate, so the lead shrinks by that each
        // cycle (to 0.58^20 of 600 Mb/s, 11 kb/s), both towards 500 Mb/s before a cut.
        let left = difference_after(multiplicative(), 420.0, 20);
        assert!(
            left.abs() < 20_000,
            "after 20 cycles the lead is {left} b/s"
        );
    }

    #[test]
    fn a_new_keys_first_mark_rate_is_measured_over_the_grace_period() {
        let mut s = SdnGccShim::new(SdnGccConfig::default(), GBPS);
        send(&mut s, 100 * MS, VM, D1);
        // The marks were counted over the controller's interval, most of it before the key
        // existed: 10 marks over Tc = 10 ms, not over the key's 1 ms of life.
        s.on_notification(101 * MS, VM, D1, 10.0);
        assert_eq!(s.rate_bps(VM, D1), Some(990 * MBPS));
    }

    #[test]
    fn the_prototype_response_cuts_a_fixed_amount_per_mark() {
        let mut s = SdnGccShim::new(SdnGccConfig::prototype(), GBPS);
        send(&mut s, 0, VM, D1);
        s.on_notification(MS, VM, D1, 2.5);
        assert_eq!(s.rate_bps(VM, D1), Some(987_500_000));
    }

    #[test]
    fn the_rate_stops_at_r_min() {
        let mut s = SdnGccShim::new(SdnGccConfig::default(), GBPS);
        send(&mut s, 0, VM, D1);
        send(&mut s, 0, VM2, D1);
        s.on_notification(MS, VM, D1, 1e6);
        assert_eq!(
            s.rate_bps(VM, D1),
            Some(5 * MBPS),
            "1% of the 500 Mb/s share"
        );
    }

    #[test]
    fn the_rate_holds_during_the_grace_period_then_climbs_by_scale_up_to_the_share() {
        let mut s = SdnGccShim::new(SdnGccConfig::default(), GBPS);
        send(&mut s, 0, VM, D1);
        s.on_notification(10 * MS, VM, D1, 50.0);
        assert_eq!(s.rate_bps(VM, D1), Some(950 * MBPS));
        run_until(&mut s, 20 * MS - 1);
        assert_eq!(
            s.rate_bps(VM, D1),
            Some(950 * MBPS),
            "no increase within Tc"
        );
        run_until(&mut s, 20 * MS);
        assert_eq!(s.rate_bps(VM, D1), Some(960 * MBPS));
        run_until(&mut s, 23 * MS);
        assert_eq!(s.rate_bps(VM, D1), Some(GBPS), "capped at E(i)");
    }

    #[test]
    fn an_idle_vm_is_deactivated_after_to_and_the_share_redistributed() {
        let mut s = SdnGccShim::new(SdnGccConfig::default(), GBPS);
        send(&mut s, 0, VM, D1);
        send(&mut s, 0, VM2, D1);
        assert_eq!(s.vm_share_bps(VM2), 500 * MBPS);
        let mut t = 0;
        while t < 1_000 * MS {
            t += TU;
            send(&mut s, t, VM2, D1);
            run_until(&mut s, t);
        }
        assert_eq!(s.vm_share_bps(VM), 0);
        assert_eq!(s.rate_bps(VM, D1), None);
        assert_eq!(s.vm_share_bps(VM2), GBPS);
        assert_eq!(s.rate_bps(VM2, D1), Some(510 * MBPS));
    }

    #[test]
    fn per_destination_keying_slows_only_the_notified_destination() {
        let config = SdnGccConfig {
            keying: RateKeying::PerDestination,
            ..Default::default()
        };
        let mut s = SdnGccShim::new(config, GBPS);
        send(&mut s, 0, VM, D1);
        send(&mut s, 0, VM, D2);
        s.on_notification(MS, VM, D1, 10.0);
        assert_eq!(s.rate_bps(VM, D1), Some(900 * MBPS));
        assert_eq!(s.rate_bps(VM, D2), Some(GBPS));
        s.on_notification(MS, VM, 0x0a09_0009, 10.0);
        assert_eq!(s.counters().notifications_ignored, 1);
    }

    fn controller(split: MarkSplit) -> SdnGccController {
        let config = match split {
            MarkSplit::PerPath => SdnGccConfig {
                keying: RateKeying::PerPath,
                ..Default::default()
            },
            split => SdnGccConfig {
                split: Some(split),
                ..Default::default()
            },
        };
        let mut c = SdnGccController::new(&config);
        assert_eq!(c.split, split);
        // Switch 1 port 3 leads to D1 and D2; port 4 to VM2.
        c.register_route(1, 3, D1);
        c.register_route(1, 3, D2);
        c.register_route(1, 4, VM2);
        c.on_packet_in(0, 1, 1, 0x0b00_0001, D1);
        c.on_packet_in(0, 1, 1, 0x0b00_0002, D1);
        c.on_packet_in(0, 1, 1, 0x0b00_0003, D1);
        c.on_packet_in(0, 1, 2, 0x0b00_0001, D2);
        c.on_packet_in(0, 1, 2, VM, VM2);
        c
    }

    #[test]
    fn the_controller_polls_every_routed_port_each_interval() {
        let mut c = controller(MarkSplit::AllSourcesBehindPort);
        assert_eq!(c.poll_at(), Some(5 * MS));
        assert!(c.on_timer(4 * MS).is_empty());
        let reqs = c.on_timer(5 * MS);
        assert_eq!(
            reqs,
            vec![
                PortStatsRequest { switch: 1, port: 3 },
                PortStatsRequest { switch: 1, port: 4 }
            ]
        );
        assert_eq!(c.poll_at(), Some(10 * MS));
    }

    #[test]
    fn new_marks_are_split_evenly_over_all_pairs_behind_the_port() {
        let mut c = controller(MarkSplit::AllSourcesBehindPort);
        assert!(
            c.on_port_stats(5 * MS, 1, 3, 100).is_empty(),
            "first reading is the baseline"
        );
        let n = c.on_port_stats(10 * MS, 1, 3, 120);
        // alpha = 20, beta = 3 sources of D1 + 1 of D2 = 4: m = 5 for each pair.
        assert_eq!(n.len(), 4);
        assert!(n.iter().all(|x| x.marks == 5.0));
        assert_eq!(
            n.iter().map(|x| (x.to_src, x.from_dst)).collect::<Vec<_>>(),
            vec![
                (0x0b00_0001, D1),
                (0x0b00_0002, D1),
                (0x0b00_0003, D1),
                (0x0b00_0001, D2)
            ]
        );
        assert!(
            c.on_port_stats(15 * MS, 1, 3, 120).is_empty(),
            "no new marks, no message"
        );
    }

    #[test]
    fn the_prototype_split_divides_by_the_sources_of_each_destination() {
        let mut c = controller(MarkSplit::SourcesOfEachDestination);
        c.on_port_stats(5 * MS, 1, 3, 0);
        let n = c.on_port_stats(10 * MS, 1, 3, 30);
        let marks: Vec<f64> = n.iter().map(|x| x.marks).collect();
        assert_eq!(marks, vec![10.0, 10.0, 10.0, 30.0]);
    }

    #[test]
    fn marks_on_one_port_never_reach_sources_of_other_ports() {
        let mut c = controller(MarkSplit::AllSourcesBehindPort);
        c.on_port_stats(5 * MS, 1, 4, 0);
        let n = c.on_port_stats(10 * MS, 1, 4, 7);
        assert_eq!(
            n,
            vec![Notify {
                to_src: VM,
                from_dst: VM2,
                marks: 7.0
            }]
        );
    }

    #[test]
    fn per_path_marks_go_only_to_the_flows_crossing_the_port() {
        let mut c = controller(MarkSplit::PerPath);
        // Two flows of VM (ids 11 and 12) on different paths; a third source's flow 13 shares
        // flow 11's congested hop (switch 1, port 7).
        c.register_path(VM, 11, &[(0, 1), (1, 7)]);
        c.register_path(VM, 12, &[(0, 2), (2, 9)]);
        c.register_path(VM2, 13, &[(3, 4), (1, 7)]);
        c.on_port_stats(0, 1, 7, 0);
        let n = c.on_port_stats(5 * MS, 1, 7, 10);
        assert_eq!(
            n,
            vec![
                Notify {
                    to_src: VM,
                    from_dst: 11,
                    marks: 5.0
                },
                Notify {
                    to_src: VM2,
                    from_dst: 13,
                    marks: 5.0
                }
            ]
        );
    }

    #[test]
    fn a_per_path_shim_slows_only_the_notified_flow() {
        let cfg = SdnGccConfig {
            keying: RateKeying::PerPath,
            ..SdnGccConfig::default()
        };
        let mut shim = SdnGccShim::new(cfg, GBPS);
        let mk = |sport: u16| {
            let b = crate::vocab::wire::emit(
                &Ipv4Fields {
                    src: VM,
                    dst: D1,
                    protocol: ip_proto::TCP,
                    ident: 0,
                    ecn: Ecn::NotEct,
                    total_len: 1500,
                    ttl: 64,
                },
                Some(&crate::vocab::wire::TcpFields {
                    src_port: sport,
                    dst_port: 80,
                    seq: 0,
                    ack: 0,
                    flags: 0x10,
                    window: 100,
                }),
            );
            Ipv4Packet::new_checked(b).unwrap()
        };
        let (mut a, mut b) = (mk(1000), mk(1001));
        let (ida, idb) = (FlowKey::of(&a).id(), FlowKey::of(&b).id());
        assert_ne!(ida, idb);
        shim.on_egress(0, &mut a);
        shim.on_egress(0, &mut b);
        shim.on_notification(MS, VM, ida, 50.0);
        assert!(shim.rate_bps(VM, ida).unwrap() < GBPS);
        assert_eq!(shim.rate_bps(VM, idb), Some(GBPS));
    }

    #[test]
    fn clear_ce_hides_marks_from_vms_only_when_configured() {
        let mk = || {
            let b = emit(
                &Ipv4Fields {
                    src: D1,
                    dst: VM,
                    protocol: ip_proto::UDP,
                    ident: 0,
                    ecn: Ecn::Ce,
                    total_len: 100,
                    ttl: 64,
                },
                None,
            );
            Ipv4Packet::new_checked(b).unwrap()
        };
        let mut keep = SdnGccShim::new(SdnGccConfig::default(), GBPS);
        let mut p = mk();
        keep.on_ingress(&mut p);
        assert_eq!(p.ecn(), Ecn::Ce);
        let mut hide = SdnGccShim::new(
            SdnGccConfig {
                clear_ce: true,
                ..SdnGccConfig::default()
            },
            GBPS,
        );
        let mut p = mk();
        hide.on_ingress(&mut p);
        assert_eq!(p.ecn(), Ecn::Ect0);
        assert!(p.checksums_valid());
        assert_eq!(hide.counters().ce_cleared, 1);
    }
}
