//! `kind = "rwndq"`: the switches' configuration, which is the scenario's table: each key with
//! its doc, unit, default and range, and the checks of its values.

use crate::vocab::keys::{table, Checks, KeyDoc, Table};
use crate::vocab::units::{as_duration, Nanos};

table! {
    /// RWNDQ parameters (the prototype's constants).
    #[derive(Copy)]
    pub struct RwndqConfig {
        /// Control-loop period.
        #[serde(with = "as_duration")]
        pub tick: Nanos = TICK.default_time(),
        /// Ticks per window update and per overflow check. The prototype: 16.
        #[serde(skip)]
        pub ticks_per_update: u32 = 16,
        /// Target queue as a fraction of the port's buffer limit.
        pub target_fraction: f64 = TARGET_FRACTION.default_number(),
        /// Slow start ends when the queue passes this fraction of the limit. The prototype:
        /// 1/4.
        #[serde(skip)]
        pub slow_start_exit_fraction: f64 = 1.0 / 4.0,
        /// A queue above this fraction of the limit for `ticks_per_update` ticks resets the
        /// windows to 1 MSS. The prototype: 15/16.
        #[serde(skip)]
        pub overflow_fraction: f64 = 15.0 / 16.0,
        /// Smallest window written, bytes: one MSS.
        #[serde(skip)]
        pub mss_bytes: u32 = 1460,
        /// Largest window, bytes. The prototype: 65535 (the fabric's receive buffer where
        /// larger).
        #[serde(skip)]
        pub max_window_bytes: u32 = 65535,
        /// Window scale (shift) the receivers use; rwnd fields hold window >> shift. 0, as in
        /// ns2 and the prototype; built for a fabric, the fabric's.
        #[serde(skip)]
        pub window_shift: u8 = 0,
        /// Base RTT used for the port BDP.
        #[serde(with = "as_duration")]
        pub base_rtt: Nanos = BASE_RTT.default_time(),
        /// A flow seen without SYN/FIN is forgotten after this much silence, ns. 100 ms: many
        /// RTTs, yet below the 200 ms RTOmin so dead flows stop diluting the share.
        #[serde(skip)]
        pub flow_idle_timeout: Nanos = 100_000_000,
    }
}

const TICK: KeyDoc = KeyDoc {
    key: "tick",
    unit: "time",
    default: "200us",
    range: ">= 1us",
    doc: "Control-loop period. The prototype: 200 us.",
};

const TARGET_FRACTION: KeyDoc = KeyDoc {
    key: "target_fraction",
    unit: "fraction",
    default: "0.125",
    range: "0..1",
    doc: "Target queue as a fraction of the port's buffer. The prototype: 1/8.",
};

const BASE_RTT: KeyDoc = KeyDoc {
    key: "base_rtt",
    unit: "time",
    default: "100us",
    range: "> 0",
    doc: "Base RTT used for the port's BDP. The experiments: 100 us.",
};

/// The kind's own keys.
const KEYS: &[KeyDoc] = &[TICK, TARGET_FRACTION, BASE_RTT];

impl Table for RwndqConfig {
    fn keys() -> Vec<KeyDoc> {
        KEYS.to_vec()
    }

    fn check_values(&self, ck: &mut Checks, _vm_address: &dyn Fn(&str) -> Option<u32>) {
        ck.time(&TICK, self.tick);
        ck.fraction(&TARGET_FRACTION, self.target_fraction);
        ck.time(&BASE_RTT, self.base_rtt);
    }
}
