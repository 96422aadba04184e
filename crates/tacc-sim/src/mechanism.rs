//! Adapters between the simulator and the sans-IO mechanisms of `tacc_mech`: the per-host
//! vswitch shim, the per-switch mechanism state, and the controller with its out-of-band
//! control channel (constant one-way latency, every message and byte counted).

use crate::model::Model;
use crate::packet::Packet;
use crate::rules::{Actions, Forward, Match, Rule};
use crate::scenario::{Loaded, MechanismCfg, MechanismKind, ScenarioError};
use crate::topology::NodeRef;
use crate::units::Size;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::{BTreeMap, VecDeque};
use tacc_mech::headers::FlowKey;
use tacc_mech::hygenicc::{HygenConfig, HygenShim};
use tacc_mech::rate_alloc::{
    AllocatorConfig, BucketConfig, EgressVerdict, ShortagePolicy, StaticRateLimiter,
};
use tacc_mech::rwndq::{Rwndq, RwndqConfig};
use tacc_mech::sdn_ecn::{InstallMarkRule, SdnEcnConfig, SdnEcnController};
use tacc_mech::sdn_gcc::{
    MarkResponse, MarkSplit, RateKeying, SdnGccController, SdnGccControllerConfig, SdnGccShim,
    SdnGccShimConfig,
};
use tacc_mech::sicc::{
    SiccController, SiccControllerConfig, SiccHypervisor, SiccHypervisorConfig, SiccMessage,
};

/// Sizes of control messages on the wire, in bytes (OpenFlow 1.3 framing where it applies).
pub mod msg_bytes {
    /// ofp_packet_in (32 B with its match) plus the first 64 bytes of the packet.
    pub const PACKET_IN: u64 = 96;
    /// Multipart request for one port's (or queue's) statistics.
    pub const STATS_REQUEST: u64 = 24;
    /// Multipart reply with one ofp_port_stats (112 B) behind a 16 B header.
    pub const PORT_STATS_REPLY: u64 = 128;
    /// One ofp_flow_stats entry with a 5-tuple match.
    pub const FLOW_STATS_ENTRY: u64 = 96;
    /// ofp_flow_mod with a 5-tuple match and set-field + output actions.
    pub const FLOW_MOD: u64 = 136;
    /// Congestion notification to a hypervisor: Ethernet + IPv4 + 2 bytes (the papers' 36 B).
    pub const NOTIFICATION: u64 = 36;
    /// SICC ON/OFF frame: a minimum-size Ethernet frame with an experimental EtherType.
    pub const SICC_MESSAGE: u64 = 64;
}

/// The vswitch shim of one host.
pub enum Shim {
    None,
    Static(StaticRateLimiter),
    Hygen(Box<HygenShim>),
    SdnGcc(Box<SdnGccShim>),
    Sicc(SiccHypervisor),
}

pub enum IngressAction {
    Deliver,
    Consume,
}

impl Shim {
    pub fn on_egress(&mut self, now: u64, pkt: &mut Packet) -> EgressVerdict {
        match self {
            Shim::None | Shim::Sicc(_) => EgressVerdict::Pass,
            Shim::Static(l) => l.on_egress(now, pkt.src, pkt.len as u64),
            Shim::Hygen(h) => h.on_egress(now, pkt),
            Shim::SdnGcc(s) => s.on_egress(now, pkt),
        }
    }

    pub fn on_ingress(&mut self, now: u64, pkt: &mut Packet) -> IngressAction {
        match self {
            Shim::Hygen(h) => match h.on_ingress(now, pkt) {
                tacc_mech::hygenicc::IngressVerdict::Deliver => IngressAction::Deliver,
                tacc_mech::hygenicc::IngressVerdict::Consume => IngressAction::Consume,
            },
            Shim::Sicc(s) => {
                s.on_ack_to_vm(now, pkt);
                IngressAction::Deliver
            }
            Shim::SdnGcc(s) => {
                s.on_ingress(pkt);
                IngressAction::Deliver
            }
            _ => IngressAction::Deliver,
        }
    }

    pub fn poll_at(&self) -> Option<u64> {
        match self {
            Shim::Hygen(h) => h.poll_at(),
            Shim::SdnGcc(s) => s.poll_at(),
            Shim::Sicc(s) => s.poll_at(),
            _ => None,
        }
    }

    pub fn on_timer(&mut self, now: u64) {
        match self {
            Shim::Hygen(h) => h.on_timer(now),
            Shim::SdnGcc(s) => s.on_timer(now),
            Shim::Sicc(s) => s.on_timer(now),
            _ => {}
        }
    }

    /// The next explicit feedback packet (HyGenICC) due now.
    pub fn poll_transmit(&mut self, now: u64) -> Option<tacc_mech::hygenicc::FeedbackPacket> {
        match self {
            Shim::Hygen(h) => h.poll_transmit(now),
            _ => None,
        }
    }

    /// Current allocated rates as (VM address, destination address or 0, bits/s).
    pub fn rates(&self) -> Vec<(u32, u32, u64)> {
        match self {
            Shim::Hygen(h) => h.pair_rates().collect(),
            Shim::SdnGcc(s) => s.rates().collect(),
            _ => Vec::new(),
        }
    }

    fn add_counters(&self, c: &mut BTreeMap<&'static str, f64>) {
        let mut add = |k: &'static str, v: f64| *c.entry(k).or_default() += v;
        match self {
            Shim::Hygen(h) => {
                let k = h.counters();
                add("feedback_packets_sent", k.feedback_sent as f64);
                add("feedback_packets_received", k.feedback_received as f64);
                add("feedback_marks_received", k.feedback_marks_received as f64);
                add("ipr_bits_set", k.ipr_set as f64);
                add("ipr_bits_seen", k.ipr_seen as f64);
                add("ce_cleared", k.ce_cleared as f64);
                add("limiter_drops", k.drops_no_tokens as f64);
                add("admission_drops", k.drops_admission as f64);
            }
            Shim::SdnGcc(s) => {
                let k = s.counters();
                add("notifications_received", k.notifications as f64);
                add("notifications_ignored", k.notifications_ignored as f64);
                add("notified_marks", k.marks);
                add("limiter_drops", k.drops as f64);
                add("ce_cleared", k.ce_cleared as f64);
            }
            Shim::Sicc(s) => {
                let k = s.counters();
                add("incast_on_received", k.incast_on as f64);
                add("incast_off_received", k.incast_off as f64);
                add("rwnd_rewrites", k.rwnd_rewrites as f64);
            }
            Shim::None | Shim::Static(_) => {}
        }
    }
}

pub struct HostShim {
    pub shim: Shim,
    pub timer_at: Option<u64>,
}

/// Mechanism state living in one switch.
#[derive(Default)]
pub struct SwitchMech {
    pub rwndq: Option<Rwndq>,
    /// Bytes per (output port, flow) for SDN-ECN's flow statistics.
    pub flow_bytes: Option<FxHashMap<(u32, FlowKey), u64>>,
    pub timer_at: Option<u64>,
}

pub enum CtrlApp {
    SdnGcc(SdnGccController),
    Sicc(SiccController),
    SdnEcn(SdnEcnController),
}

/// Messages on the control channel.
pub enum Msg {
    /// Switch -> controller: a packet's headers (from a table miss or a copy rule).
    PacketIn {
        switch: u32,
        in_port: u32,
        out_port: u32,
        pkt: Box<Packet>,
    },
    /// Controller -> switch requests.
    PortStatsRequest {
        switch: u32,
        port: u32,
    },
    QueueRequest {
        switch: u32,
        port: u32,
    },
    StatsRequest {
        switch: u32,
    },
    InstallRule {
        switch: u32,
        rule: Rule,
        timeout: Option<u64>,
    },
    /// Switch -> controller replies, with the counters at the time the switch answered.
    PortStats {
        switch: u32,
        port: u32,
        marks: u64,
    },
    QueueLength {
        switch: u32,
        port: u32,
        pkts: u32,
    },
    SwitchStats {
        switch: u32,
        ports: Vec<tacc_mech::sdn_ecn::PortSample>,
        flows: Vec<tacc_mech::sdn_ecn::FlowSample>,
    },
    /// Controller -> host shim.
    Notify {
        host: u32,
        vm: u32,
        from_dst: u32,
        marks: f64,
    },
    Sicc {
        host: u32,
        msg: SiccMessage,
    },
}

impl Msg {
    fn bytes(&self) -> u64 {
        use msg_bytes::*;
        match self {
            Msg::PacketIn { .. } => PACKET_IN,
            Msg::PortStatsRequest { .. } | Msg::QueueRequest { .. } | Msg::StatsRequest { .. } => {
                STATS_REQUEST
            }
            Msg::InstallRule { .. } => FLOW_MOD,
            Msg::PortStats { .. } | Msg::QueueLength { .. } => PORT_STATS_REPLY,
            Msg::SwitchStats { ports, flows, .. } => {
                16 + 112 * ports.len() as u64 + FLOW_STATS_ENTRY * flows.len() as u64
            }
            Msg::Notify { .. } => NOTIFICATION,
            Msg::Sicc { .. } => SICC_MESSAGE,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Msg::PacketIn { .. } => "packet_in",
            Msg::PortStatsRequest { .. } | Msg::QueueRequest { .. } | Msg::StatsRequest { .. } => {
                "stats_request"
            }
            Msg::InstallRule { .. } => "flow_mod",
            Msg::PortStats { .. } | Msg::QueueLength { .. } | Msg::SwitchStats { .. } => {
                "stats_reply"
            }
            Msg::Notify { .. } | Msg::Sicc { .. } => "host_message",
        }
    }
}

#[derive(Default)]
pub struct Control {
    pub latency: u64,
    pub app: Option<CtrlApp>,
    /// Messages in flight; constant latency keeps them in delivery order.
    pub inflight: VecDeque<(u64, Msg)>,
    pub timer_at: Option<u64>,
    pub messages: BTreeMap<&'static str, (u64, u64)>,
    /// (switch, flow) already reported by a table-miss packet-in; the flow is the (src, dst)
    /// pair, or the whole 5-tuple when marks are attributed per path.
    pub seen: FxHashSet<(u32, FlowKey)>,
    /// Marks are attributed per ECMP path (SDN-GCC with keying = "path").
    pub per_path: bool,
}

impl Control {
    /// Puts a message on the channel; returns its delivery time.
    pub fn send(&mut self, now: u64, m: Msg) -> u64 {
        let e = self.messages.entry(m.kind()).or_default();
        e.0 += 1;
        e.1 += m.bytes();
        let at = now + self.latency;
        self.inflight.push_back((at, m));
        at
    }
}

fn parse_policy(l: &Loaded, v: &Option<String>) -> Result<ShortagePolicy, ScenarioError> {
    match v.as_deref() {
        None | Some("drop") => Ok(ShortagePolicy::Drop),
        Some("queue") => Ok(ShortagePolicy::Queue),
        Some(x) => Err(l.error(
            "mechanism.on_shortage",
            format!("expected \"drop\" or \"queue\", got {x:?}"),
        )),
    }
}

fn fraction(l: &Loaded, key: &str, v: Option<f64>, default: f64) -> Result<f64, ScenarioError> {
    let x = v.unwrap_or(default);
    if !(x.is_finite() && (0.0..=1.0).contains(&x)) {
        return Err(l.error(
            &format!("mechanism.{key}"),
            format!("expected a fraction between 0 and 1, got {x}"),
        ));
    }
    Ok(x)
}

fn positive(
    l: &Loaded,
    key: &str,
    v: Option<crate::units::Duration>,
    default: u64,
) -> Result<u64, ScenarioError> {
    let x = v.map(|d| d.0).unwrap_or(default);
    if x == 0 {
        return Err(l.error(&format!("mechanism.{key}"), "must be greater than zero"));
    }
    Ok(x)
}

/// Builds the mechanism's shims, switch state and controller into the model.
pub fn install(
    m: &mut Model,
    l: &Loaded,
    vm_index: &dyn Fn(&str, &str) -> Result<u32, ScenarioError>,
) -> Result<(), ScenarioError> {
    let c: &MechanismCfg = &l.scenario.mechanism;
    let allowed = MechanismCfg::allowed(c.kind);
    if let Some(k) = c
        .present()
        .into_iter()
        .find(|k| !allowed.contains(&k.as_str()))
    {
        return Err(l.error(
            &format!("mechanism.{k}"),
            format!(
                "does not apply to kind {:?} (its keys: {})",
                serde_json::to_value(c.kind)
                    .unwrap_or_default()
                    .as_str()
                    .unwrap_or(""),
                if allowed.is_empty() {
                    "none".to_string()
                } else {
                    allowed.join(", ")
                }
            ),
        ));
    }
    let bucket = BucketConfig {
        on_shortage: parse_policy(l, &c.on_shortage)?,
        burst_ns: c
            .burst
            .map(|d| d.0)
            .unwrap_or(BucketConfig::default().burst_ns),
        ..BucketConfig::default()
    };
    let alloc = AllocatorConfig {
        idle_timeout: positive(
            l,
            "idle_timeout",
            c.idle_timeout,
            AllocatorConfig::default().idle_timeout,
        )?,
        bucket,
    };
    let mut weights: BTreeMap<u32, u32> = BTreeMap::new();
    for (name, &w) in c.weights.iter().flatten() {
        let vm = vm_index("mechanism.weights", name)?;
        if w == 0 {
            return Err(l.error(
                "mechanism.weights",
                format!("weight of {name:?} must be greater than zero"),
            ));
        }
        weights.insert(vm, w);
    }
    m.control.latency = c.latency.map(|d| d.0).unwrap_or(0);
    match c.kind {
        MechanismKind::None => {}
        MechanismKind::StaticRate => {
            let rate = c.rate.ok_or_else(|| {
                l.error(
                    "mechanism.rate",
                    "static-rate needs a rate such as \"500Mbps\"",
                )
            })?;
            if rate.0 == 0 {
                return Err(l.error("mechanism.rate", "must be greater than zero"));
            }
            let targets: Vec<u32> = match &c.vms {
                None => (0..m.vms.len() as u32).collect(),
                Some(names) => names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| vm_index(&format!("mechanism.vms[{i}]"), n))
                    .collect::<Result<_, _>>()?,
            };
            for h in 0..m.hosts.len() {
                let mut lim = StaticRateLimiter::new(bucket);
                for &v in targets
                    .iter()
                    .filter(|&&v| m.vms[v as usize].host == h as u32)
                {
                    lim.set_rate(0, m.vms[v as usize].ip, rate.0);
                }
                m.shims[h].shim = Shim::Static(lim);
            }
        }
        MechanismKind::Hygenicc => {
            let d = HygenConfig::default();
            let cfg = HygenConfig {
                update_interval: positive(
                    l,
                    "update_interval",
                    c.update_interval,
                    d.update_interval,
                )?,
                congestion_timeout: positive(
                    l,
                    "congestion_timeout",
                    c.congestion_timeout,
                    d.congestion_timeout,
                )?,
                feedback_timeout: positive(
                    l,
                    "feedback_timeout",
                    c.feedback_timeout,
                    d.feedback_timeout,
                )?,
                fast_increase: fraction(l, "fast_increase", c.fast_increase, d.fast_increase)?,
                slow_increase: fraction(l, "slow_increase", c.slow_increase, d.slow_increase)?,
                decrease_per_mark: fraction(
                    l,
                    "decrease_per_mark",
                    c.decrease_per_mark,
                    d.decrease_per_mark,
                )?,
                min_rate_fraction: fraction(
                    l,
                    "min_rate_fraction",
                    c.min_rate_fraction,
                    d.min_rate_fraction,
                )?,
                alloc,
                admission_control: c.admission_control.unwrap_or(false),
            };
            install_rate_shims(
                m,
                &weights,
                |rate| HygenShim::new(cfg, rate),
                |s, ip, w| s.register_vm(0, ip, w),
                |s| Shim::Hygen(Box::new(s)),
            );
        }
        MechanismKind::SdnGcc => {
            let d = SdnGccShimConfig::default();
            let keying = match c.keying.as_deref() {
                None | Some("vm") => RateKeying::PerVm,
                Some("destination") => RateKeying::PerDestination,
                Some("path") => RateKeying::PerPath,
                Some(x) => {
                    return Err(l.error(
                        "mechanism.keying",
                        format!("expected \"vm\", \"destination\" or \"path\", got {x:?}"),
                    ))
                }
            };
            let monitor_interval = positive(
                l,
                "interval",
                c.interval,
                SdnGccControllerConfig::default().monitor_interval,
            )?;
            let cfg = SdnGccShimConfig {
                update_interval: positive(
                    l,
                    "update_interval",
                    c.update_interval,
                    d.update_interval,
                )?,
                // Two controller intervals, whatever Ti is: steady congestion (a notification
                // every Ti) then never lets a rate climb between two notifications.
                congestion_grace: positive(
                    l,
                    "congestion_grace",
                    c.congestion_grace,
                    2 * monitor_interval,
                )?,
                scale: fraction(l, "scale", c.scale, d.scale)?,
                response: match c.cut_per_mark {
                    Some(r) => MarkResponse::PerMark { cut_bps: r.0 },
                    None => d.response,
                },
                min_rate_fraction: fraction(
                    l,
                    "min_rate_fraction",
                    c.min_rate_fraction,
                    d.min_rate_fraction,
                )?,
                alloc,
                keying,
                clear_ce: c.clear_ce.unwrap_or(false),
            };
            install_rate_shims(
                m,
                &weights,
                |rate| SdnGccShim::new(cfg, rate),
                |s, ip, w| s.register_vm(0, ip, w),
                |s| Shim::SdnGcc(Box::new(s)),
            );
            let split = match c.split.as_deref() {
                _ if keying == RateKeying::PerPath && c.split.is_some() => return Err(l.error("mechanism.split", "per-path keying splits marks over the flows crossing the port; leave split out")),
                _ if keying == RateKeying::PerPath => MarkSplit::PerPath,
                None | Some("all-sources") => MarkSplit::AllSourcesBehindPort,
                Some("per-destination") => MarkSplit::SourcesOfEachDestination,
                Some(x) => return Err(l.error("mechanism.split", format!("expected \"all-sources\" or \"per-destination\", got {x:?}"))),
            };
            let mut ctrl = SdnGccController::new(SdnGccControllerConfig {
                monitor_interval,
                split,
            });
            // The controller knows the topology: which destinations each switch port reaches.
            for s in 0..m.graph.switches.len() as u32 {
                for (vm, v) in m.vms.iter().enumerate() {
                    for &p in m.route_ports(s, vm as u32) {
                        ctrl.register_route(s, p, v.ip);
                    }
                }
            }
            m.control.app = Some(CtrlApp::SdnGcc(ctrl));
            m.control.per_path = keying == RateKeying::PerPath;
        }
        MechanismKind::Sicc => {
            let d = SiccControllerConfig::default();
            let cfg = SiccControllerConfig {
                monitor_interval: positive(l, "interval", c.interval, d.monitor_interval)?,
                off_fraction: fraction(l, "off_fraction", c.off_fraction, d.off_fraction)?,
                on_fraction: c.on_fraction.unwrap_or(d.on_fraction),
                incast_duration: positive(
                    l,
                    "incast_duration",
                    c.incast_duration,
                    d.incast_duration,
                )?,
                initial_window_pkts: c.initial_window.unwrap_or(d.initial_window_pkts),
                buffer_pkts: d.buffer_pkts,
                evaluate_on_syn: c.evaluate_on_syn.unwrap_or(false),
            };
            if !(cfg.on_fraction > 0.0 && cfg.on_fraction.is_finite()) {
                return Err(l.error(
                    "mechanism.on_fraction",
                    format!("expected a positive number, got {}", cfg.on_fraction),
                ));
            }
            if !(cfg.initial_window_pkts >= 0.0 && cfg.initial_window_pkts.is_finite()) {
                return Err(l.error(
                    "mechanism.initial_window",
                    format!(
                        "expected a non-negative number of packets, got {}",
                        cfg.initial_window_pkts
                    ),
                ));
            }
            let mut ctrl = SiccController::new(cfg);
            for (p, port) in m.ports.iter().enumerate() {
                if let NodeRef::Switch(s) = port.from {
                    let pkts = match port.qdisc.limit {
                        Size::Packets(n) => n,
                        Size::Bytes(b) => b / 1500,
                    };
                    ctrl.set_port_buffer(s, p as u32, pkts.min(u32::MAX as u64) as u32);
                }
            }
            m.control.app = Some(CtrlApp::Sicc(ctrl));
            for h in 0..m.hosts.len() {
                m.shims[h].shim = Shim::Sicc(SiccHypervisor::new(SiccHypervisorConfig {
                    flag_lifetime: cfg.incast_duration,
                }));
            }
            // Rules at every ToR (a switch with hosts attached) copy SYN and FIN to the controller.
            let tors: FxHashSet<u32> = m
                .ports
                .iter()
                .filter_map(|p| match (p.from, p.to) {
                    (NodeRef::Switch(s), NodeRef::Host(_)) => Some(s),
                    _ => None,
                })
                .collect();
            let mut tors: Vec<u32> = tors.into_iter().collect();
            tors.sort_unstable();
            use tacc_mech::headers::tcp_flags as F;
            for s in tors {
                for (mask, value) in [(F::SYN | F::ACK, F::SYN), (F::FIN, F::FIN)] {
                    let rule = Rule {
                        m: Match {
                            protocol: Some(6),
                            flags_mask: mask,
                            flags_value: value,
                            ..Match::default()
                        },
                        priority: 1000,
                        actions: Actions {
                            forward: Forward::Normal,
                            set_ce: false,
                            copy_to_controller: true,
                        },
                        expires_at: None,
                        packets: 0,
                        bytes: 0,
                    };
                    m.pending_rules.push((s, 0, rule));
                }
            }
        }
        MechanismKind::SdnEcn => {
            let d = SdnEcnConfig::default();
            let cfg = SdnEcnConfig {
                probe_interval: positive(l, "interval", c.interval, d.probe_interval)?,
                congestion_threshold: fraction(
                    l,
                    "threshold",
                    c.threshold,
                    d.congestion_threshold,
                )?,
                max_marked_fraction: fraction(
                    l,
                    "max_fraction",
                    c.max_fraction,
                    d.max_marked_fraction,
                )?,
                rule_priority: d.rule_priority,
                rule_hard_timeout: positive(
                    l,
                    "rule_timeout",
                    c.rule_timeout,
                    d.rule_hard_timeout,
                )?,
            };
            let mut ctrl = SdnEcnController::new(cfg);
            for (p, port) in m.ports.iter().enumerate() {
                if let NodeRef::Switch(s) = port.from {
                    ctrl.add_link(0, s, p as u32, port.rate_bps);
                }
            }
            m.control.app = Some(CtrlApp::SdnEcn(ctrl));
            for sm in &mut m.switch_mech {
                sm.flow_bytes = Some(FxHashMap::default());
            }
        }
        MechanismKind::Rwndq => {
            let d = RwndqConfig::default();
            // The receivers' window scale, as every endpoint derives it from the receive buffer.
            let rcv_buf = l
                .scenario
                .tcp
                .rcv_buf
                .map(|b| b.0)
                .unwrap_or(crate::tcp::TcpConfig::default().rcv_buf);
            let shift = crate::tcp::window_scale_for(rcv_buf);
            let cfg = RwndqConfig {
                tick: positive(l, "tick", c.tick, d.tick)?,
                target_fraction: fraction(
                    l,
                    "target_fraction",
                    c.target_fraction,
                    d.target_fraction,
                )?,
                base_rtt: positive(l, "base_rtt", c.base_rtt, d.base_rtt)?,
                window_shift: shift,
                max_window_bytes: d
                    .max_window_bytes
                    .max((rcv_buf).min(u32::MAX as u64) as u32),
                ..d
            };
            for s in 0..m.switch_mech.len() {
                let mut r = Rwndq::new(cfg);
                for (p, port) in m.ports.iter().enumerate() {
                    if port.from == NodeRef::Switch(s as u32) {
                        let limit = match port.qdisc.limit {
                            Size::Packets(n) => n * 1500,
                            Size::Bytes(b) => b,
                        };
                        r.add_port(0, p as u32, port.rate_bps, limit);
                    }
                }
                m.switch_mech[s].rwndq = Some(r);
            }
        }
    }
    Ok(())
}

/// One rate-limiting shim per host, made by `new` from the host's NIC rate, with every VM of
/// the host registered at its weight (1 unless the scenario gives one).
fn install_rate_shims<S>(
    m: &mut Model,
    weights: &BTreeMap<u32, u32>,
    new: impl Fn(u64) -> S,
    register: impl Fn(&mut S, u32, u32),
    wrap: impl Fn(S) -> Shim,
) {
    for h in 0..m.hosts.len() {
        let mut shim = new(m.ports[m.hosts[h].nic_port as usize].rate_bps);
        for (v, vm) in m
            .vms
            .iter()
            .enumerate()
            .filter(|(_, vm)| vm.host == h as u32)
        {
            register(
                &mut shim,
                vm.ip,
                weights.get(&(v as u32)).copied().unwrap_or(1),
            );
        }
        m.shims[h].shim = wrap(shim);
    }
}

/// A flow-table rule from SDN-ECN's decision.
pub fn mark_rule(r: &InstallMarkRule) -> (Rule, u64) {
    let k = r.key;
    let m = Match {
        src: Some(k.src),
        dst: Some(k.dst),
        protocol: Some(k.protocol),
        sport: Some(k.src_port),
        dport: Some(k.dst_port),
        flags_mask: 0,
        flags_value: 0,
    };
    (
        Rule {
            m,
            priority: r.priority,
            actions: Actions {
                forward: Forward::Port(r.out_port),
                set_ce: true,
                copy_to_controller: false,
            },
            expires_at: None,
            packets: 0,
            bytes: 0,
        },
        r.hard_timeout,
    )
}

/// Counters of every shim and switch mechanism, summed, for summary.json.
pub fn counters(m: &Model) -> BTreeMap<&'static str, f64> {
    let mut c = BTreeMap::new();
    for h in &m.shims {
        h.shim.add_counters(&mut c);
    }
    for s in &m.switch_mech {
        if let Some(r) = &s.rwndq {
            *c.entry("rwnd_rewrites").or_default() += r.counters().rwnd_rewrites as f64;
            *c.entry("rwndq_overflow_resets").or_default() += r.counters().overflow_resets as f64;
        }
    }
    c
}
