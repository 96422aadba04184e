//! The engine's side of the mechanism interface (`tacc_mech::roles`): the slot of each host
//! shim and switch hook with its pending timer, and the controller with its out-of-band
//! control channel (constant one-way latency, every message and byte counted). Which
//! mechanism fills the slots is the scenario's business; nothing here names one.

use crate::packet::Packet;
use std::collections::{BTreeMap, VecDeque};
use tacc_mech::control::ControlMessage;
use tacc_mech::roles::{ControllerApp, HostShim, SwitchHook};

/// One host's virtual-switch hook.
#[derive(Default)]
pub struct HostSlot {
    pub shim: Option<Box<dyn HostShim<Packet>>>,
    /// Time of the pending timer event, if one is scheduled.
    pub timer_at: Option<u64>,
}

/// One switch's mechanism hook.
#[derive(Default)]
pub struct SwitchSlot {
    pub hook: Option<Box<dyn SwitchHook<Packet>>>,
    /// The hook's `queue_events()`, asked once.
    pub queue_events: bool,
    pub timer_at: Option<u64>,
}

/// The controller and its channel to switches and hosts.
#[derive(Default)]
pub struct Control {
    pub latency: u64,
    pub app: Option<Box<dyn ControllerApp>>,
    /// Messages in flight, in delivery order (constant latency keeps those sent here so;
    /// another partition's are put in their place).
    pub inflight: VecDeque<(u64, ControlMessage)>,
    pub timer_at: Option<u64>,
    /// The controller runs in another partition of a partitioned run (`crate::parallel`):
    /// what is for it goes there.
    pub elsewhere: bool,
    /// (messages, bytes) by kind, with the shims' in-band feedback packets.
    pub messages: BTreeMap<&'static str, (u64, u64)>,
}

impl Control {
    /// Counts a message the controller sends.
    pub fn account(&mut self, m: &ControlMessage) {
        self.count(m.kind(), m.wire_bytes());
    }

    /// Counts one control message of `kind`: the channel's, or a shim's in-band signal.
    pub fn count(&mut self, kind: &'static str, bytes: u64) {
        let e = self.messages.entry(kind).or_default();
        e.0 += 1;
        e.1 += bytes;
    }

    /// Puts a message on the channel; returns its delivery time.
    pub fn send(&mut self, now: u64, m: ControlMessage) -> u64 {
        self.account(&m);
        let at = now + self.latency;
        self.inflight.push_back((at, m));
        at
    }

    /// A message another partition sent, due at `at`: after those due by then.
    pub fn arrive(&mut self, at: u64, m: ControlMessage) {
        let i = self.inflight.partition_point(|&(t, _)| t <= at);
        self.inflight.insert(i, (at, m));
    }
}

/// Counters of every shim and switch hook, summed by name, for summary.json.
pub fn counters(hosts: &[HostSlot], switches: &[SwitchSlot]) -> BTreeMap<&'static str, f64> {
    let mut c = BTreeMap::new();
    let mut add = |k: &'static str, v: f64| *c.entry(k).or_default() += v;
    for s in hosts.iter().filter_map(|h| h.shim.as_ref()) {
        s.counters(&mut add);
    }
    for s in switches.iter().filter_map(|s| s.hook.as_ref()) {
        s.counters(&mut add);
    }
    c
}
