//! The registry of mechanisms: the scenario's `[mechanism]` table, one configuration struct per
//! kind, checked and built into an [`Instance`] for a [`Fabric`]. Each kind lives in its own
//! folder under `mechanisms/`: `config.rs` (its table, which is the configuration its state
//! machines take: each key's doc, unit, default, range and checks), `mod.rs` (its state
//! machines, which play the roles) and `build.rs` (how it is built for a fabric); adding a
//! mechanism is that folder, its `pub mod` and one line in `mechanisms!` below.
//!
//! Omitted keys take the papers' values (each key's declaration gives its default and its
//! source). A key of another kind is a schema error (every struct denies unknown fields).

use serde::{Deserialize, Serialize};

use crate::mechanisms::{hygenicc, rwndq, sdn_ecn, sdn_gcc, sicc, static_rate};
use crate::vocab::headers::PacketHeaders;
use crate::vocab::keys::{Mechanism, Problem, Table, TableDoc};
use crate::vocab::roles::{Fabric, Instance};

macro_rules! mechanisms {
    ($($(#[doc = $doc:literal])* $name:literal => $variant:ident($cfg:ty),)*) => {
        /// The mechanism under test and its parameters: `kind` selects the struct.
        #[derive(Deserialize, Serialize, Debug, Clone)]
        #[serde(tag = "kind")]
        pub enum MechanismConfig {
            /// No mechanism.
            #[serde(rename = "none")]
            None(NoMechanism),
            $($(#[doc = $doc])* #[serde(rename = $name)] $variant($cfg),)*
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

            /// Every kind's keys, one table each (`none` has none).
            pub fn tables() -> Vec<TableDoc> {
                let mut tables = vec![TableDoc {
                    table: "mechanism",
                    tag: Some(("kind", "none")),
                    array: false,
                    doc: "No mechanism.",
                    keys: Vec::new(),
                }];
                $(tables.push(TableDoc {
                    table: "mechanism",
                    tag: Some(("kind", $name)),
                    array: false,
                    doc: concat!($($doc),*).trim_ascii(),
                    keys: <$cfg as Table>::keys(),
                });)*
                tables
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
    "hygenicc" => Hygenicc(hygenicc::HygenConfig),
    /// SDN-GCC: the same limiters driven by a controller reading switch ECN counters.
    "sdn-gcc" => SdnGcc(sdn_gcc::SdnGccConfig),
    /// SICC: controller-predicted incast; hypervisors clamp the rwnd of ACKs.
    "sicc" => Sicc(sicc::SiccConfig),
    /// SDN-ECN: short-lived flow rules that CE-mark the top flows of hot links.
    "sdn-ecn" => SdnEcn(sdn_ecn::SdnEcnConfig),
    /// RWNDQ (baseline switch): fair-share receive windows written into ACKs.
    "rwndq" => Rwndq(rwndq::RwndqConfig),
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
                "weights": {"nobody": 1}, "idle_timeout": "0s"}"#,
        )
        .unwrap();
        let keys: Vec<String> = c.check(&|_| None).into_iter().map(|p| p.key).collect();
        for k in [
            "fast_increase",
            "update_interval",
            "weights",
            "idle_timeout",
        ] {
            assert!(keys.contains(&format!("mechanism.{k}")), "{k} in {keys:?}");
        }
        let e = parse(r#"{"kind": "hygenicc", "on_shortage": "maybe"}"#).unwrap_err();
        assert!(e.contains("unknown variant `maybe`"), "{e}");
    }

    /// What a kind's state machines get from a table without keys is their own `Default`
    /// (what a direct user of this crate gets), and it passes the kind's checks.
    #[test]
    fn an_empty_table_is_the_state_machines_default_and_passes_its_checks() {
        use crate::mechanisms::{hygenicc, rwndq, sdn_ecn, sdn_gcc, sicc};
        let empty = |kind: &str| {
            let c = parse(&format!(r#"{{"kind": "{kind}"}}"#)).unwrap();
            assert_eq!(c.check(&|_| None), vec![], "{kind}");
            c
        };
        let MechanismConfig::Hygenicc(h) = empty("hygenicc") else {
            unreachable!()
        };
        assert_eq!(h, hygenicc::HygenConfig::default());
        let MechanismConfig::SdnGcc(g) = empty("sdn-gcc") else {
            unreachable!()
        };
        assert_eq!(g, sdn_gcc::SdnGccConfig::default());
        assert_eq!(g.congestion_grace(), 2 * g.monitor_interval);
        let MechanismConfig::Sicc(c) = empty("sicc") else {
            unreachable!()
        };
        assert_eq!((c, c.on_fraction()), (sicc::SiccConfig::default(), 1.0));
        let switch = parse(r#"{"kind": "sicc", "mode": "switch"}"#).unwrap();
        assert_eq!(switch.check(&|_| None), vec![]);
        let MechanismConfig::Sicc(s) = switch else {
            unreachable!()
        };
        assert_eq!((s, s.on_fraction()), (sicc::SiccConfig::switch(), 0.95));
        let MechanismConfig::SdnEcn(e) = empty("sdn-ecn") else {
            unreachable!()
        };
        assert_eq!(e, sdn_ecn::SdnEcnConfig::default());
        let MechanismConfig::Rwndq(r) = empty("rwndq") else {
            unreachable!()
        };
        assert_eq!(r, rwndq::RwndqConfig::default());
        let rate = parse(r#"{"kind": "static-rate", "rate": "1Gbps"}"#).unwrap();
        assert_eq!(rate.check(&|_| None), vec![]);
        let MechanismConfig::StaticRate(rate) = rate else {
            unreachable!()
        };
        assert_eq!(rate.bucket(), crate::vocab::roles::BucketConfig::default());
    }

    /// A period's floor is one of the two the crate states its reasons for.
    #[test]
    fn every_declared_floor_is_a_timer_or_a_poll_floor() {
        use crate::vocab::keys::{MIN_POLL, MIN_TIMER};
        let floors: Vec<(String, u64)> = MechanismConfig::tables()
            .iter()
            .flat_map(|t| t.keys.iter().map(move |k| (t.name(), *k)))
            .filter(|(_, k)| k.range.starts_with(">= ") && k.unit == "time")
            .map(|(t, k)| (format!("{t}.{}", k.key), k.floor()))
            .collect();
        assert!(floors.len() >= 6, "{floors:?}");
        for (key, floor) in floors {
            assert!(
                floor == MIN_TIMER || floor == MIN_POLL,
                "{key}: floor {floor} ns"
            );
        }
    }
}
