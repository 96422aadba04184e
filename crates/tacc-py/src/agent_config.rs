//! `tacc agent`'s host config (a TOML file), read as strictly as a scenario: every problem
//! is one `FILE:LINE: key: ...` line.
//!
//! ```toml
//! name = "hv1"                 # optional: the machine's host name
//! uplink = "eth0"              # the NIC towards the fabric
//! uplink_rate = "10Gbps"
//! bridges = ["br0"]            # every port but the uplink is a VM's; addresses learned
//! ovs_db = "unix:/var/run/openvswitch/db.sock"   # where an OVS bridge's ports are listed
//! ovs_userspace = false        # true: VMs and uplink on an OVS bridge, datapath_type=netdev
//! state_dir = "/run/tacc-agent"
//! rescan = "1s"
//! limiter_queue = "150KB"
//! metrics = "127.0.0.1:9464"   # the Prometheus endpoint, or "off"
//! metrics_beyond_localhost = false   # true to listen on another address than loopback
//! bpf_stats = false            # count the programs' run time for the metrics
//! log_format = "text"          # or "json": one object a line
//! pin_dir = "/sys/fs/bpf/tacc-agent"   # the maps, pinned: a restarted agent takes them over
//!
//! [[vms]]                      # VMs by port, with an address or learned from their traffic
//! name = "web1"
//! port = "vnet0"
//! address = "10.0.0.1"
//!
//! [controller]                 # for the kinds with a controller (sdn-gcc, sicc)
//! address = "192.0.2.1:7400"
//! key_file = "/etc/tacc/host.key"   # 32 bytes, readable by its owner alone
//! fail_static = "10s"          # the last rates kept this long once the channel is down,
//! retry_max = "5s"             # then the limits lifted; reconnection backoff up to this
//!
//! [mechanism]                  # the keys and checks of a scenario's [mechanism]
//! kind = "hygenicc"
//! ```

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use serde::Deserialize;
use tacc_agent::channel::ChannelConfig;
use tacc_agent::daemon::{unsupported, ControllerLink, DaemonConfig, VmEntry};
use tacc_mech::units::{Bytes, Duration, Rate};
use tacc_sim::scenario::{ConfigReader, ScenarioErrors};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ControllerTable {
    address: String,
    key_file: PathBuf,
    #[serde(default)]
    fail_static: Option<Duration>,
    #[serde(default)]
    retry_max: Option<Duration>,
}

/// A key file's 32 bytes, or what is wrong with it: one that others may read is refused.
pub(crate) fn read_key(path: &std::path::Path) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{} is readable or writable by others than its owner (mode {mode:o}): chmod 600 it",
            path.display()
        ));
    }
    let key = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if key.len() != 32 {
        return Err(format!(
            "{}: expected 32 bytes, found {}",
            path.display(),
            key.len()
        ));
    }
    Ok(key)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VmTable {
    name: String,
    port: String,
    #[serde(default)]
    address: Option<String>,
}

const DEFAULT_STATE_DIR: &str = "/run/tacc-agent";
const DEFAULT_OVS_DB: &str = "unix:/var/run/openvswitch/db.sock";
const DEFAULT_METRICS: &str = "127.0.0.1:9464";
const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/tacc-agent";
/// A limiter's FIFO: 100 full frames, a switch port's buffer in the papers' experiments.
const DEFAULT_LIMITER_QUEUE: u64 = 100 * 1514;

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn interface_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() || name.len() > 15 {
        Some("expected an interface name of 1 to 15 characters")
    } else if name.contains(['/', ' ', '\0']) {
        Some("expected an interface name (no '/', spaces)")
    } else {
        None
    }
}

/// `metrics` (an address and port, loopback unless `metrics_beyond_localhost = true`, or
/// "off"): where a daemon's Prometheus endpoint listens, `None` for none (or an error).
pub(crate) fn read_metrics(r: &mut ConfigReader, default: &str) -> Option<SocketAddr> {
    let metrics: Option<String> = r.optional("metrics");
    let beyond_localhost: Option<bool> = r.optional("metrics_beyond_localhost");
    match metrics.as_deref().unwrap_or(default) {
        "off" => None,
        text => match text.parse::<SocketAddr>() {
            Ok(addr) if !addr.ip().is_loopback() && beyond_localhost != Some(true) => {
                r.error(
                    "metrics",
                    format!(
                        "{addr} is beyond localhost: the metrics say what runs on this \
                         host; set metrics_beyond_localhost = true to listen there"
                    ),
                );
                None
            }
            Ok(addr) => Some(addr),
            Err(_) => {
                r.error(
                    "metrics",
                    format!("expected an address and port such as \"{default}\", or \"off\", got {text:?}"),
                );
                None
            }
        },
    }
}

/// `log_format`: true for "json" (one object a line), false for "text".
pub(crate) fn read_log_format(r: &mut ConfigReader) -> bool {
    let log_format: Option<String> = r.optional("log_format");
    match log_format.as_deref() {
        None | Some("text") => false,
        Some("json") => true,
        Some(other) => {
            r.error(
                "log_format",
                format!("expected \"text\" or \"json\", got {other:?}"),
            );
            false
        }
    }
}

/// Reads and checks a host config; `file` names it in errors.
pub fn read(text: &str, file: &str) -> Result<DaemonConfig, ScenarioErrors> {
    let mut r = ConfigReader::new(text, file)?;
    let name: Option<String> = r.optional("name");
    let uplink: Option<String> = r.required("uplink");
    let uplink_rate: Option<Rate> = r.required("uplink_rate");
    let bridges: Vec<String> = r.optional("bridges").unwrap_or_default();
    let ovs_userspace: Option<bool> = r.optional("ovs_userspace");
    let ovs_db: Option<String> = r.optional("ovs_db");
    let state_dir: Option<PathBuf> = r.optional("state_dir");
    let rescan: Option<Duration> = r.optional("rescan");
    let limiter_queue: Option<Bytes> = r.optional("limiter_queue");
    let metrics = read_metrics(&mut r, DEFAULT_METRICS);
    let bpf_stats: Option<bool> = r.optional("bpf_stats");
    let log_json = read_log_format(&mut r);
    let pin_dir: Option<PathBuf> = r.optional("pin_dir");
    let controller_table: Option<ControllerTable> = r.optional("controller");
    let vm_tables: Vec<(usize, VmTable)> = r.list("vms");
    let mechanism = r.mechanism();

    if let Some(problem) = uplink.as_deref().and_then(interface_name_problem) {
        r.error("uplink", problem);
    }
    if uplink_rate.is_some_and(|x| x.0 == 0) {
        r.error("uplink_rate", "expected a rate above 0");
    }
    for (i, b) in bridges.iter().enumerate() {
        if let Some(problem) = interface_name_problem(b) {
            r.error(&format!("bridges[{i}]"), problem);
        }
    }
    if ovs_db
        .as_deref()
        .is_some_and(|d| !(d.starts_with("unix:/") || d.starts_with("tcp:")))
    {
        r.error(
            "ovs_db",
            "expected Open vSwitch's database as ovs-vsctl --db takes it: \
             \"unix:/PATH\" or \"tcp:ADDRESS:PORT\"",
        );
    }
    if rescan.is_some_and(|d| d.0 < 10_000_000) {
        r.error("rescan", "expected at least 10ms");
    }
    if limiter_queue.is_some_and(|b| b.0 < 1514) {
        r.error("limiter_queue", "expected at least one full frame, 1514B");
    }
    let mut vms = Vec::new();
    let (mut names, mut ports) = (HashSet::new(), HashSet::new());
    for (i, vm) in vm_tables {
        let at = |key: &str| format!("vms[{i}].{key}");
        if !names.insert(vm.name.clone()) {
            r.error(&at("name"), format!("VM {:?} is named twice", vm.name));
        }
        if let Some(problem) = interface_name_problem(&vm.port) {
            r.error(&at("port"), problem);
        } else if Some(&vm.port) == uplink.as_ref() {
            r.error(&at("port"), "is the uplink");
        } else if !ports.insert(vm.port.clone()) {
            r.error(
                &at("port"),
                format!("port {:?} is given to two VMs", vm.port),
            );
        }
        let address = match vm.address.as_deref().map(str::parse::<Ipv4Addr>) {
            None => None,
            Some(Ok(ip)) => Some(u32::from(ip)),
            Some(Err(_)) => {
                r.error(
                    &at("address"),
                    "expected an IPv4 address such as \"10.0.0.1\"",
                );
                None
            }
        };
        vms.push(VmEntry {
            name: vm.name,
            port: vm.port,
            address,
        });
    }
    if let Some(m) = &mechanism {
        // A VM whose address is learned resolves once it sends; its name is checked here.
        let vm_address = |n: &str| {
            vms.iter()
                .find(|v| v.name == n)
                .map(|v| v.address.unwrap_or(0))
        };
        for p in m.check(&vm_address) {
            r.error(&p.key, p.message);
        }
        if let Some(why) = unsupported(m, controller_table.is_some()) {
            r.error("mechanism.kind", why);
        }
    }
    let controller = controller_table.and_then(|c| {
        let key = read_key(&c.key_file)
            .map_err(|e| r.error("controller.key_file", e))
            .ok()?;
        if c.address
            .to_socket_addrs()
            .map_or(true, |mut a| a.next().is_none())
        {
            r.error(
                "controller.address",
                format!(
                    "expected a host and port such as \"192.0.2.1:7400\", got {:?}",
                    c.address
                ),
            );
            return None;
        }
        Some(ControllerLink {
            channel: ChannelConfig {
                address: c.address,
                key,
                retry_max: std::time::Duration::from_nanos(
                    c.retry_max.map_or(5_000_000_000, |d| d.0),
                ),
                host: name.clone().unwrap_or_else(host_name),
            },
            fail_static: std::time::Duration::from_nanos(
                c.fail_static.map_or(10_000_000_000, |d| d.0),
            ),
        })
    });
    r.finish()?;
    Ok(DaemonConfig {
        name: name.unwrap_or_else(host_name),
        uplink: uplink.expect("checked"),
        uplink_rate_bps: uplink_rate.expect("checked").0,
        bridges,
        ovs_userspace: ovs_userspace.unwrap_or(false),
        ovs_db: ovs_db.unwrap_or_else(|| DEFAULT_OVS_DB.into()),
        vms,
        mechanism: mechanism.unwrap_or_default(),
        state_dir: state_dir.unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR)),
        rescan_ns: rescan.map_or(1_000_000_000, |d| d.0),
        limiter_queue_bytes: limiter_queue.map_or(DEFAULT_LIMITER_QUEUE, |b| b.0),
        metrics,
        bpf_stats: bpf_stats.unwrap_or(false),
        log_json,
        pin_dir: pin_dir.unwrap_or_else(|| PathBuf::from(DEFAULT_PIN_DIR)),
        controller,
    })
}
