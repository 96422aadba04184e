//! SDN-ECN: a controller that picks the flows to ECN-mark (PAPERS.md §4).
//!
//! Every probe interval the caller reads each switch's cumulative port byte counters and
//! per-flow byte counters (OpenFlow port and flow stats) into [`SdnEcnController::on_probe`].
//! - Algorithm-A: a link whose utilization over the interval exceeds 75% is congested.
//! - Algorithm-B: among the flows crossing a congested link, the top T% by rate are selected,
//!   T rising linearly from 0 at 75% utilization to 50% at 100%. The count is ceil(T x N), so a
//!   congested link always marks at least its fastest flow; N counts only flows that moved
//!   bytes in the interval and are not exempted by policy.
//! - Each selected flow gets a high-priority rule on that switch that sets CE and forwards to
//!   the same port; it expires after a short hard timeout and the normal rules match again.

mod build;
pub mod config;

pub use config::SdnEcnConfig;

use std::collections::{BTreeMap, BTreeSet};

use crate::vocab::headers::FlowKey;
use crate::vocab::units::{Nanos, NS_PER_SEC};

pub use crate::vocab::control::{FlowSample, PortSample};

/// The caller should read the port and flow counters of `switch` for the next probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct StatsRequest {
    pub switch: u32,
}

/// Install on `switch` a rule matching `key` that sets CE and outputs to `out_port`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InstallMarkRule {
    pub switch: u32,
    pub out_port: u32,
    pub key: FlowKey,
    pub priority: u16,
    pub hard_timeout: Nanos,
}

#[derive(Clone, Copy, Debug)]
struct LinkState {
    capacity_bps: u64,
    last: Option<(Nanos, u64)>,
    utilization: Option<f64>,
}

/// The SDN-ECN controller application.
#[derive(Clone, Debug)]
pub struct SdnEcnController {
    config: SdnEcnConfig,
    links: BTreeMap<(u32, u32), LinkState>,
    /// Last (time, bytes) per (switch, port, flow).
    flows: BTreeMap<(u32, u32, FlowKey), (Nanos, u64)>,
    exempt: BTreeSet<FlowKey>,
    next_probe: Option<Nanos>,
}

impl SdnEcnController {
    pub fn new(config: SdnEcnConfig) -> SdnEcnController {
        SdnEcnController {
            config,
            links: BTreeMap::new(),
            flows: BTreeMap::new(),
            exempt: BTreeSet::new(),
            next_probe: None,
        }
    }

    /// Declares the link leaving `port` of `switch` with its capacity in bits/s.
    pub fn add_link(&mut self, now: Nanos, switch: u32, port: u32, capacity_bps: u64) {
        self.links.insert(
            (switch, port),
            LinkState {
                capacity_bps,
                last: None,
                utilization: None,
            },
        );
        self.next_probe
            .get_or_insert(now + self.config.probe_interval);
    }

    /// Administrator policy: never mark this flow.
    pub fn exempt_flow(&mut self, key: FlowKey) {
        self.exempt.insert(key);
    }

    /// The link's utilization over the last probe interval (a fraction), once two probes in.
    pub fn utilization(&self, switch: u32, port: u32) -> Option<f64> {
        self.links.get(&(switch, port)).and_then(|l| l.utilization)
    }

    /// T: the fraction of a link's flows to mark at `utilization`.
    pub fn marked_fraction(&self, utilization: f64) -> f64 {
        let threshold = self.config.congestion_threshold;
        if utilization <= threshold {
            return 0.0;
        }
        let over = ((utilization - threshold) / (1.0 - threshold)).min(1.0);
        over * self.config.max_marked_fraction
    }

    pub fn poll_at(&self) -> Option<Nanos> {
        self.next_probe
    }

    /// Every probe interval: the switches whose counters to read.
    pub fn on_timer(&mut self, now: Nanos) -> Vec<StatsRequest> {
        match self.next_probe {
            Some(t) if t <= now => {}
            _ => return Vec::new(),
        }
        self.next_probe = Some(now + self.config.probe_interval);
        let switches: BTreeSet<u32> = self.links.keys().map(|&(switch, _)| switch).collect();
        switches
            .into_iter()
            .map(|switch| StatsRequest { switch })
            .collect()
    }

    /// The counters read at `now`: Algorithm-A on the ports, Algorithm-B on the flows of the
    /// congested ones. Counters seen for the first time only set baselines.
    pub fn on_probe(
        &mut self,
        now: Nanos,
        ports: &[PortSample],
        flows: &[FlowSample],
    ) -> Vec<InstallMarkRule> {
        for s in ports {
            let Some(link) = self.links.get_mut(&(s.switch, s.port)) else {
                continue;
            };
            link.utilization = match link.last {
                Some((t, bytes)) if now > t && s.tx_bytes >= bytes && link.capacity_bps > 0 => {
                    let bits = (s.tx_bytes - bytes) as f64 * 8.0;
                    Some(bits * NS_PER_SEC as f64 / ((now - t) as f64 * link.capacity_bps as f64))
                }
                _ => None,
            };
            link.last = Some((now, s.tx_bytes));
        }
        let mut rates: BTreeMap<(u32, u32), Vec<(f64, FlowKey)>> = BTreeMap::new();
        let mut seen = BTreeMap::new();
        for s in flows {
            let id = (s.switch, s.port, s.key);
            if let Some(&(t, bytes)) = self.flows.get(&id) {
                if now > t && s.bytes > bytes && !self.exempt.contains(&s.key) {
                    let rate =
                        (s.bytes - bytes) as f64 * 8.0 * NS_PER_SEC as f64 / (now - t) as f64;
                    rates
                        .entry((s.switch, s.port))
                        .or_default()
                        .push((rate, s.key));
                }
            }
            seen.insert(id, (now, s.bytes));
        }
        // Flows of the probed switches that are absent from this probe have ended or moved:
        // forget them. Other switches' flows keep their baselines for their own probes.
        let probed: BTreeSet<u32> = ports
            .iter()
            .map(|p| p.switch)
            .chain(flows.iter().map(|f| f.switch))
            .collect();
        self.flows
            .retain(|&(switch, _, _), _| !probed.contains(&switch));
        self.flows.extend(seen);
        let mut rules = Vec::new();
        for (&(switch, port), link) in &self.links {
            let Some(utilization) = link.utilization else {
                continue;
            };
            let fraction = self.marked_fraction(utilization);
            let Some(candidates) = rates.get_mut(&(switch, port)).filter(|_| fraction > 0.0) else {
                continue;
            };
            candidates.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let count = (fraction * candidates.len() as f64).ceil() as usize;
            rules.extend(
                candidates
                    .iter()
                    .take(count)
                    .map(|&(_, key)| InstallMarkRule {
                        switch,
                        out_port: port,
                        key,
                        priority: self.config.rule_priority,
                        hard_timeout: self.config.rule_hard_timeout,
                    }),
            );
        }
        rules
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::headers::ip_proto;

    const MBPS: u64 = 1_000_000;
    const S: Nanos = NS_PER_SEC;

    fn flow(i: u16) -> FlowKey {
        FlowKey {
            src: 0x0a00_0000 + i as u32,
            dst: 0x0a09_0001,
            src_port: 1000 + i,
            dst_port: 80,
            protocol: ip_proto::TCP,
        }
    }

    /// A 100 Mb/s link (switch 1, port 2) probed at 0 and 2 s; flow i moved `mbits[i]` Mb in
    /// between and the port `port_mbits` Mb.
    fn probe_twice(
        c: &mut SdnEcnController,
        port_mbits: u64,
        mbits: &[u64],
    ) -> Vec<InstallMarkRule> {
        let zero: Vec<FlowSample> = (0..mbits.len())
            .map(|i| FlowSample {
                switch: 1,
                port: 2,
                key: flow(i as u16),
                bytes: 0,
            })
            .collect();
        assert!(c
            .on_probe(
                0,
                &[PortSample {
                    switch: 1,
                    port: 2,
                    tx_bytes: 0
                }],
                &zero
            )
            .is_empty());
        let later: Vec<FlowSample> = mbits
            .iter()
            .enumerate()
            .map(|(i, m)| FlowSample {
                switch: 1,
                port: 2,
                key: flow(i as u16),
                bytes: m * MBPS / 8,
            })
            .collect();
        c.on_probe(
            2 * S,
            &[PortSample {
                switch: 1,
                port: 2,
                tx_bytes: port_mbits * MBPS / 8,
            }],
            &later,
        )
    }

    fn controller() -> SdnEcnController {
        let mut c = SdnEcnController::new(SdnEcnConfig::default());
        c.add_link(0, 1, 2, 100 * MBPS);
        c
    }

    #[test]
    fn the_marked_fraction_rises_from_0_at_75_to_50_percent_at_full_load() {
        let c = controller();
        assert_eq!(c.marked_fraction(0.5), 0.0);
        assert_eq!(c.marked_fraction(0.75), 0.0);
        assert_eq!(c.marked_fraction(0.875), 0.25);
        assert_eq!(c.marked_fraction(1.0), 0.5);
        assert_eq!(c.marked_fraction(1.2), 0.5);
    }

    #[test]
    fn utilization_comes_from_the_byte_counter_delta() {
        let mut c = controller();
        probe_twice(&mut c, 175, &[]);
        assert_eq!(c.utilization(1, 2), Some(0.875));
    }

    #[test]
    fn a_link_at_87_5_percent_marks_its_fastest_quarter() {
        let mut c = controller();
        let rules = probe_twice(&mut c, 175, &[10, 40, 20, 30, 5, 25, 15, 30]);
        let keys: Vec<FlowKey> = rules.iter().map(|r| r.key).collect();
        // ceil(0.25 x 8) = 2: flow 1 (40 Mb) then the lower key of the two at 30 Mb.
        assert_eq!(keys, vec![flow(1), flow(3)]);
        assert_eq!(
            rules[0],
            InstallMarkRule {
                switch: 1,
                out_port: 2,
                key: flow(1),
                priority: 100,
                hard_timeout: S
            }
        );
    }

    #[test]
    fn a_barely_congested_link_still_marks_one_flow() {
        let mut c = controller();
        // 80%: T = 10% of 5 flows = 0.5, rounded up to 1.
        let rules = probe_twice(&mut c, 160, &[30, 50, 20, 40, 10]);
        assert_eq!(
            rules.iter().map(|r| r.key).collect::<Vec<_>>(),
            vec![flow(1)]
        );
    }

    #[test]
    fn an_uncongested_link_marks_nothing() {
        let mut c = controller();
        assert!(probe_twice(&mut c, 150, &[100, 50]).is_empty());
    }

    #[test]
    fn exempt_and_idle_flows_are_not_candidates() {
        let mut c = controller();
        c.exempt_flow(flow(0));
        // Full load: T = 50% of the 2 flows that moved and are not exempt.
        let rules = probe_twice(&mut c, 200, &[90, 0, 60, 50]);
        assert_eq!(
            rules.iter().map(|r| r.key).collect::<Vec<_>>(),
            vec![flow(2)]
        );
    }

    #[test]
    fn probes_are_requested_from_every_switch_with_a_link() {
        let mut c = controller();
        c.add_link(0, 3, 1, 100 * MBPS);
        c.add_link(0, 3, 2, 100 * MBPS);
        assert_eq!(c.poll_at(), Some(2 * S));
        assert_eq!(
            c.on_timer(2 * S),
            vec![StatsRequest { switch: 1 }, StatsRequest { switch: 3 }]
        );
        assert_eq!(c.poll_at(), Some(4 * S));
    }

    #[test]
    fn probing_one_switch_keeps_the_other_switches_flow_baselines() {
        let mut c = SdnEcnController::new(SdnEcnConfig::default());
        c.add_link(0, 1, 10, 100 * MBPS);
        c.add_link(0, 2, 20, 100 * MBPS);
        let sample = |switch, port, bytes| FlowSample {
            switch,
            port,
            key: flow(1),
            bytes,
        };
        let port = |switch, port, tx_bytes| PortSample {
            switch,
            port,
            tx_bytes,
        };
        // Baselines at t = 0 for both switches, probed one after the other.
        c.on_probe(0, &[port(1, 10, 0)], &[sample(1, 10, 0)]);
        c.on_probe(0, &[port(2, 20, 0)], &[sample(2, 20, 0)]);
        // One second later switch 2's link ran at 100%: its flow is selected, although switch 1
        // was probed in between.
        c.on_probe(S, &[port(1, 10, 0)], &[sample(1, 10, 0)]);
        let rules = c.on_probe(
            S,
            &[port(2, 20, 100 * MBPS / 8)],
            &[sample(2, 20, 100 * MBPS / 8)],
        );
        assert_eq!(rules.len(), 1);
        assert_eq!((rules[0].switch, rules[0].out_port), (2, 20));
    }
}
