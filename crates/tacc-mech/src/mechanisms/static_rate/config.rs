//! `kind = "static-rate"`: the limiters' configuration, which is the scenario's table: each key
//! with its doc, unit, default and range, and the checks of its values.

use crate::limiters::keys::{bucket_config, BURST, ON_SHORTAGE};
use crate::vocab::keys::{table, Checks, KeyDoc, Table};
use crate::vocab::roles::{BucketConfig, ShortagePolicy};
use crate::vocab::units::{as_duration, Nanos, Rate};

table! {
    /// Static per-VM token buckets at a fixed rate.
    pub struct StaticRateConfig {
        /// The fixed per-VM rate (required).
        pub rate: Option<Rate> = None,
        /// VMs limited (unset: all).
        pub vms: Option<Vec<String>> = None,
        /// Drop (the papers' default) or queue packets that find no tokens.
        pub on_shortage: ShortagePolicy = ShortagePolicy::Drop,
        /// Bucket depth as time at the bucket's rate.
        #[serde(with = "as_duration")]
        pub burst: Nanos = BURST.default_time(),
    }
}

impl StaticRateConfig {
    pub fn bucket(&self) -> BucketConfig {
        bucket_config(self.on_shortage, self.burst)
    }
}

const RATE: KeyDoc = KeyDoc {
    key: "rate",
    unit: "rate",
    default: "required",
    range: "> 0",
    doc: "The fixed rate of each VM limited.",
};

const VMS: KeyDoc = KeyDoc {
    key: "vms",
    unit: "names",
    default: "none",
    range: "",
    doc: "VMs limited; unset, all.",
};

/// The kind's own keys.
const KEYS: &[KeyDoc] = &[RATE, VMS, ON_SHORTAGE, BURST];

impl Table for StaticRateConfig {
    fn keys() -> Vec<KeyDoc> {
        KEYS.to_vec()
    }

    fn check_values(&self, ck: &mut Checks, vm_address: &dyn Fn(&str) -> Option<u32>) {
        match self.rate {
            None => ck.problem("rate", "static-rate needs a rate such as \"500Mbps\""),
            Some(r) if r.0 == 0 => ck.problem("rate", "must be greater than zero"),
            Some(_) => {}
        }
        for (i, n) in self.vms.iter().flatten().enumerate() {
            if vm_address(n).is_none() {
                ck.problem(&format!("vms[{i}]"), format!("no host or VM named {n:?}"));
            }
        }
    }
}
