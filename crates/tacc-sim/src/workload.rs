//! A scenario's open-loop traffic drawn without running it: every flow's endpoints, size,
//! start and the ports its data packets cross, routed as the engine routes them (ECMP by the
//! 5-tuple hash, source ports allocated per VM in start order as a run allocates them).
//!
//! Each source draws from its own random stream ([`Traffic::stream`]), as it does in a run,
//! so these are the run's very flows: the same names, endpoints, sizes and start times, and
//! on a scenario whose only flows are `[[traffic]]` the same paths.

use crate::model::{App, Model, Traffic};

/// One flow of the workload.
pub struct WorkloadFlow {
    /// As a run names it: `<traffic name>.<arrival number>`.
    pub name: String,
    pub group: String,
    pub src_vm: u32,
    pub dst_vm: u32,
    pub bytes: u64,
    pub start: u64,
    pub cc: &'static str,
    pub ecn: bool,
    /// The source port the run gives the flow, and the sink's.
    pub src_port: u16,
    pub dst_port: u16,
    /// The ports the data packets cross, source NIC first.
    pub ports: Vec<u32>,
}

/// The flows of every `[[traffic]]` source until its stop or the end of the run, in start
/// order (ties by source order). Other flows (`[[flows]]`, `[[incast]]`) are not included.
pub fn generate(m: &mut Model) -> Vec<WorkloadFlow> {
    let mut drawn = Vec::new();
    for (a, app) in m.apps.iter().enumerate() {
        let App::Traffic(t) = app else { continue };
        // A copy of the source's stream: the model's is left at its first arrival, for a run.
        let mut rng = t.rng.clone();
        // A run handles events up to and including its end; a source stops at its `stop`.
        let open = |now: u64| now <= m.duration && t.stop.is_none_or(|s| now < s);
        let mut now = t.start;
        let mut k = 0u32;
        while open(now) {
            let arrival = t.draw(&mut rng);
            drawn.push((now, a, k, arrival));
            now += arrival.gap_ns.max(1);
            k += 1;
        }
    }
    drawn.sort_by_key(|&(start, a, k, _)| (start, a, k));
    drawn
        .into_iter()
        .map(|(start, a, k, arrival)| {
            let App::Traffic(Traffic { name, tcp, .. }) = &m.apps[a] else {
                unreachable!("drawn from a traffic source")
            };
            let (name, group, cc, ecn) = (format!("{name}.{k}"), name.clone(), tcp.cc, tcp.ecn);
            let (sport, dport) = (m.alloc_port(arrival.src), crate::model::TCP_DPORT);
            WorkloadFlow {
                name,
                group,
                src_vm: arrival.src,
                dst_vm: arrival.dst,
                bytes: arrival.bytes,
                start,
                cc: cc.name(),
                ecn,
                src_port: sport,
                dst_port: dport,
                ports: m.tcp_path(arrival.src, arrival.dst, sport, dport),
            }
        })
        .collect()
}
