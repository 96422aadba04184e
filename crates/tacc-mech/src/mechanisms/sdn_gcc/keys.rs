//! `kind = "sdn-gcc"`: one SDN-GCC shim per host, the controller app, and at each ToR the
//! table miss that tells the controller about a new (source, destination) pair.

use std::collections::BTreeMap;

use rustc_hash::FxHashSet;

use crate::limiters::keys::{limiter_config, rate_shims, LIMITER_KEYS};
use crate::mechanisms::sdn_gcc::{
    MarkResponse, MarkSplit, RateKeying, SdnGccController, SdnGccControllerConfig, SdnGccShim,
    SdnGccShimConfig,
};
use crate::vocab::control::{ControlMessage, HostMessage, PacketIn, StatsReply, StatsRequest};
use crate::vocab::headers::{FlowKey, PacketHeaders};
use crate::vocab::keys::{Checks, KeyDoc, Mechanism, CONTROL_LATENCY};
use crate::vocab::roles::SwitchHookCore;
use crate::vocab::roles::{ControllerApp, Fabric, Instance, PathOracle, SwitchHook};
use crate::vocab::units::Nanos;
use crate::vocab::units::{Duration, Rate};

limiter_config! {
    pub struct SdnGccTable {
        /// Timer period of the shim.
        pub update_interval: Option<Duration>,
        pub min_rate_fraction: Option<f64>,
        /// Controller polling interval (Ti).
        pub interval: Option<Duration>,
        /// One-way latency of the out-of-band control channel.
        pub latency: Option<Duration>,
        /// "all-sources" (Algorithm 4) or "per-destination" (the authors' prototype).
        pub split: Option<String>,
        /// "vm" (one rate per VM, Algorithm 3), "destination", or "path" (per ECMP path).
        pub keying: Option<String>,
        /// Tc: congestion grace period (default: two controller intervals, 2 x Ti).
        pub congestion_grace: Option<Duration>,
        /// scale(C) as a fraction of the NIC rate.
        pub scale: Option<f64>,
        /// Algorithm 3's mark-rate unit: marks are counted per this much time (default 1 ms).
        pub rate_unit: Option<Duration>,
        /// Prototype response: this cut per mark instead of the mark-rate rule.
        pub cut_per_mark: Option<Rate>,
        /// The mark-rate rule's cut: "additive" (Algorithm 3 as printed, the default) or
        /// "multiplicative" (in proportion to the rate: rates converge to equal shares).
        pub decrease: Option<String>,
        /// Clear CE before delivering packets to VMs (for tenants that do not use ECN).
        pub clear_ce: Option<bool>,
    }
}

const UPDATE_INTERVAL: KeyDoc = KeyDoc {
    key: "update_interval",
    unit: "time",
    default: "500us",
    range: ">= 1us",
    doc: "Period of the shim's state-update timer. The paper gives none; HyGenICC's Tu, 500 \
         us.",
};

const MIN_RATE_FRACTION: KeyDoc = KeyDoc {
    key: "min_rate_fraction",
    unit: "fraction",
    default: "0.01",
    range: "0..1",
    doc: "R_min as a fraction of the VM's share. The paper: 1%.",
};

const INTERVAL: KeyDoc = KeyDoc {
    key: "interval",
    unit: "time",
    default: "5ms",
    range: ">= 10us",
    doc: "Ti: the controller's polling period of the switch ports' mark counters. The paper: \
         5 ms (1, 10, 50 ms in Fig. 6); the prototype: 1 ms.",
};

const SPLIT: KeyDoc = KeyDoc {
    key: "split",
    unit: "string",
    default: "\"all-sources\"",
    range: "\"all-sources\" or \"per-destination\"",
    doc: "How a port's marks are spread: over all the sources sending through it (Algorithm \
         4) or over the sources of each destination (the authors' prototype). Not with \
         keying = \"path\".",
};

const KEYING: KeyDoc = KeyDoc {
    key: "keying",
    unit: "string",
    default: "\"vm\"",
    range: "\"vm\", \"destination\" or \"path\"",
    doc: "What a rate is attached to: one rate per VM (Algorithm 3), per (VM, destination), \
         or per (VM, flow) so that only the flows crossing a congested port slow down.",
};

const CONGESTION_GRACE: KeyDoc = KeyDoc {
    key: "congestion_grace",
    unit: "time",
    default: "2 x interval",
    range: "> 0",
    doc: "Tc: a rate without notification for this long increases again. Two controller \
         intervals (10 ms at the paper's Ti), so steady congestion never lets it climb in \
         between.",
};

const SCALE: KeyDoc = KeyDoc {
    key: "scale",
    unit: "fraction",
    default: "0.01",
    range: "0..1",
    doc: "scale(C) as a fraction of the NIC rate C: the increase per timer tick and the unit \
         of the decrease. C/100, HyGenICC's fast increase.",
};

const RATE_UNIT: KeyDoc = KeyDoc {
    key: "rate_unit",
    unit: "time",
    default: "1ms",
    range: "> 0",
    doc: "Algorithm 3's mark-rate unit: marks are counted per this much time. Not with \
         cut_per_mark.",
};

const CUT_PER_MARK: KeyDoc = KeyDoc {
    key: "cut_per_mark",
    unit: "rate",
    default: "none",
    range: "",
    doc: "The prototype's response: this cut per mark (5 Mb/s) instead of the mark-rate \
         rule; unset, the mark-rate rule.",
};

const DECREASE: KeyDoc = KeyDoc {
    key: "decrease",
    unit: "string",
    default: "\"additive\"",
    range: "\"additive\" or \"multiplicative\"",
    doc: "The mark-rate rule's cut: additive (Algorithm 3 as printed) or multiplicative, in \
         proportion to the rate, so that rates converge to equal shares.",
};

const CLEAR_CE: KeyDoc = KeyDoc {
    key: "clear_ce",
    unit: "bool",
    default: "false",
    range: "",
    doc: "Clear CE before delivering packets to VMs, for tenants that do not use ECN end to \
         end.",
};

/// The kind's own keys.
const KEYS: &[KeyDoc] = &[
    UPDATE_INTERVAL,
    MIN_RATE_FRACTION,
    INTERVAL,
    CONTROL_LATENCY,
    SPLIT,
    KEYING,
    CONGESTION_GRACE,
    SCALE,
    RATE_UNIT,
    CUT_PER_MARK,
    DECREASE,
    CLEAR_CE,
];

impl Mechanism for SdnGccTable {
    /// The shims' and the controller's parameters, and the VMs' weights by address.
    type Params = (SdnGccShimConfig, SdnGccControllerConfig, BTreeMap<u32, u32>);

    fn keys() -> Vec<KeyDoc> {
        [LIMITER_KEYS, KEYS].concat()
    }

    fn resolve(&self, ck: &mut Checks, vm_address: &dyn Fn(&str) -> Option<u32>) -> Self::Params {
        let d = SdnGccShimConfig::default();
        let keying = match ck.choice(&KEYING, &self.keying) {
            0 => RateKeying::PerVm,
            1 => RateKeying::PerDestination,
            _ => RateKeying::PerPath,
        };
        let monitor_interval = ck.time(&INTERVAL, self.interval);
        let shim = SdnGccShimConfig {
            update_interval: ck.time(&UPDATE_INTERVAL, self.update_interval),
            // Two controller intervals, whatever Ti is: steady congestion (a notification
            // every Ti) then never lets a rate climb between two notifications.
            congestion_grace: ck.positive(
                CONGESTION_GRACE.key,
                self.congestion_grace,
                2 * monitor_interval,
            ),
            scale: ck.fraction(&SCALE, self.scale),
            response: match (self.cut_per_mark, self.rate_unit) {
                (Some(r), None) => {
                    // The prototype's cut per mark is additive.
                    if ck.choice(&DECREASE, &self.decrease) == 1 {
                        ck.problem("decrease", "cut_per_mark is a fixed cut per mark; give \"additive\" or leave decrease out");
                    }
                    MarkResponse::PerMark { cut_bps: r.0 }
                }
                (Some(_), Some(_)) => {
                    ck.problem("rate_unit", "the mark-rate rule's unit; cut_per_mark replaces that rule, give one of them");
                    d.response
                }
                (None, unit) => MarkResponse::MarkRate {
                    rate_unit: ck.time(&RATE_UNIT, unit),
                    multiplicative: ck.choice(&DECREASE, &self.decrease) == 1,
                },
            },
            min_rate_fraction: ck.fraction(&MIN_RATE_FRACTION, self.min_rate_fraction),
            alloc: self.limiter_keys().alloc(ck),
            keying,
            clear_ce: ck.flag(&CLEAR_CE, self.clear_ce),
        };
        let split = if keying == RateKeying::PerPath {
            if self.split.is_some() {
                ck.problem("split", "per-path keying splits marks over the flows crossing the port; leave split out");
            }
            MarkSplit::PerPath
        } else {
            match ck.choice(&SPLIT, &self.split) {
                0 => MarkSplit::AllSourcesBehindPort,
                _ => MarkSplit::SourcesOfEachDestination,
            }
        };
        let ctrl = SdnGccControllerConfig {
            monitor_interval,
            split,
        };
        (shim, ctrl, self.limiter_keys().weights(ck, vm_address))
    }

    fn instantiate<P: PacketHeaders + ?Sized + 'static>(
        &self,
        (shim, ctrl, weights): Self::Params,
        fabric: &dyn Fabric,
    ) -> Instance<P> {
        let per_path = shim.keying == RateKeying::PerPath;
        let mut inst = Instance::none(fabric);
        inst.shims = rate_shims(
            fabric,
            &weights,
            |rate| SdnGccShim::new(shim, rate),
            |s, ip, w| s.register_vm(0, ip, w),
        );
        // The controller knows the topology: which destinations each switch port reaches.
        let mut app = SdnGccController::new(ctrl);
        let vms = fabric.vms();
        for s in 0..fabric.switches() {
            for (vm, &(_, ip)) in vms.iter().enumerate() {
                for &p in fabric.route_ports(s, vm as u32) {
                    app.register_route(s, p, ip);
                }
            }
        }
        inst.controller = Some(Box::new(SdnGccApp { app, per_path }));
        for switch in fabric.tors() {
            inst.switch_hooks[switch as usize] = Some(Box::new(FirstPacket {
                seen: FxHashSet::default(),
                per_path,
            }));
        }
        inst.control_latency = self
            .latency
            .map_or_else(|| CONTROL_LATENCY.default_time(), |d| d.0);
        inst
    }
}

/// Reactive forwarding at a ToR: the first packet of a new (source, destination) pair from a
/// host (of a new flow, when marks are attributed per path) misses the table and goes to the
/// controller.
struct FirstPacket {
    seen: FxHashSet<FlowKey>,
    per_path: bool,
}

impl SwitchHookCore for FirstPacket {}

impl<P: PacketHeaders + ?Sized> SwitchHook<P> for FirstPacket {
    fn on_arrival(&mut self, _now: Nanos, _in_port: u32, from_host: bool, pkt: &mut P) -> bool {
        if !from_host {
            return false;
        }
        let key = if self.per_path {
            FlowKey::of(pkt)
        } else {
            FlowKey {
                src: pkt.src(),
                dst: pkt.dst(),
                src_port: 0,
                dst_port: 0,
                protocol: 0,
            }
        };
        self.seen.insert(key)
    }
}

struct SdnGccApp {
    app: SdnGccController,
    per_path: bool,
}

impl ControllerApp for SdnGccApp {
    fn on_packet_in(
        &mut self,
        now: Nanos,
        pi: &PacketIn,
        paths: &dyn PathOracle,
        _out: &mut Vec<ControlMessage>,
    ) {
        let h = &pi.headers;
        self.app
            .on_packet_in(now, pi.switch, pi.in_port, h.src, h.dst);
        if self.per_path {
            let hops = paths.path(pi.switch, h);
            if !hops.is_empty() {
                self.app.register_path(h.src, h.flow_key().id(), &hops);
            }
        }
    }

    fn on_stats_reply(&mut self, now: Nanos, reply: &StatsReply, out: &mut Vec<ControlMessage>) {
        if let StatsReply::PortMarks {
            switch,
            port,
            marks,
        } = *reply
        {
            out.extend(
                self.app
                    .on_port_stats(now, switch, port, marks)
                    .into_iter()
                    .map(|n| ControlMessage::ToHost(HostMessage::Congestion(n))),
            );
        }
    }

    fn on_timer(&mut self, now: Nanos, out: &mut Vec<ControlMessage>) {
        out.extend(self.app.on_timer(now).into_iter().map(|r| {
            ControlMessage::StatsRequest(StatsRequest::PortMarks {
                switch: r.switch,
                port: r.port,
            })
        }));
    }

    fn poll_at(&self) -> Option<Nanos> {
        self.app.poll_at()
    }
}
