//! `kind = "sdn-gcc"`: the configuration of the shims and the controller app, which is the
//! scenario's table: each key with its doc, unit, default and range, and the checks of its
//! values.

use crate::limiters::keys::{check_limiter_keys, limiter_table, LIMITER_KEYS};
use crate::vocab::keys::{Checks, KeyDoc, Table, CONTROL_LATENCY};
use crate::vocab::units::{as_duration, Duration, Nanos, Rate};

/// Which rate a packet or a notification belongs to, below the VM's share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub enum RateKeying {
    /// One rate per VM (Algorithm 3).
    #[serde(rename = "vm")]
    PerVm,
    /// One rate per (VM, destination): notifications only slow the destination they name.
    #[serde(rename = "destination")]
    PerDestination,
    /// One rate per (VM, flow) where the flow is named by
    /// [`FlowKey::id`](crate::vocab::headers::FlowKey::id): with ECMP each flow follows one
    /// path, so a controller that attributes marks per path (see
    /// [`SdnGccController::register_path`](super::SdnGccController::register_path)) slows
    /// only the flows crossing the congested port (000 §VII-C). Notifications then carry the
    /// flow id in place of the destination.
    #[serde(rename = "path")]
    PerPath,
}

/// How a notification of `marks` cuts the rate R.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MarkResponse {
    /// Algorithm 3: R -= mark_rate x scale(C), where mark_rate is the marks per `rate_unit`
    /// ns since the previous notification, i.e. marks x rate_unit / (now - cong_time). The
    /// interval is clamped to [rate_unit, Tc] so that two notifications in the same instant
    /// (one per destination) do not divide by zero and the first one after a quiet spell is
    /// measured over at most the grace period. With rate_unit = 1 ms, scale(C) = C/100 and
    /// the paper's Ti = 5 ms, a notification cuts 2 Mb/s per mark at 1 Gb/s.
    ///
    /// `multiplicative` (off by default, `decrease = "multiplicative"`): the cut is that
    /// amount times R / C, i.e. R *= 1 - mark_rate x scale(C) / C (the same cut as Algorithm
    /// 3's at R = C). Algorithm 4 gives every source behind a port the same marks whatever it
    /// sends, so Algorithm 3's additive cut keeps
    /// whatever lead a source had (a late joiner starts at its share E(i) while the others
    /// were cut) and only the floor R_min ever evens the rates out: additive increase with
    /// additive decrease does not converge to fairness. A cut in proportion to R is what a
    /// source's own marks would give it (its marks are in proportion to what it sends, as
    /// HyGenICC's receivers count them), and with the additive increase it converges to
    /// equal rates (Chiu and Jain's AIMD). Not the default: a tenant whose TCP also reacts to
    /// the marks (ECN, `clear_ce` off) then falls behind UDP tenants whose rates the
    /// controller alone holds (a tagged NewReno flow got 59 Mb/s next to 3 UDP flows, ideal
    /// 243, where the additive cut keeps the late joiner's lead and gives it 200 or more).
    MarkRate {
        rate_unit: Nanos,
        multiplicative: bool,
    },
    /// The authors' prototype: R -= marks x `cut_bps` (5 Mb/s per mark).
    PerMark { cut_bps: u64 },
}

/// How the controller divides a port's new marks among sources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub enum MarkSplit {
    /// Algorithm 4: m = alpha / beta with beta the number of (source, destination) pairs of all
    /// destinations reached through the port; every pair gets m, so the port's alpha marks are
    /// shared out exactly.
    #[serde(rename = "all-sources")]
    AllSourcesBehindPort,
    /// The authors' prototype: a pair gets alpha / (number of sources of its destination).
    #[serde(rename = "per-destination")]
    SourcesOfEachDestination,
    /// Per path: the port's alpha marks are split evenly over the flows registered as crossing
    /// it ([`SdnGccController::register_path`](super::SdnGccController::register_path)); each
    /// notification names the flow id. Not a value of `split`: it follows from
    /// `keying = "path"`.
    #[serde(skip)]
    PerPath,
}

/// The mark-rate rule's cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decrease {
    /// Algorithm 3 as printed.
    #[default]
    Additive,
    /// In proportion to the rate (see [`MarkResponse::MarkRate`]).
    Multiplicative,
}

limiter_table! {
    /// SDN-GCC's parameters: the host shims' and the controller app's.
    pub struct SdnGccConfig {
        /// Period of the shim's state-update timer.
        #[serde(with = "as_duration")]
        pub update_interval: Nanos = UPDATE_INTERVAL.default_time(),
        /// R_min as a fraction of the VM's share.
        pub min_rate_fraction: f64 = MIN_RATE_FRACTION.default_number(),
        /// Ti: the controller's polling period.
        #[serde(rename = "interval", with = "as_duration")]
        pub monitor_interval: Nanos = INTERVAL.default_time(),
        /// One-way latency of the out-of-band control channel.
        #[serde(with = "as_duration")]
        pub latency: Nanos = CONTROL_LATENCY.default_time(),
        /// How a port's marks are spread (unset: all the sources; per path with per-path
        /// keying).
        pub split: Option<MarkSplit> = None,
        /// What a rate is attached to.
        pub keying: RateKeying = RateKeying::PerVm,
        /// Tc: congestion grace (unset: two controller intervals).
        pub congestion_grace: Option<Duration> = None,
        /// scale(C) as a fraction of the NIC rate C.
        pub scale: f64 = SCALE.default_number(),
        /// Algorithm 3's mark-rate unit (unset: 1 ms; not with `cut_per_mark`).
        pub rate_unit: Option<Duration> = None,
        /// The prototype's fixed cut per mark instead of the mark-rate rule.
        pub cut_per_mark: Option<Rate> = None,
        /// The mark-rate rule's cut.
        pub decrease: Decrease = Decrease::Additive,
        /// Clear CE on packets delivered to local VMs.
        pub clear_ce: bool = CLEAR_CE.default_flag(),
    }
}

impl SdnGccConfig {
    /// The authors' prototype: polls every 1 ms, splits marks per destination and cuts a
    /// fixed 5 Mb/s per mark; the rest as the paper.
    pub fn prototype() -> SdnGccConfig {
        SdnGccConfig {
            monitor_interval: 1_000_000,
            split: Some(MarkSplit::SourcesOfEachDestination),
            cut_per_mark: Some(Rate(5_000_000)),
            ..Default::default()
        }
    }

    /// Tc: two controller intervals where not given, whatever Ti is: steady congestion (a
    /// notification every Ti) then never lets a rate climb between two notifications.
    pub fn congestion_grace(&self) -> Nanos {
        self.congestion_grace
            .map_or(2 * self.monitor_interval, |d| d.0)
    }

    /// How notifications cut the rate.
    pub fn response(&self) -> MarkResponse {
        match self.cut_per_mark {
            Some(r) => MarkResponse::PerMark { cut_bps: r.0 },
            None => MarkResponse::MarkRate {
                rate_unit: self
                    .rate_unit
                    .map_or_else(|| RATE_UNIT.default_time(), |d| d.0),
                multiplicative: self.decrease == Decrease::Multiplicative,
            },
        }
    }

    /// How the controller divides a port's marks.
    pub fn mark_split(&self) -> MarkSplit {
        match (self.keying, self.split) {
            (RateKeying::PerPath, _) => MarkSplit::PerPath,
            (_, split) => split.unwrap_or(MarkSplit::AllSourcesBehindPort),
        }
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

impl Table for SdnGccConfig {
    fn keys() -> Vec<KeyDoc> {
        [LIMITER_KEYS, KEYS].concat()
    }

    fn check_values(&self, ck: &mut Checks, vm_address: &dyn Fn(&str) -> Option<u32>) {
        ck.time(&UPDATE_INTERVAL, self.update_interval);
        ck.time(&INTERVAL, self.monitor_interval);
        ck.time(&CONGESTION_GRACE, self.congestion_grace());
        ck.fraction(&SCALE, self.scale);
        ck.fraction(&MIN_RATE_FRACTION, self.min_rate_fraction);
        if let Some(unit) = self.rate_unit {
            ck.time(&RATE_UNIT, unit.0);
        }
        if self.cut_per_mark.is_some() {
            if self.rate_unit.is_some() {
                ck.problem(
                    "rate_unit",
                    "the mark-rate rule's unit; cut_per_mark replaces that rule, give one of them",
                );
            }
            // The prototype's cut per mark is additive.
            if self.decrease == Decrease::Multiplicative {
                ck.problem(
                    "decrease",
                    "cut_per_mark is a fixed cut per mark; give \"additive\" or leave decrease out",
                );
            }
        }
        if self.keying == RateKeying::PerPath && self.split.is_some() {
            ck.problem(
                "split",
                "per-path keying splits marks over the flows crossing the port; leave split out",
            );
        }
        check_limiter_keys(ck, &self.weights, self.idle_timeout, vm_address);
    }
}
