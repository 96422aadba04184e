//! `kind = "sicc"`: the configuration of the controller app and hypervisor modules, or of the
//! switches in switch mode, which is the scenario's table: each key with its doc, unit,
//! default and range, and the checks of its values.

use crate::vocab::keys::{table, Checks, KeyDoc, Table, CONTROL_LATENCY};
use crate::vocab::units::{as_duration, Nanos};

/// Where SICC runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SiccMode {
    /// The paper's design: a controller app and a module in every hypervisor.
    #[default]
    Controller,
    /// The authors' ns-2 module: each switch port reacts to its own queue and rewrites the
    /// ACKs itself.
    Switch,
}

/// Which switches copy SYNs and FINs to the controller: the ports a copy leaves by are the
/// ports the controller watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SiccCopyAt {
    /// Algorithm 1: the ToRs, whose ports towards the hosts meet an incast at its receiver.
    #[default]
    Tors,
    /// Every switch: a bottleneck between switches is watched too.
    All,
}

table! {
    /// SICC's parameters.
    #[derive(Copy)]
    pub struct SiccConfig {
        pub mode: SiccMode = SiccMode::Controller,
        /// T: queue sampling period.
        #[serde(rename = "interval", with = "as_duration")]
        pub monitor_interval: Nanos = INTERVAL.default_time(),
        /// One-way latency of the out-of-band control channel.
        #[serde(with = "as_duration")]
        pub latency: Nanos = CONTROL_LATENCY.default_time(),
        /// alpha1: incast OFF once the queue is at most this fraction of the buffer.
        pub off_fraction: f64 = OFF_FRACTION.default_number(),
        /// alpha2 (unset: the mode's own, see [`SiccConfig::on_fraction`]).
        pub on_fraction: Option<f64> = None,
        /// DM: the shortest incast episode; also how long a hypervisor's ON lasts without an
        /// OFF.
        #[serde(with = "as_duration")]
        pub incast_duration: Nanos = INCAST_DURATION.default_time(),
        /// IW, packets: the initial window a new connection may send at once.
        #[serde(rename = "initial_window")]
        pub initial_window_pkts: f64 = INITIAL_WINDOW.default_number(),
        /// Also test the ON condition when a SYN copy arrives, with the last smoothed queue,
        /// instead of only every T. Algorithm 1 tests it every T; at data-center RTTs a
        /// volley's first windows leave before the next reading unless the controller reacts
        /// to the SYNs themselves, as the authors' ns-2 module (inside the switch) does.
        pub evaluate_on_syn: bool = EVALUATE_ON_SYN.default_flag(),
        pub copy_at: SiccCopyAt = SiccCopyAt::Tors,
        /// B, packets: buffer of ports not given one by
        /// [`SiccController::set_port_buffer`](super::SiccController::set_port_buffer). The
        /// simulations: 83 packets (125 KB).
        #[serde(skip)]
        pub buffer_pkts: u32 = 83,
        /// Switch mode: the segment, bytes, whose window ACKs carry during incast (the
        /// module: one mean-sized packet). 1460, as RWNDQ's: the switch reads no SYN options.
        #[serde(skip)]
        pub mss: u16 = 1460,
        /// Switch mode: the receivers' window scale (a window field holds window >> shift).
        #[serde(skip)]
        pub window_shift: u8 = 0,
    }
}

impl SiccConfig {
    /// The authors' module in every switch, at its defaults.
    pub fn switch() -> SiccConfig {
        SiccConfig {
            mode: SiccMode::Switch,
            ..Default::default()
        }
    }

    /// alpha2: the paper's 100% of the buffer for the controller; the module's 0.95 of the
    /// queue in switch mode.
    pub fn on_fraction(&self) -> f64 {
        self.on_fraction.unwrap_or(match self.mode {
            SiccMode::Controller => 1.0,
            SiccMode::Switch => 0.95,
        })
    }
}

const MODE: KeyDoc = KeyDoc {
    key: "mode",
    unit: "string",
    default: "\"controller\"",
    range: "\"controller\" or \"switch\"",
    doc: "controller: the paper's design; switch: the authors' ns-2 module, each switch port \
         reacting to its own queue and rewriting the ACKs itself (keys on_fraction and \
         off_fraction only).",
};

const INTERVAL: KeyDoc = KeyDoc {
    key: "interval",
    unit: "time",
    default: "1ms",
    range: ">= 10us",
    doc: "T: the controller's queue sampling period. The paper: 1 ms (10 RTTs).",
};

const OFF_FRACTION: KeyDoc = KeyDoc {
    key: "off_fraction",
    unit: "fraction",
    default: "0.2",
    range: "0..1 (switch mode: below on_fraction)",
    doc: "alpha1: incast OFF once the queue is at most this fraction of the buffer. The \
         paper and the module: 20%.",
};

const ON_FRACTION: KeyDoc = KeyDoc {
    key: "on_fraction",
    unit: "number",
    default: "1 (switch mode: 0.95)",
    range: "> 0 (switch mode: 0..1, above off_fraction)",
    doc: "alpha2: incast ON once beta x IW + Q reaches this fraction of the buffer. The \
         paper: 100%; the switch module: 0.95 of the queue.",
};

const INCAST_DURATION: KeyDoc = KeyDoc {
    key: "incast_duration",
    unit: "time",
    default: "3ms",
    range: "> 0",
    doc: "DM: the shortest incast episode (a typical mice duration). The paper gives no \
         number; the prototype's 30 RTTs.",
};

const INITIAL_WINDOW: KeyDoc = KeyDoc {
    key: "initial_window",
    unit: "number",
    default: "1",
    range: ">= 0",
    doc: "IW in packets: the initial window the controller assumes a new connection sends at \
         once. The simulations: 1 MSS (10 is typical of Linux).",
};

const EVALUATE_ON_SYN: KeyDoc = KeyDoc {
    key: "evaluate_on_syn",
    unit: "bool",
    default: "false",
    range: "",
    doc: "Also test the incast-ON condition on every SYN copy, not only every T (Algorithm \
         1), as the authors' in-switch module does.",
};

const COPY_AT: KeyDoc = KeyDoc {
    key: "copy_at",
    unit: "string",
    default: "\"tors\"",
    range: "\"tors\" or \"all\"",
    doc: "The switches whose rules copy SYNs and FINs to the controller, and so the ports it \
         watches: tors, as Algorithm 1 (an incast meets its receiver's ToR port); all, every \
         switch, as on the authors' testbed, whose copies came from its software core switch \
         in front of the bottleneck (its hardware ToRs could not match TCP flags).",
};

/// The kind's own keys.
const KEYS: &[KeyDoc] = &[
    MODE,
    INTERVAL,
    CONTROL_LATENCY,
    OFF_FRACTION,
    ON_FRACTION,
    INCAST_DURATION,
    INITIAL_WINDOW,
    EVALUATE_ON_SYN,
    COPY_AT,
];

impl Table for SiccConfig {
    fn keys() -> Vec<KeyDoc> {
        KEYS.to_vec()
    }

    fn check_values(&self, ck: &mut Checks, _vm_address: &dyn Fn(&str) -> Option<u32>) {
        ck.fraction(&OFF_FRACTION, self.off_fraction);
        let on_fraction = self.on_fraction();
        if self.mode == SiccMode::Switch {
            let d = SiccConfig::switch();
            for (key, set) in [
                (INTERVAL.key, self.monitor_interval != d.monitor_interval),
                (CONTROL_LATENCY.key, self.latency != d.latency),
                (
                    INCAST_DURATION.key,
                    self.incast_duration != d.incast_duration,
                ),
                (
                    INITIAL_WINDOW.key,
                    self.initial_window_pkts != d.initial_window_pkts,
                ),
                (
                    EVALUATE_ON_SYN.key,
                    self.evaluate_on_syn != d.evaluate_on_syn,
                ),
                (COPY_AT.key, self.copy_at != d.copy_at),
            ] {
                if set {
                    ck.problem(
                        key,
                        "applies to mode = \"controller\" only: in mode = \"switch\" each port \
                         reacts to its own queue (keys: on_fraction, off_fraction)",
                    );
                }
            }
            ck.fraction(&ON_FRACTION, on_fraction);
            let fraction = |x: f64| (0.0..=1.0).contains(&x);
            if fraction(on_fraction)
                && fraction(self.off_fraction)
                && self.off_fraction >= on_fraction
            {
                ck.problem(
                    "off_fraction",
                    format!(
                        "expected below on_fraction ({on_fraction}), got {}: every departure \
                         would end the incast its arrival began",
                        self.off_fraction
                    ),
                );
            }
            return;
        }
        ck.time(&INTERVAL, self.monitor_interval);
        ck.time(&INCAST_DURATION, self.incast_duration);
        if !(on_fraction > 0.0 && on_fraction.is_finite()) {
            ck.problem(
                "on_fraction",
                format!("expected a positive number, got {on_fraction}"),
            );
        }
        let iw = self.initial_window_pkts;
        if !(iw >= 0.0 && iw.is_finite()) {
            ck.problem(
                "initial_window",
                format!("expected a non-negative number of packets, got {iw}"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> (SiccConfig, Vec<String>) {
        let c: SiccConfig = serde_json::from_str(json).unwrap();
        let keys = c.check(&|_| None).into_iter().map(|p| p.key).collect();
        (c, keys)
    }

    #[test]
    fn the_paper_s_controller_is_the_default_mode_and_the_switch_takes_the_module_s_thresholds() {
        let (c, problems) = read("{}");
        assert_eq!(
            (c.mode, c.on_fraction(), problems),
            (SiccMode::Controller, 1.0, vec![])
        );
        let (s, problems) = read(r#"{"mode": "switch"}"#);
        assert_eq!(
            (s, s.on_fraction(), problems),
            (SiccConfig::switch(), 0.95, vec![])
        );
        let (s, problems) = read(r#"{"mode": "switch", "on_fraction": 0.8}"#);
        assert_eq!((s.on_fraction(), problems), (0.8, vec![]));
    }

    /// A controller key in switch mode is refused where it would change anything: a value
    /// other than its default (the default is what the switch mode runs with anyway).
    #[test]
    fn the_switch_refuses_controller_keys_and_an_off_threshold_not_below_on() {
        let (_, problems) = read(
            r#"{"mode": "switch", "interval": "2ms", "evaluate_on_syn": true,
                "on_fraction": 0.5, "off_fraction": 0.5}"#,
        );
        assert_eq!(
            problems,
            [
                "mechanism.interval",
                "mechanism.evaluate_on_syn",
                "mechanism.off_fraction"
            ]
        );
        let e = serde_json::from_str::<SiccConfig>(r#"{"mode": "router"}"#).unwrap_err();
        assert!(e.to_string().contains("unknown variant `router`"), "{e}");
    }
}
