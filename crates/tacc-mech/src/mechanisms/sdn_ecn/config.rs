//! `kind = "sdn-ecn"`: the controller app's configuration, which is the scenario's table: each
//! key with its doc, unit, default and range, and the checks of its values.

use crate::vocab::keys::{table, Checks, KeyDoc, Table, CONTROL_LATENCY};
use crate::vocab::units::{as_duration, Nanos};

table! {
    /// Parameters of the SDN-ECN controller application.
    #[derive(Copy)]
    pub struct SdnEcnConfig {
        /// Time between probes.
        #[serde(rename = "interval", with = "as_duration")]
        pub probe_interval: Nanos = INTERVAL.default_time(),
        /// One-way latency of the out-of-band control channel.
        #[serde(with = "as_duration")]
        pub latency: Nanos = CONTROL_LATENCY.default_time(),
        /// Utilization above which a link is congested, as a fraction.
        #[serde(rename = "threshold")]
        pub congestion_threshold: f64 = THRESHOLD.default_number(),
        /// The fraction T of a congested link's flows selected at 100% utilization.
        #[serde(rename = "max_fraction")]
        pub max_marked_fraction: f64 = MAX_FRACTION.default_number(),
        /// Priority of the marking rules: above the forwarding rules (assumed lower).
        #[serde(skip)]
        pub rule_priority: u16 = 100,
        /// How long a marking rule lives.
        #[serde(rename = "rule_timeout", with = "as_duration")]
        pub rule_hard_timeout: Nanos = RULE_TIMEOUT.default_time(),
    }
}

const INTERVAL: KeyDoc = KeyDoc {
    key: "interval",
    unit: "time",
    default: "2s",
    range: ">= 10us",
    doc: "The controller's probe interval. The paper: 2 s.",
};

const THRESHOLD: KeyDoc = KeyDoc {
    key: "threshold",
    unit: "fraction",
    default: "0.75",
    range: "0..1",
    doc: "Utilization above which a link is congested. The paper: 0.75.",
};

const MAX_FRACTION: KeyDoc = KeyDoc {
    key: "max_fraction",
    unit: "fraction",
    default: "0.5",
    range: "0..1",
    doc: "The fraction T of a congested link's flows selected for marking at 100% \
         utilization. The paper: 0.5.",
};

const RULE_TIMEOUT: KeyDoc = KeyDoc {
    key: "rule_timeout",
    unit: "time",
    default: "1s",
    range: "> 0",
    doc: "How long a marking rule lives. The paper says short; half a probe interval, so a \
         flow stops being marked unless the next probe selects it again.",
};

/// The kind's own keys.
const KEYS: &[KeyDoc] = &[
    INTERVAL,
    CONTROL_LATENCY,
    THRESHOLD,
    MAX_FRACTION,
    RULE_TIMEOUT,
];

impl Table for SdnEcnConfig {
    fn keys() -> Vec<KeyDoc> {
        KEYS.to_vec()
    }

    fn check_values(&self, ck: &mut Checks, _vm_address: &dyn Fn(&str) -> Option<u32>) {
        ck.time(&INTERVAL, self.probe_interval);
        ck.fraction(&THRESHOLD, self.congestion_threshold);
        ck.fraction(&MAX_FRACTION, self.max_marked_fraction);
        ck.time(&RULE_TIMEOUT, self.rule_hard_timeout);
    }
}
