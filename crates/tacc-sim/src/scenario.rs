//! The scenario file: schema, strict parsing, `--set` overrides and error locations.
//!
//! Every key is read here (each table's serde struct; unknown keys are errors); its doc, unit,
//! default and range are declared in [`crate::keys`], which tests/keys.rs holds to these
//! structs. Errors name the file, the line, the key path and what was expected.

use crate::cc::CcKind;
use crate::units::{Bytes, Duration, Rate, Size};
use serde::de::DeserializeOwned;
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

/// Every error found in a scenario, in file order (overrides last).
#[derive(Debug, Clone)]
pub struct ScenarioErrors(pub Vec<ScenarioError>);

/// Errors shown; a file with more is likely mistaken throughout, and the first ones say how.
const SHOWN: usize = 20;

impl ScenarioErrors {
    pub fn new(mut errors: Vec<ScenarioError>) -> ScenarioErrors {
        errors.sort_by(|a, b| {
            (a.line.is_none(), a.line, &a.field).cmp(&(b.line.is_none(), b.line, &b.field))
        });
        ScenarioErrors(errors)
    }
}

impl From<ScenarioError> for ScenarioErrors {
    fn from(e: ScenarioError) -> Self {
        ScenarioErrors(vec![e])
    }
}

/// One error a line, the first [`SHOWN`] of them.
impl fmt::Display for ScenarioErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().take(SHOWN).enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        match self.0.len().saturating_sub(SHOWN) {
            0 => Ok(()),
            1 => write!(f, "\n... and 1 more error"),
            n => write!(f, "\n... and {n} more errors"),
        }
    }
}

impl std::error::Error for ScenarioErrors {}

fn default_one() -> u32 {
    1
}

/// The whole file. It is read key by key (see [`parse`]), so that every key's errors are found;
/// each table below is read by serde.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Name shown in results; defaults to the file stem.
    pub name: Option<String>,
    pub description: Option<String>,
    /// Simulated time.
    pub duration: Duration,
    /// Default 1.
    pub seed: u64,
    pub topology: Topology,
    pub queue: QueueCfg,
    pub nic: NicCfg,
    pub tcp: TcpCfg,
    pub flows: Vec<FlowCfg>,
    pub incast: Vec<IncastCfg>,
    pub traffic: Vec<TrafficCfg>,
    pub rules: Vec<RuleCfg>,
    /// Random loss on links.
    pub loss: Vec<LossCfg>,
    /// The mechanism under test: `kind` and that kind's keys (see `tacc_mech::registry`).
    pub mechanism: MechanismConfig,
    /// The `[mechanism]` keys the file gives, `kind` aside (what summary.json reports as the
    /// mechanism's parameters).
    pub mechanism_keys: Vec<String>,
    pub output: OutputCfg,
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

impl Topology {
    /// The `kind` key as written.
    pub fn kind(&self) -> &'static str {
        match self {
            Topology::Star { .. } => "star",
            Topology::Dumbbell { .. } => "dumbbell",
            Topology::Racks { .. } => "racks",
            Topology::FatTree { .. } => "fat-tree",
            Topology::Explicit { .. } => "explicit",
        }
    }
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

/// Whose defaults the `[tcp]` keys a scenario leaves out take.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum TcpProfile {
    /// The papers' simulators' TCP (ns-2): RFC 6675 recovery, no probes, initial window 2.
    #[default]
    Classic,
    /// Linux 6.x: RACK-TLP, PRR, initial window 10, quick-ACK then delayed ACKs, HyStart,
    /// Cubic's clamp, Minshall's rule.
    Linux,
}

#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RtoFormula {
    Rfc6298,
    Linux,
}

/// TCP defaults for every flow; flows may override `cc` and `ecn`.
#[derive(Deserialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct TcpCfg {
    pub profile: Option<TcpProfile>,
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
    /// Proportional Rate Reduction (RFC 6937, Linux's and ns-3's default); default false (the
    /// window drops to ssthresh at once, RFC 6675 and RFC 3168).
    pub prr: Option<bool>,
    pub rack: Option<bool>,
    pub tlp: Option<bool>,
    pub dsack: Option<bool>,
    pub quickack: Option<bool>,
    pub rto_formula: Option<RtoFormula>,
    pub hystart: Option<bool>,
    pub cubic_clamp: Option<bool>,
    pub minshall: Option<bool>,
    pub half_window: Option<bool>,
    pub timestamps: Option<bool>,
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
    /// Mean of an exponential delay added to each flow's start (drawn from the run's RNG), so
    /// a group's connections open a little apart as a real volley does.
    #[serde(default)]
    pub jitter: Duration,
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
    /// TCP: the receiver's packets (its ACKs) skip its vNIC and the network (its NIC's
    /// queue and random loss included) and reach the sender this long after leaving its
    /// stack, plus its host's transmit timing noise: a path whose way back is of no interest,
    /// one event a packet instead of one a hop.
    pub return_delay: Option<Duration>,
    /// UDP: the packets carry a signal only a shim may send (an attack on the mechanism).
    pub forge: Option<Forge>,
    /// UDP: the source address the packets carry, another VM's (default: the sender's own).
    pub spoof: Option<String>,
}

/// A mechanism signal a malicious VM writes into its packets.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Forge {
    /// HyGenICC's explicit feedback: the feedback protocol, one mark in the IP ID.
    Feedback,
    /// HyGenICC's echo of one mark: the IPv4 reserved ("IPR") bit set.
    Ipr,
}

impl Forge {
    pub fn name(self) -> &'static str {
        match self {
            Forge::Feedback => "feedback",
            Forge::Ipr => "ipr",
        }
    }
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

/// Random loss on the ports named (or of a class: "all", "host->switch", "switch->host",
/// "switch->switch"): packets are lost on the wire after the port sent them.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields, tag = "model", rename_all = "kebab-case")]
pub enum LossCfg {
    /// Each packet lost with probability `rate`.
    Bernoulli { ports: Vec<String>, rate: f64 },
    /// Bursty loss: a good and a bad state, stepped per packet (from good to bad with
    /// probability `p`, back with `r`), losing `loss_good` and `loss_bad` of their packets.
    GilbertElliott {
        ports: Vec<String>,
        p: f64,
        r: f64,
        #[serde(default)]
        loss_good: f64,
        #[serde(default = "all_lost")]
        loss_bad: f64,
    },
}

fn all_lost() -> f64 {
    1.0
}

impl LossCfg {
    pub fn ports(&self) -> &[String] {
        match self {
            LossCfg::Bernoulli { ports, .. } | LossCfg::GilbertElliott { ports, .. } => ports,
        }
    }
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
    /// Ports sampled into queues.csv: "switches" (all switch ports), "all" or a list of names;
    /// unset, the switch ports up to a bound (`build::DEFAULT_SAMPLED_PORTS`).
    #[serde(default)]
    pub ports: Option<HostSet>,
    /// Ports whose sent packets are written to `pcap/<port>.pcapng` (a run with an output
    /// directory): headers as on the wire, simulated timestamps.
    #[serde(default)]
    pub pcap: Vec<String>,
    /// Whether those captures also hold the packets the port's queue dropped, each with a
    /// comment saying so, at the time it was refused.
    #[serde(default)]
    pub pcap_dropped: bool,
}

fn default_bin() -> Duration {
    Duration(100_000_000)
}
fn default_sample() -> Duration {
    Duration(1_000_000)
}

impl Default for OutputCfg {
    fn default() -> Self {
        OutputCfg {
            goodput_bin: default_bin(),
            queue_sample: default_sample(),
            ports: None,
            pcap: Vec::new(),
            pcap_dropped: false,
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
    /// Lists that lost unreadable elements: the list's key and the file's index of each element
    /// kept, so that errors name elements as the file numbers them.
    renumbered: Vec<(String, Vec<usize>)>,
    /// Tables and list elements with schema errors. Their keys in error were left out, so
    /// their semantic checks would be about values the file does not hold.
    misread: Vec<String>,
}

impl Loaded {
    /// An error about `path` (e.g. "flows[2].src"), located in the file or in a --set.
    pub fn error(&self, path: &str, message: impl Into<String>) -> ScenarioError {
        let path = self.renumber(path);
        located(&self.file, &self.text, &self.sets, &path, message.into())
    }

    /// Whether `path` lies in a table or list element that had schema errors.
    pub(crate) fn misread(&self, path: &str) -> bool {
        let path = self.renumber(path);
        self.misread.iter().any(|table| within(&path, table))
    }

    /// `path` with its list index as the file numbers it.
    fn renumber(&self, path: &str) -> String {
        for (list, kept) in &self.renumbered {
            let Some(rest) = path
                .strip_prefix(list.as_str())
                .and_then(|r| r.strip_prefix('['))
            else {
                continue;
            };
            let Some((index, rest)) = rest.split_once(']') else {
                continue;
            };
            if let Some(i) = index.parse::<usize>().ok().and_then(|i| kept.get(i)) {
                return format!("{list}[{i}]{rest}");
            }
        }
        path.to_string()
    }
}

/// Whether `path` is `outer` or a key or element inside it.
fn within(path: &str, outer: &str) -> bool {
    path.strip_prefix(outer)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

/// An error about `path`, located in the file, or in the overrides when one of them set it.
fn located(file: &str, text: &str, sets: &[String], path: &str, message: String) -> ScenarioError {
    let from_set = !path.is_empty() && sets.iter().any(|s| within(path, s) || within(s, path));
    ScenarioError {
        file: if from_set {
            format!("{file} (--set)")
        } else {
            file.to_string()
        },
        line: if from_set { None } else { locate(text, path) },
        field: path.to_string(),
        message,
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Finds the line of a key path such as `flows[2].src` or `topology.kind` in TOML text: where
/// the key is written, or else the header of its table, or else where the nearest enclosing
/// key is written (a key of an inline table is found at the line of that table's key).
pub fn locate(text: &str, path: &str) -> Option<usize> {
    if path.is_empty() {
        return None;
    }
    let steps: Vec<(&str, Option<usize>)> = path
        .split('.')
        .map(|seg| match seg.split_once('[') {
            Some((name, rest)) => (name, rest.trim_end_matches(']').parse().ok()),
            None => (seg, None),
        })
        .collect();
    (1..=steps.len())
        .rev()
        .find_map(|n| written_at(text, &steps[..n]))
}

/// The line where the last of `steps` is written: as `key = ...` in its table, or as the
/// header `[table.key]` (for an indexed step, the i-th `[[table.key]]`).
fn written_at(text: &str, steps: &[(&str, Option<usize>)]) -> Option<usize> {
    let (&(key, index), tables) = steps.split_last()?;
    let table = tables.iter().map(|s| s.0).collect::<Vec<_>>().join(".");
    let table_index = tables.last().and_then(|s| s.1);
    let own = if table.is_empty() {
        key.to_string()
    } else {
        format!("{table}.{key}")
    };
    let (mut in_table, mut tables_seen, mut own_seen) = (tables.is_empty(), 0, 0);
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with('[') {
            let is_list = line.starts_with("[[");
            let name = line.split('#').next().unwrap_or("");
            let name = name.trim().trim_matches(|c| c == '[' || c == ']').trim();
            in_table = false;
            if name == table {
                in_table = !is_list || table_index.is_none_or(|i| i == tables_seen);
                tables_seen += usize::from(is_list);
            }
            if name == own {
                if !is_list || index.is_none_or(|i| i == own_seen) {
                    return Some(n + 1);
                }
                own_seen += 1;
            }
            continue;
        }
        if in_table && line.split('=').next().unwrap_or("").trim() == key {
            return Some(n + 1);
        }
    }
    None
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

/// A scenario file as read: the scenario and every error in its schema (unknown, missing and
/// mistyped keys). With errors, `loaded` still holds what could be read (the keys in error left
/// out, lists without their unreadable elements) so that semantic checks can find more; it is
/// `None` when no scenario could be made of the file (bad TOML, or a required key unreadable).
pub struct Parsed {
    pub loaded: Option<Loaded>,
    pub errors: Vec<ScenarioError>,
}

/// Parses scenario text strictly, with `--set key=value` overrides applied. Each top-level key
/// and each element of a list of tables is read on its own, so one mistake does not hide the
/// others.
pub fn parse(text: &str, file: &str, sets: &[(String, String)]) -> Parsed {
    let mut table: toml::Table = match toml::from_str(text) {
        Ok(t) => t,
        Err(e) => {
            let error = ScenarioError {
                file: file.to_string(),
                line: e.span().map(|s| line_of(text, s.start)),
                field: String::new(),
                message: e.message().to_string(),
            };
            return Parsed {
                loaded: None,
                errors: vec![error],
            };
        }
    };
    let set_keys: Vec<String> = sets.iter().map(|(k, _)| k.clone()).collect();
    let mut r = Reader {
        file,
        text,
        sets: &set_keys,
        errors: Vec::new(),
        misread: Vec::new(),
        renumbered: Vec::new(),
    };
    for (k, v) in sets {
        if let Err(m) = apply_set(&mut table, k, v) {
            r.errors.push(ScenarioError {
                file: file.to_string(),
                line: None,
                field: k.clone(),
                message: format!("cannot apply --set: {m}"),
            });
        }
    }
    let mut top = Keys {
        table,
        known: Vec::new(),
    };
    let name = r.optional(&mut top, "name");
    let description = r.optional(&mut top, "description");
    let duration = r.required(&mut top, "duration", &[]);
    let seed = r.optional(&mut top, "seed").unwrap_or(1);
    let topology = r.required(&mut top, "topology", &TOPOLOGY_STAND_INS);
    let queue = r.queue(top.take("queue"));
    let nic = r.optional(&mut top, "nic").unwrap_or_default();
    let tcp = r.optional(&mut top, "tcp").unwrap_or_default();
    let flows = r.list("flows", top.take("flows"));
    let incast = r.list("incast", top.take("incast"));
    let traffic = r.list("traffic", top.take("traffic"));
    let rules = r.list("rules", top.take("rules"));
    let loss = r.list("loss", top.take("loss"));
    let mechanism_keys = given_keys(&top, "mechanism");
    let mechanism = r.mechanism(&mut top).unwrap_or_default();
    let output = r.optional(&mut top, "output").unwrap_or_default();
    r.unknown_keys(&top);
    let Reader {
        errors,
        misread,
        renumbered,
        ..
    } = r;
    let (Some(duration), Some(topology)) = (duration, topology) else {
        return Parsed {
            loaded: None,
            errors,
        };
    };
    let scenario = Scenario {
        name,
        description,
        duration,
        seed,
        topology,
        queue,
        nic,
        tcp,
        flows,
        incast,
        traffic,
        rules,
        loss,
        mechanism,
        mechanism_keys,
        output,
    };
    let loaded = Loaded {
        scenario,
        file: file.to_string(),
        text: text.to_string(),
        sets: set_keys,
        renumbered,
        misread,
    };
    Parsed {
        loaded: Some(loaded),
        errors,
    }
}

/// Another tacc file read as strictly as a scenario (`tacc agent`'s host config): top-level
/// keys taken one by one, each read on its own, every error at its line; what no one takes is
/// an unknown key.
pub struct ConfigReader<'a> {
    r: Reader<'a>,
    top: Keys,
}

impl<'a> ConfigReader<'a> {
    /// The file's text, or its one syntax error.
    pub fn new(text: &'a str, file: &'a str) -> Result<ConfigReader<'a>, ScenarioErrors> {
        let table: toml::Table = toml::from_str(text).map_err(|e| ScenarioError {
            file: file.to_string(),
            line: e.span().map(|s| line_of(text, s.start)),
            field: String::new(),
            message: e.message().to_string(),
        })?;
        Ok(ConfigReader {
            r: Reader {
                file,
                text,
                sets: &[],
                errors: Vec::new(),
                misread: Vec::new(),
                renumbered: Vec::new(),
            },
            top: Keys {
                table,
                known: Vec::new(),
            },
        })
    }

    pub fn required<T: DeserializeOwned>(&mut self, key: &'static str) -> Option<T> {
        self.r.required(&mut self.top, key, &[])
    }

    pub fn optional<T: DeserializeOwned>(&mut self, key: &'static str) -> Option<T> {
        self.r.optional(&mut self.top, key)
    }

    /// A list of tables, as (index in the file, element) for the elements that read.
    pub fn list<T: DeserializeOwned>(&mut self, key: &'static str) -> Vec<(usize, T)> {
        let value = self.top.take(key);
        let read: Vec<T> = self.r.list(key, value);
        let kept = match self.r.renumbered.iter().find(|(k, _)| k == key) {
            Some((_, kept)) => kept.clone(),
            None => (0..read.len()).collect(),
        };
        kept.into_iter().zip(read).collect()
    }

    pub fn mechanism(&mut self) -> Option<MechanismConfig> {
        self.r.mechanism(&mut self.top)
    }

    /// A problem with the key at `path` (`vms[1].port`), located in the file; none where the
    /// key already has one (the parser's, where it refused the key).
    pub fn error(&mut self, path: &str, message: impl Into<String>) {
        let table = path.split(['.', '[']).next().unwrap_or(path).to_string();
        if !self.r.errors.iter().any(|e| e.field == path) {
            self.r.report(&table, path, message.into());
        }
    }

    /// True once a problem was found (unknown keys are found by [`finish`](Self::finish)).
    pub fn has_errors(&self) -> bool {
        !self.r.errors.is_empty()
    }

    /// Every error, unknown keys included, or none.
    pub fn finish(mut self) -> Result<(), ScenarioErrors> {
        self.r.unknown_keys(&self.top);
        match self.r.errors {
            e if e.is_empty() => Ok(()),
            e => Err(ScenarioErrors::new(e)),
        }
    }
}

/// The keys a table of `top` gives, its tag `kind` aside.
fn given_keys(top: &Keys, table: &str) -> Vec<String> {
    let keys = top.table.get(table).and_then(|t| t.as_table());
    keys.into_iter()
        .flat_map(|t| t.keys())
        .filter(|k| *k != "kind")
        .cloned()
        .collect()
}

/// serde reports a key of another mechanism kind as an unknown field of `[mechanism]`; this
/// says which kind it does not apply to, and that kind's keys.
fn foreign_mechanism_key(e: &mut ScenarioError, kind: &str) {
    let Some((key, rest)) = e
        .message
        .strip_prefix("unknown field `")
        .and_then(|m| m.split_once('`'))
    else {
        return;
    };
    let keys = match rest
        .split_once("expected one of ")
        .or(rest.split_once("expected "))
    {
        Some((_, keys)) => keys.replace('`', ""),
        None => "none".to_string(),
    };
    e.field = format!("mechanism.{key}");
    e.message = format!("does not apply to kind {kind:?} (its keys: {keys})");
}

/// Stand-ins for a topology's rates and delays that do not parse, by the start of their error:
/// they shape neither the topology's names nor its routes, so the rest of the file can still
/// be checked against those.
const TOPOLOGY_STAND_INS: [(&str, &str); 2] =
    [("expected a rate", "1Gbps"), ("expected a duration", "1us")];

/// The top-level table: its keys are taken one by one, and what is left is unknown.
struct Keys {
    table: toml::Table,
    known: Vec<&'static str>,
}

impl Keys {
    fn take(&mut self, key: &'static str) -> Option<toml::Value> {
        self.known.push(key);
        self.table.remove(key)
    }
}

/// A step of a key path: a table's key, an element of a list, or something else serde names.
#[derive(Clone, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
    Other(String),
}

fn steps(path: &serde_path_to_error::Path) -> Vec<Step> {
    use serde_path_to_error::Segment;
    path.iter()
        .map(|s| match s {
            Segment::Map { key } => Step::Key(key.clone()),
            Segment::Seq { index } => Step::Index(*index),
            Segment::Enum { variant } => Step::Other(variant.clone()),
            Segment::Unknown => Step::Other("?".into()),
        })
        .collect()
}

/// `table` followed by `steps`, as errors name keys: "flows[1].rate".
fn joined(table: &str, steps: &[Step]) -> String {
    let mut path = table.to_string();
    for s in steps {
        match s {
            Step::Key(k) | Step::Other(k) => {
                path.push('.');
                path.push_str(k);
            }
            Step::Index(i) => path.push_str(&format!("[{i}]")),
        }
    }
    path
}

/// The table holding the key at `at`, and the key.
fn holder<'a>(
    value: &'a mut toml::Value,
    at: &'a [Step],
) -> Option<(&'a mut toml::Table, &'a str)> {
    let (Step::Key(key), parents) = at.split_last()? else {
        return None;
    };
    let mut v = value;
    for s in parents {
        v = match (s, v) {
            (Step::Key(k), toml::Value::Table(t)) => t.get_mut(k)?,
            (Step::Index(i), toml::Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    match v {
        toml::Value::Table(t) => Some((t, key)),
        _ => None,
    }
}

/// An error's message on one line, without toml's note of where (errors are located here).
fn message_of(e: &impl fmt::Display) -> String {
    let mut m = e.to_string();
    if let Some(i) = m.find("\nin `") {
        m.truncate(i);
    }
    m.replace('\n', " ").trim().to_string()
}

fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.split('`').next()
}

/// The key of `value`'s table that `message` is about. Serde does not say which when the table
/// is internally tagged (the topology), but leaving that key out changes the error. The tag,
/// `kind`, is never the one: errors about the tag name it.
fn culprit<T: DeserializeOwned>(value: &toml::Value, message: &str) -> Option<String> {
    let toml::Value::Table(t) = value else {
        return None;
    };
    t.keys()
        .filter(|k| k.as_str() != "kind")
        .find(|k| {
            let mut without = t.clone();
            without.remove(k.as_str());
            match serde_path_to_error::deserialize::<_, T>(toml::Value::Table(without)) {
                Ok(_) => true,
                Err(e) => message_of(e.inner()) != message,
            }
        })
        .cloned()
}

/// Reads a scenario table by table, collecting every error instead of stopping at the first.
struct Reader<'a> {
    file: &'a str,
    text: &'a str,
    sets: &'a [String],
    errors: Vec<ScenarioError>,
    misread: Vec<String>,
    renumbered: Vec<(String, Vec<usize>)>,
}

impl Reader<'_> {
    /// An error at `path` in `table` (a top-level key or a list element).
    fn report(&mut self, table: &str, path: &str, message: String) {
        let e = located(self.file, self.text, self.sets, path, message);
        self.errors.push(e);
        if !self.misread.iter().any(|t| t == table) {
            self.misread.push(table.to_string());
        }
    }

    /// `value`, the top-level key or list element `table`, as a `T`. Each error is reported,
    /// its key left out (or, for an error starting as one of `stand_ins` does, given that
    /// stand-in value) and the rest read again, so that one table's errors are all found. None
    /// if the table cannot be made without the keys in error.
    fn read<T: DeserializeOwned>(
        &mut self,
        table: &str,
        mut value: toml::Value,
        stand_ins: &[(&str, &str)],
    ) -> Option<T> {
        let mut edited: Vec<Vec<Step>> = Vec::new();
        loop {
            let e = match serde_path_to_error::deserialize::<_, T>(value.clone()) {
                Ok(t) => return Some(t),
                Err(e) => e,
            };
            let message = message_of(e.inner());
            let mut at = steps(e.path());
            if let Some(key) = missing_field(&message) {
                let mut key_at = at.clone();
                key_at.push(Step::Key(key.to_string()));
                // A key left out after an error of its own is not reported missing as well.
                if !edited.contains(&key_at) {
                    self.report(table, &joined(table, &at), message);
                }
                return None;
            }
            if at.is_empty() {
                match culprit::<T>(&value, &message) {
                    Some(key) => at.push(Step::Key(key)),
                    None => {
                        self.report(table, table, message);
                        return None;
                    }
                }
            }
            // The key holding the error: a bad element in a list of values takes the list out.
            let last_key = at.iter().rposition(|s| matches!(s, Step::Key(_)));
            let key_at = at[..last_key.map_or(0, |i| i + 1)].to_vec();
            // Each key is edited once, so this ends.
            if edited.contains(&key_at) {
                return None;
            }
            self.report(table, &joined(table, &at), message.clone());
            let (holder, key) = holder(&mut value, &key_at)?;
            let stand_in = match holder.get(key) {
                Some(toml::Value::String(_)) => {
                    stand_ins.iter().find(|(m, _)| message.starts_with(m))
                }
                _ => None,
            };
            match stand_in {
                Some((_, v)) => holder.insert(key.to_string(), toml::Value::String(v.to_string())),
                None => holder.remove(key),
            };
            edited.push(key_at);
        }
    }

    /// The `[mechanism]` table; a key of another kind than its `kind` is reported as such.
    fn mechanism(&mut self, top: &mut Keys) -> Option<MechanismConfig> {
        let kind = top
            .table
            .get("mechanism")
            .and_then(|m| m.get("kind"))
            .and_then(|k| k.as_str())
            .map(String::from);
        let first = self.errors.len();
        let mechanism = self.optional(top, "mechanism");
        if let Some(kind) = kind {
            for e in &mut self.errors[first..] {
                foreign_mechanism_key(e, &kind);
            }
        }
        mechanism
    }

    /// Every key of `top` not taken is an error.
    fn unknown_keys(&mut self, top: &Keys) {
        let expected: Vec<String> = top.known.iter().map(|k| format!("`{k}`")).collect();
        for key in top.table.keys() {
            let message = format!(
                "unknown field `{key}`, expected one of {}",
                expected.join(", ")
            );
            self.report(key, key, message);
        }
    }

    fn optional<T: DeserializeOwned>(&mut self, top: &mut Keys, key: &'static str) -> Option<T> {
        let value = top.take(key)?;
        self.read(key, value, &[])
    }

    fn required<T: DeserializeOwned>(
        &mut self,
        top: &mut Keys,
        key: &'static str,
        stand_ins: &[(&str, &str)],
    ) -> Option<T> {
        match top.take(key) {
            Some(value) => self.read(key, value, stand_ins),
            None => {
                self.report(key, "", format!("missing field `{key}`"));
                None
            }
        }
    }

    /// A list of tables, each element read on its own; unreadable ones are left out.
    fn list<T: DeserializeOwned>(&mut self, key: &str, value: Option<toml::Value>) -> Vec<T> {
        let items = match value {
            None => return Vec::new(),
            Some(toml::Value::Array(items)) => items,
            Some(other) => return self.read(key, other, &[]).unwrap_or_default(),
        };
        let n = items.len();
        let (mut read, mut kept) = (Vec::new(), Vec::new());
        for (i, item) in items.into_iter().enumerate() {
            if let Some(x) = self.read(&format!("{key}[{i}]"), item, &[]) {
                read.push(x);
                kept.push(i);
            }
        }
        if kept.len() < n {
            self.renumbered.push((key.to_string(), kept));
        }
        read
    }

    /// The queue table, its overrides read like a list of tables.
    fn queue(&mut self, value: Option<toml::Value>) -> QueueCfg {
        match value {
            None => QueueCfg::default(),
            Some(toml::Value::Table(mut t)) => {
                let overrides = t.remove("overrides");
                let mut q: QueueCfg = self
                    .read("queue", toml::Value::Table(t), &[])
                    .unwrap_or_default();
                q.overrides = self.list("queue.overrides", overrides);
                q
            }
            Some(other) => self.read("queue", other, &[]).unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = "name = \"t\"\nduration = \"1s\"\n[topology]\nkind = \"star\"\nsenders = 2\nreceivers = 1\nlink_rate = \"1Gbps\"\nlink_delay = \"25us\"\n[[flows]]\nname = \"a\"\nsrc = \"s0\"\ndst = \"r0\"\n[[flows]]\nname = \"b\"\nsrc = \"s1\"\ndst = \"r0\"\nrate = \"fast\"\n";

    /// The errors in `text`, which must have some.
    fn errors(text: &str) -> Vec<ScenarioError> {
        let errors = parse(text, "x.toml", &[]).errors;
        assert!(!errors.is_empty(), "accepted:\n{text}");
        errors
    }

    #[test]
    fn bad_unit_names_file_line_and_field() {
        let e = &errors(OK)[0];
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
        let e = &errors(&text)[0];
        assert_eq!(e.line, Some(17), "{e}");
        assert!(e.message.contains("unknown field `colour`"), "{e}");
        let text = format!("colour = 1\n{}", OK.replace("rate = \"fast\"", ""));
        let e = &errors(&text)[0];
        assert_eq!(e.line, Some(1), "{e}");
    }

    #[test]
    fn every_bad_key_of_a_table_is_reported_at_its_line() {
        // The topology is internally tagged: serde does not say which of its keys is wrong.
        let text = OK
            .replace("senders = 2", "senders = 2\nsize = 3")
            .replace("name = \"b\"", "name = \"b\"\ncolour = \"red\"")
            + "[queue]\noverrides = [{ ports = [\"sw0->r0\"], kind = \"fifo\" }]\n";
        let mut found: Vec<_> = errors(&text)
            .into_iter()
            .map(|e| (e.line, e.field))
            .collect();
        found.sort();
        let expected = [
            (6, "topology.size"),
            (16, "flows[1].colour"),
            (19, "flows[1].rate"),
            (21, "queue.overrides[0].kind"),
        ]
        .map(|(l, f)| (Some(l), f.to_string()));
        assert_eq!(found, expected);
    }

    #[test]
    fn locate_finds_keys_table_headers_and_keys_of_inline_tables() {
        let text =
            "a = 1\n[t]\nx = 1\n[[l]]\ny = 1\n[[l]]\ny = 2\n[[t.o]]\nz = 1\n[u]\nv = [{w = 1}]\n";
        for (path, line) in [
            ("a", Some(1)),
            ("t", Some(2)),
            ("t.x", Some(3)),
            ("l[1]", Some(6)),
            ("l[1].y", Some(7)),
            // a key missing from a table: the table's header
            ("l[1].q", Some(6)),
            ("t.o[0]", Some(8)),
            ("t.o[0].z", Some(9)),
            ("u.v[0].w", Some(11)),
            ("nowhere", None),
        ] {
            assert_eq!(locate(text, path), line, "{path}");
        }
    }

    #[test]
    fn set_overrides_a_nested_value() {
        let sets = vec![
            ("flows[1].rate".to_string(), "\"2Gbps\"".to_string()),
            ("duration".to_string(), "5s".to_string()),
        ];
        let p = parse(OK, "x.toml", &sets);
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        let l = p.loaded.unwrap();
        assert_eq!(l.scenario.flows[1].rate, Some(Rate(2_000_000_000)));
        assert_eq!(l.scenario.duration, Duration(5_000_000_000));
    }

    #[test]
    fn malformed_toml_reports_its_line() {
        let e = &errors("duration = \"1s\"\nname = 'x\n")[0];
        assert_eq!(e.line, Some(2));
    }
}
