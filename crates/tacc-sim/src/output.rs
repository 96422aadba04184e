//! Result files: summary.json, flows.csv, goodput.csv, queues.csv. Everything a report or a
//! plot shows is read back from these.

use crate::model::{Model, Port};
use crate::packet::Packet;
use crate::pcap::{PcapngWriter, LINKTYPE_RAW};
use serde::Serialize;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::io;
use std::path::Path;

/// Packet conservation: every packet sent to a NIC is delivered, dropped or still in flight.
#[derive(Clone, Debug, Default)]
pub struct Conservation {
    pub sent: u64,
    pub delivered: u64,
    pub dropped: u64,
}

/// What a run records besides the world's own state: event and drop counts, and the time
/// series written to rates.csv and queues.csv.
#[derive(Default)]
pub struct Recorded {
    pub events: u64,
    /// A partitioned run's windows (`crate::parallel`).
    pub windows: u64,
    pub cons: Conservation,
    /// Packets sent to a NIC and not yet delivered or dropped, at the end.
    pub in_flight: u64,
    /// Packets dropped by the vswitch egress hook before reaching the NIC.
    pub shim_dropped: u64,
    /// Packets dropped by switch rules.
    pub rule_dropped: u64,
    /// Packets dropped because a VM's vNIC queue was full.
    pub vnic_dropped: u64,
    /// Allocated rates sampled every goodput bin: (time, VM address, destination or 0, bits/s).
    pub rate_samples: Vec<(u64, u32, u32, u64)>,
    /// (time, port, packets, bytes), when not streamed.
    pub queue_samples: Vec<(u64, u32, u32, u64)>,
    /// When set, queue samples go straight to this CSV file instead of `queue_samples`, so
    /// memory stays flat however long the run.
    pub queue_out: Option<QueueStream>,
    /// Headers copied to the controller by switch rules: (time, switch, in port, packet).
    pub packet_ins: Vec<(u64, u32, u32, Packet)>,
    /// The captures of `output.pcap`, written as the run goes.
    pub capture: Option<Capture>,
}

impl Recorded {
    /// Records one queue sample of `port` (named `name`).
    pub fn queue_sample(&mut self, now: u64, port: u32, name: &str, pkts: u32, bytes: u64) {
        match &mut self.queue_out {
            Some(q) => q.row(now, name, pkts, bytes),
            None => self.queue_samples.push((now, port, pkts, bytes)),
        }
    }
}

/// Bytes kept of a captured packet: its headers with their options (as `tcpdump -s 128`).
pub const PCAP_SNAPLEN: u32 = 128;

/// The captures of `output.pcap`: one pcapng file per port in `pcap/`, named by
/// [`capture_files`], packets as [`Packet::to_wire`] writes them, in time order.
///
/// A packet is handed over as it is admitted, stamped with the start of its serialization,
/// which may be later than the drops that follow it: each port's sent packets wait here
/// until the time they started has come, and those that had not started when the run ended
/// are left out, as a capture on the wire never saw them.
pub struct Capture {
    ports: HashMap<u32, CapturedPort>,
    /// The first write error, reported when the run ends.
    error: Option<io::Error>,
}

struct CapturedPort {
    file: PcapngWriter<io::BufWriter<std::fs::File>>,
    /// Sent packets not written yet, in the order of their stamps: (stamp, bytes, note).
    waiting: VecDeque<(u64, Vec<u8>, Option<&'static str>)>,
}

impl Capture {
    /// Opens the captures of the model's `pcap_ports` in `dir/pcap` and flags their ports;
    /// `None` without any. Capture files of an earlier run there are removed (nothing else).
    pub fn create(dir: &Path, m: &mut Model) -> io::Result<Option<Capture>> {
        if m.pcap_ports.is_empty() {
            return Ok(None);
        }
        let pcap_dir = dir.join("pcap");
        std::fs::create_dir_all(&pcap_dir)?;
        for entry in std::fs::read_dir(&pcap_dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "pcapng") {
                std::fs::remove_file(path)?;
            }
        }
        let names: Vec<&str> = m
            .pcap_ports
            .iter()
            .map(|&p| m.ports[p as usize].name.as_str())
            .collect();
        let files = capture_files(&names);
        let mut ports = HashMap::new();
        for (&port, file) in m.pcap_ports.iter().zip(files) {
            let p = &mut m.ports[port as usize];
            p.extras |= Port::CAPTURED;
            let app = concat!("tacc ", env!("CARGO_PKG_VERSION"));
            let out = io::BufWriter::new(std::fs::File::create(pcap_dir.join(file))?);
            let mut w = PcapngWriter::new(out, app)?;
            w.interface(&p.name, LINKTYPE_RAW, PCAP_SNAPLEN)?;
            let waiting = VecDeque::new();
            ports.insert(port, CapturedPort { file: w, waiting });
        }
        Ok(Some(Capture { ports, error: None }))
    }

    /// A packet `port` sends, starting at `at` (now or later).
    pub fn sent(&mut self, port: u32, at: u64, pkt: &Packet, note: Option<&'static str>) {
        if let Some(p) = self.ports.get_mut(&port) {
            p.waiting.push_back((at, pkt.to_wire(), note));
        }
    }

    /// A packet `port`'s queue refused `now`: written after what the port sent until now.
    pub fn dropped(&mut self, port: u32, now: u64, pkt: &Packet, note: &'static str) {
        let Some(p) = self.ports.get_mut(&port) else {
            return;
        };
        let mut result = p.write_until(now);
        if result.is_ok() {
            let bytes = pkt.to_wire();
            result = p.file.packet(0, now, &bytes, bytes.len(), Some(note));
        }
        if let (Err(e), None) = (result, &self.error) {
            self.error = Some(e);
        }
    }

    /// Writes what the ports had started sending by `end` and flushes the files; the first
    /// error of the run, if any.
    pub fn finish(mut self, end: u64) -> io::Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.ports.values_mut().try_for_each(|p| {
            p.write_until(end)?;
            p.file.flush()
        })
    }
}

impl CapturedPort {
    fn write_until(&mut self, now: u64) -> io::Result<()> {
        while self.waiting.front().is_some_and(|w| w.0 <= now) {
            let (at, bytes, note) = self.waiting.pop_front().expect("a front");
            self.file.packet(0, at, &bytes, bytes.len(), note)?;
        }
        Ok(())
    }
}

/// The capture file of each port named: `->` as `-to-`, anything but ASCII letters, digits,
/// `.`, `_` and `-` as `_`, `.pcapng`; a name another port took already gets `-2`, `-3`,
/// ... until it is unique.
pub fn capture_files(ports: &[&str]) -> Vec<String> {
    let mut taken = HashSet::new();
    ports
        .iter()
        .map(|port| {
            let stem: String = port
                .replace("->", "-to-")
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || "._-".contains(c) {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let mut file = format!("{stem}.pcapng");
            let mut n = 1;
            while !taken.insert(file.clone()) {
                n += 1;
                file = format!("{stem}-{n}.pcapng");
            }
            file
        })
        .collect()
}

/// Queue samples streamed to a CSV file as the run goes (`queues.csv`'s format).
pub struct QueueStream {
    pub path: std::path::PathBuf,
    out: std::io::BufWriter<std::fs::File>,
    /// The first write error, reported when the results are written.
    pub error: Option<std::io::Error>,
}

impl QueueStream {
    pub fn create(path: &Path) -> io::Result<QueueStream> {
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        queues_header(&mut out)?;
        Ok(QueueStream {
            path: path.to_path_buf(),
            out,
            error: None,
        })
    }

    fn row(&mut self, now: u64, name: &str, pkts: u32, bytes: u64) {
        if self.error.is_none() {
            if let Err(e) = queue_row(&mut self.out, now, name, pkts, bytes) {
                self.error = Some(e);
            }
        }
    }

    /// Flushes the file; returns its path or the first error.
    pub fn finish(mut self) -> io::Result<std::path::PathBuf> {
        use std::io::Write;
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()?;
        Ok(self.path)
    }
}

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
    /// Window reductions in answer to ECN echoes (at most one per round trip).
    pub ecn_reductions: u64,
}

#[derive(Serialize)]
pub struct PortSummary {
    pub name: String,
    pub rate_bps: u64,
    pub enqueued: u64,
    pub dropped: u64,
    pub dropped_overflow: u64,
    pub dropped_aqm: u64,
    /// Lost on the link (the scenario's random loss).
    pub dropped_loss: u64,
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
    /// Present when queues.csv holds a subset of the switch ports (the default on a large
    /// fabric): which, and how to ask for more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_sample_ports: Option<SampledPorts>,
    pub flows: Vec<FlowSummary>,
    pub ports: Vec<PortSummary>,
    pub conservation: ConservationSummary,
    pub control: ControlSummary,
    pub mechanism: MechanismSummary,
    pub partitions: PartitionSummary,
}

/// How the run was split (`crate::parallel`): the partitions are the scenario's, so the
/// results do not depend on the threads that ran them.
#[derive(Serialize, Default)]
pub struct PartitionSummary {
    pub count: u16,
    /// The least time between partitions: each ran this much simulated time alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lookahead_s: Option<f64>,
    /// Why the run is one partition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub one_because: Option<String>,
    /// Windows run between exchanges, and the events a window held on average.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub windows: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_per_window: Option<f64>,
    /// The wall time a thread waited for the others to finish windows, on average over the threads
    /// (before `critical_events`: a line that tools drop with the run's wall time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub barrier_wall_seconds: Option<f64>,
    /// By a number of cores (1, 2, 4, ... and the partitions' count): the events and the
    /// mail taken on the critical path had the partitions run on that many, partition p on
    /// core p % cores (the sum over the windows of the busiest core's; the busiest in events
    /// and in mail may be two cores, so together they bound the path from above). The
    /// scenario's, whatever the threads that ran it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub critical_events: Option<Vec<CriticalPath>>,
}

#[derive(Serialize)]
pub struct CriticalPath {
    pub cores: usize,
    pub events: u64,
    /// Packets and control messages taken from other partitions.
    pub mail: u64,
}

#[derive(Serialize)]
pub struct SampledPorts {
    pub sampled: usize,
    pub switch_ports: usize,
    /// Every n-th switch port in index order, from the first.
    pub every: usize,
    pub note: String,
}

/// The mechanism under test: its parameters as given, what it did, and its control traffic.
#[derive(Serialize)]
pub struct MechanismSummary {
    pub kind: &'static str,
    /// Parameters set in the scenario (unset ones take the papers' defaults).
    pub params: serde_json::Value,
    pub counters: std::collections::BTreeMap<&'static str, f64>,
    pub control_latency_s: f64,
    /// Control messages and bytes by kind, and in total: the controller's channel, and the
    /// shims' in-band feedback packets (HyGenICC's) as `in_band_feedback`.
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
    m: &Model,
    rec: &Recorded,
    file: &str,
    mechanism: &tacc_mech::MechanismConfig,
    mechanism_keys: &[String],
    wall_seconds: f64,
) -> Summary {
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
                ecn_reductions: st.ecn_reductions,
            }
        })
        .collect();
    let ports = m
        .ports
        .iter()
        .map(|p| PortSummary {
            name: p.name.clone(),
            rate_bps: p.rate_bps,
            enqueued: p.enqueued(),
            dropped: p.drops.total(),
            dropped_overflow: p.drops.overflow,
            dropped_aqm: p.drops.aqm,
            dropped_loss: p.drops.loss,
            marked: p.stats.marked,
            max_backlog_pkts: p.max_backlog as u64,
            mean_backlog_pkts: p.stats.backlog_integral as f64 / end as f64,
            tx_bytes: p.stats.tx_bytes,
            utilization: p.stats.tx_bytes as f64 * 8.0 / (p.rate_bps as f64 * end as f64 / NS),
        })
        .collect();
    let c = &rec.cons;
    let in_flight = rec.in_flight;
    Summary {
        tacc_version: env!("CARGO_PKG_VERSION"),
        scenario: m.name.clone(),
        scenario_file: file.to_string(),
        seed: m.seed,
        sim_seconds: end as f64 / NS,
        wall_seconds,
        events: rec.events,
        goodput_bin_s: m.goodput_bin as f64 / NS,
        queue_sample_s: m.queue_sample as f64 / NS,
        queue_sample_ports: m.sampled_subset.map(|sub| SampledPorts {
            sampled: m.sampled_ports.len(),
            switch_ports: sub.of,
            every: sub.every,
            note: format!(
                "queues.csv samples {} of the {} switch ports, one in {} in index order \
                 (without output.ports at most {} are sampled); output.ports = \"switches\", \
                 \"all\" or a list of port names samples those",
                m.sampled_ports.len(),
                sub.of,
                sub.every,
                crate::build::DEFAULT_SAMPLED_PORTS
            ),
        }),
        flows,
        ports,
        mechanism: {
            let msgs = &m.control.messages;
            // What the file gives, as read: the parameters a reader of the run compares.
            let mut params = serde_json::to_value(mechanism).unwrap_or_default();
            if let serde_json::Value::Object(map) = &mut params {
                map.retain(|k, _| mechanism_keys.contains(k));
            }
            MechanismSummary {
                kind: mechanism.kind(),
                params,
                counters: crate::mechanism::counters(&m.shims, &m.switch_mech),
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
            packet_ins: rec.packet_ins.len() as u64,
            rule_dropped: rec.rule_dropped,
        },
        conservation: ConservationSummary {
            sent: c.sent,
            delivered: c.delivered,
            dropped: c.dropped,
            in_flight,
            ok: c.sent == c.delivered + c.dropped + in_flight,
            shim_dropped: rec.shim_dropped,
            vnic_dropped: rec.vnic_dropped,
        },
        partitions: PartitionSummary::default(),
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// queues.csv, written here from samples kept in memory and by [`QueueStream`] as a run
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
pub fn write(dir: &Path, m: &Model, rec: &mut Recorded, summary: &Summary) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let streamed = rec.queue_out.take().map(|q| q.finish()).transpose()?;
    let rec = &*rec;
    let mut flows = String::from("name,group,src,dst,transport,cc,ecn,bytes_delivered,start,end,fct,goodput_mbps,completed,retransmits,fast_retransmits,timeouts,ecn_reductions\n");
    for f in &summary.flows {
        let _ = writeln!(
            flows,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
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
            f.timeouts,
            f.ecn_reductions
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
            let bytes = f.bin(b);
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
    for &(t, p, pkts, bytes) in &rec.queue_samples {
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
    for &(t, vm, dst, bps) in &rec.rate_samples {
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
    if !rec.rate_samples.is_empty() {
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
