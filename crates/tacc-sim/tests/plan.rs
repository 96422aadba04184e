//! The plan (`tacc_sim::plan`): what the testbed and its agents read of a scenario. Every
//! mechanism's keys must survive the trip through JSON, since an agent builds its mechanism
//! from the plan's copy.

use std::path::Path;

use tacc_mech::plan::Plan;

const SCENARIOS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../python/tacc/scenarios");

fn plan_of(file: &str, sets: &[(&str, &str)]) -> Plan {
    let path = Path::new(SCENARIOS).join(file);
    let text = tacc_sim::read_scenario(&path).unwrap();
    let sets: Vec<(String, String)> = sets
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let prepared = tacc_sim::load(&text, file, &sets, None).unwrap();
    tacc_sim::plan::plan(&prepared)
}

#[test]
fn every_mechanism_reads_back_from_the_plans_json_with_its_keys() {
    let mechanisms = [
        r#"{kind="static-rate",rate="250Mbps",on_shortage="queue",burst="50us"}"#,
        r#"{kind="hygenicc",update_interval="500us",feedback_timeout="100us",fast_increase=0.02}"#,
        r#"{kind="sdn-gcc",interval="5ms",on_shortage="queue"}"#,
        r#"{kind="sicc",latency="100us"}"#,
        r#"{kind="sdn-ecn",interval="1ms"}"#,
        r#"{kind="rwndq",tick="200us",base_rtt="100us"}"#,
    ];
    for m in mechanisms {
        let plan = plan_of("default.toml", &[("mechanism", m)]);
        let json = serde_json::to_string(&plan).unwrap();
        let back: Plan = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{m}: {e}"));
        assert_eq!(serde_json::to_string(&back).unwrap(), json, "{m}");
        assert!(back.mechanism.is_some(), "{m}");
        // The keys the table gives, for summary.json's parameters.
        let table: toml::Table = toml::from_str(&format!("m = {m}")).unwrap();
        let mut given: Vec<&String> = table["m"].as_table().unwrap().keys().collect();
        given.retain(|k| *k != "kind");
        let mut keys: Vec<&String> = back.mechanism_keys.iter().collect();
        given.sort();
        keys.sort();
        assert_eq!(keys, given, "{m}");
    }
    assert!(plan_of("default.toml", &[]).mechanism.is_none());
}

#[test]
fn the_plan_has_the_scenarios_ports_routes_and_flows() {
    let plan = plan_of("default.toml", &[]);
    assert_eq!(
        (plan.hosts.len(), plan.switches.len(), plan.vms.len()),
        (5, 1, 5)
    );
    assert_eq!(plan.ports.len(), 10);
    let bottleneck = plan.ports.iter().find(|p| p.name == "sw0->r0").unwrap();
    assert_eq!(bottleneck.rate_bps, 1_000_000_000);
    assert_eq!(
        (bottleneck.queue.limit_packets, bottleneck.queue.k_packets),
        (Some(100), Some(20))
    );
    assert_eq!(plan.flows.len(), 4);
    assert_eq!(plan.flows[0].transport, "tcp");
    // Every switch reaches every VM.
    assert_eq!(plan.routes.len(), plan.vms.len());
}
