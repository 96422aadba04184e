//! The registry of mechanisms: the scenario's `[mechanism]` table, one configuration struct per
//! kind, checked and built into an [`Instance`] for a [`Fabric`]. Each kind lives in its own
//! module here (its keys, their checks, how it is built and how its state machines play the
//! roles); adding a mechanism is that module plus one line in [`mechanisms!`] below.
//!
//! Omitted keys take the papers' values (each default and its source is documented on the
//! state machines' config structs). A key of another kind is a schema error (every struct
//! denies unknown fields).

use serde::{Deserialize, Serialize};

use crate::headers::PacketHeaders;
use crate::roles::{Fabric, Instance};
use crate::units::Duration;
use crate::Nanos;

pub mod hygenicc;
mod limiter;
pub mod rwndq;
pub mod sdn_ecn;
pub mod sdn_gcc;
pub mod sicc;
pub mod static_rate;

/// A problem with one key of the `[mechanism]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The key, e.g. "mechanism.interval" or "mechanism.vms[2]".
    pub key: String,
    /// What was expected.
    pub message: String,
}

/// What every kind does with its table.
pub trait Mechanism {
    /// What the table resolves to: the state machines' parameters.
    type Params;

    /// Turns the table into parameters, recording every problem in `ck`; `vm_address`
    /// resolves VM names as the fabric will.
    fn resolve(&self, ck: &mut Checks, vm_address: &dyn Fn(&str) -> Option<u32>) -> Self::Params;

    /// The mechanism's roles in `fabric`.
    fn instantiate<P: PacketHeaders + ?Sized + 'static>(
        &self,
        params: Self::Params,
        fabric: &dyn Fabric,
    ) -> Instance<P>;

    /// Every problem with the table.
    fn check(&self, vm_address: &dyn Fn(&str) -> Option<u32>) -> Vec<Problem> {
        let mut ck = Checks::default();
        self.resolve(&mut ck, vm_address);
        ck.problems
    }

    /// The mechanism's roles in `fabric`. Call only on a table without problems.
    fn build<P: PacketHeaders + ?Sized + 'static>(&self, fabric: &dyn Fabric) -> Instance<P> {
        let params = self.resolve(&mut Checks::default(), &|n| fabric.vm_address(n));
        self.instantiate(params, fabric)
    }
}

macro_rules! mechanisms {
    ($($(#[$doc:meta])* $name:literal => $variant:ident($cfg:ty),)*) => {
        /// The mechanism under test and its parameters: `kind` selects the struct.
        #[derive(Deserialize, Serialize, Debug, Clone)]
        #[serde(tag = "kind")]
        pub enum MechanismConfig {
            /// No mechanism.
            #[serde(rename = "none")]
            None(NoMechanism),
            $($(#[$doc])* #[serde(rename = $name)] $variant($cfg),)*
        }

        impl MechanismConfig {
            /// Every kind's name, as `kind` takes it.
            pub const KINDS: &'static [&'static str] = &["none", $($name,)*];

            /// The value of `kind`.
            pub fn kind(&self) -> &'static str {
                match self {
                    MechanismConfig::None(_) => "none",
                    $(MechanismConfig::$variant(_) => $name,)*
                }
            }

            pub fn check(&self, vm_address: &dyn Fn(&str) -> Option<u32>) -> Vec<Problem> {
                match self {
                    MechanismConfig::None(_) => Vec::new(),
                    $(MechanismConfig::$variant(c) => c.check(vm_address),)*
                }
            }

            pub fn build<P: PacketHeaders + ?Sized + 'static>(
                &self,
                fabric: &dyn Fabric,
            ) -> Instance<P> {
                match self {
                    MechanismConfig::None(_) => Instance::none(fabric),
                    $(MechanismConfig::$variant(c) => c.build(fabric),)*
                }
            }
        }
    };
}

/// `kind = "none"`: no keys.
#[derive(Deserialize, Serialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct NoMechanism {}

impl Default for MechanismConfig {
    fn default() -> Self {
        MechanismConfig::None(NoMechanism {})
    }
}

mechanisms! {
    /// Static per-VM token buckets at a fixed rate (not work-conserving).
    "static-rate" => StaticRate(static_rate::StaticRateConfig),
    /// HyGenICC: hypervisor rate limiters driven by ECN feedback between hypervisors.
    "hygenicc" => Hygenicc(hygenicc::HygenicConfig),
    /// SDN-GCC: the same limiters driven by a controller reading switch ECN counters.
    "sdn-gcc" => SdnGcc(sdn_gcc::SdnGccConfig),
    /// SICC: controller-predicted incast; hypervisors clamp the rwnd of ACKs.
    "sicc" => Sicc(sicc::SiccConfig),
    /// SDN-ECN: short-lived flow rules that CE-mark the top flows of hot links.
    "sdn-ecn" => SdnEcn(sdn_ecn::SdnEcnConfig),
    /// RWNDQ (baseline switch): fair-share receive windows written into ACKs.
    "rwndq" => Rwndq(rwndq::RwndqConfig),
}

/// Shortest period of a host or switch timer: below it a run only crawls.
pub const MIN_TIMER: Nanos = 1_000;
/// Shortest controller polling interval: no controller reads counters faster, and below it a
/// run spends its time in polls (a 1 ns interval is 30 M polls in 30 ms).
pub const MIN_POLL: Nanos = 10_000;

/// Collects the problems found while turning a table's values into a state machine's config.
#[derive(Default)]
pub struct Checks {
    pub problems: Vec<Problem>,
}

impl Checks {
    pub fn problem(&mut self, key: &str, message: impl Into<String>) {
        self.problems.push(Problem {
            key: format!("mechanism.{key}"),
            message: message.into(),
        });
    }

    /// A fraction in [0, 1], or `default`.
    pub fn fraction(&mut self, key: &str, v: Option<f64>, default: f64) -> f64 {
        let x = v.unwrap_or(default);
        if !(x.is_finite() && (0.0..=1.0).contains(&x)) {
            self.problem(key, format!("expected a fraction between 0 and 1, got {x}"));
        }
        x
    }

    /// A period of at least `floor` ns (and more than zero), or `default`.
    pub fn period(
        &mut self,
        key: &str,
        v: Option<Duration>,
        default: Nanos,
        floor: Nanos,
    ) -> Nanos {
        let x = v.map(|d| d.0).unwrap_or(default);
        if x == 0 {
            self.problem(key, "must be greater than zero");
        } else if x < floor {
            self.problem(
                key,
                format!(
                    "must be at least {}us (got {x}ns): a shorter period only makes the run crawl",
                    floor / 1000
                ),
            );
        }
        x
    }

    /// A time of more than zero, or `default`.
    pub fn positive(&mut self, key: &str, v: Option<Duration>, default: Nanos) -> Nanos {
        self.period(key, v, default, 1)
    }

    /// One of `choices` (the first is the default), by position.
    pub fn choice(&mut self, key: &str, v: &Option<String>, choices: &[&str]) -> usize {
        let Some(v) = v else { return 0 };
        choices.iter().position(|c| c == v).unwrap_or_else(|| {
            let quoted: Vec<String> = choices.iter().map(|c| format!("{c:?}")).collect();
            let expected = match quoted.split_last() {
                Some((last, [])) => last.clone(),
                Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                None => String::new(),
            };
            self.problem(key, format!("expected {expected}, got {v:?}"));
            0
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<MechanismConfig, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn kind_selects_the_struct_and_foreign_keys_are_refused() {
        let c = parse(r#"{"kind": "sicc", "interval": "1ms"}"#).unwrap();
        assert_eq!(c.kind(), "sicc");
        let e = parse(r#"{"kind": "hygenicc", "interval": "1ms"}"#).unwrap_err();
        assert!(e.contains("unknown field `interval`"), "{e}");
        assert!(parse(r#"{"kind": "teleport"}"#).is_err());
        assert!(parse(r#"{"kind": "none", "rate": "1Gbps"}"#).is_err());
        assert_eq!(MechanismConfig::KINDS.len(), 7);
    }

    #[test]
    fn a_polling_interval_below_the_floor_is_refused_with_its_reason() {
        let c = parse(r#"{"kind": "sdn-ecn", "interval": "1ns"}"#).unwrap();
        let p = c.check(&|_| None);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].key, "mechanism.interval");
        assert!(p[0].message.contains("at least 10us"), "{}", p[0].message);
    }

    #[test]
    fn every_problem_is_reported_not_the_first() {
        let c = parse(
            r#"{"kind": "hygenicc", "fast_increase": 2.0, "update_interval": "0s",
                "weights": {"nobody": 1}, "on_shortage": "maybe"}"#,
        )
        .unwrap();
        let keys: Vec<String> = c.check(&|_| None).into_iter().map(|p| p.key).collect();
        for k in ["fast_increase", "update_interval", "weights", "on_shortage"] {
            assert!(keys.contains(&format!("mechanism.{k}")), "{k} in {keys:?}");
        }
    }
}
