//! `kind = "hygenicc"`: the shim's configuration, which is the scenario's table: each key with
//! its doc, unit, default and range, and the checks of its values.

use crate::limiters::keys::{check_limiter_keys, limiter_table, LIMITER_KEYS};
use crate::vocab::keys::{Checks, KeyDoc, Table};
use crate::vocab::units::{as_duration, Nanos};

limiter_table! {
    /// HyGenICC's parameters. Rate steps are fractions of the NIC's nominal rate C.
    pub struct HygenConfig {
        /// Tu: period of the rate-update timer.
        #[serde(with = "as_duration")]
        pub update_interval: Nanos = UPDATE_INTERVAL.default_time(),
        /// Congestion_Timeout: a pair with no feedback for this long is uncongested again.
        #[serde(with = "as_duration")]
        pub congestion_timeout: Nanos = CONGESTION_TIMEOUT.default_time(),
        /// Feedback_Timeout: marks pending this long go back in an explicit feedback packet.
        #[serde(with = "as_duration")]
        pub feedback_timeout: Nanos = FEEDBACK_TIMEOUT.default_time(),
        /// Increase per Tu while uncongested, fraction of C.
        pub fast_increase: f64 = FAST_INCREASE.default_number(),
        /// Increase per Tu while congested but without new feedback, fraction of C.
        pub slow_increase: f64 = SLOW_INCREASE.default_number(),
        /// Decrease per feedback mark per Tu, fraction of C.
        pub decrease_per_mark: f64 = DECREASE_PER_MARK.default_number(),
        /// R_min as a fraction of the VM's share.
        pub min_rate_fraction: f64 = MIN_RATE_FRACTION.default_number(),
        /// Refuse new TCP connections (SYN without ACK) from any local VM towards a
        /// destination one of whose pairs sits at R_min with congestion still fresh.
        pub admission_control: bool = ADMISSION_CONTROL.default_flag(),
        /// Drop packets of the feedback protocol and clear the IPR bit that local VMs send,
        /// so that a VM cannot cut another VM's rate by forging them.
        pub scrub: bool = SCRUB.default_flag(),
    }
}

const UPDATE_INTERVAL: KeyDoc = KeyDoc {
    key: "update_interval",
    unit: "time",
    default: "500us",
    range: ">= 1us",
    doc: "Tu: period of the shim's rate-update timer. The paper: 5 RTTs = 500 us.",
};

const MIN_RATE_FRACTION: KeyDoc = KeyDoc {
    key: "min_rate_fraction",
    unit: "fraction",
    default: "0.01",
    range: "0..1",
    doc: "R_min as a fraction of the VM's share. The paper gives none; SDN-GCC (same shim) \
         uses 1%, the prototype's 10 Mb/s at 1 Gb/s.",
};

const CONGESTION_TIMEOUT: KeyDoc = KeyDoc {
    key: "congestion_timeout",
    unit: "time",
    default: "1ms",
    range: "> 0",
    doc: "Congestion_Timeout: a pair with no feedback for this long is uncongested again and \
         goes back to fast increase. The paper leaves it open; 2 Tu.",
};

const FEEDBACK_TIMEOUT: KeyDoc = KeyDoc {
    key: "feedback_timeout",
    unit: "time",
    default: "100us",
    range: ">= 1us",
    doc: "Feedback_Timeout: marks pending this long without a reverse packet to carry them \
         go back in an explicit feedback packet. The paper: about one RTT, 100 us.",
};

const FAST_INCREASE: KeyDoc = KeyDoc {
    key: "fast_increase",
    unit: "fraction",
    default: "0.01",
    range: "0..1",
    doc: "Increase per Tu while uncongested, as a fraction of the NIC rate C. The paper: \
         C/100.",
};

const SLOW_INCREASE: KeyDoc = KeyDoc {
    key: "slow_increase",
    unit: "fraction",
    default: "0.001",
    range: "0..1",
    doc: "Increase per Tu while congested but without new feedback, fraction of C. The \
         paper: C/1000.",
};

const DECREASE_PER_MARK: KeyDoc = KeyDoc {
    key: "decrease_per_mark",
    unit: "fraction",
    default: "0.001",
    range: "0..1",
    doc: "Decrease per feedback mark per Tu, fraction of C. The paper: C/1000.",
};

const ADMISSION_CONTROL: KeyDoc = KeyDoc {
    key: "admission_control",
    unit: "bool",
    default: "false",
    range: "",
    doc: "Refuse new TCP connections from local VMs towards a destination one of whose pairs \
         sits at R_min with congestion still fresh. The paper mentions it in prose only.",
};

const SCRUB: KeyDoc = KeyDoc {
    key: "scrub",
    unit: "bool",
    default: "true",
    range: "",
    doc: "Drop the feedback packets and clear the IPR bits the local VMs send, so that a VM \
         cannot cut another VM's rate by forging them.",
};

/// The kind's own keys.
const KEYS: &[KeyDoc] = &[
    UPDATE_INTERVAL,
    MIN_RATE_FRACTION,
    CONGESTION_TIMEOUT,
    FEEDBACK_TIMEOUT,
    FAST_INCREASE,
    SLOW_INCREASE,
    DECREASE_PER_MARK,
    ADMISSION_CONTROL,
    SCRUB,
];

impl Table for HygenConfig {
    fn keys() -> Vec<KeyDoc> {
        [LIMITER_KEYS, KEYS].concat()
    }

    fn check_values(&self, ck: &mut Checks, vm_address: &dyn Fn(&str) -> Option<u32>) {
        ck.time(&UPDATE_INTERVAL, self.update_interval);
        ck.time(&CONGESTION_TIMEOUT, self.congestion_timeout);
        ck.time(&FEEDBACK_TIMEOUT, self.feedback_timeout);
        for (k, v) in [
            (&FAST_INCREASE, self.fast_increase),
            (&SLOW_INCREASE, self.slow_increase),
            (&DECREASE_PER_MARK, self.decrease_per_mark),
            (&MIN_RATE_FRACTION, self.min_rate_fraction),
        ] {
            ck.fraction(k, v);
        }
        check_limiter_keys(ck, &self.weights, self.idle_timeout, vm_address);
    }
}
