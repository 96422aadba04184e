//! Per-NIC rate allocation (PAPERS.md §1 "Rate allocation", §2 E(i)) and the static per-VM
//! rate-limit baseline.
//!
//! [`RateAllocator`] splits a NIC's nominal rate C among its *active* VMs in proportion to their
//! weights (share = C x w / sum of active weights) and polices each VM with a token bucket at its
//! share. A VM becomes active with its first packet and is deactivated after `idle_timeout`
//! without one; both events redistribute the shares. [`KeyedLimiter`] stacks adaptive per-key
//! buckets ([`KeyedBuckets`]) on top of these per-VM buckets: the limiter of HyGenICC and
//! SDN-GCC, whose rate rules drive it. [`StaticRateLimiter`] is the "static per-VM rate limit at
//! the fair share" baseline: the per-key buckets alone at fixed rates, no activity tracking, no
//! adaptation.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use crate::limiters::token_bucket::TokenBucket;
use crate::vocab::roles::{BucketConfig, DropReason, EgressVerdict, ShortagePolicy};
use crate::vocab::units::{Nanos, NS_PER_SEC};

impl BucketConfig {
    /// A full bucket at `rate_bps`, sized for that rate.
    pub fn bucket(&self, rate_bps: u64, now: Nanos) -> TokenBucket {
        TokenBucket::new(rate_bps, self.depth_for(rate_bps), now)
    }

    /// Moves `bucket` to `rate_bps` from `now` on and resizes it for that rate.
    pub fn retune(&self, bucket: &mut TokenBucket, now: Nanos, rate_bps: u64) {
        bucket.set_rate(now, rate_bps);
        bucket.set_depth(self.depth_for(rate_bps));
    }
}

/// Takes `bytes` from every bucket if all of them have the tokens at `now`; otherwise takes
/// nothing and reports the shortage according to `policy`.
pub(crate) fn admit_all(
    buckets: &mut [&mut TokenBucket],
    now: Nanos,
    bytes: u64,
    policy: ShortagePolicy,
) -> EgressVerdict {
    let mut ready = now;
    for bucket in buckets.iter_mut() {
        match bucket.ready_at(now, bytes) {
            Some(t) => ready = ready.max(t),
            None => return EgressVerdict::Drop(DropReason::NeverFits),
        }
    }
    if ready > now {
        return match policy {
            ShortagePolicy::Drop => EgressVerdict::Drop(DropReason::NoTokens),
            ShortagePolicy::Queue => EgressVerdict::Hold { until: ready },
        };
    }
    for bucket in buckets.iter_mut() {
        let taken = bucket.try_consume(now, bytes);
        debug_assert!(taken, "ready_at promised the tokens");
    }
    EgressVerdict::Pass
}

/// Parameters of the per-NIC share allocator.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AllocatorConfig {
    /// A VM that has offered no packet for this long (ns) is deactivated and its share given
    /// back to the others. The papers use 1 s.
    pub idle_timeout: Nanos,
    /// Sizing and shortage behaviour of the per-VM buckets.
    pub bucket: BucketConfig,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            idle_timeout: NS_PER_SEC,
            bucket: BucketConfig::default(),
        }
    }
}

#[derive(Clone, Debug)]
struct VmSlot {
    weight: u32,
    active: bool,
    last_offered: Nanos,
    share_bps: u64,
    bucket: TokenBucket,
}

/// Work-conserving weighted split of one NIC's rate among its active VMs.
#[derive(Clone, Debug)]
pub struct RateAllocator {
    config: AllocatorConfig,
    nic_rate_bps: u64,
    vms: BTreeMap<u32, VmSlot>,
}

impl RateAllocator {
    pub fn new(config: AllocatorConfig, nic_rate_bps: u64) -> RateAllocator {
        RateAllocator {
            config,
            nic_rate_bps,
            vms: BTreeMap::new(),
        }
    }

    pub fn config(&self) -> &AllocatorConfig {
        &self.config
    }

    pub fn nic_rate_bps(&self) -> u64 {
        self.nic_rate_bps
    }

    /// Declares a VM (identified by its IPv4 address) with a weight (0 is treated as 1).
    /// Re-registering an active VM changes its weight and redistributes the shares.
    pub fn register_vm(&mut self, now: Nanos, vm: u32, weight: u32) {
        let weight = weight.max(1);
        let bucket = self.config.bucket.bucket(0, now);
        let slot = self.vms.entry(vm).or_insert(VmSlot {
            weight,
            active: false,
            last_offered: now,
            share_bps: 0,
            bucket,
        });
        slot.weight = weight;
        if slot.active {
            self.redistribute(now);
        }
    }

    /// Marks `vm` as sending at `now`, registering it with weight 1 if unknown. Returns true if
    /// it was inactive, i.e. the shares have just been redistributed.
    pub fn touch(&mut self, now: Nanos, vm: u32) -> bool {
        let slot = match self.vms.get_mut(&vm) {
            Some(slot) => slot,
            None => {
                self.register_vm(now, vm, 1);
                self.vms.get_mut(&vm).expect("registered above")
            }
        };
        slot.last_offered = now;
        if slot.active {
            return false;
        }
        slot.active = true;
        self.redistribute(now);
        if let Some(slot) = self.vms.get_mut(&vm) {
            slot.bucket.fill(now);
        }
        true
    }

    /// Polices one packet of `bytes` from `vm` at `now`: activates the VM, then takes the
    /// tokens from its share bucket and from `inner` (a finer-grained bucket of the caller,
    /// e.g. HyGenICC's per-destination bucket) only if both have them.
    pub fn admit(
        &mut self,
        now: Nanos,
        vm: u32,
        bytes: u64,
        inner: Option<&mut TokenBucket>,
    ) -> EgressVerdict {
        self.touch(now, vm);
        self.police(now, vm, bytes, inner)
    }

    /// [`RateAllocator::admit`] for a VM the caller has just touched.
    fn police(
        &mut self,
        now: Nanos,
        vm: u32,
        bytes: u64,
        inner: Option<&mut TokenBucket>,
    ) -> EgressVerdict {
        let policy = self.config.bucket.on_shortage;
        let slot = self.vms.get_mut(&vm).expect("touched by the caller");
        match inner {
            Some(inner) => admit_all(&mut [&mut slot.bucket, inner], now, bytes, policy),
            None => admit_all(&mut [&mut slot.bucket], now, bytes, policy),
        }
    }

    /// Deactivates every VM idle for at least `idle_timeout` at `now` and redistributes the
    /// shares. Returns the deactivated VMs in address order.
    pub fn expire_idle(&mut self, now: Nanos) -> Vec<u32> {
        let timeout = self.config.idle_timeout;
        let mut expired = Vec::new();
        for (&vm, slot) in self.vms.iter_mut() {
            if slot.active && now.saturating_sub(slot.last_offered) >= timeout {
                slot.active = false;
                expired.push(vm);
            }
        }
        if !expired.is_empty() {
            self.redistribute(now);
        }
        expired
    }

    /// When the next VM will go idle (call [`RateAllocator::expire_idle`] then).
    pub fn poll_at(&self) -> Option<Nanos> {
        self.vms
            .values()
            .filter(|s| s.active)
            .map(|s| s.last_offered + self.config.idle_timeout)
            .min()
    }

    pub fn is_active(&self, vm: u32) -> bool {
        self.vms.get(&vm).is_some_and(|s| s.active)
    }

    /// The VM's current share in bits/s (0 while inactive or unknown).
    pub fn share_bps(&self, vm: u32) -> u64 {
        self.vms.get(&vm).map_or(0, |s| s.share_bps)
    }

    /// (VM, share in bits/s) of every registered VM, in address order.
    pub fn shares(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.vms.iter().map(|(&vm, s)| (vm, s.share_bps))
    }

    fn redistribute(&mut self, now: Nanos) {
        let total: u64 = self
            .vms
            .values()
            .filter(|s| s.active)
            .map(|s| s.weight as u64)
            .sum();
        for slot in self.vms.values_mut() {
            slot.share_bps = if slot.active {
                (self.nic_rate_bps as u128 * slot.weight as u128 / total as u128) as u64
            } else {
                0
            };
            self.config
                .bucket
                .retune(&mut slot.bucket, now, slot.share_bps);
        }
    }
}

/// Token buckets per rate key (VM, key), each at a rate of its own, with the state `S` a
/// mechanism keeps beside each. The static baseline uses it alone at fixed rates;
/// [`KeyedLimiter`] adapts the rates below the VMs' shares.
#[derive(Clone, Debug)]
pub struct KeyedBuckets<S> {
    config: BucketConfig,
    keys: BTreeMap<(u32, u32), KeyBucket<S>>,
}

/// The bucket's rate is the key's rate.
#[derive(Clone, Debug)]
struct KeyBucket<S> {
    bucket: TokenBucket,
    state: S,
}

impl<S> KeyedBuckets<S> {
    pub fn new(config: BucketConfig) -> KeyedBuckets<S> {
        KeyedBuckets {
            config,
            keys: BTreeMap::new(),
        }
    }

    pub fn config(&self) -> &BucketConfig {
        &self.config
    }

    /// Limits (`vm`, `key`) to `rate_bps` from `now` on; a new key starts with a full bucket
    /// and `state()`.
    pub fn set_rate(
        &mut self,
        now: Nanos,
        vm: u32,
        key: u32,
        rate_bps: u64,
        state: impl FnOnce() -> S,
    ) {
        match self.keys.entry((vm, key)) {
            Entry::Occupied(e) => self.config.retune(&mut e.into_mut().bucket, now, rate_bps),
            Entry::Vacant(e) => {
                e.insert(KeyBucket {
                    bucket: self.config.bucket(rate_bps, now),
                    state: state(),
                });
            }
        }
    }

    /// The key's rate in bits/s, `None` if it has none.
    pub fn rate_bps(&self, vm: u32, key: u32) -> Option<u64> {
        self.keys.get(&(vm, key)).map(|k| k.bucket.rate_bps())
    }

    /// (VM, key, rate in bits/s, state) of every key, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u32, u64, &S)> + '_ {
        self.keys
            .iter()
            .map(|(&(vm, key), k)| (vm, key, k.bucket.rate_bps(), &k.state))
    }

    /// Polices one packet of `bytes` through the key's bucket; keys without a rate pass.
    pub fn admit(&mut self, now: Nanos, vm: u32, key: u32, bytes: u64) -> EgressVerdict {
        match self.keys.get_mut(&(vm, key)) {
            Some(k) => admit_all(&mut [&mut k.bucket], now, bytes, self.config.on_shortage),
            None => EgressVerdict::Pass,
        }
    }
}

/// The limiter bookkeeping of HyGenICC and SDN-GCC: each VM policed at its share of the NIC
/// ([`RateAllocator`]) and, below it, each of its rate keys (a destination, a flow, or 0 for
/// the whole VM) at an adaptive rate that never exceeds the share. A key comes to life at the
/// share with the VM's first packet for it and is forgotten once idle; the rate rules stay
/// with the mechanism, which keeps its per-key state `S` here.
#[derive(Clone, Debug)]
pub struct KeyedLimiter<S> {
    alloc: RateAllocator,
    keys: KeyedBuckets<Sending<S>>,
}

#[derive(Clone, Debug)]
struct Sending<S> {
    last_sent: Nanos,
    state: S,
}

impl<S> KeyBucket<Sending<S>> {
    /// Runs a rate `rule` of [`KeyedLimiter::update`] on this key.
    fn apply(
        &mut self,
        config: &BucketConfig,
        now: Nanos,
        share: u64,
        rule: impl FnOnce(u64, u64, &mut S) -> Option<u64>,
    ) {
        if let Some(rate) = rule(share, self.bucket.rate_bps(), &mut self.state.state) {
            config.retune(&mut self.bucket, now, rate);
        }
    }
}

impl<S> KeyedLimiter<S> {
    pub fn new(config: AllocatorConfig, nic_rate_bps: u64) -> KeyedLimiter<S> {
        KeyedLimiter {
            alloc: RateAllocator::new(config, nic_rate_bps),
            keys: KeyedBuckets::new(config.bucket),
        }
    }

    pub fn nic_rate_bps(&self) -> u64 {
        self.alloc.nic_rate_bps()
    }

    /// Declares a VM and its weight ([`RateAllocator::register_vm`]); keys above a shrunken
    /// share are cut to it.
    pub fn register_vm(&mut self, now: Nanos, vm: u32, weight: u32) {
        self.alloc.register_vm(now, vm, weight);
        self.clamp_to_shares(now);
    }

    /// Marks `vm` as sending at `now`; if that activates it, the shares are redistributed and
    /// keys above a shrunken share are cut to it.
    pub fn activate(&mut self, now: Nanos, vm: u32) {
        if self.alloc.touch(now, vm) {
            self.clamp_to_shares(now);
        }
    }

    /// Polices one packet of `bytes` from `vm` for `key` at `now`: activates the VM, creates
    /// the key at the VM's share with `state()` if it is new, and takes the tokens from the
    /// VM's share bucket and the key's bucket only if both have them.
    pub fn admit(
        &mut self,
        now: Nanos,
        vm: u32,
        key: u32,
        bytes: u64,
        state: impl FnOnce() -> S,
    ) -> EgressVerdict {
        self.activate(now, vm);
        let share = self.alloc.share_bps(vm);
        let config = &self.keys.config;
        let k = self
            .keys
            .keys
            .entry((vm, key))
            .or_insert_with(|| KeyBucket {
                bucket: config.bucket(share, now),
                state: Sending {
                    last_sent: now,
                    state: state(),
                },
            });
        k.state.last_sent = now;
        self.alloc.police(now, vm, bytes, Some(&mut k.bucket))
    }

    /// Applies a rate rule to (`vm`, `key`): `rule(share, rate, state)` gets the VM's share
    /// and the key's rate in bits/s and returns the new rate, if it changes it. False if the
    /// key is not active.
    pub fn update(
        &mut self,
        now: Nanos,
        vm: u32,
        key: u32,
        rule: impl FnOnce(u64, u64, &mut S) -> Option<u64>,
    ) -> bool {
        let share = self.alloc.share_bps(vm);
        let Some(k) = self.keys.keys.get_mut(&(vm, key)) else {
            return false;
        };
        k.apply(&self.keys.config, now, share, rule);
        true
    }

    /// Applies a rate rule, as [`KeyedLimiter::update`], to every key in key order.
    pub fn update_all(
        &mut self,
        now: Nanos,
        mut rule: impl FnMut(u64, u64, &mut S) -> Option<u64>,
    ) {
        for (&(vm, _), k) in self.keys.keys.iter_mut() {
            k.apply(&self.keys.config, now, self.alloc.share_bps(vm), &mut rule);
        }
    }

    /// The mechanism's state of (`vm`, `key`), if the key is active.
    pub fn state_mut(&mut self, vm: u32, key: u32) -> Option<&mut S> {
        self.keys
            .keys
            .get_mut(&(vm, key))
            .map(|k| &mut k.state.state)
    }

    /// Deactivates the VMs idle for the idle timeout ([`RateAllocator::expire_idle`]) and
    /// forgets their keys and every key that sent nothing for as long.
    pub fn expire_idle(&mut self, now: Nanos) {
        let expired = self.alloc.expire_idle(now);
        let idle = self.alloc.config().idle_timeout;
        self.keys.keys.retain(|&(vm, _), k| {
            !expired.contains(&vm) && now.saturating_sub(k.state.last_sent) < idle
        });
    }

    /// True if no key is active.
    pub fn is_empty(&self) -> bool {
        self.keys.keys.is_empty()
    }

    /// The VM's current share in bits/s (0 while inactive or unknown).
    pub fn share_bps(&self, vm: u32) -> u64 {
        self.alloc.share_bps(vm)
    }

    /// (VM, share in bits/s) of every registered VM, in address order.
    pub fn shares(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.alloc.shares()
    }

    /// The rate of (`vm`, `key`) in bits/s, if the key is active.
    pub fn rate_bps(&self, vm: u32, key: u32) -> Option<u64> {
        self.keys.rate_bps(vm, key)
    }

    /// (VM, key, rate in bits/s, state) of every active key, in key order.
    pub fn entries(&self) -> impl Iterator<Item = (u32, u32, u64, &S)> + '_ {
        self.keys
            .iter()
            .map(|(vm, key, rate, k)| (vm, key, rate, &k.state))
    }

    /// (VM, key, rate in bits/s) of every active key, in key order.
    pub fn rates(&self) -> impl Iterator<Item = (u32, u32, u64)> + '_ {
        self.keys.iter().map(|(vm, key, rate, _)| (vm, key, rate))
    }

    /// A shrinking share takes effect at once on every key of the VM.
    fn clamp_to_shares(&mut self, now: Nanos) {
        self.update_all(now, |share, rate, _| (rate > share).then_some(share));
    }
}

/// The static per-VM rate limit baseline: each VM's traffic is policed at a fixed rate.
#[derive(Clone, Debug)]
pub struct StaticRateLimiter {
    buckets: KeyedBuckets<()>,
}

impl StaticRateLimiter {
    pub fn new(bucket_config: BucketConfig) -> StaticRateLimiter {
        StaticRateLimiter {
            buckets: KeyedBuckets::new(bucket_config),
        }
    }

    /// Limits `vm` to `rate_bps` from `now` on.
    pub fn set_rate(&mut self, now: Nanos, vm: u32, rate_bps: u64) {
        self.buckets.set_rate(now, vm, 0, rate_bps, || ());
    }

    /// The buckets' depth and what they do on a shortage.
    pub fn bucket_config(&self) -> &BucketConfig {
        self.buckets.config()
    }

    /// The VM's limit, `None` if it is unlimited.
    pub fn rate_bps(&self, vm: u32) -> Option<u64> {
        self.buckets.rate_bps(vm, 0)
    }

    /// Every limit as (VM, 0, bits/s).
    pub fn rates(&self) -> impl Iterator<Item = (u32, u32, u64)> + '_ {
        self.buckets.iter().map(|(vm, key, bps, _)| (vm, key, bps))
    }

    /// Polices one packet of `bytes` from `vm`; VMs without a rate pass unlimited.
    pub fn on_egress(&mut self, now: Nanos, vm: u32, bytes: u64) -> EgressVerdict {
        self.buckets.admit(now, vm, 0, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GBPS: u64 = 1_000_000_000;
    const MBPS: u64 = 1_000_000;

    fn tiny_bucket(policy: ShortagePolicy) -> BucketConfig {
        // Depth one 1500 B packet at every rate used below.
        BucketConfig {
            min_depth_bytes: 1500,
            burst_ns: 0,
            on_shortage: policy,
        }
    }

    #[test]
    fn depth_is_burst_time_of_tokens_but_at_least_one_frame() {
        let c = BucketConfig::default();
        assert_eq!(c.depth_for(GBPS), 125_000);
        assert_eq!(c.depth_for(10 * MBPS), 1514);
    }

    #[test]
    fn first_packet_activates_a_vm_and_takes_the_whole_nic() {
        let mut a = RateAllocator::new(AllocatorConfig::default(), GBPS);
        a.register_vm(0, 1, 1);
        a.register_vm(0, 2, 1);
        assert_eq!(a.share_bps(1), 0);
        assert_eq!(a.admit(10, 1, 1500, None), EgressVerdict::Pass);
        assert_eq!(a.share_bps(1), GBPS);
        assert_eq!(a.share_bps(2), 0);
    }

    #[test]
    fn active_vms_split_the_nic_by_weight() {
        let mut a = RateAllocator::new(AllocatorConfig::default(), GBPS);
        a.register_vm(0, 1, 1);
        a.register_vm(0, 2, 3);
        a.touch(0, 1);
        a.touch(0, 2);
        assert_eq!(a.share_bps(1), 250 * MBPS);
        assert_eq!(a.share_bps(2), 750 * MBPS);
    }

    #[test]
    fn a_vm_idle_for_the_timeout_gives_its_share_back() {
        let mut a = RateAllocator::new(AllocatorConfig::default(), GBPS);
        a.touch(0, 1);
        a.touch(0, 2);
        a.touch(500_000_000, 2);
        assert_eq!(a.poll_at(), Some(NS_PER_SEC));
        assert!(a.expire_idle(NS_PER_SEC - 1).is_empty());
        assert_eq!(a.expire_idle(NS_PER_SEC), vec![1]);
        assert_eq!(a.share_bps(1), 0);
        assert_eq!(a.share_bps(2), GBPS);
        assert_eq!(a.poll_at(), Some(1_500_000_000));
    }

    #[test]
    fn the_vm_bucket_polices_at_the_share() {
        let mut a = RateAllocator::new(
            AllocatorConfig {
                bucket: tiny_bucket(ShortagePolicy::Drop),
                ..Default::default()
            },
            GBPS,
        );
        a.touch(0, 1);
        a.touch(0, 2);
        // 500 Mb/s: 1500 B every 24 us.
        assert_eq!(a.admit(0, 1, 1500, None), EgressVerdict::Pass);
        assert_eq!(
            a.admit(23_999, 1, 1500, None),
            EgressVerdict::Drop(DropReason::NoTokens)
        );
        assert_eq!(a.admit(24_000, 1, 1500, None), EgressVerdict::Pass);
    }

    #[test]
    fn an_inner_bucket_is_charged_only_when_both_have_tokens() {
        let cfg = tiny_bucket(ShortagePolicy::Drop);
        let mut a = RateAllocator::new(
            AllocatorConfig {
                bucket: cfg,
                ..Default::default()
            },
            GBPS,
        );
        let mut inner = cfg.bucket(100 * MBPS, 0);
        assert_eq!(a.admit(0, 1, 1500, Some(&mut inner)), EgressVerdict::Pass);
        // The VM bucket (1 Gb/s) refills in 12 us, the inner one (100 Mb/s) in 120 us.
        assert_eq!(
            a.admit(12_000, 1, 1500, Some(&mut inner)),
            EgressVerdict::Drop(DropReason::NoTokens)
        );
        assert_eq!(a.admit(12_000, 1, 1500, None), EgressVerdict::Pass);
        assert_eq!(inner.ready_at(12_000, 1500), Some(120_000));
    }

    #[test]
    fn queue_mode_says_when_the_packet_fits() {
        let mut a = RateAllocator::new(
            AllocatorConfig {
                bucket: tiny_bucket(ShortagePolicy::Queue),
                ..Default::default()
            },
            GBPS,
        );
        assert_eq!(a.admit(0, 1, 1500, None), EgressVerdict::Pass);
        assert_eq!(
            a.admit(2_000, 1, 1500, None),
            EgressVerdict::Hold { until: 12_000 }
        );
        assert_eq!(a.admit(12_000, 1, 1500, None), EgressVerdict::Pass);
    }

    #[test]
    fn a_packet_larger_than_the_bucket_is_dropped_even_in_queue_mode() {
        let mut a = RateAllocator::new(
            AllocatorConfig {
                bucket: tiny_bucket(ShortagePolicy::Queue),
                ..Default::default()
            },
            GBPS,
        );
        assert_eq!(
            a.admit(0, 1, 9000, None),
            EgressVerdict::Drop(DropReason::NeverFits)
        );
    }

    fn limiter() -> KeyedLimiter<u32> {
        KeyedLimiter::new(
            AllocatorConfig {
                bucket: tiny_bucket(ShortagePolicy::Drop),
                ..Default::default()
            },
            GBPS,
        )
    }

    #[test]
    fn a_new_key_starts_at_the_vm_share_with_its_state() {
        let mut l = limiter();
        l.activate(0, 1);
        l.activate(0, 2);
        assert_eq!(l.admit(0, 1, 7, 1500, || 42), EgressVerdict::Pass);
        assert_eq!(l.rate_bps(1, 7), Some(500 * MBPS));
        assert_eq!(
            l.entries().collect::<Vec<_>>(),
            vec![(1, 7, 500 * MBPS, &42)]
        );
        // The existing key keeps its state.
        l.admit(24_000, 1, 7, 1500, || 0);
        assert_eq!(l.state_mut(1, 7), Some(&mut 42));
    }

    #[test]
    fn a_packet_needs_tokens_in_both_the_share_and_the_key_bucket() {
        let mut l = limiter();
        l.admit(0, 1, 7, 1500, || 0);
        assert!(l.update(0, 1, 7, |share, rate, _| {
            assert_eq!((share, rate), (GBPS, GBPS));
            Some(100 * MBPS)
        }));
        // The share bucket (1 Gb/s) refills in 12 us, the key's (100 Mb/s) in 120 us.
        assert_eq!(
            l.admit(12_000, 1, 7, 1500, || 0),
            EgressVerdict::Drop(DropReason::NoTokens)
        );
        assert_eq!(l.admit(12_000, 1, 8, 1500, || 0), EgressVerdict::Pass);
        assert_eq!(l.admit(120_000, 1, 7, 1500, || 0), EgressVerdict::Pass);
    }

    #[test]
    fn an_activation_redistributes_and_cuts_keys_above_the_new_share() {
        let mut l = limiter();
        l.register_vm(0, 1, 3);
        l.admit(0, 1, 7, 1500, || 0);
        l.admit(0, 1, 8, 1500, || 0);
        l.update(0, 1, 8, |_, _, _| Some(100 * MBPS));
        assert_eq!(l.rate_bps(1, 7), Some(GBPS));
        l.admit(1_000, 2, 7, 1500, || 0);
        assert_eq!(
            l.shares().collect::<Vec<_>>(),
            vec![(1, 750 * MBPS), (2, 250 * MBPS)]
        );
        assert_eq!(
            l.rates().collect::<Vec<_>>(),
            vec![(1, 7, 750 * MBPS), (1, 8, 100 * MBPS), (2, 7, 250 * MBPS)]
        );
        // A heavier weight for an active VM takes effect at once too.
        l.register_vm(2_000, 2, 5);
        assert_eq!(l.rate_bps(1, 7), Some(375 * MBPS));
    }

    #[test]
    fn rules_run_over_every_key_with_its_vm_share() {
        let mut l = limiter();
        l.admit(0, 1, 7, 1500, || 1);
        l.admit(0, 2, 7, 1500, || 2);
        let mut seen = Vec::new();
        l.update_all(0, |share, rate, state| {
            seen.push((share, rate, *state));
            *state += 10;
            (*state == 11).then_some(share / 10)
        });
        assert_eq!(
            seen,
            vec![(500 * MBPS, 500 * MBPS, 1), (500 * MBPS, 500 * MBPS, 2)]
        );
        assert_eq!(
            l.entries().collect::<Vec<_>>(),
            vec![(1, 7, 50 * MBPS, &11), (2, 7, 500 * MBPS, &12)]
        );
        assert!(!l.update(0, 3, 7, |_, _, _| Some(1)), "no such key");
    }

    #[test]
    fn idle_keys_and_the_keys_of_idle_vms_are_forgotten() {
        let mut l = limiter();
        l.admit(0, 1, 7, 1500, || 0);
        l.admit(0, 2, 7, 1500, || 0);
        l.admit(0, 2, 8, 1500, || 0);
        // VM 2 stays active through key 8 only.
        l.admit(NS_PER_SEC / 2, 2, 8, 1500, || 0);
        l.expire_idle(NS_PER_SEC - 1);
        assert_eq!(l.rates().count(), 3);
        l.expire_idle(NS_PER_SEC);
        assert_eq!(l.rates().collect::<Vec<_>>(), vec![(2, 8, 500 * MBPS)]);
        assert_eq!((l.share_bps(1), l.share_bps(2)), (0, GBPS));
        l.expire_idle(3 * NS_PER_SEC / 2);
        assert!(l.is_empty());
        // A returning VM starts afresh at its share.
        l.admit(2 * NS_PER_SEC, 1, 7, 1500, || 0);
        assert_eq!(l.rate_bps(1, 7), Some(GBPS));
    }

    #[test]
    fn static_limits_hold_a_vm_at_its_rate_even_when_alone() {
        let mut s = StaticRateLimiter::new(tiny_bucket(ShortagePolicy::Drop));
        s.set_rate(0, 1, 500 * MBPS);
        assert_eq!(s.rate_bps(1), Some(500 * MBPS));
        assert_eq!(s.on_egress(0, 1, 1500), EgressVerdict::Pass);
        assert_eq!(
            s.on_egress(12_000, 1, 1500),
            EgressVerdict::Drop(DropReason::NoTokens)
        );
        assert_eq!(s.on_egress(24_000, 1, 1500), EgressVerdict::Pass);
        assert_eq!(s.on_egress(0, 9, 1500), EgressVerdict::Pass, "unlimited VM");
        assert_eq!(s.rate_bps(9), None);
    }

    #[test]
    fn a_new_static_rate_applies_from_then_on() {
        let mut s = StaticRateLimiter::new(tiny_bucket(ShortagePolicy::Drop));
        s.set_rate(0, 1, 500 * MBPS);
        assert_eq!(s.on_egress(0, 1, 1500), EgressVerdict::Pass);
        // Tokens earned at 500 Mb/s until 12 us (750 B), at 1 Gb/s after.
        s.set_rate(12_000, 1, GBPS);
        assert_eq!(s.rate_bps(1), Some(GBPS));
        assert_eq!(
            s.on_egress(17_999, 1, 1500),
            EgressVerdict::Drop(DropReason::NoTokens)
        );
        assert_eq!(s.on_egress(18_000, 1, 1500), EgressVerdict::Pass);
    }
}
