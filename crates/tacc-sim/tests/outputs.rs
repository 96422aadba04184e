//! What a run writes by default on a large fabric stays bounded.

mod common;
use common::run;
use tacc_sim::build::DEFAULT_SAMPLED_PORTS;

fn fat_tree(k: u32, output: &str) -> String {
    format!(
        "name = \"ft\"\nduration = \"2ms\"\n[topology]\nkind = \"fat-tree\"\nk = {k}\n\
         link_rate = \"1Gbps\"\nlink_delay = \"1us\"\n[[traffic]]\nname = \"web\"\n\
         cdf = \"websearch\"\nload = 0.5\n{output}"
    )
}

/// Queue samples taken at each sampling time: (rows, distinct ports).
fn per_sample(sim: &tacc_sim::sim::Sim) -> (usize, usize) {
    let first = sim.rec.queue_samples[0].0;
    let rows: Vec<_> = sim
        .rec
        .queue_samples
        .iter()
        .filter(|q| q.0 == first)
        .collect();
    let mut ports: Vec<u32> = rows.iter().map(|q| q.1).collect();
    ports.dedup();
    (rows.len(), ports.len())
}

#[test]
fn a_large_fat_trees_default_queue_samples_are_bounded_and_say_so() {
    // k = 16: 5,120 switch ports; one in five is sampled.
    let (sim, s) = run(&fat_tree(16, ""));
    let (rows, ports) = per_sample(&sim);
    assert_eq!(
        (rows, ports),
        (DEFAULT_SAMPLED_PORTS, DEFAULT_SAMPLED_PORTS)
    );
    assert!(sim.rec.queue_samples.len() <= 3 * DEFAULT_SAMPLED_PORTS);
    let note = s
        .queue_sample_ports
        .as_ref()
        .expect("the subset is reported");
    assert_eq!(
        (note.sampled, note.switch_ports, note.every),
        (1024, 5120, 5)
    );
    assert!(note.note.contains("output.ports = \"switches\""));
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["queue_sample_ports"]["sampled"], 1024);
    // Every tier is sampled: edge, aggregation and core ports.
    let names: Vec<&str> = sim
        .m
        .sampled_ports
        .iter()
        .map(|&p| sim.m.ports[p as usize].name.as_str())
        .collect();
    for tier in ["edge", "agg", "core"] {
        assert!(
            names.iter().any(|n| n.starts_with(tier)),
            "no {tier} port sampled"
        );
    }
}

#[test]
fn all_switch_ports_are_sampled_on_request_or_below_the_bound() {
    let (sim, s) = run(&fat_tree(16, "[output]\nports = \"switches\"\n"));
    assert_eq!(per_sample(&sim).1, 5120);
    assert!(s.queue_sample_ports.is_none());
    // k = 8: 640 switch ports, all sampled by default, and summary.json as before.
    let (sim, s) = run(&fat_tree(8, ""));
    assert_eq!(per_sample(&sim).1, 640);
    assert!(s.queue_sample_ports.is_none());
    let json = serde_json::to_value(&s).unwrap();
    assert!(json.get("queue_sample_ports").is_none());
}
