//! Result files: summary.json, flows.csv, goodput.csv, queues.csv. Everything a report or a
//! plot shows is read back from these.

use crate::model::Model;
use crate::sim::Sim;
use serde::Serialize;
use std::fmt::Write as _;
use std::io;
use std::path::Path;

#[derive(Serialize)]
pub struct FlowSummary {
    pub name: String,
    pub group: String,
    pub src: String,
    pub dst: String,
    pub transport: &'static str,
    pub cc: Option<&'static str>,
    pub ecn: bool,
    pub bytes_delivered: u64,
    pub start: f64,
    pub end: Option<f64>,
    pub fct: Option<f64>,
    pub goodput_mbps: f64,
    pub completed: bool,
    pub retransmits: u64,
    pub fast_retransmits: u64,
    pub timeouts: u64,
}

#[derive(Serialize)]
pub struct PortSummary {
    pub name: String,
    pub rate_bps: u64,
    pub enqueued: u64,
    pub dropped: u64,
    pub dropped_overflow: u64,
    pub dropped_aqm: u64,
    pub marked: u64,
    pub max_backlog_pkts: u64,
    pub mean_backlog_pkts: f64,
    pub tx_bytes: u64,
    pub utilization: f64,
}

#[derive(Serialize)]
pub struct ConservationSummary {
    pub sent: u64,
    pub delivered: u64,
    pub dropped: u64,
    pub in_flight: u64,
    pub ok: bool,
    /// Packets dropped by a vswitch egress hook before entering the network.
    pub shim_dropped: u64,
    /// Packets dropped at a full VM vNIC queue before reaching the vswitch.
    pub vnic_dropped: u64,
}

#[derive(Serialize)]
pub struct Summary {
    pub tacc_version: &'static str,
    pub scenario: String,
    pub scenario_file: String,
    pub seed: u64,
    pub sim_seconds: f64,
    pub wall_seconds: f64,
    pub events: u64,
    pub goodput_bin_s: f64,
    pub queue_sample_s: f64,
    pub flows: Vec<FlowSummary>,
    pub ports: Vec<PortSummary>,
    pub conservation: ConservationSummary,
    pub control: ControlSummary,
    pub mechanism: MechanismSummary,
}

/// The mechanism under test: its parameters as given, what it did, and its control traffic.
#[derive(Serialize)]
pub struct MechanismSummary {
    pub kind: crate::scenario::MechanismKind,
    /// Parameters set in the scenario (unset ones take the papers' defaults).
    pub params: serde_json::Value,
    pub counters: std::collections::BTreeMap<&'static str, f64>,
    pub control_latency_s: f64,
    /// Control-channel messages and bytes by kind, and in total.
    pub control_messages: std::collections::BTreeMap<&'static str, u64>,
    pub control_bytes: std::collections::BTreeMap<&'static str, u64>,
    pub control_messages_total: u64,
    pub control_bytes_total: u64,
}

/// Switch flow-table activity.
#[derive(Serialize)]
pub struct ControlSummary {
    pub rules_installed: u64,
    pub rules_expired: u64,
    /// Packet copies sent to the controller by rules.
    pub packet_ins: u64,
    pub rule_dropped: u64,
}

const NS: f64 = 1e9;

pub fn summarize(
    sim: &Sim,
    file: &str,
    mechanism: &crate::scenario::MechanismCfg,
    wall_seconds: f64,
) -> Summary {
    let m: &Model = &sim.m;
    let end = m.duration;
    let flows = m
        .flows
        .iter()
        .map(|f| {
            let st = m.tcp_stats(f);
            let stop = f.end.unwrap_or(end).max(f.start);
            let active = (stop - f.start) as f64 / NS;
            let goodput = if active > 0.0 {
                f.delivered as f64 * 8.0 / active / 1e6
            } else {
                0.0
            };
            FlowSummary {
                name: f.name.clone(),
                group: f.group.clone(),
                src: m.vms[f.src_vm as usize].name.clone(),
                dst: m.vms[f.dst_vm as usize].name.clone(),
                transport: if f.udp.is_some() { "udp" } else { "tcp" },
                cc: f.cc.map(|c| c.name()),
                ecn: f.ecn,
                bytes_delivered: f.delivered,
                start: f.start as f64 / NS,
                end: f.end.map(|e| e as f64 / NS),
                fct: if f.completed {
                    f.end.map(|e| (e - f.start) as f64 / NS)
                } else {
                    None
                },
                goodput_mbps: goodput,
                completed: f.completed,
                retransmits: st.retransmits,
                fast_retransmits: st.fast_retransmits,
                timeouts: st.timeouts,
            }
        })
        .collect();
    let ports = m
        .ports
        .iter()
        .map(|p| PortSummary {
            name: p.name.clone(),
            rate_bps: p.rate_bps,
            enqueued: p.stats.enqueued,
            dropped: p.stats.dropped(),
            dropped_overflow: p.stats.dropped_overflow,
            dropped_aqm: p.stats.dropped_aqm,
            marked: p.stats.marked,
            max_backlog_pkts: p.stats.max_backlog,
            mean_backlog_pkts: p.stats.backlog_integral as f64 / end as f64,
            tx_bytes: p.stats.tx_bytes,
            utilization: p.stats.tx_bytes as f64 * 8.0 / (p.rate_bps as f64 * end as f64 / NS),
        })
        .collect();
    let c = &sim.cons;
    let in_flight = sim.in_flight();
    Summary {
        tacc_version: env!("CARGO_PKG_VERSION"),
        scenario: m.name.clone(),
        scenario_file: file.to_string(),
        seed: m.seed,
        sim_seconds: end as f64 / NS,
        wall_seconds,
        events: sim.events,
        goodput_bin_s: m.goodput_bin as f64 / NS,
        queue_sample_s: m.queue_sample as f64 / NS,
        flows,
        ports,
        mechanism: {
            let msgs = &m.control.messages;
            let mut params = serde_json::to_value(mechanism).unwrap_or_default();
            if let serde_json::Value::Object(map) = &mut params {
                map.retain(|k, v| k != "kind" && !v.is_null());
            }
            MechanismSummary {
                kind: mechanism.kind,
                params,
                counters: crate::mechanism::counters(m),
                control_latency_s: m.control.latency as f64 / NS,
                control_messages: msgs.iter().map(|(k, v)| (*k, v.0)).collect(),
                control_bytes: msgs.iter().map(|(k, v)| (*k, v.1)).collect(),
                control_messages_total: msgs.values().map(|v| v.0).sum(),
                control_bytes_total: msgs.values().map(|v| v.1).sum(),
            }
        },
        control: ControlSummary {
            rules_installed: m.tables.iter().map(|t| t.installed).sum(),
            rules_expired: m.tables.iter().map(|t| t.expired).sum(),
            packet_ins: sim.packet_ins.len() as u64,
            rule_dropped: sim.rule_dropped,
        },
        conservation: ConservationSummary {
            sent: c.sent,
            delivered: c.delivered,
            dropped: c.dropped,
            in_flight,
            ok: c.sent == c.delivered + c.dropped + in_flight,
            shim_dropped: sim.shim_dropped,
            vnic_dropped: sim.vnic_dropped,
        },
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// queues.csv, written here from samples kept in memory and by `sim::QueueStream` as a run
/// streams them.
pub fn queues_header(out: &mut impl io::Write) -> io::Result<()> {
    writeln!(out, "time_s,port,backlog_pkts,backlog_bytes")
}

pub fn queue_row(
    out: &mut impl io::Write,
    t: u64,
    port: &str,
    pkts: u32,
    bytes: u64,
) -> io::Result<()> {
    writeln!(
        out,
        "{},{},{},{}",
        t as f64 / NS,
        csv_field(port),
        pkts,
        bytes
    )
}

fn opt(v: Option<f64>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

/// Writes all result files into `dir` (created if needed). Files are written to temporary
/// names and renamed, so a failed run leaves no half-written result.
pub fn write(dir: &Path, sim: &mut Sim, summary: &Summary) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let streamed = sim.queue_out.take().map(|q| q.finish()).transpose()?;
    let sim = &*sim;
    let m = &sim.m;
    let mut flows = String::from("name,group,src,dst,transport,cc,ecn,bytes_delivered,start,end,fct,goodput_mbps,completed,retransmits,fast_retransmits,timeouts\n");
    for f in &summary.flows {
        let _ = writeln!(
            flows,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            csv_field(&f.name),
            csv_field(&f.group),
            csv_field(&f.src),
            csv_field(&f.dst),
            f.transport,
            f.cc.unwrap_or(""),
            f.ecn,
            f.bytes_delivered,
            f.start,
            opt(f.end),
            opt(f.fct),
            f.goodput_mbps,
            f.completed,
            f.retransmits,
            f.fast_retransmits,
            f.timeouts
        );
    }
    let bin = m.goodput_bin;
    let bins = m.duration.div_ceil(bin) as usize;
    let mut goodput = String::from("time_s,flow,goodput_mbps\n");
    for f in &m.flows {
        // Bins from the flow's start bin to its end bin (zeros included: a starving flow shows).
        let first = (f.start / bin) as usize;
        let last = (f
            .end
            .unwrap_or(m.duration)
            .min(m.duration)
            .saturating_sub(1)
            / bin) as usize;
        for b in first..=last.min(bins.saturating_sub(1)) {
            let bytes = f.bins.get(b).copied().unwrap_or(0);
            let _ = writeln!(
                goodput,
                "{},{},{}",
                (b as u64 * bin) as f64 / NS,
                csv_field(&f.name),
                bytes as f64 * 8.0 / (bin as f64 / NS) / 1e6
            );
        }
    }
    let mut queues = Vec::new();
    queues_header(&mut queues)?;
    for &(t, p, pkts, bytes) in &sim.queue_samples {
        queue_row(&mut queues, t, &m.ports[p as usize].name, pkts, bytes)?;
    }
    let queues = String::from_utf8(queues).map_err(io::Error::other)?;
    let mut rates = String::from("time_s,vm,dst,rate_mbps\n");
    let vm_name = |ip: u32| {
        m.host_of_ip(ip)
            .and_then(|_| m.vms.iter().find(|v| v.ip == ip))
            .map(|v| v.name.as_str())
            .unwrap_or("")
    };
    for &(t, vm, dst, bps) in &sim.rate_samples {
        let _ = writeln!(
            rates,
            "{},{},{},{}",
            t as f64 / NS,
            csv_field(vm_name(vm)),
            csv_field(vm_name(dst)),
            bps as f64 / 1e6
        );
    }
    let json = serde_json::to_string_pretty(summary).map_err(io::Error::other)?;
    let mut files = vec![("flows.csv", flows), ("goodput.csv", goodput)];
    match streamed {
        Some(path) => std::fs::rename(path, dir.join("queues.csv"))?,
        None => files.push(("queues.csv", queues)),
    }
    if !sim.rate_samples.is_empty() {
        files.push(("rates.csv", rates));
    }
    files.push(("summary.json", json + "\n"));
    for (name, body) in files {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, body)?;
        std::fs::rename(&tmp, dir.join(name))?;
    }
    Ok(())
}
