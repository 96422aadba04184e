//! `kind = "hygenicc"`: one HyGenICC shim per host; no controller.

use std::collections::BTreeMap;

use crate::limiters::keys::{limiter_config, rate_shims, LIMITER_KEYS};
use crate::mechanisms::hygenicc::{HygenConfig, HygenShim};
use crate::vocab::headers::PacketHeaders;
use crate::vocab::keys::{Checks, KeyDoc, Mechanism};
use crate::vocab::roles::{Fabric, Instance};
use crate::vocab::units::Duration;

limiter_config! {
    pub struct HygeniccTable {
        /// Timer period of the shim (Tu).
        pub update_interval: Option<Duration>,
        pub min_rate_fraction: Option<f64>,
        pub congestion_timeout: Option<Duration>,
        pub feedback_timeout: Option<Duration>,
        pub fast_increase: Option<f64>,
        pub slow_increase: Option<f64>,
        pub decrease_per_mark: Option<f64>,
        pub admission_control: Option<bool>,
        /// Drop the feedback packets and clear the IPR bits the VMs send (default true).
        pub scrub: Option<bool>,
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

impl Mechanism for HygeniccTable {
    /// The shim's parameters and the VMs' weights by address.
    type Params = (HygenConfig, BTreeMap<u32, u32>);

    fn keys() -> Vec<KeyDoc> {
        [LIMITER_KEYS, KEYS].concat()
    }

    fn resolve(&self, ck: &mut Checks, vm_address: &dyn Fn(&str) -> Option<u32>) -> Self::Params {
        let cfg = HygenConfig {
            update_interval: ck.time(&UPDATE_INTERVAL, self.update_interval),
            congestion_timeout: ck.time(&CONGESTION_TIMEOUT, self.congestion_timeout),
            feedback_timeout: ck.time(&FEEDBACK_TIMEOUT, self.feedback_timeout),
            fast_increase: ck.fraction(&FAST_INCREASE, self.fast_increase),
            slow_increase: ck.fraction(&SLOW_INCREASE, self.slow_increase),
            decrease_per_mark: ck.fraction(&DECREASE_PER_MARK, self.decrease_per_mark),
            min_rate_fraction: ck.fraction(&MIN_RATE_FRACTION, self.min_rate_fraction),
            alloc: self.limiter_keys().alloc(ck),
            admission_control: ck.flag(&ADMISSION_CONTROL, self.admission_control),
            scrub: ck.flag(&SCRUB, self.scrub),
        };
        (cfg, self.limiter_keys().weights(ck, vm_address))
    }

    fn instantiate<P: PacketHeaders + ?Sized + 'static>(
        &self,
        (cfg, weights): Self::Params,
        fabric: &dyn Fabric,
    ) -> Instance<P> {
        let mut inst = Instance::none(fabric);
        inst.shims = rate_shims(
            fabric,
            &weights,
            |rate| HygenShim::new(cfg, rate),
            |s, ip, w| s.register_vm(0, ip, w),
        );
        inst
    }
}
