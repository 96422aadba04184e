//! `tacc agent --config host.toml`: the host agent as a daemon on a hypervisor that tacc did
//! not build. It attaches `host.bpf.c` to interfaces that exist (the VMs' taps or veths, the
//! ports of a bridge, the uplink), creates no namespace, runs the host shim of the config's
//! `[mechanism]` on a one-host fabric of the VMs it finds, and detaches everything on SIGTERM.
//!
//! VMs come and go without a restart: every `rescan` the agent lists the bridges' ports,
//! attaches to new ones, and learns the addresses the VMs send from (the programs record each
//! source address by the port it came in on); when the set of VMs changes, the shim is built
//! again for the new set (rates restart from the VMs' shares, the limiters stay in place).
//!
//! What the agent does is written to `state_dir/status.json` every second (`tacc agent
//! status` prints it); `state_dir/agent.pid` keeps a second agent off the same directory.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use aya::programs::TcAttachType;
use serde::Serialize;
use tacc_mech::registry::MechanismConfig;
use tacc_mech::roles::{Fabric, HostShim, ShortagePolicy, SwitchPort};
use tacc_mech::wire::Ipv4Packet;

use crate::channel::{Channel, ChannelConfig};
use crate::host::{
    flags, load_pinned, FeedbackOut, Limiters, LinkSocket, Maps, ShimDriver, F_LEARN, F_SCRUB,
    F_SCRUB_EGRESS,
};
use crate::metrics::{Exposition, Text};
use crate::records::Records;
use crate::tc::attach;
use crate::{ifindex, Clock};

/// A VM the config names: its port on this host and, if given, its address.
#[derive(Clone, Debug)]
pub struct VmEntry {
    pub name: String,
    pub port: String,
    pub address: Option<u32>,
}

/// A host config, read and checked (the reading is the caller's: `tacc agent`).
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    pub name: String,
    /// The NIC towards the fabric.
    pub uplink: String,
    pub uplink_rate_bps: u64,
    /// Every port of these bridges (Linux or Open vSwitch) except the uplink is a VM's.
    pub bridges: Vec<String>,
    /// Where Open vSwitch's database listens, for its bridges' ports.
    pub ovs_db: String,
    /// The VMs and the uplink are ports of an Open vSwitch bridge with the userspace
    /// datapath, which reads its ports with packet sockets, before tc ingress: what arrives
    /// for a VM is then seen on the tc egress of its port, and the scrub is on the uplink's.
    pub ovs_userspace: bool,
    pub vms: Vec<VmEntry>,
    pub mechanism: MechanismConfig,
    pub state_dir: PathBuf,
    /// How often bridges are listed and addresses learned, ns.
    pub rescan_ns: u64,
    /// The FIFO under each rate limiter's HTB class (`on_shortage = "queue"`), bytes.
    pub limiter_queue_bytes: u64,
    /// Where the Prometheus endpoint listens (`None`: nowhere).
    pub metrics: Option<std::net::SocketAddr>,
    /// Have the kernel count the programs' run time (BPF_ENABLE_STATS) for the metrics.
    pub bpf_stats: bool,
    /// Log lines as JSON objects rather than text.
    pub log_json: bool,
    /// Where the maps are pinned (a directory on a BPF filesystem).
    pub pin_dir: PathBuf,
    /// The controller the agent takes its mechanism's messages from, if any.
    pub controller: Option<ControllerLink>,
}

/// The channel to the controller, and what the agent does without it.
#[derive(Clone, Debug)]
pub struct ControllerLink {
    pub channel: ChannelConfig,
    /// How long the agent keeps the last rates once the channel is down (fail-static), before
    /// it lifts its limits (fail-open).
    pub fail_static: std::time::Duration,
}

/// The agent's log on stderr: one line per event, as text or a JSON object.
struct Log {
    json: bool,
}

impl Log {
    fn event(&self, event: &str, fields: &[(&str, &str)]) {
        let line = if self.json {
            let mut obj = serde_json::Map::new();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            obj.insert("time".into(), now.into());
            obj.insert("event".into(), event.into());
            for (k, v) in fields {
                obj.insert((*k).into(), (*v).into());
            }
            serde_json::Value::Object(obj).to_string()
        } else {
            let kv: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("tacc-agent: {event} {}", kv.join(" "))
                .trim_end()
                .to_string()
        };
        eprintln!("{line}");
    }
}

/// The host as a mechanism sees it: one host, its NIC, its VMs; no switch.
pub struct HostFabric {
    pub nic_rate_bps: u64,
    /// (name, address) of each VM.
    pub vms: Vec<(String, u32)>,
}

/// Linux's largest default receive buffer (tcp_rmem's third value) and its window scale.
const LINUX_RCV_BUF: u64 = 6_291_456;

impl Fabric for HostFabric {
    fn hosts(&self) -> u32 {
        1
    }
    fn nic_rate_bps(&self, _host: u32) -> u64 {
        self.nic_rate_bps
    }
    fn vms(&self) -> Vec<(u32, u32)> {
        self.vms.iter().map(|&(_, ip)| (0, ip)).collect()
    }
    fn vm_address(&self, name: &str) -> Option<u32> {
        self.vms.iter().find(|(n, _)| n == name).map(|&(_, ip)| ip)
    }
    fn switches(&self) -> u32 {
        0
    }
    fn switch_ports(&self) -> Vec<SwitchPort> {
        Vec::new()
    }
    fn route_ports(&self, _switch: u32, _vm: u32) -> &[u32] {
        &[]
    }
    fn receiver_window(&self) -> (u64, u8) {
        (
            LINUX_RCV_BUF,
            tacc_mech::plan::window_scale_for(LINUX_RCV_BUF),
        )
    }
}

/// The mechanism's roles on a host of no VMs: which of them it has.
fn roles(mechanism: &MechanismConfig) -> tacc_mech::roles::Instance<Ipv4Packet<Vec<u8>>> {
    let fabric = HostFabric {
        nic_rate_bps: 1_000_000_000,
        vms: Vec::new(),
    };
    mechanism.build(&fabric)
}

/// The rates in force (VM, remote, b/s) with each VM by its name, and a remote of 0 as "*".
fn named_rates(vms: &[VmSeen], in_force: &[(u32, u32, u64)]) -> Vec<(String, String, f64)> {
    let name_of = |ip: u32| {
        let dotted = std::net::Ipv4Addr::from(ip).to_string();
        vms.iter()
            .find(|v| v.address == dotted)
            .map_or(dotted, |v| v.name.clone())
    };
    in_force
        .iter()
        .map(|&(vm, dst, bps)| {
            let dst = if dst == 0 { "*".into() } else { name_of(dst) };
            (name_of(vm), dst, bps as f64)
        })
        .collect()
}

/// Whether a shim that takes its rates from a controller is frozen (its datapath keeping the
/// rates and clamps in force): while the channel is down (fail-static), and once it is back,
/// until the controller says it is in control (it has its switches) or sends a message, for
/// at most `fail_static`. An agent reconnects at its first try after the new controller
/// listens, often before that controller has read its switches: a shim resumed then climbs
/// from the rates held, its notifications long past, and in the controller-restart test the
/// UDP VM went to line rate for 0.3 s. Back from fail-open (the limits lifted), there is
/// nothing to hold.
#[derive(Default)]
struct Hold {
    /// When the channel came back with the rates still held.
    back_at: Option<std::time::Instant>,
    /// The channel went down after a session had been up.
    lost: bool,
    ever_up: bool,
}

impl Hold {
    fn frozen(
        &mut self,
        down: Option<std::time::Duration>,
        in_control: bool,
        open: bool,
        fail_static: std::time::Duration,
    ) -> bool {
        if down.is_some() {
            self.lost |= self.ever_up;
            self.back_at = None;
            return true;
        }
        self.ever_up = true;
        if std::mem::take(&mut self.lost) && !open {
            self.back_at = Some(std::time::Instant::now());
        }
        if in_control || self.back_at.is_some_and(|t| t.elapsed() >= fail_static) {
            self.back_at = None;
        }
        self.back_at.is_some()
    }
}

/// Why a mechanism cannot run under `tacc agent`, if it cannot: a kind with a controller
/// needs the config's `[controller]`, and the kinds that live in the switches have no host
/// shim.
pub fn unsupported(mechanism: &MechanismConfig, controller: bool) -> Option<String> {
    let inst = roles(mechanism);
    let kind = mechanism.kind();
    if inst.shims.iter().all(Option::is_none) && kind != "none" {
        return Some(format!(
            "kind {kind:?} runs in the switches, not in a hypervisor: `tacc agent` runs \
             static-rate, hygenicc, and with a [controller] sdn-gcc and sicc"
        ));
    }
    if inst.controller.is_some() && !controller {
        return Some(format!(
            "kind {kind:?} takes its rates or clamps from a controller: give the agent a \
             [controller] table (address, key_file)"
        ));
    }
    None
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn catch_signals() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}

/// The interfaces listed as ports of `bridge`: a Linux bridge's from sysfs, else an Open
/// vSwitch bridge's from the database at `ovs_db`; why not, if neither lists it.
fn bridge_ports(bridge: &str, ovs_db: &str) -> Result<Vec<String>, String> {
    let dir = Path::new("/sys/class/net").join(bridge).join("brif");
    let mut ports: Vec<String> = match std::fs::read_dir(dir) {
        Ok(d) => d
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => {
            let out = Command::new("ovs-vsctl")
                .args([
                    &format!("--db={ovs_db}"),
                    "--timeout=2",
                    "list-ports",
                    bridge,
                ])
                .output()
                .map_err(|e| format!("not a Linux bridge, and ovs-vsctl: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "not a Linux bridge, and ovs-vsctl said: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_string)
                .collect()
        }
    };
    ports.sort();
    Ok(ports)
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
struct VmSeen {
    name: String,
    port: String,
    address: String,
    /// Learned from its traffic, not given by the config.
    learned: bool,
}

#[derive(Serialize)]
struct Status<'a> {
    pid: u32,
    name: &'a str,
    mechanism: &'a str,
    uplink: &'a str,
    uplink_rate_mbps: f64,
    ports: Vec<&'a str>,
    vms: &'a [VmSeen],
    /// The rates in force: VM, destination (or "*" for the VM's whole share), Mb/s.
    rates: Vec<(String, String, f64)>,
    counters: BTreeMap<&'static str, f64>,
    uptime_s: f64,
    /// The capabilities the agent kept after setting up.
    capabilities: &'a [&'static str],
    /// It took over the maps of an agent that died.
    resumed: bool,
    /// "up", "down" (fail-static: the last rates kept), "open" (limits lifted), or "none".
    controller: &'static str,
}

/// What the agent set up in the kernel, taken down on exit.
struct Attached {
    uplink: String,
    /// VM ports with our program.
    ports: BTreeSet<String>,
    htb_root: bool,
    /// What arrives for a VM is handled on its port's egress ([`DaemonConfig::ovs_userspace`]).
    ovs_userspace: bool,
}

impl Attached {
    /// The programs on a VM's port.
    fn port_programs(&self) -> &'static [(TcAttachType, &'static str)] {
        if self.ovs_userspace {
            &[
                (TcAttachType::Ingress, "vm_ingress"),
                (TcAttachType::Egress, "uplink_ingress"),
            ]
        } else {
            &[(TcAttachType::Ingress, "vm_ingress")]
        }
    }

    fn attach_port(&mut self, bpf: &mut aya::Ebpf, port: &str) -> Result<(), String> {
        for &(hook, name) in self.port_programs() {
            attach_fresh(bpf, name, port, hook)?;
        }
        self.ports.insert(port.to_string());
        Ok(())
    }

    /// Our programs off a VM's port (one gone with its VM is no error).
    fn detach_port(&self, port: &str) {
        for &(hook, name) in self.port_programs() {
            let _ = aya::programs::tc::qdisc_detach_program(port, hook, name);
        }
    }

    /// Takes everything down: our programs, and the clsact qdiscs left without a filter
    /// (what is gone already, a VM's port with its VM, is no error).
    fn detach(&self) {
        let ours = [
            (self.uplink.as_str(), TcAttachType::Egress, "uplink_egress"),
            (
                self.uplink.as_str(),
                TcAttachType::Ingress,
                "uplink_ingress",
            ),
        ];
        let ports = self.ports.iter().flat_map(|p| {
            self.port_programs()
                .iter()
                .map(move |&(hook, name)| (p.as_str(), hook, name))
        });
        for (dev, hook, name) in ours.into_iter().chain(ports) {
            let _ = aya::programs::tc::qdisc_detach_program(dev, hook, name);
        }
        for dev in self
            .ports
            .iter()
            .map(String::as_str)
            .chain([self.uplink.as_str()])
        {
            let filters = |hook| tc_output(&["filter", "show", "dev", dev, hook]);
            if filters("ingress").trim().is_empty() && filters("egress").trim().is_empty() {
                tc(&["qdisc", "del", "dev", dev, "clsact"]);
            }
        }
        if self.htb_root {
            tc(&["qdisc", "del", "dev", &self.uplink, "root"]);
        }
    }
}

/// Attaches program `name` to `dev`'s `hook` in place of any filter of that name there: one
/// an agent killed before it could detach left (the first filter's verdict ends the hook, so
/// the old program would go on running alone).
fn attach_fresh(
    bpf: &mut aya::Ebpf,
    name: &str,
    dev: &str,
    hook: TcAttachType,
) -> Result<(), String> {
    let _ = aya::programs::tc::qdisc_detach_program(dev, hook, name);
    attach(bpf, name, dev, hook)
}

fn tc_output(args: &[&str]) -> String {
    Command::new("tc")
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

fn tc(args: &[&str]) -> bool {
    Command::new("tc")
        .args(args)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The uplink's HTB: root 1:1 at the uplink's rate, the default leaf 1:2 for what no limiter
/// takes, the limiters' classes under 1:1 ([`crate::tc::Htb`]).
fn htb_root(uplink: &str, rate_bps: u64) -> Result<(), String> {
    let rate = format!("{rate_bps}bit");
    // Whatever root was there goes (a killed agent's HTB, or the default qdisc, which the
    // kernel puts back when the agent deletes its own on exit).
    tc(&["qdisc", "del", "dev", uplink, "root"]);
    let lines = [
        vec![
            "qdisc", "add", "dev", uplink, "root", "handle", "1:", "htb", "default", "2",
        ],
        vec![
            "class", "add", "dev", uplink, "parent", "1:", "classid", "1:1", "htb", "rate", &rate,
            "quantum", "1514",
        ],
        vec![
            "class", "add", "dev", uplink, "parent", "1:1", "classid", "1:2", "htb", "rate", &rate,
            "quantum", "1514",
        ],
    ];
    for args in lines {
        if !tc(&args) {
            return Err(format!("tc {} failed", args.join(" ")));
        }
    }
    Ok(())
}

/// Holds `state_dir/agent.pid` while the agent runs.
struct PidFile(PathBuf);

impl PidFile {
    fn take(dir: &Path) -> Result<PidFile, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let path = dir.join("agent.pid");
        if let Some(pid) = std::fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        {
            // SAFETY: signal 0 only checks that the process exists.
            if pid != std::process::id() as i32 && unsafe { libc::kill(pid, 0) } == 0 {
                return Err(format!(
                    "another tacc agent (pid {pid}) runs with state directory {}",
                    dir.display()
                ));
            }
        }
        std::fs::write(&path, format!("{}\n", std::process::id()))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(PidFile(path))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The VMs on the ports now: the config's, with their given or learned address, and one per
/// address learned on a bridge port the config does not name. A VM whose address is not
/// known yet is left out until it sends.
fn vms_now(cfg: &DaemonConfig, ports: &BTreeSet<String>, maps: &Maps) -> Vec<VmSeen> {
    let mut learned: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (src, port) in maps.vm_sources.iter().filter_map(Result::ok) {
        learned.entry(port).or_default().push(u32::from_be(src));
    }
    let by_index = |port: &str| {
        ifindex(port)
            .ok()
            .and_then(|i| learned.get(&i))
            .cloned()
            .unwrap_or_default()
    };
    let dotted = |ip: u32| std::net::Ipv4Addr::from(ip).to_string();
    let mut vms = Vec::new();
    for vm in &cfg.vms {
        let (ip, was_learned) = match vm.address {
            Some(ip) => (Some(ip), false),
            None => (by_index(&vm.port).into_iter().min(), true),
        };
        if let Some(ip) = ip {
            vms.push(VmSeen {
                name: vm.name.clone(),
                port: vm.port.clone(),
                address: dotted(ip),
                learned: was_learned,
            });
        }
    }
    let named: BTreeSet<&str> = cfg.vms.iter().map(|v| v.port.as_str()).collect();
    for port in ports.iter().filter(|p| !named.contains(p.as_str())) {
        for ip in by_index(port) {
            vms.push(VmSeen {
                name: format!("{port}/{}", dotted(ip)),
                port: port.clone(),
                address: dotted(ip),
                learned: true,
            });
        }
    }
    vms.sort();
    vms
}

fn build_shim(
    cfg: &DaemonConfig,
    vms: &[VmSeen],
) -> Option<Box<dyn HostShim<Ipv4Packet<Vec<u8>>>>> {
    let fabric = HostFabric {
        nic_rate_bps: cfg.uplink_rate_bps,
        vms: vms
            .iter()
            .map(|v| {
                (
                    v.name.clone(),
                    v.address.parse::<std::net::Ipv4Addr>().map_or(0, u32::from),
                )
            })
            .collect(),
    };
    cfg.mechanism
        .build::<Ipv4Packet<Vec<u8>>>(&fabric)
        .shims
        .into_iter()
        .next()
        .flatten()
}

/// Runs the agent until SIGTERM, SIGINT or SIGHUP, then takes down what it set up.
pub fn run(cfg: DaemonConfig) -> Result<(), String> {
    catch_signals();
    let _pid = PidFile::take(&cfg.state_dir)?;
    ifindex(&cfg.uplink).map_err(|e| format!("uplink: {e}"))?;
    let datapath = build_shim(&cfg, &[])
        .map(|s| s.datapath())
        .unwrap_or_default();
    let resumed = pins(&cfg.pin_dir)?;
    let mut flags = flags(datapath, datapath.scrub) | F_LEARN;
    if cfg.ovs_userspace && datapath.scrub {
        // Dropped at a VM's port, a packet would still be OVS's: scrubbed where it leaves.
        flags = flags & !F_SCRUB | F_SCRUB_EGRESS;
    }
    let (mut bpf, mut maps) = load_pinned(flags, &cfg.pin_dir)?;
    let mut attached = Attached {
        uplink: cfg.uplink.clone(),
        ports: BTreeSet::new(),
        htb_root: false,
        ovs_userspace: cfg.ovs_userspace,
    };
    let result = serve(&cfg, &mut bpf, &mut maps, &mut attached, datapath, resumed);
    attached.detach();
    let _ = std::fs::remove_file(cfg.state_dir.join("status.json"));
    // Stopped on purpose: the maps go with the programs.
    if let Ok(dir) = std::fs::read_dir(&cfg.pin_dir) {
        for entry in dir.filter_map(Result::ok) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    let _ = std::fs::remove_dir(&cfg.pin_dir);
    result
}

const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Makes the pin directory if need be; true if it holds maps already (an agent died there).
fn pins(dir: &Path) -> Result<bool, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("pin_dir {}: {e}", dir.display()))?;
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("pin_dir {}: not a path", dir.display()))?;
    // SAFETY: statfs writes the struct it is given.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid path and a struct to fill.
    if unsafe { libc::statfs(path.as_ptr(), &mut fs) } != 0 || fs.f_type as i64 != BPF_FS_MAGIC {
        return Err(format!(
            "pin_dir {}: not on a BPF filesystem (mount -t bpf bpf /sys/fs/bpf)",
            dir.display()
        ));
    }
    Ok(std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()))
}

fn serve(
    cfg: &DaemonConfig,
    bpf: &mut aya::Ebpf,
    maps: &mut Maps,
    attached: &mut Attached,
    datapath: tacc_mech::roles::Datapath,
    resumed: bool,
) -> Result<(), String> {
    let log = Log { json: cfg.log_json };
    attach_fresh(bpf, "uplink_egress", &cfg.uplink, TcAttachType::Egress)?;
    if cfg.ovs_userspace {
        // One left by an agent of the other mode would count the arrivals twice.
        let _ = aya::programs::tc::qdisc_detach_program(
            &cfg.uplink,
            TcAttachType::Ingress,
            "uplink_ingress",
        );
    } else {
        attach_fresh(bpf, "uplink_ingress", &cfg.uplink, TcAttachType::Ingress)?;
    }
    if datapath
        .limiter
        .is_some_and(|b| b.on_shortage == ShortagePolicy::Queue)
    {
        attached.htb_root = true;
        // A dead agent's HTB holds the classes its pinned maps name: kept as it is.
        let kept = resumed
            && tc_output(&["qdisc", "show", "dev", &cfg.uplink]).contains("qdisc htb 1: root");
        if !kept {
            htb_root(&cfg.uplink, cfg.uplink_rate_bps)?;
        }
    }
    // Held for the agent's life: the kernel counts the programs' run time while it is open.
    let _stats = match cfg.bpf_stats {
        true => Some(
            aya::sys::enable_stats(aya::sys::Stats::RunTime)
                .map_err(|e| format!("bpf_stats: {e}"))?,
        ),
        false => None,
    };
    let exposition = Exposition::default();
    let mut feedback = Some(FeedbackOut::Link(LinkSocket::new(&cfg.uplink)?));
    let capabilities = crate::caps::drop_all_but_the_agents()?;
    // After the drop: a thread started before would keep every capability.
    if let Some(addr) = cfg.metrics {
        crate::metrics::serve(addr, exposition.clone())?;
    }
    let channel = match &cfg.controller {
        Some(link) => Some(Channel::start(link.channel.clone())?),
        None => None,
    };
    // Without its controller a shim that takes its rates from it keeps the last ones for
    // fail_static, then lifts them.
    let frozen_without = cfg
        .controller
        .as_ref()
        .filter(|_| roles(&cfg.mechanism).controller.is_some());
    let mut open = false;
    let mut connected = false;
    let mut holding = false; // since "controller lost: rates held"
    let mut hold = Hold::default();
    // The rates the datapath holds (VM, remote, b/s): a frozen shim's are the last round's,
    // which the status and metrics go on showing until the limits are lifted.
    let mut in_force: Vec<(u32, u32, u64)> = Vec::new();
    let rate = format!("{}", cfg.uplink_rate_bps);
    let metrics = cfg
        .metrics
        .map(|a| a.to_string())
        .unwrap_or_else(|| "off".into());
    log.event(
        "started",
        &[
            ("name", &cfg.name),
            ("mechanism", cfg.mechanism.kind()),
            ("uplink", &cfg.uplink),
            ("uplink_rate_bps", &rate),
            ("metrics", &metrics),
            ("maps", if resumed { "taken over" } else { "new" }),
        ],
    );
    let clock = Clock::new(crate::monotonic_ns(), 1.0);
    let mut limiters =
        Limiters::for_datapath(datapath, &cfg.uplink, cfg.limiter_queue_bytes, &clock)?;
    if let Some(l) = &mut limiters {
        l.resume(maps);
    }
    let mut driver: Option<ShimDriver> = None;
    let mut limiters = Some(limiters);
    let mut vms: Vec<VmSeen> = Vec::new();
    let mut next_scan = 0;
    let mut last_scan = 0;
    let mut unreadable = BTreeSet::new(); // bridges whose ports could not be listed
    let mut next_status = 0;
    // Gone, its last status written, before the caller removes status.json.
    let records = Records::without_csv();
    while !STOP.load(Ordering::SeqCst) {
        let now = clock.now();
        if now >= next_scan {
            let mut ports: BTreeSet<String> = cfg.vms.iter().map(|v| v.port.clone()).collect();
            for bridge in &cfg.bridges {
                match bridge_ports(bridge, &cfg.ovs_db) {
                    Ok(found) => {
                        if unreadable.remove(bridge) {
                            log.event("bridge read", &[("bridge", bridge)]);
                        }
                        ports.extend(found);
                    }
                    Err(why) => {
                        if unreadable.insert(bridge.clone()) {
                            log.event("bridge unreadable", &[("bridge", bridge), ("why", &why)]);
                        }
                    }
                }
            }
            ports.remove(&cfg.uplink);
            ports.retain(|p| ifindex(p).is_ok());
            for gone in attached.ports.difference(&ports) {
                log.event("port gone", &[("port", gone)]);
                // A port that left its bridge but lives on keeps none of our programs.
                attached.detach_port(gone);
            }
            attached.ports.retain(|p| ports.contains(p));
            for p in &ports {
                if !attached.ports.contains(p) {
                    attached.attach_port(bpf, p)?;
                    log.event("port attached", &[("port", p)]);
                }
            }
            let seen = vms_now(cfg, &ports, maps);
            if seen != vms || driver.is_none() {
                for v in seen.iter().filter(|v| !vms.contains(v)) {
                    let how = if v.learned { "learned" } else { "given" };
                    let fields = [("name", v.name.as_str()), ("port", &v.port)];
                    log.event(
                        "vm",
                        &[&fields[..], &[("address", &v.address), ("address_is", how)]].concat(),
                    );
                }
                for v in vms.iter().filter(|v| !seen.contains(v)) {
                    log.event("vm gone", &[("name", &v.name), ("address", &v.address)]);
                }
                vms = seen;
                if let Some(shim) = build_shim(cfg, &vms) {
                    let mut d = match driver.take() {
                        Some(mut d) => {
                            d.shim = shim;
                            d
                        }
                        None => {
                            let mut d = ShimDriver::new(
                                shim,
                                limiters.take().flatten(),
                                feedback.take().expect("one driver is made"),
                                1.0,
                            );
                            d.baseline(maps);
                            d
                        }
                    };
                    let known: HashSet<u32> = vms
                        .iter()
                        .filter_map(|v| v.address.parse::<std::net::Ipv4Addr>().ok())
                        .map(u32::from)
                        .collect();
                    d.resume(now, maps, |ip| known.contains(&ip));
                    d.vms = Some(known);
                    driver = Some(d);
                }
            }
            last_scan = now;
            next_scan = now + cfg.rescan_ns;
        }
        let mut heard = false;
        if let (Some(ch), Some(d)) = (&channel, &mut driver) {
            ch.drain(&mut |m| {
                heard = true;
                d.shim.on_message(now, m)
            });
        }
        let down = channel.as_ref().and_then(Channel::down_for);
        if channel.is_some() && down.is_none() != connected {
            connected = down.is_none();
            match (connected, frozen_without.is_some()) {
                (true, _) => log.event("controller connected", &[]),
                (false, true) => {
                    holding = true;
                    let held: Vec<String> = named_rates(&vms, &in_force)
                        .iter()
                        .map(|(vm, dst, bps)| format!("{vm}>{dst}:{:.3}Mbps", bps / 1e6))
                        .collect();
                    log.event("controller lost: rates held", &[("rates", &held.join(","))])
                }
                (false, _) => log.event("controller lost", &[]),
            }
        }
        let in_control = heard || channel.as_ref().is_some_and(Channel::in_control);
        let frozen = match frozen_without {
            Some(link) => hold.frozen(down, in_control, open, link.fail_static),
            None => false,
        };
        // The rates held since the loss apply no more (back from fail-open, the match below
        // says so).
        if holding && !frozen {
            holding = false;
            match (open, in_control) {
                (true, _) => {}
                (false, true) => log.event("controller in control: the rates follow it again", &[]),
                (false, false) => log.event(
                    "controller not in control within fail_static: the shim's rates apply",
                    &[],
                ),
            }
        }
        match (frozen_without, down) {
            (Some(link), Some(d)) if d >= link.fail_static && !open => {
                if let Some(drv) = &mut driver {
                    drv.lift(maps, cfg.uplink_rate_bps)?;
                    in_force.clear();
                }
                open = true;
                let secs = format!("{:.1}", d.as_secs_f64());
                log.event("fail-open: limits lifted", &[("controller_down_s", &secs)]);
            }
            (_, None) if open => {
                open = false;
                log.event("controller back: limits in force again", &[]);
            }
            _ => {}
        }
        // A source the shim does not know sent: perhaps a VM to learn, so look again soon.
        if let Some(d) = driver.as_mut().filter(|d| d.unknown_sources) {
            d.unknown_sources = false;
            next_scan = next_scan.min(last_scan + EAGER_SCAN_NS);
        }
        match &mut driver {
            // Frozen: the datapath keeps the rates (or, open, none) as they are.
            Some(_) if frozen => {}
            Some(d) => in_force = d.round(now, &clock, maps, None)?,
            None => in_force.clear(),
        }
        if now >= next_status {
            let mut counters = match &driver {
                Some(d) => d.counts(maps, None)?,
                None => BTreeMap::new(),
            };
            if let Some(ch) = &channel {
                ch.counts().each(&mut |k, v| {
                    counters.insert(k, v);
                });
            }
            let rates = named_rates(&vms, &in_force);
            if cfg.metrics.is_some() {
                let pairs = driver.as_ref().map(|d| d.pair_totals()).unwrap_or_default();
                let text = exposition_text(cfg, &clock, &vms, &rates, &pairs, &counters, bpf);
                exposition.set(text);
            }
            let status = Status {
                pid: std::process::id(),
                name: &cfg.name,
                mechanism: cfg.mechanism.kind(),
                uplink: &cfg.uplink,
                uplink_rate_mbps: cfg.uplink_rate_bps as f64 / 1e6,
                ports: attached.ports.iter().map(String::as_str).collect(),
                vms: &vms,
                rates: rates
                    .into_iter()
                    .map(|(vm, dst, bps)| (vm, dst, bps / 1e6))
                    .collect(),
                counters,
                uptime_s: clock.elapsed() as f64 / 1e9,
                capabilities: &capabilities,
                resumed,
                controller: match (&channel, down, open) {
                    (None, _, _) => "none",
                    (Some(_), None, _) => "up",
                    (Some(_), Some(_), false) => "down",
                    (Some(_), Some(_), true) => "open",
                },
            };
            records.replace_json(&cfg.state_dir.join("status.json"), &status)?;
            next_status = now + STATUS_EVERY_NS;
        }
        let wait = driver.as_ref().map_or(IDLE_NS, |d| d.wait_ns(&clock));
        crate::sleep_ns(wait.min(next_scan.saturating_sub(clock.now())).max(10_000));
    }
    log.event("stopping", &[("name", &cfg.name)]);
    Ok(())
}

/// The metrics: the agent, the rates in force and every pair's datapath counts by VM and
/// remote, the shim's and the programs' event counts, and (with `bpf_stats`) the programs'
/// run time.
fn exposition_text(
    cfg: &DaemonConfig,
    clock: &Clock,
    vms: &[VmSeen],
    rates: &[(String, String, f64)],
    pairs: &[tacc_mech::roles::PairCounts],
    counters: &BTreeMap<&'static str, f64>,
    bpf: &aya::Ebpf,
) -> String {
    let mut t = Text::default();
    let info = [
        ("name", cfg.name.as_str()),
        ("mechanism", cfg.mechanism.kind()),
        ("uplink", cfg.uplink.as_str()),
    ];
    t.sample(
        "agent_info",
        "gauge",
        "The agent, its mechanism and uplink.",
        &info,
        1.0,
    );
    let up = clock.elapsed() as f64 / 1e9;
    t.sample(
        "agent_uptime_seconds",
        "gauge",
        "Seconds since the agent started.",
        &[],
        up,
    );
    t.sample(
        "vms",
        "gauge",
        "VMs the agent knows (given or learned).",
        &[],
        vms.len() as f64,
    );
    for (vm, dst, bps) in rates {
        let help = "The rate the mechanism holds a VM (to a destination, * for all) to.";
        t.sample("rate_bps", "gauge", help, &[("vm", vm), ("dst", dst)], *bps);
    }
    let dotted = |ip: u32| std::net::Ipv4Addr::from(ip).to_string();
    for p in pairs {
        let (vm, remote) = (dotted(p.vm), dotted(p.remote));
        let labels = [("vm", vm.as_str()), ("remote", remote.as_str())];
        for (name, help, v) in [
            (
                "pair_tx_packets_total",
                "Packets a VM sent to a remote.",
                p.tx_packets,
            ),
            (
                "pair_tx_bytes_total",
                "Bytes a VM sent to a remote.",
                p.tx_bytes,
            ),
            (
                "pair_ce_cleared_total",
                "CE marks on packets from a remote, cleared.",
                p.ce_cleared,
            ),
            (
                "pair_ipr_set_total",
                "Marks echoed to a remote in the IPR bit.",
                p.ipr_set,
            ),
            ("pair_ipr_seen_total", "IPR bits from a remote.", p.ipr_seen),
            (
                "pair_feedback_packets_total",
                "Feedback packets from a remote.",
                p.feedback_packets,
            ),
            (
                "pair_feedback_marks_total",
                "Marks those feedback packets carried.",
                p.feedback_marks,
            ),
        ] {
            t.sample(name, "counter", help, &labels, v as f64);
        }
    }
    for (event, n) in counters {
        let help = "Events of the shim and the datapath (drops, rewrites, feedback) by kind.";
        t.sample("events_total", "counter", help, &[("event", event)], *n);
    }
    if cfg.bpf_stats {
        for (name, prog) in bpf.programs() {
            if let Ok(info) = prog.info() {
                let labels = [("program", name)];
                let secs = info.run_time().as_secs_f64();
                let help = "Time the kernel spent in a program.";
                t.sample("bpf_run_seconds_total", "counter", help, &labels, secs);
                let help = "Runs of a program.";
                t.sample(
                    "bpf_runs_total",
                    "counter",
                    help,
                    &labels,
                    info.run_count() as f64,
                );
            }
        }
    }
    t.finish()
}

const STATUS_EVERY_NS: u64 = 1_000_000_000;
/// How soon a scan follows the last when an unknown source sent.
const EAGER_SCAN_NS: u64 = 20_000_000;
/// The longest sleep without a shim: a stop is seen within it.
const IDLE_NS: u64 = 100_000_000;

#[cfg(test)]
mod tests {
    use super::Hold;
    use std::time::Duration;

    const STATIC: Duration = Duration::from_secs(3600);
    const DOWN: Option<Duration> = Some(Duration::from_millis(5));

    #[test]
    fn rates_are_held_while_down_and_after_until_the_controller_is_in_control() {
        let mut h = Hold::default();
        assert!(h.frozen(DOWN, false, false, STATIC), "not connected yet");
        assert!(
            !h.frozen(None, false, false, STATIC),
            "the first session holds nothing"
        );
        assert!(h.frozen(DOWN, false, false, STATIC));
        assert!(
            h.frozen(None, false, false, STATIC),
            "back, its controller not in control"
        );
        assert!(h.frozen(None, false, false, STATIC));
        assert!(!h.frozen(None, true, false, STATIC), "in control");
        assert!(!h.frozen(None, false, false, STATIC), "and stays so");
    }

    #[test]
    fn a_controller_not_in_control_is_waited_for_fail_static_at_most() {
        let mut h = Hold::default();
        assert!(!h.frozen(None, false, false, Duration::ZERO));
        assert!(h.frozen(DOWN, false, false, Duration::ZERO));
        assert!(!h.frozen(None, false, false, Duration::ZERO));
    }

    #[test]
    fn back_from_fail_open_nothing_is_held() {
        let mut h = Hold::default();
        assert!(!h.frozen(None, false, false, STATIC));
        assert!(h.frozen(DOWN, false, true, STATIC));
        assert!(!h.frozen(None, false, true, STATIC));
    }
}
