//! The scenario file: schema, strict parsing, `--set` overrides and error locations.
//!
//! Every key is declared once here, with its unit (by type) and default; unknown keys are
//! errors. Errors name the file, the line, the key path and what was expected.

use crate::cc::CcKind;
use crate::units::{Bytes, Duration, Rate, Size};
use serde::Deserialize;
use std::fmt;
use tacc_mech::MechanismConfig;

#[derive(Debug, Clone)]
pub struct ScenarioError {
    pub file: String,
    pub line: Option<usize>,
    pub field: String,
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ScenarioError {}

fn default_one() -> u32 {
    1
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name shown in results; defaults to the file stem.
    pub name: Option<String>,
    pub description: Option<String>,
    /// Simulated time.
    pub duration: Duration,
    #[serde(default = "default_seed")]
    pub seed: u64,
    pub topology: Topology,
    #[serde(default)]
    pub queue: QueueCfg,
    #[serde(default)]
    pub nic: NicCfg,
    #[serde(default)]
    pub tcp: TcpCfg,
    #[serde(default)]
    pub flows: Vec<FlowCfg>,
    #[serde(default)]
    pub incast: Vec<IncastCfg>,
    #[serde(default)]
    pub traffic: Vec<TrafficCfg>,
    #[serde(default)]
    pub rules: Vec<RuleCfg>,
    #[serde(default)]
    /// The mechanism under test: `kind` and that kind's keys (see `tacc_mech::mechanisms`).
    pub mechanism: MechanismConfig,
    #[serde(default)]
    pub output: OutputCfg,
}

fn default_seed() -> u64 {
    1
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "kebab-case")]
pub enum Topology {
    /// N senders and M receivers on one switch; the bottleneck is the switch port to a receiver.
    Star {
        senders: u32,
        receivers: u32,
        link_rate: Rate,
        link_delay: Duration,
        #[serde(default = "default_one")]
        vms_per_host: u32,
    },
    /// Senders on a left switch, receivers on a right switch, one bottleneck link between them.
    Dumbbell {
        senders: u32,
        receivers: u32,
        link_rate: Rate,
        link_delay: Duration,
        bottleneck_rate: Option<Rate>,
        bottleneck_delay: Option<Duration>,
        #[serde(default = "default_one")]
        vms_per_host: u32,
    },
    /// Servers -> ToR -> aggregation -> core; every ToR links to every aggregation switch and
    /// every aggregation switch to every core switch.
    Racks {
        racks: u32,
        servers_per_rack: u32,
        aggs: u32,
        #[serde(default = "default_one")]
        cores: u32,
        host_rate: Rate,
        tor_rate: Rate,
        agg_rate: Rate,
        link_delay: Duration,
        #[serde(default = "default_one")]
        vms_per_host: u32,
    },
    /// The k-ary fat tree (k pods, k^3/4 hosts), all links at one rate.
    FatTree {
        k: u32,
        link_rate: Rate,
        link_delay: Duration,
        #[serde(default = "default_one")]
        vms_per_host: u32,
    },
    /// Nodes and links listed one by one.
    Explicit {
        hosts: Vec<String>,
        switches: Vec<String>,
        links: Vec<LinkCfg>,
        #[serde(default = "default_one")]
        vms_per_host: u32,
    },
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct LinkCfg {
    pub a: String,
    pub b: String,
    pub rate: Rate,
    pub delay: Duration,
}

#[derive(Deserialize, Debug, Clone, Copy, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub enum QueueKind {
    Droptail,
    /// RED with min = max = K on the instantaneous queue: ECT packets are CE-marked,
    /// others dropped, when the queue holds K or more on arrival (the papers' setting).
    RedEcn,
    /// Classic RED on the averaged queue (Floyd & Jacobson), marking ECT packets if `ecn`.
    Red,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct QueueCfg {
    #[serde(default = "default_queue_kind")]
    pub kind: QueueKind,
    #[serde(default = "default_limit")]
    pub limit: Size,
    /// Marking threshold for red-ecn.
    pub k: Option<Size>,
    pub min_th: Option<Size>,
    pub max_th: Option<Size>,
    pub max_p: Option<f64>,
    pub weight: Option<f64>,
    #[serde(default = "default_true")]
    pub ecn: bool,
    /// Mean packet size used by RED's idle-time decay.
    #[serde(default)]
    pub overrides: Vec<PortQueueCfg>,
}

/// A queue configuration for specific ports (by name, e.g. "sw0->r0").
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct PortQueueCfg {
    pub ports: Vec<String>,
    pub kind: Option<QueueKind>,
    pub limit: Option<Size>,
    pub k: Option<Size>,
}

fn default_queue_kind() -> QueueKind {
    QueueKind::RedEcn
}
fn default_limit() -> Size {
    Size::Packets(100)
}
fn default_true() -> bool {
    true
}

impl Default for QueueCfg {
    fn default() -> Self {
        QueueCfg {
            kind: default_queue_kind(),
            limit: default_limit(),
            k: None,
            min_th: None,
            max_th: None,
            max_p: None,
            weight: None,
            ecn: true,
            overrides: vec![],
        }
    }
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct NicCfg {
    /// Drop-tail limit of each host NIC's egress queue.
    #[serde(default = "default_nic_limit")]
    pub limit: Size,
    /// Random extra delay, uniform in [0, jitter], added to every packet a host NIC sends
    /// (default: one 1500-byte packet time at the NIC's rate, 12 us at 1 Gb/s). Real hosts
    /// have microseconds of transmit timing noise; without any, equal-size packets phase-lock
    /// at a shared queue and the same flow wins every free slot.
    pub jitter: Option<Duration>,
}

fn default_nic_limit() -> Size {
    Size::Packets(1000)
}

impl Default for NicCfg {
    fn default() -> Self {
        NicCfg {
            limit: default_nic_limit(),
            jitter: None,
        }
    }
}

/// TCP defaults for every flow; flows may override `cc` and `ecn`.
#[derive(Deserialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct TcpCfg {
    pub cc: Option<CcKind>,
    pub ecn: Option<bool>,
    pub mss: Option<Bytes>,
    /// Initial window in segments.
    pub init_cwnd: Option<u32>,
    pub rto_min: Option<Duration>,
    pub rto_init: Option<Duration>,
    pub delayed_ack: Option<bool>,
    pub delack_timeout: Option<Duration>,
    pub sack: Option<bool>,
    /// Send SYN/SYN-ACK as ECT(0) when ECN is on (RFC 8311); default false (RFC 3168).
    pub ecn_syn: Option<bool>,
    /// Send retransmissions as ECT(0) when ECN is on (ns-2 FullTcp); default false (RFC 3168).
    pub ecn_retransmit: Option<bool>,
    /// Grow cwnd only while cwnd-limited (Linux); default false (ns-2: on every ACK).
    pub cwnd_validation: Option<bool>,
    pub rcv_buf: Option<Bytes>,
    pub dupthresh: Option<u32>,
    pub dctcp_g: Option<f64>,
    /// TCP small queues: most data a connection keeps queued in its host (VM vNIC), as time at
    /// the NIC rate (Linux: about 1 ms of the pacing rate). Default "1ms".
    pub small_queue: Option<Duration>,
}

#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tcp,
    Udp,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct FlowCfg {
    pub name: String,
    /// A group of `count` flows named name.0 .. name.N-1; "{i}" / "{i+K}" in src/dst expand.
    pub count: Option<u32>,
    pub src: String,
    pub dst: String,
    #[serde(default = "default_transport")]
    pub transport: Transport,
    #[serde(default)]
    pub start: Duration,
    pub stop: Option<Duration>,
    /// TCP: bytes to send then close (default: unlimited until stop / end of run).
    pub bytes: Option<Bytes>,
    pub cc: Option<CcKind>,
    pub ecn: Option<bool>,
    /// UDP: sending rate (constant bit rate while on).
    pub rate: Option<Rate>,
    /// UDP: IP packet size.
    pub packet_size: Option<Bytes>,
    /// UDP on/off source: mean on and off periods (exponentially distributed).
    pub on: Option<Duration>,
    pub off: Option<Duration>,
    /// UDP request/reply: the destination answers every packet with this many bytes.
    pub reply_size: Option<Bytes>,
    /// TCP: data segments (numbered from 0) whose first transmission is dropped at the sender's NIC.
    #[serde(default)]
    pub drop_segments: Vec<u64>,
}

fn default_transport() -> Transport {
    Transport::Tcp
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct IncastCfg {
    pub name: String,
    pub aggregator: String,
    /// Worker names; "{i}" expands over `count` like flow groups.
    pub workers: String,
    pub count: u32,
    /// Bytes each worker returns per epoch.
    pub bytes: Bytes,
    #[serde(default = "default_one")]
    pub epochs: u32,
    #[serde(default)]
    pub start: Duration,
    /// Fixed epoch period; without it the next epoch starts when the last one completes.
    pub interval: Option<Duration>,
    /// Mean of the exponential delay before each worker starts its response.
    #[serde(default)]
    pub jitter: Duration,
    pub cc: Option<CcKind>,
    pub ecn: Option<bool>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct TrafficCfg {
    pub name: String,
    /// Hosts that send and receive; "all" or a list of names.
    #[serde(default = "default_all")]
    pub hosts: HostSet,
    /// "websearch", "datamining" or a path to a CDF file (lines "bytes cumulative_probability").
    pub cdf: String,
    /// Offered load as a fraction of each host's link rate.
    pub load: f64,
    #[serde(default)]
    pub start: Duration,
    pub stop: Option<Duration>,
    pub cc: Option<CcKind>,
    pub ecn: Option<bool>,
}

/// A match-action rule installed in a switch's flow table at time `at`.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct RuleCfg {
    pub switch: String,
    #[serde(default)]
    pub at: Duration,
    #[serde(default)]
    pub priority: u16,
    pub hard_timeout: Option<Duration>,
    /// Match fields (omitted = wildcard). src/dst are host or VM names.
    pub src: Option<String>,
    pub dst: Option<String>,
    /// "tcp", "udp" or an IP protocol number.
    pub protocol: Option<String>,
    pub sport: Option<u16>,
    pub dport: Option<u16>,
    /// TCP flags that must be set ("syn") or clear ("!ack").
    #[serde(default)]
    pub tcp_flags: Vec<String>,
    /// "normal" (routing), "drop", or an output port name such as "sw0->r0".
    #[serde(default = "default_forward")]
    pub forward: String,
    #[serde(default)]
    pub set_ce: bool,
    #[serde(default)]
    pub copy_to_controller: bool,
}

fn default_forward() -> String {
    "normal".into()
}

#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub enum HostSet {
    Named(String),
    List(Vec<String>),
}

fn default_all() -> HostSet {
    HostSet::Named("all".into())
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct OutputCfg {
    #[serde(default = "default_bin")]
    pub goodput_bin: Duration,
    #[serde(default = "default_sample")]
    pub queue_sample: Duration,
    /// Ports sampled into queues.csv: "switches" (all switch ports), "all" or a list of names.
    #[serde(default = "default_switches")]
    pub ports: HostSet,
}

fn default_bin() -> Duration {
    Duration(100_000_000)
}
fn default_sample() -> Duration {
    Duration(1_000_000)
}
fn default_switches() -> HostSet {
    HostSet::Named("switches".into())
}

impl Default for OutputCfg {
    fn default() -> Self {
        OutputCfg {
            goodput_bin: default_bin(),
            queue_sample: default_sample(),
            ports: default_switches(),
        }
    }
}

// ---------------------------------------------------------------------------------- loading

/// A parsed scenario with its source text, for locating later (semantic) errors.
pub struct Loaded {
    pub scenario: Scenario,
    pub file: String,
    text: String,
    sets: Vec<String>,
}

impl Loaded {
    /// An error about `path` (e.g. "flows[2].src"), located in the file or in a --set.
    pub fn error(&self, path: &str, message: impl Into<String>) -> ScenarioError {
        let from_set = self
            .sets
            .iter()
            .any(|s| path.starts_with(s.as_str()) || s.starts_with(path));
        ScenarioError {
            file: if from_set {
                format!("{} (--set)", self.file)
            } else {
                self.file.clone()
            },
            line: if from_set {
                None
            } else {
                locate(&self.text, path)
            },
            field: path.to_string(),
            message: message.into(),
        }
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Finds the line of a key path such as `flows[2].src` or `topology.kind` in TOML text.
pub fn locate(text: &str, path: &str) -> Option<usize> {
    let parts: Vec<&str> = path.split('.').collect();
    let (key, tables) = parts.split_last()?;
    let key = key.split('[').next().unwrap_or(key);
    // the table header the key lives under, e.g. "flows" with index 2
    let (header, index) = match tables.last() {
        Some(t) => {
            let name = t.split('[').next().unwrap_or(t);
            let idx = t
                .split('[')
                .nth(1)
                .and_then(|s| s.trim_end_matches(']').parse::<usize>().ok());
            (
                tables[..tables.len() - 1]
                    .iter()
                    .map(|s| s.split('[').next().unwrap_or(s))
                    .chain([name])
                    .collect::<Vec<_>>()
                    .join("."),
                idx,
            )
        }
        None => (String::new(), None),
    };
    let mut in_table = header.is_empty();
    let mut seen = 0usize;
    let mut header_line = None;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with('[') {
            let name = line.trim_matches(|c| c == '[' || c == ']').trim();
            in_table = false;
            if name == header {
                if line.starts_with("[[") {
                    in_table = index.is_none_or(|i| i == seen);
                    seen += 1;
                } else {
                    in_table = true;
                }
                if in_table {
                    header_line = Some(n + 1);
                }
            }
            continue;
        }
        if in_table {
            let k = line.split('=').next().unwrap_or("").trim();
            if k == key {
                return Some(n + 1);
            }
        }
    }
    header_line
}

/// Sets `path` (dotted, with [i] indices) in a TOML table to `value` (TOML literal or bare string).
fn apply_set(root: &mut toml::Table, path: &str, raw: &str) -> Result<(), String> {
    let value = match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) => t.remove("v").unwrap(),
        Err(_) => toml::Value::String(raw.to_string()),
    };
    let mut parts: Vec<(String, Option<usize>)> = Vec::new();
    for seg in path.split('.') {
        let name = seg.split('[').next().unwrap_or(seg).to_string();
        if name.is_empty() {
            return Err("empty key in path".into());
        }
        let idx = match seg.split_once('[') {
            Some((_, rest)) => Some(
                rest.trim_end_matches(']')
                    .parse::<usize>()
                    .map_err(|_| format!("bad index in {seg:?}"))?,
            ),
            None => None,
        };
        parts.push((name, idx));
    }
    let mut cur = root;
    for (i, (name, idx)) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        if last && idx.is_none() {
            cur.insert(name.clone(), value);
            return Ok(());
        }
        let entry = cur
            .entry(name.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let target = match idx {
            Some(k) => match entry {
                toml::Value::Array(a) => a
                    .get_mut(*k)
                    .ok_or_else(|| format!("{name} has no element {k}"))?,
                _ => return Err(format!("{name} is not a list")),
            },
            None => entry,
        };
        if last {
            *target = value;
            return Ok(());
        }
        cur = match target {
            toml::Value::Table(t) => t,
            _ => return Err(format!("{name} is not a table")),
        };
    }
    Ok(())
}

/// Parses scenario text strictly and applies `--set key=value` overrides.
pub fn parse(text: &str, file: &str, sets: &[(String, String)]) -> Result<Loaded, ScenarioError> {
    let err = |line, field: &str, message: String| ScenarioError {
        file: file.to_string(),
        line,
        field: field.to_string(),
        message,
    };
    let mut table: toml::Table = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start));
        err(line, "", e.message().to_string())
    })?;
    for (k, v) in sets {
        apply_set(&mut table, k, v)
            .map_err(|m| err(None, k, format!("cannot apply --set: {m}")))?;
    }
    let loaded_sets: Vec<String> = sets.iter().map(|(k, _)| k.clone()).collect();
    let kind = table
        .get("mechanism")
        .and_then(|m| m.get("kind"))
        .and_then(|k| k.as_str())
        .map(String::from);
    let scenario: Scenario =
        serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
            let path = e.path().to_string();
            let mut message = e.inner().to_string();
            if let Some(i) = message.find("\nin `") {
                message.truncate(i);
            }
            let message = message.replace('\n', " ");
            let tmp = Loaded {
                scenario: placeholder(),
                file: file.to_string(),
                text: text.to_string(),
                sets: loaded_sets.clone(),
            };
            let path = if path == "." { String::new() } else { path };
            let (path, message) = foreign_mechanism_key(path, message, kind.as_deref());
            let mut e = tmp.error(&path, message);
            if e.line.is_none() && !e.file.ends_with("(--set)") {
                e.line = unknown_key_line(text, &e.message);
            }
            e
        })?;
    Ok(Loaded {
        scenario,
        file: file.to_string(),
        text: text.to_string(),
        sets: loaded_sets,
    })
}

/// serde reports a key of another mechanism kind as an unknown field of `[mechanism]`; this
/// names the key and says which kind it does not apply to, and that kind's keys.
fn foreign_mechanism_key(path: String, message: String, kind: Option<&str>) -> (String, String) {
    let (Some(kind), "mechanism") = (kind, path.as_str()) else {
        return (path, message);
    };
    let Some((key, rest)) = message
        .strip_prefix("unknown field `")
        .and_then(|m| m.split_once('`'))
    else {
        return (path, message);
    };
    let keys = match rest
        .split_once("expected one of ")
        .or(rest.split_once("expected "))
    {
        Some((_, keys)) => keys.replace('`', ""),
        None => "none".to_string(),
    };
    (
        format!("mechanism.{key}"),
        format!("does not apply to kind {kind:?} (its keys: {keys})"),
    )
}

/// For "unknown field `x`" errors at the top level, the line where `x` is written.
fn unknown_key_line(text: &str, message: &str) -> Option<usize> {
    let key = message.split('`').nth(1)?;
    text.lines()
        .position(|l| l.split('=').next().map(str::trim) == Some(key))
        .map(|n| n + 1)
}

fn placeholder() -> Scenario {
    Scenario {
        name: None,
        description: None,
        duration: Duration(0),
        seed: 1,
        topology: Topology::Explicit {
            hosts: vec![],
            switches: vec![],
            links: vec![],
            vms_per_host: 1,
        },
        queue: QueueCfg::default(),
        nic: NicCfg::default(),
        tcp: TcpCfg::default(),
        flows: vec![],
        incast: vec![],
        traffic: vec![],
        rules: vec![],
        mechanism: MechanismConfig::default(),
        output: OutputCfg::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = "name = \"t\"\nduration = \"1s\"\n[topology]\nkind = \"star\"\nsenders = 2\nreceivers = 1\nlink_rate = \"1Gbps\"\nlink_delay = \"25us\"\n[[flows]]\nname = \"a\"\nsrc = \"s0\"\ndst = \"r0\"\n[[flows]]\nname = \"b\"\nsrc = \"s1\"\ndst = \"r0\"\nrate = \"fast\"\n";

    #[test]
    fn bad_unit_names_file_line_and_field() {
        let e = parse(OK, "x.toml", &[]).err().unwrap();
        assert_eq!(e.line, Some(17));
        assert_eq!(e.field, "flows[1].rate");
        assert!(
            e.to_string()
                .starts_with("x.toml:17: flows[1].rate: expected a rate"),
            "{e}"
        );
    }

    #[test]
    fn unknown_key_is_an_error_with_its_line() {
        let text = OK.replace("rate = \"fast\"", "colour = \"red\"");
        let e = parse(&text, "x.toml", &[]).err().unwrap();
        assert_eq!(e.line, Some(17), "{e}");
        assert!(e.message.contains("unknown field `colour`"), "{e}");
        let text = format!("colour = 1\n{}", OK.replace("rate = \"fast\"", ""));
        let e = parse(&text, "x.toml", &[]).err().unwrap();
        assert_eq!(e.line, Some(1), "{e}");
    }

    #[test]
    fn set_overrides_a_nested_value() {
        let sets = vec![
            ("flows[1].rate".to_string(), "\"2Gbps\"".to_string()),
            ("duration".to_string(), "5s".to_string()),
        ];
        let l = parse(OK, "x.toml", &sets).unwrap();
        assert_eq!(l.scenario.flows[1].rate, Some(Rate(2_000_000_000)));
        assert_eq!(l.scenario.duration, Duration(5_000_000_000));
    }

    #[test]
    fn malformed_toml_reports_its_line() {
        let e = parse("duration = \"1s\"\nname = 'x\n", "x.toml", &[])
            .err()
            .unwrap();
        assert_eq!(e.line, Some(2));
    }
}
