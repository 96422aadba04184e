//! The registry of mechanisms: the scenario's `[mechanism]` table, one configuration struct per
//! kind, checked and built into an [`Instance`] for a [`Fabric`]. Each kind lives in its own
//! folder under `mechanisms/` (its keys, their checks, how it is built and its state machines,
//! which play the roles); adding a mechanism is that folder plus one line in `mechanisms!`
//! below.
//!
//! Omitted keys take the papers' values (each default and its source is documented on the
//! state machines' config structs). A key of another kind is a schema error (every struct
//! denies unknown fields).

use serde::{Deserialize, Serialize};

use crate::mechanisms::{hygenicc, rwndq, sdn_ecn, sdn_gcc, sicc, static_rate};
use crate::vocab::headers::PacketHeaders;
use crate::vocab::keys::{Mechanism, Problem, TableDoc};
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
                    keys: <$cfg as Mechanism>::keys(),
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
    "static-rate" => StaticRate(static_rate::StaticRateTable),
    /// HyGenICC: hypervisor rate limiters driven by ECN feedback between hypervisors.
    "hygenicc" => Hygenicc(hygenicc::keys::HygeniccTable),
    /// SDN-GCC: the same limiters driven by a controller reading switch ECN counters.
    "sdn-gcc" => SdnGcc(sdn_gcc::keys::SdnGccTable),
    /// SICC: controller-predicted incast; hypervisors clamp the rwnd of ACKs.
    "sicc" => Sicc(sicc::keys::SiccTable),
    /// SDN-ECN: short-lived flow rules that CE-mark the top flows of hot links.
    "sdn-ecn" => SdnEcn(sdn_ecn::keys::SdnEcnTable),
    /// RWNDQ (baseline switch): fair-share receive windows written into ACKs.
    "rwndq" => Rwndq(rwndq::keys::RwndqTable),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::keys::Checks;

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

    /// What the parser reads for each kind when its table gives no key: the declared defaults
    /// must be the state machines' own (what a direct user of this crate gets).
    #[test]
    fn an_empty_table_resolves_to_the_state_machines_defaults() {
        use crate::limiters::rate_alloc::AllocatorConfig;
        use crate::mechanisms::{hygenicc, rwndq, sdn_ecn, sdn_gcc, sicc};
        use crate::vocab::roles::BucketConfig;
        let ck = &mut Checks::default();
        let none = &|_: &str| None;
        let (h, _) = hygenicc::keys::HygeniccTable::default().resolve(ck, none);
        assert_eq!(h, hygenicc::HygenConfig::default());
        assert_eq!(h.alloc, AllocatorConfig::default());
        let (shim, ctrl, _) = sdn_gcc::keys::SdnGccTable::default().resolve(ck, none);
        assert_eq!(shim, sdn_gcc::SdnGccShimConfig::default());
        assert_eq!(ctrl, sdn_gcc::SdnGccControllerConfig::default());
        let c = sicc::keys::SiccTable::default().resolve(ck, none);
        assert_eq!(
            c,
            sicc::keys::SiccParams::Controller(sicc::SiccControllerConfig::default())
        );
        let switch = parse(r#"{"kind": "sicc", "mode": "switch"}"#).unwrap();
        let MechanismConfig::Sicc(switch) = switch else {
            unreachable!()
        };
        let s = switch.resolve(ck, none);
        assert_eq!(
            s,
            sicc::keys::SiccParams::Switch(sicc::SiccSwitchConfig::default())
        );
        let e = sdn_ecn::keys::SdnEcnTable::default().resolve(ck, none);
        assert_eq!(e, sdn_ecn::SdnEcnConfig::default());
        let r = rwndq::keys::RwndqTable::default().resolve(ck, none);
        assert_eq!(r, rwndq::RwndqConfig::default());
        let rate = parse(r#"{"kind": "static-rate", "rate": "1Gbps"}"#).unwrap();
        let MechanismConfig::StaticRate(rate) = rate else {
            unreachable!()
        };
        assert_eq!(rate.resolve(ck, none).0, BucketConfig::default());
        assert_eq!(ck.problems, vec![]);
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
