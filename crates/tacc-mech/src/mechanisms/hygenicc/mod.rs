//! HyGenICC: hypervisor-to-hypervisor IP congestion control (PAPERS.md §1).
//!
//! One [`HygenShim`] sits in each host's virtual switch and plays both roles, since every host
//! both sends and receives:
//! - *sender side*: polices each local VM at its share of the NIC and, below that, each (VM,
//!   destination) pair at an adaptive rate R driven by congestion feedback. The paper keeps "a
//!   bucket per VM and a rate per VM pair"; here the per-VM bucket enforces the share (isolation
//!   between tenants) and a per-pair bucket enforces R (so one congested destination does not
//!   slow the VM's traffic to the others). R is capped by the VM's share.
//!   The buckets and shares are kept by [`KeyedLimiter`]; the rate rule is here.
//! - *receiver side*: counts CE marks per (source VM, destination VM), hides them from the VM,
//!   and echoes them to the source's shim, one per reverse packet via the IPv4 reserved bit
//!   ("IPR"), or in bulk in an explicit feedback packet when no reverse packet went out for
//!   `feedback_timeout`.

mod build;
pub mod config;

pub use config::HygenConfig;

use std::collections::BTreeMap;

use crate::limiters::rate_alloc::KeyedLimiter;
use crate::vocab::headers::{ip_proto, tcp_flags, Ecn, PacketHeaders};
use crate::vocab::roles::{Datapath, HostShim, HostShimCore};
use crate::vocab::roles::{DropReason, EgressVerdict, FeedbackPacket, IngressVerdict, PairCounts};
use crate::vocab::units::Nanos;

/// Event counters of one shim.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HygenCounters {
    pub feedback_sent: u64,
    pub feedback_received: u64,
    /// Marks carried by the feedback packets received.
    pub feedback_marks_received: u64,
    pub ipr_set: u64,
    pub ipr_seen: u64,
    pub ce_cleared: u64,
    pub drops_no_tokens: u64,
    pub drops_admission: u64,
    /// Feedback packets sent by a local VM, dropped ([`HygenConfig::scrub`]).
    pub scrubbed_feedback: u64,
    /// IPR bits set by a local VM, cleared ([`HygenConfig::scrub`]).
    pub scrubbed_ipr: u64,
}

/// The sender-side congestion state of one (local VM, remote destination) pair.
#[derive(Clone, Debug)]
struct SenderPair {
    /// Marks received since the last timer tick.
    feedback: u64,
    congested: bool,
    feedback_time: Nanos,
}

/// The receiver-side state of one (remote source, local VM) pair.
#[derive(Clone, Debug)]
struct ReceiverEntry {
    pending_marks: u64,
    feedback_sent: Nanos,
    last_mark: Nanos,
}

/// The HyGenICC shim of one host NIC.
#[derive(Clone, Debug)]
pub struct HygenShim {
    config: HygenConfig,
    /// Keyed by (local VM, destination).
    limiter: KeyedLimiter<SenderPair>,
    /// Keyed by (remote source, local VM).
    receivers: BTreeMap<(u32, u32), ReceiverEntry>,
    next_tick: Option<Nanos>,
    counters: HygenCounters,
}

impl HygenShim {
    pub fn new(config: HygenConfig, nic_rate_bps: u64) -> HygenShim {
        HygenShim {
            limiter: KeyedLimiter::new(config.alloc(), nic_rate_bps),
            config,
            receivers: BTreeMap::new(),
            next_tick: None,
            counters: HygenCounters::default(),
        }
    }

    pub fn config(&self) -> &HygenConfig {
        &self.config
    }

    pub fn counters(&self) -> &HygenCounters {
        &self.counters
    }

    /// Declares a local VM and its weight; unregistered VMs get weight 1 on their first packet.
    pub fn register_vm(&mut self, now: Nanos, vm: u32, weight: u32) {
        self.limiter.register_vm(now, vm, weight);
    }

    /// The VM's current share of the NIC in bits/s (0 while inactive).
    pub fn vm_share_bps(&self, vm: u32) -> u64 {
        self.limiter.share_bps(vm)
    }

    /// (VM, share in bits/s) of every known VM, in address order.
    pub fn vm_shares(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.limiter.shares()
    }

    /// The adaptive rate of the (VM, destination) pair in bits/s, if the pair is active.
    pub fn pair_rate_bps(&self, vm: u32, dst: u32) -> Option<u64> {
        self.limiter.rate_bps(vm, dst)
    }

    /// (VM, destination, rate in bits/s) of every active pair, in key order.
    pub fn pair_rates(&self) -> impl Iterator<Item = (u32, u32, u64)> + '_ {
        self.limiter.rates()
    }

    /// `marks` CE marks cleared on packets from `remote` to the local `vm`.
    fn count_marks(&mut self, now: Nanos, remote: u32, vm: u32, marks: u64) {
        self.counters.ce_cleared += marks;
        let entry = self.receivers.entry((remote, vm)).or_insert(ReceiverEntry {
            pending_marks: 0,
            feedback_sent: now,
            last_mark: now,
        });
        entry.pending_marks += marks;
        entry.last_mark = now;
        self.next_tick
            .get_or_insert(now + self.config.update_interval);
    }

    /// Up to `n` pending marks of (`remote`, `vm`) went back in IPR bits; how many did.
    fn take_reflections(&mut self, now: Nanos, remote: u32, vm: u32, n: u64) -> u64 {
        let Some(entry) = self.receivers.get_mut(&(remote, vm)) else {
            return 0;
        };
        let taken = n.min(entry.pending_marks);
        if taken > 0 {
            entry.pending_marks -= taken;
            entry.feedback_sent = now;
            self.counters.ipr_set += taken;
        }
        taken
    }

    fn tick(&mut self, now: Nanos) {
        let idle = self.config.idle_timeout;
        self.limiter.expire_idle(now);
        self.receivers
            .retain(|_, e| e.pending_marks > 0 || now.saturating_sub(e.last_mark) < idle);
        let c = self.limiter.nic_rate_bps() as f64;
        let fast = (c * self.config.fast_increase) as u64;
        let slow = (c * self.config.slow_increase) as u64;
        let per_mark = c * self.config.decrease_per_mark;
        let config = &self.config;
        self.limiter.update_all(now, |share, rate, pair| {
            if now.saturating_sub(pair.feedback_time) >= config.congestion_timeout {
                pair.congested = false;
            }
            let rate = if !pair.congested {
                rate.saturating_add(fast)
            } else if pair.feedback > 0 {
                rate.saturating_sub((pair.feedback as f64 * per_mark) as u64)
            } else {
                rate.saturating_add(slow)
            };
            pair.feedback = 0;
            let min_rate = (share as f64 * config.min_rate_fraction) as u64;
            Some(rate.min(share).max(min_rate))
        });
    }

    fn record_feedback(&mut self, now: Nanos, vm: u32, dst: u32, marks: u64) {
        if let Some(pair) = self.limiter.state_mut(vm, dst) {
            pair.feedback += marks;
            pair.congested = true;
            pair.feedback_time = now;
        }
    }

    /// Sets the IPR bit on a packet from local `vm` back to `src_vm` if marks are pending.
    fn reflect_one_mark(
        &mut self,
        now: Nanos,
        pkt: &mut (impl PacketHeaders + ?Sized),
        src_vm: u32,
        vm: u32,
    ) {
        if self.take_reflections(now, src_vm, vm, 1) == 1 {
            pkt.set_reserved_bit(true);
        }
    }

    /// True if some local pair towards `dst` has been cut to R_min and had feedback within
    /// the congestion timeout.
    fn congested_towards(&self, now: Nanos, dst: u32) -> bool {
        self.congested_destinations(now).any(|d| d == dst)
    }

    /// The destinations of the pairs held at R_min by fresh congestion: admission control
    /// refuses new connections towards them. A destination may come more than once.
    pub fn congested_destinations(&self, now: Nanos) -> impl Iterator<Item = u32> + '_ {
        self.limiter.entries().filter_map(move |(vm, d, rate, p)| {
            let min_rate =
                (self.limiter.share_bps(vm) as f64 * self.config.min_rate_fraction) as u64;
            let fresh = now.saturating_sub(p.feedback_time) < self.config.congestion_timeout;
            (p.congested && fresh && rate <= min_rate).then_some(d)
        })
    }
}

fn is_connection_request(pkt: &(impl PacketHeaders + ?Sized)) -> bool {
    pkt.tcp_flags()
        .is_some_and(|f| f & tcp_flags::SYN != 0 && f & tcp_flags::ACK == 0)
}

impl HostShimCore for HygenShim {
    fn datapath(&self) -> Datapath {
        Datapath {
            set_ect: true,
            clear_ce: true,
            echo_ipr: true,
            feedback: true,
            clamp_window: false,
            pair_counts: true,
            scrub: self.config().scrub,
            limiter: Some(self.config.alloc().bucket),
            admission_control: self.config().admission_control,
        }
    }
    fn refused_destinations(&self, now: Nanos, out: &mut dyn FnMut(u32)) {
        if self.config().admission_control {
            let refused: std::collections::BTreeSet<u32> =
                self.congested_destinations(now).collect();
            refused.into_iter().for_each(out);
        }
    }

    /// The pair starts at `bps` (at most the VM's share); below the share it was being cut,
    /// so it starts congested: slow increase until `congestion_timeout` passes unmarked.
    fn resume_rate(&mut self, now: Nanos, vm: u32, dst: u32, bps: u64) {
        self.next_tick
            .get_or_insert(now + self.config.update_interval);
        self.limiter.admit(now, vm, dst, 0, || SenderPair {
            feedback: 0,
            congested: true,
            feedback_time: now,
        });
        self.limiter.update(now, vm, dst, |share, _, pair| {
            pair.congested = bps < share;
            Some(bps.min(share))
        });
    }

    /// The per-packet work of [`HygenShim::on_egress`] and [`HygenShim::on_ingress`] done by a
    /// kernel datapath for one pair, in counts: the datapath clears CE, echoes marks in IPR
    /// bits while marks are pending, and consumes feedback packets; enforcement of the rates
    /// ([`HygenShim::pair_rates`]) is its too.
    fn on_datapath(&mut self, now: Nanos, c: &PairCounts) {
        if c.tx_packets > 0 {
            self.next_tick
                .get_or_insert(now + self.config.update_interval);
            self.limiter.admit(now, c.vm, c.remote, 0, || SenderPair {
                feedback: 0,
                congested: false,
                feedback_time: now,
            });
        }
        self.counters.ipr_seen += c.ipr_seen;
        self.counters.feedback_received += c.feedback_packets;
        self.counters.feedback_marks_received += c.feedback_marks;
        let marks = c.ipr_seen + c.feedback_marks;
        if marks > 0 {
            self.record_feedback(now, c.vm, c.remote, marks);
        }
        if c.ce_cleared > 0 {
            self.count_marks(now, c.remote, c.vm, c.ce_cleared);
        }
        if c.ipr_set > 0 {
            self.take_reflections(now, c.remote, c.vm, c.ipr_set);
        }
    }

    /// Runs the Tu timer if it is due at `now`: idle resets, then one rate update per pair.
    fn on_timer(&mut self, now: Nanos) {
        match self.next_tick {
            Some(t) if t <= now => {}
            _ => return,
        }
        self.tick(now);
        let keep_running = !self.limiter.is_empty() || !self.receivers.is_empty();
        self.next_tick = keep_running.then_some(now + self.config.update_interval);
    }

    /// When the shim next needs [`HygenShim::on_timer`] or has feedback to send.
    fn poll_at(&self) -> Option<Nanos> {
        let timeout = self.config.feedback_timeout;
        let feedback_due = self
            .receivers
            .values()
            .filter(|e| e.pending_marks > 0)
            .map(|e| e.feedback_sent + timeout)
            .min();
        match (self.next_tick, feedback_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next explicit feedback packet due at `now`, if any; call until `None`.
    fn poll_transmit(&mut self, now: Nanos) -> Option<FeedbackPacket> {
        let timeout = self.config.feedback_timeout;
        let (&(src_vm, local_vm), entry) = self
            .receivers
            .iter_mut()
            .find(|(_, e)| e.pending_marks > 0 && now.saturating_sub(e.feedback_sent) >= timeout)?;
        let count = entry.pending_marks.min(u16::MAX as u64);
        entry.pending_marks -= count;
        entry.feedback_sent = now;
        self.counters.feedback_sent += 1;
        Some(FeedbackPacket {
            src: local_vm,
            dst: src_vm,
            count: count as u16,
        })
    }
    fn rates(&self, out: &mut dyn FnMut(u32, u32, u64)) {
        for (vm, dst, bps) in self.pair_rates() {
            out(vm, dst, bps);
        }
    }
    fn counters(&self, out: &mut dyn FnMut(&'static str, f64)) {
        let k = HygenShim::counters(self);
        out("feedback_packets_sent", k.feedback_sent as f64);
        out("feedback_packets_received", k.feedback_received as f64);
        out("feedback_marks_received", k.feedback_marks_received as f64);
        out("ipr_bits_set", k.ipr_set as f64);
        out("ipr_bits_seen", k.ipr_seen as f64);
        out("ce_cleared", k.ce_cleared as f64);
        out("limiter_drops", k.drops_no_tokens as f64);
        out("admission_drops", k.drops_admission as f64);
        out("scrubbed_feedback", k.scrubbed_feedback as f64);
        out("scrubbed_ipr", k.scrubbed_ipr as f64);
    }
}

impl<P: PacketHeaders + ?Sized> HostShim<P> for HygenShim {
    /// A packet leaves a local VM (its source address) for the network.
    fn on_egress(&mut self, now: Nanos, pkt: &mut P) -> EgressVerdict {
        if self.config.scrub {
            if pkt.protocol() == ip_proto::FEEDBACK {
                self.counters.scrubbed_feedback += 1;
                return EgressVerdict::Drop(DropReason::Forged);
            }
            if pkt.reserved_bit() {
                self.counters.scrubbed_ipr += 1;
                pkt.set_reserved_bit(false);
            }
        }
        let (vm, dst) = (pkt.src(), pkt.dst());
        self.next_tick
            .get_or_insert(now + self.config.update_interval);
        if self.config.admission_control && is_connection_request(pkt) {
            // Activated before the check, whose minimum rate follows the shares (`admit`
            // activates the VM of every other packet).
            self.limiter.activate(now, vm);
            if self.congested_towards(now, dst) {
                self.counters.drops_admission += 1;
                return EgressVerdict::Drop(DropReason::Admission);
            }
        }
        let verdict = self
            .limiter
            .admit(now, vm, dst, pkt.ip_len() as u64, || SenderPair {
                feedback: 0,
                congested: false,
                feedback_time: now,
            });
        match verdict {
            EgressVerdict::Pass => {
                if pkt.ecn() != Ecn::Ect0 {
                    pkt.set_ecn(Ecn::Ect0);
                }
                self.reflect_one_mark(now, pkt, dst, vm);
            }
            EgressVerdict::Drop(DropReason::NoTokens) => self.counters.drops_no_tokens += 1,
            EgressVerdict::Drop(_) | EgressVerdict::Hold { .. } => {}
        }
        verdict
    }

    /// A packet arrives from the network for a local VM (its destination address).
    fn on_ingress(&mut self, now: Nanos, pkt: &mut P) -> IngressVerdict {
        // A packet from `remote` to local `vm` is feedback for our pair (vm, remote) and/or
        // data of the remote pair (remote, vm) whose marks we must echo.
        let (remote, vm) = (pkt.src(), pkt.dst());
        if pkt.protocol() == ip_proto::FEEDBACK {
            let count = pkt.ip_id() as u64;
            self.counters.feedback_received += 1;
            self.counters.feedback_marks_received += count;
            self.record_feedback(now, vm, remote, count);
            return IngressVerdict::Consume;
        }
        if pkt.reserved_bit() {
            self.counters.ipr_seen += 1;
            pkt.set_reserved_bit(false);
            self.record_feedback(now, vm, remote, 1);
        }
        if pkt.ecn() == Ecn::Ce {
            pkt.set_ecn(Ecn::Ect0);
            self.count_marks(now, remote, vm, 1);
        }
        IngressVerdict::Deliver
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::units::NS_PER_SEC;
    use crate::vocab::wire::{emit, Ipv4Fields, Ipv4Packet, TcpFields};

    const GBPS: u64 = 1_000_000_000;
    const MBPS: u64 = 1_000_000;
    const TU: Nanos = 500_000;
    const VM_A: u32 = 0x0a00_0001;
    const VM_B: u32 = 0x0a00_0002;
    const REMOTE: u32 = 0x0a01_0001;
    const REMOTE2: u32 = 0x0a01_0002;

    fn packet(src: u32, dst: u32, protocol: u8, ecn: Ecn, ident: u16) -> Vec<u8> {
        let tcp = TcpFields {
            src_port: 1,
            dst_port: 2,
            seq: 0,
            ack: 0,
            flags: tcp_flags::ACK,
            window: 100,
        };
        emit(
            &Ipv4Fields {
                src,
                dst,
                protocol,
                ident,
                ecn,
                total_len: 1500,
                ttl: 64,
            },
            (protocol == ip_proto::TCP).then_some(&tcp),
        )
    }

    fn send(shim: &mut HygenShim, now: Nanos, src: u32, dst: u32) -> (EgressVerdict, Vec<u8>) {
        let mut b = packet(src, dst, ip_proto::UDP, Ecn::NotEct, 0);
        let v = shim.on_egress(now, &mut Ipv4Packet::new_checked(&mut b[..]).unwrap());
        (v, b)
    }

    fn receive(shim: &mut HygenShim, now: Nanos, b: &mut [u8]) -> IngressVerdict {
        shim.on_ingress(now, &mut Ipv4Packet::new_checked(b).unwrap())
    }

    fn feedback(shim: &mut HygenShim, now: Nanos, from: u32, to: u32, count: u16) {
        let mut b = packet(from, to, ip_proto::FEEDBACK, Ecn::NotEct, count);
        assert_eq!(receive(shim, now, &mut b), IngressVerdict::Consume);
    }

    /// Drives the timer through every tick up to and including `until`.
    fn run_until(shim: &mut HygenShim, until: Nanos) {
        while let Some(t) = shim.poll_at().filter(|&t| t <= until) {
            shim.on_timer(t);
            while shim.poll_transmit(t).is_some() {}
        }
    }

    #[test]
    fn a_datapath_reporting_counts_drives_the_shim_as_the_packets_would() {
        let mut per_packet = HygenShim::new(HygenConfig::default(), GBPS);
        let mut counted = HygenShim::new(HygenConfig::default(), GBPS);
        let report = |s: &mut HygenShim, now, c: PairCounts| {
            s.on_datapath(
                now,
                &PairCounts {
                    vm: VM_A,
                    remote: REMOTE,
                    ..c
                },
            )
        };
        send(&mut per_packet, 0, VM_A, REMOTE);
        report(
            &mut counted,
            0,
            PairCounts {
                tx_packets: 1,
                tx_bytes: 1500,
                ..Default::default()
            },
        );
        for t in [10_000, 11_000, 12_000] {
            let mut b = packet(REMOTE, VM_A, ip_proto::UDP, Ecn::Ce, 0);
            receive(&mut per_packet, t, &mut b);
        }
        report(
            &mut counted,
            12_000,
            PairCounts {
                ce_cleared: 3,
                ..Default::default()
            },
        );
        let (_, b) = send(&mut per_packet, 20_000, VM_A, REMOTE);
        assert!(Ipv4Packet::new_checked(&b[..]).unwrap().reserved_bit());
        report(
            &mut counted,
            20_000,
            PairCounts {
                tx_packets: 1,
                tx_bytes: 1500,
                ipr_set: 1,
                ..Default::default()
            },
        );
        feedback(&mut per_packet, 30_000, REMOTE, VM_A, 50);
        for t in [31_000, 32_000] {
            let mut b = packet(REMOTE, VM_A, ip_proto::TCP, Ecn::Ect0, 0);
            Ipv4Packet::new_checked(&mut b[..])
                .unwrap()
                .set_reserved_bit(true);
            receive(&mut per_packet, t, &mut b);
        }
        report(
            &mut counted,
            32_000,
            PairCounts {
                ipr_seen: 2,
                feedback_packets: 1,
                feedback_marks: 50,
                ..Default::default()
            },
        );
        let mut sent = [Vec::new(), Vec::new()];
        for (s, out) in [&mut per_packet, &mut counted].into_iter().zip(&mut sent) {
            while let Some(t) = s.poll_at().filter(|&t| t <= 3 * TU) {
                s.on_timer(t);
                out.extend(std::iter::from_fn(|| s.poll_transmit(t)));
            }
        }
        assert_eq!(
            sent[0],
            vec![FeedbackPacket {
                src: VM_A,
                dst: REMOTE,
                count: 2
            }]
        );
        assert_eq!(sent[0], sent[1]);
        // 52 marks cut C/1000 each at Tu; +C/1000 at 2 Tu (congested, quiet); +C/100 at 3 Tu.
        assert_eq!(per_packet.pair_rate_bps(VM_A, REMOTE), Some(959 * MBPS));
        assert_eq!(
            per_packet.pair_rate_bps(VM_A, REMOTE),
            counted.pair_rate_bps(VM_A, REMOTE)
        );
        assert_eq!(per_packet.counters(), counted.counters());
    }

    #[test]
    fn a_new_pair_starts_at_the_vm_share_and_packets_leave_ect0() {
        let mut s = HygenShim::new(HygenConfig::default(), GBPS);
        let (v, b) = send(&mut s, 0, VM_A, REMOTE);
        assert_eq!(v, EgressVerdict::Pass);
        assert_eq!(s.pair_rate_bps(VM_A, REMOTE), Some(GBPS));
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.ecn(), Ecn::Ect0);
        assert!(p.checksums_valid());
    }

    #[test]
    fn a_resumed_pair_starts_at_its_rate_in_force_and_increases_slowly() {
        let mut s = HygenShim::new(HygenConfig::default(), GBPS);
        s.resume_rate(0, VM_A, REMOTE, 300 * MBPS);
        s.resume_rate(0, VM_A, REMOTE + 1, 2 * GBPS);
        assert_eq!(s.pair_rate_bps(VM_A, REMOTE), Some(300 * MBPS));
        assert_eq!(
            s.pair_rate_bps(VM_A, REMOTE + 1),
            Some(GBPS),
            "capped at the share"
        );
        // Below its share it was being cut: + C/1000 a tick until the congestion timeout.
        run_until(&mut s, TU);
        assert_eq!(s.pair_rate_bps(VM_A, REMOTE), Some(301 * MBPS));
    }

    #[test]
    fn feedback_cuts_the_rate_by_marks_times_c_over_1000_at_the_next_tick() {
        let mut s = HygenShim::new(HygenConfig::default(), GBPS);
        send(&mut s, 0, VM_A, REMOTE);
        feedback(&mut s, 100_000, REMOTE, VM_A, 50);
        assert_eq!(s.counters().feedback_marks_received, 50);
        assert_eq!(
            s.pair_rate_bps(VM_A, REMOTE),
            Some(GBPS),
            "cuts happen on the timer"
        );
        run_until(&mut s, TU);
        assert_eq!(s.pair_rate_bps(VM_A, REMOTE), Some(950 * MBPS));
    }

    #[test]
    fn congestion_without_new_feedback_increases_slowly_then_fast_after_the_timeout() {
        let mut s = HygenShim::new(HygenConfig::default(), GBPS);
        send(&mut s, 0, VM_A, REMOTE);
        feedback(&mut s, 100_000, REMOTE, VM_A, 50);
        run_until(&mut s, TU);
        // 1000 us: 900 us since the feedback < 1 ms, still congested: + C/1000.
        run_until(&mut s, 2 * TU);
        assert_eq!(s.pair_rate_bps(VM_A, REMOTE), Some(951 * MBPS));
        // 1500 us: congestion timed out: + C/100.
        run_until(&mut s, 3 * TU);
        assert_eq!(s.pair_rate_bps(VM_A, REMOTE), Some(961 * MBPS));
    }

    #[test]
    fn the_rate_never_exceeds_the_share_nor_falls_below_r_min() {
        let mut s = HygenShim::new(HygenConfig::default(), GBPS);
        send(&mut s, 0, VM_A, REMOTE);
        send(&mut s, 0, VM_B, REMOTE);
        feedback(&mut s, 100_000, REMOTE, VM_A, 60_000);
        run_until(&mut s, TU);
        // Share 500 Mb/s, R_min = 1% of it.
        assert_eq!(s.pair_rate_bps(VM_A, REMOTE), Some(5 * MBPS));
        // Uncongested from 1.1 ms on: +10 Mb/s per tick, capped at the share.
        run_until(&mut s, 60 * TU);
        assert_eq!(s.pair_rate_bps(VM_A, REMOTE), Some(500 * MBPS));
        assert_eq!(s.pair_rate_bps(VM_B, REMOTE), Some(500 * MBPS));
    }

    #[test]
    fn ipr_bits_from_the_network_count_as_one_mark_each_and_are_cleared() {
        let mut s = HygenShim::new(HygenConfig::default(), GBPS);
        send(&mut s, 0, VM_A, REMOTE);
        for t in [10_000, 20_000] {
            let mut b = packet(REMOTE, VM_A, ip_proto::TCP, Ecn::Ect0, 0);
            Ipv4Packet::new_checked(&mut b[..])
                .unwrap()
                .set_reserved_bit(true);
            assert_eq!(receive(&mut s, t, &mut b), IngressVerdict::Deliver);
            let p = Ipv4Packet::new_checked(&b[..]).unwrap();
            assert!(!p.reserved_bit() && p.checksums_valid());
        }
        assert_eq!(s.counters().ipr_seen, 2);
        run_until(&mut s, TU);
        assert_eq!(s.pair_rate_bps(VM_A, REMOTE), Some(998 * MBPS));
    }

    #[test]
    fn a_vm_cannot_send_feedback_or_ipr_bits_unless_scrubbing_is_off() {
        let forged = || {
            let feedback = packet(REMOTE, VM_B, ip_proto::FEEDBACK, Ecn::NotEct, 5_000);
            let mut ipr = packet(REMOTE, VM_B, ip_proto::UDP, Ecn::NotEct, 0);
            Ipv4Packet::new_checked(&mut ipr[..])
                .unwrap()
                .set_reserved_bit(true);
            (feedback, ipr)
        };
        let egress = |s: &mut HygenShim, b: &mut Vec<u8>| {
            s.on_egress(0, &mut Ipv4Packet::new_checked(&mut b[..]).unwrap())
        };
        // A VM writing the address of another VM's receiver as its source.
        let mut s = HygenShim::new(HygenConfig::default(), GBPS);
        let (mut feedback, mut ipr) = forged();
        assert_eq!(
            egress(&mut s, &mut feedback),
            EgressVerdict::Drop(DropReason::Forged)
        );
        assert_eq!(egress(&mut s, &mut ipr), EgressVerdict::Pass);
        let p = Ipv4Packet::new_checked(&ipr[..]).unwrap();
        assert!(!p.reserved_bit() && p.checksums_valid());
        assert_eq!(
            (s.counters().scrubbed_feedback, s.counters().scrubbed_ipr),
            (1, 1)
        );

        let open = HygenConfig {
            scrub: false,
            ..Default::default()
        };
        let mut s = HygenShim::new(open, GBPS);
        let (mut feedback, mut ipr) = forged();
        assert_eq!(egress(&mut s, &mut feedback), EgressVerdict::Pass);
        assert_eq!(egress(&mut s, &mut ipr), EgressVerdict::Pass);
        assert!(Ipv4Packet::new_checked(&ipr[..]).unwrap().reserved_bit());
        assert_eq!(
            (s.counters().scrubbed_feedback, s.counters().scrubbed_ipr),
            (0, 0)
        );
    }

    #[test]
    fn ce_marks_are_counted_hidden_from_the_vm_and_echoed_on_reverse_packets() {
        let mut s = HygenShim::new(HygenConfig::default(), GBPS);
        for t in [0, 1_000] {
            let mut b = packet(REMOTE, VM_A, ip_proto::UDP, Ecn::Ce, 0);
            assert_eq!(receive(&mut s, t, &mut b), IngressVerdict::Deliver);
            let p = Ipv4Packet::new_checked(&b[..]).unwrap();
            assert_eq!(p.ecn(), Ecn::Ect0);
            assert!(p.checksums_valid());
        }
        assert_eq!(s.counters().ce_cleared, 2);
        let reflected: Vec<bool> = (0..3)
            .map(|i| {
                let (_, b) = send(&mut s, 2_000 + i, VM_A, REMOTE);
                let p = Ipv4Packet::new_checked(&b[..]).unwrap();
                assert!(p.checksums_valid());
                p.reserved_bit()
            })
            .collect();
        assert_eq!(reflected, vec![true, true, false]);
        assert_eq!(s.counters().ipr_set, 2);
        // Packets to another destination carry none of these marks.
        let (_, b) = send(&mut s, 3_000, VM_A, REMOTE2);
        assert!(!Ipv4Packet::new_checked(&b[..]).unwrap().reserved_bit());
    }

    #[test]
    fn marks_without_reverse_traffic_go_back_in_a_feedback_packet_after_the_timeout() {
        let mut s = HygenShim::new(HygenConfig::default(), GBPS);
        for t in [0, 10_000, 20_000] {
            let mut b = packet(REMOTE, VM_A, ip_proto::UDP, Ecn::Ce, 0);
            receive(&mut s, t, &mut b);
        }
        assert_eq!(
            s.poll_at(),
            Some(100_000),
            "feedback due one timeout after the first mark"
        );
        assert_eq!(s.poll_transmit(99_999), None);
        assert_eq!(
            s.poll_transmit(100_000),
            Some(FeedbackPacket {
                src: VM_A,
                dst: REMOTE,
                count: 3
            })
        );
        assert_eq!(s.poll_transmit(100_000), None);
        assert_eq!(s.counters().feedback_sent, 1);
    }

    #[test]
    fn a_feedback_packet_fed_back_in_is_consumed_and_counted() {
        let fb = FeedbackPacket {
            src: REMOTE,
            dst: VM_A,
            count: 7,
        };
        let mut b = fb.to_ipv4_bytes();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.checksums_valid());
        assert_eq!(
            (p.ip_len(), p.protocol(), p.ip_id()),
            (22, ip_proto::FEEDBACK, 7)
        );
        let mut s = HygenShim::new(HygenConfig::default(), GBPS);
        send(&mut s, 0, VM_A, REMOTE);
        assert_eq!(receive(&mut s, 10, &mut b), IngressVerdict::Consume);
        run_until(&mut s, TU);
        assert_eq!(s.pair_rate_bps(VM_A, REMOTE), Some(993 * MBPS));
    }

    #[test]
    fn a_reverse_packet_postpones_the_explicit_feedback() {
        let mut s = HygenShim::new(HygenConfig::default(), GBPS);
        for t in [0, 10_000] {
            let mut b = packet(REMOTE, VM_A, ip_proto::UDP, Ecn::Ce, 0);
            receive(&mut s, t, &mut b);
        }
        send(&mut s, 50_000, VM_A, REMOTE);
        assert_eq!(s.poll_transmit(100_000), None);
        assert_eq!(
            s.poll_transmit(150_000),
            Some(FeedbackPacket {
                src: VM_A,
                dst: REMOTE,
                count: 1
            })
        );
    }

    #[test]
    fn a_vm_idle_for_a_second_is_reset_and_its_share_redistributed() {
        let mut s = HygenShim::new(HygenConfig::default(), GBPS);
        send(&mut s, 0, VM_A, REMOTE);
        send(&mut s, 0, VM_B, REMOTE);
        assert_eq!(s.vm_share_bps(VM_B), 500 * MBPS);
        // B keeps sending, A falls silent.
        let mut t = 0;
        while t < NS_PER_SEC + TU {
            t += TU;
            send(&mut s, t, VM_B, REMOTE);
            run_until(&mut s, t);
        }
        assert_eq!(s.vm_share_bps(VM_A), 0);
        assert_eq!(s.pair_rate_bps(VM_A, REMOTE), None);
        assert_eq!(s.vm_share_bps(VM_B), GBPS);
        // A expired at the 1 s tick; since then B's pair climbs by C/100 per tick (two ticks).
        assert_eq!(s.pair_rate_bps(VM_B, REMOTE), Some(520 * MBPS));
    }

    #[test]
    fn weighted_vms_get_weighted_shares_and_pairs_shrink_at_once() {
        let mut s = HygenShim::new(HygenConfig::default(), GBPS);
        s.register_vm(0, VM_A, 3);
        s.register_vm(0, VM_B, 1);
        send(&mut s, 0, VM_A, REMOTE);
        assert_eq!(s.pair_rate_bps(VM_A, REMOTE), Some(GBPS));
        send(&mut s, 1_000, VM_B, REMOTE);
        assert_eq!(s.vm_share_bps(VM_A), 750 * MBPS);
        assert_eq!(s.vm_share_bps(VM_B), 250 * MBPS);
        assert_eq!(s.pair_rate_bps(VM_A, REMOTE), Some(750 * MBPS));
    }

    #[test]
    fn the_vm_bucket_drops_traffic_above_the_share() {
        let mut s = HygenShim::new(HygenConfig::default(), GBPS);
        // A fresh 1 Gb/s bucket holds 125 kB: 83 packets of 1500 B pass back to back.
        let passed = (0..100)
            .filter(|_| send(&mut s, 0, VM_A, REMOTE).0 == EgressVerdict::Pass)
            .count();
        assert_eq!(passed, 83);
        assert_eq!(s.counters().drops_no_tokens, 17);
    }

    #[test]
    fn admission_control_refuses_syns_towards_a_destination_at_r_min() {
        let config = HygenConfig {
            admission_control: true,
            ..Default::default()
        };
        let mut s = HygenShim::new(config, GBPS);
        send(&mut s, 0, VM_A, REMOTE);
        feedback(&mut s, 100_000, REMOTE, VM_A, 60_000);
        run_until(&mut s, TU);
        let syn = |s: &mut HygenShim, now, src, dst| {
            let tcp = TcpFields {
                src_port: 1,
                dst_port: 2,
                seq: 0,
                ack: 0,
                flags: tcp_flags::SYN,
                window: 100,
            };
            let mut b = emit(
                &Ipv4Fields {
                    src,
                    dst,
                    protocol: ip_proto::TCP,
                    ident: 0,
                    ecn: Ecn::NotEct,
                    total_len: 40,
                    ttl: 64,
                },
                Some(&tcp),
            );
            s.on_egress(now, &mut Ipv4Packet::new_checked(&mut b[..]).unwrap())
        };
        assert_eq!(
            syn(&mut s, TU + 1, VM_A, REMOTE),
            EgressVerdict::Drop(DropReason::Admission)
        );
        assert_eq!(syn(&mut s, TU + 1, VM_A, REMOTE2), EgressVerdict::Pass);
        assert_eq!(s.counters().drops_admission, 1);
        // What a kernel datapath is told to refuse: the same destination alone.
        assert_eq!(
            s.congested_destinations(TU + 1).collect::<Vec<_>>(),
            [REMOTE]
        );
        assert_eq!(s.congested_destinations(100_000 + 1_000_000).count(), 0);
        // Once the congestion times out the SYN goes through.
        assert_eq!(
            syn(&mut s, 100_000 + 1_000_000, VM_A, REMOTE),
            EgressVerdict::Pass
        );
    }
}
