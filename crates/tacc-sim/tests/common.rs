//! Helpers shared by the scenario tests.
#![allow(dead_code)]

use tacc_sim::output::{FlowSummary, PortSummary, Summary};
use tacc_sim::sim::Sim;

pub fn run(text: &str) -> (Sim, Summary) {
    let p = tacc_sim::load(text, "test.toml", &[], None).unwrap_or_else(|e| panic!("{e}"));
    let (sim, s) = tacc_sim::run(p, Default::default(), &mut |_, _| {});
    assert!(
        s.conservation.ok,
        "packet conservation violated: {:?}",
        (
            s.conservation.sent,
            s.conservation.delivered,
            s.conservation.dropped,
            s.conservation.in_flight
        )
    );
    (sim, s)
}

pub fn flow<'a>(s: &'a Summary, name: &str) -> &'a FlowSummary {
    s.flows
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no flow {name}"))
}

pub fn port<'a>(s: &'a Summary, name: &str) -> &'a PortSummary {
    s.ports
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no port {name}"))
}

/// Mean goodput (Mb/s) of a flow over [from, to) seconds, from its goodput bins.
pub fn goodput_between(sim: &Sim, name: &str, from: f64, to: f64) -> f64 {
    let f = sim.m.flows.iter().find(|f| f.name == name).unwrap();
    let bin = sim.m.goodput_bin as f64 / 1e9;
    let (a, b) = ((from / bin).round() as usize, (to / bin).round() as usize);
    let bytes: u64 = (a..b).map(|i| f.bin(i)).sum();
    bytes as f64 * 8.0 / (to - from) / 1e6
}

pub fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let s2: f64 = x.iter().map(|v| v * v).sum();
    s * s / (x.len() as f64 * s2)
}

/// A star of `senders` hosts into r0 over 1 Gb/s links (RTT 100 us), RED-ECN K = 20, 100-packet buffer.
pub fn star(senders: u32, duration: &str, rest: &str) -> String {
    format!(
        "name = \"t\"\nduration = \"{duration}\"\n[topology]\nkind = \"star\"\nsenders = {senders}\nreceivers = 1\nlink_rate = \"1Gbps\"\nlink_delay = \"25us\"\n[queue]\nkind = \"red-ecn\"\nlimit = \"100pkt\"\nk = \"20pkt\"\n{rest}"
    )
}

/// Seconds in a duration string such as "10ms".
pub fn secs(d: &str) -> f64 {
    tacc_sim::units::Duration::parse(d).unwrap().0 as f64 / 1e9
}
