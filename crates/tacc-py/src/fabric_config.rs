//! `tacc controller`'s fabric config (a TOML file), read as strictly as a scenario: every
//! problem is one `FILE:LINE: key: ...` line. The fabric it describes becomes a plan
//! (`tacc_mech::plan::Plan`), the world the mechanism's controller is built against, as a
//! scenario's does in the simulator and on the testbed.
//!
//! ```toml
//! openflow = "0.0.0.0:6653"        # where the OVS switches connect (OpenFlow 1.3)
//! agents = "0.0.0.0:7400"          # where the hosts' agents connect (the control channel)
//! state_dir = "/run/tacc-controller"
//! metrics = "127.0.0.1:9465"       # the Prometheus endpoint, or "off"
//! log_format = "text"              # or "json"
//!
//! [[hosts]]                        # a hypervisor, named as its agent names itself
//! name = "hv1"
//! nic_rate = "10Gbps"
//! key_file = "/etc/tacc/keys/hv1.key"   # the key its agent holds (32 bytes, mode 600)
//! vms = [{ name = "web1", address = "10.0.0.1" }]
//!
//! [[switches]]
//! name = "tor1"
//! datapath_id = 1                  # as OVS gives it (other-config:datapath-id)
//! stats = "/run/tacc-switch/tor1.sock"  # its switch agent's stats socket (ECN marks, queues),
//!                                  # or "ADDRESS:PORT" (UDP) for an agent on another machine,
//! # stats_key_file = "/etc/tacc/keys/tor1.key"  # which then signs each request and reply
//! ports = [                        # OpenFlow port number, what it is cabled to
//!   { number = 1, to = "hv1", rate = "10Gbps", buffer = "100pkt", marking = "20pkt", device = "p1" },
//!   { number = 9, to = "spine1:3", rate = "40Gbps", buffer = "200pkt", device = "p9" },
//! ]
//!
//! [mechanism]                      # the keys and checks of a scenario's [mechanism]
//! kind = "sdn-gcc"
//! ```

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tacc_mech::plan::{
    Node, Plan, PlanHost, PlanOutput, PlanPort, PlanQueue, PlanRoute, PlanSwitch, PlanVm,
};
use tacc_mech::registry::MechanismConfig;
use tacc_mech::units::{Rate, Size};
use tacc_mech::wire::Ipv4Packet;
use tacc_sim::plan::plan_tcp;
use tacc_sim::scenario::{ConfigReader, ScenarioErrors};
use tacc_sim::tcp::TcpConfig;

use crate::agent_config::{read_key, read_log_format, read_metrics};

const DEFAULT_OPENFLOW: &str = "0.0.0.0:6653";
const DEFAULT_STATE_DIR: &str = "/run/tacc-controller";
const DEFAULT_METRICS: &str = "127.0.0.1:9465";
/// Linux's largest receive buffer by default (tcp_rmem[2]).
const GUEST_RCV_BUF: u64 = 6 << 20;
/// OpenFlow's highest physical port number (OFPP_MAX).
const OFPP_MAX: u32 = 0xffff_ff00;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HostTable {
    name: String,
    nic_rate: Rate,
    #[serde(default)]
    key_file: Option<PathBuf>,
    #[serde(default)]
    vms: Vec<VmTable>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VmTable {
    name: String,
    address: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SwitchTable {
    name: String,
    datapath_id: u64,
    #[serde(default)]
    stats: Option<String>,
    #[serde(default)]
    stats_key_file: Option<PathBuf>,
    #[serde(default)]
    ports: Vec<PortTable>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PortTable {
    number: u32,
    to: String,
    rate: Rate,
    buffer: Size,
    #[serde(default)]
    marking: Option<Size>,
    #[serde(default)]
    device: Option<String>,
}

/// What the controller daemon runs with (read by python/tacc/deploy/controller.py).
#[derive(Serialize)]
pub struct ControllerDaemon {
    pub plan: Plan,
    pub openflow: SocketAddr,
    pub agents: Option<SocketAddr>,
    /// Host name -> its key, hex.
    pub keys: BTreeMap<String, String>,
    pub switches: Vec<DaemonSwitch>,
    /// Plan port -> the other direction of its link.
    pub reverse: BTreeMap<u32, u32>,
    pub state_dir: PathBuf,
    pub metrics: Option<SocketAddr>,
    pub log_json: bool,
}

#[derive(Serialize)]
pub struct DaemonSwitch {
    pub name: String,
    pub datapath_id: u64,
    /// A Unix socket's path, or a UDP address and port (with `stats_key`).
    pub stats: Option<String>,
    /// The key that signs the stats over UDP, hex (read where the keys are).
    pub stats_key: Option<String>,
    /// Plan port -> its OpenFlow port number.
    pub ofports: BTreeMap<u32, u32>,
    /// Plan port -> its interface, for the switch agent (ports with a `device`).
    pub devices: BTreeMap<u32, String>,
}

/// Where a switch port is cabled: a host, or a switch's port (by index and number).
enum End {
    Host(usize),
    Switch(usize, u32),
}

/// Reads and checks a fabric config; `file` names it in errors. `keys_read`: read the hosts'
/// and the switches' key files (the controller does); without, only their presence is
/// checked, but for the key of switch `switch` (its switch agent's).
pub fn read(
    text: &str,
    file: &str,
    keys_read: bool,
    switch: Option<&str>,
) -> Result<ControllerDaemon, ScenarioErrors> {
    let mut r = ConfigReader::new(text, file)?;
    let openflow: Option<String> = r.optional("openflow");
    let agents: Option<String> = r.optional("agents");
    let state_dir: Option<PathBuf> = r.optional("state_dir");
    let metrics = read_metrics(&mut r, DEFAULT_METRICS);
    let log_json = read_log_format(&mut r);
    let hosts: Vec<(usize, HostTable)> = r.list("hosts");
    let switches: Vec<(usize, SwitchTable)> = r.list("switches");
    let mechanism = r.mechanism();

    let address = |r: &mut ConfigReader, key: &str, text: Option<&str>| {
        let text = text?;
        text.parse::<SocketAddr>()
            .map_err(|_| {
                r.error(
                    key,
                    format!("expected an address and port such as \"0.0.0.0:6653\", got {text:?}"),
                )
            })
            .ok()
    };
    let openflow = address(
        &mut r,
        "openflow",
        Some(openflow.as_deref().unwrap_or(DEFAULT_OPENFLOW)),
    );
    let agents = address(&mut r, "agents", agents.as_deref());
    // The controller's own servers listen on IPv4.
    for (key, a) in [("agents", agents), ("metrics", metrics)] {
        if a.is_some_and(|a| a.is_ipv6()) {
            r.error(key, "expected an IPv4 address and port");
        }
    }

    // Hosts and their VMs.
    let mut plan_hosts = Vec::new();
    let mut vms = Vec::new();
    let mut keys = BTreeMap::new();
    let mut host_index = HashMap::new();
    let (mut vm_names, mut addresses) = (HashSet::new(), HashSet::new());
    for (j, (i, h)) in hosts.iter().enumerate() {
        let at = |key: &str| format!("hosts[{i}].{key}");
        if host_index.insert(h.name.clone(), j).is_some() {
            r.error(&at("name"), format!("host {:?} is named twice", h.name));
        }
        if h.nic_rate.0 == 0 {
            r.error(&at("nic_rate"), "expected a rate above 0");
        }
        if let Some(path) = h.key_file.as_ref().filter(|_| keys_read) {
            match read_key(path) {
                Ok(key) => {
                    keys.insert(h.name.clone(), hex(&key));
                }
                Err(e) => r.error(&at("key_file"), e),
            }
        }
        for (k, vm) in h.vms.iter().enumerate() {
            let at = |key: &str| format!("hosts[{i}].vms[{k}].{key}");
            if !vm_names.insert(vm.name.clone()) {
                r.error(&at("name"), format!("VM {:?} is named twice", vm.name));
            }
            match vm.address.parse::<Ipv4Addr>() {
                Ok(ip) if !addresses.insert(ip) => {
                    r.error(&at("address"), format!("{ip} is given to two VMs"))
                }
                Ok(_) => {}
                Err(_) => r.error(
                    &at("address"),
                    "expected an IPv4 address such as \"10.0.0.1\"",
                ),
            }
            vms.push(PlanVm {
                name: vm.name.clone(),
                host: j as u32,
                address: vm.address.clone(),
            });
        }
        plan_hosts.push(PlanHost {
            name: h.name.clone(),
            nic_port: u32::MAX, // set where its cable is found
        });
    }

    // Switches, their ports and what each is cabled to.
    let mut switch_index = HashMap::new();
    let mut dpids = HashSet::new();
    for (n, (i, s)) in switches.iter().enumerate() {
        if switch_index.insert(s.name.clone(), n).is_some() {
            r.error(
                &format!("switches[{i}].name"),
                format!("switch {:?} is named twice", s.name),
            );
        }
        if s.datapath_id == 0 || !dpids.insert(s.datapath_id) {
            r.error(
                &format!("switches[{i}].datapath_id"),
                "expected a datapath id above 0 that no other switch has",
            );
        }
        let at = |key: &str| format!("switches[{i}].{key}");
        match (&s.stats, &s.stats_key_file) {
            (Some(path), Some(_)) if path.starts_with('/') => r.error(
                &at("stats_key_file"),
                "expected none with a Unix socket, which its file's mode guards: the key \
                 signs the stats of a switch agent reached over UDP",
            ),
            (Some(path), None) if path.starts_with('/') => {}
            (Some(address), key) => {
                if address.parse::<SocketAddr>().is_err() {
                    r.error(
                        &at("stats"),
                        format!(
                            "expected a Unix socket's absolute path, or the UDP address and \
                             port of a switch agent on another machine such as \
                             \"10.0.0.254:7401\", got {address:?}"
                        ),
                    );
                }
                if key.is_none() {
                    r.error(
                        &at("stats_key_file"),
                        "expected the switch's key file (32 bytes, mode 600): the stats of a \
                         switch agent reached over UDP are signed",
                    );
                }
            }
            (None, Some(_)) => r.error(
                &at("stats_key_file"),
                "expected `stats` as well: the key signs the stats of its switch agent",
            ),
            (None, None) => {}
        }
    }
    let mut ends: Vec<Vec<Option<End>>> = Vec::new();
    for (n, (i, s)) in switches.iter().enumerate() {
        let mut numbers = HashSet::new();
        let mut here = Vec::new();
        for (k, p) in s.ports.iter().enumerate() {
            let at = |key: &str| format!("switches[{i}].ports[{k}].{key}");
            if p.number == 0 || p.number > OFPP_MAX || !numbers.insert(p.number) {
                r.error(
                    &at("number"),
                    format!("expected an OpenFlow port number from 1 to {OFPP_MAX} that no other port of {:?} has", s.name),
                );
            }
            if p.rate.0 == 0 {
                r.error(&at("rate"), "expected a rate above 0");
            }
            if p.buffer.count() == 0 {
                r.error(&at("buffer"), "expected a buffer of at least one packet");
            }
            if let Some(m) = p.marking {
                if std::mem::discriminant(&m) != std::mem::discriminant(&p.buffer)
                    || m.count() == 0
                    || m.count() > p.buffer.count()
                {
                    r.error(
                        &at("marking"),
                        format!("expected a threshold above 0, in the buffer's unit, at most the buffer ({})", p.buffer),
                    );
                }
            }
            match &p.device {
                Some(d) if d.is_empty() || d.len() > 15 || d.contains(['/', ' ']) => r.error(
                    &at("device"),
                    "expected an interface name of 1 to 15 characters",
                ),
                None if s.stats.is_some() => r.error(
                    &at("device"),
                    "expected the port's interface: the switch agent of a switch with `stats` \
                     answers the controller for every port",
                ),
                _ => {}
            }
            let end = match p.to.split_once(':') {
                None => host_index.get(&p.to).map(|&h| End::Host(h)),
                Some((sw, number)) => match (switch_index.get(sw), number.parse::<u32>()) {
                    (Some(&t), Ok(number)) if (t, number) != (n, p.number) => {
                        Some(End::Switch(t, number))
                    }
                    _ => None,
                },
            };
            if end.is_none() {
                r.error(
                    &at("to"),
                    format!(
                        "expected a host's name or SWITCH:PORT of another port in this file, got {:?}",
                        p.to
                    ),
                );
            }
            here.push(end);
        }
        ends.push(here);
    }

    // The plan's ports: each switch port's direction out of it, then each host's NIC.
    let mut ports = Vec::new();
    let mut port_of = HashMap::new(); // (switch, number) -> plan port
    let mut daemon_switches = Vec::new();
    for (n, (i, s)) in switches.iter().enumerate() {
        let mut ofports = BTreeMap::new();
        let mut devices = BTreeMap::new();
        for (k, p) in s.ports.iter().enumerate() {
            let to = match &ends[n][k] {
                Some(End::Host(h)) => Node::Host(*h as u32),
                Some(End::Switch(t, _)) => Node::Switch(*t as u32),
                None => Node::Switch(n as u32),
            };
            let index = ports.len() as u32;
            let (limit_packets, limit_bytes) = PlanQueue::fields(p.buffer);
            let (k_packets, k_bytes) = p.marking.map_or((None, None), PlanQueue::fields);
            ports.push(PlanPort {
                name: format!("{}:{}", s.name, p.number),
                from: Node::Switch(n as u32),
                to,
                rate_bps: p.rate.0,
                delay_ns: 0,
                queue: PlanQueue {
                    kind: if p.marking.is_some() {
                        "red-ecn"
                    } else {
                        "droptail"
                    }
                    .into(),
                    limit_packets,
                    limit_bytes,
                    k_packets,
                    k_bytes,
                },
                loss_rate: None,
            });
            port_of.insert((n, p.number), index);
            ofports.insert(index, p.number);
            if let Some(d) = &p.device {
                devices.insert(index, d.clone());
            }
        }
        let stats_key = match &s.stats_key_file {
            Some(path) if keys_read || switch == Some(s.name.as_str()) => match read_key(path) {
                Ok(key) => Some(hex(&key)),
                Err(e) => {
                    r.error(&format!("switches[{i}].stats_key_file"), e);
                    None
                }
            },
            _ => None,
        };
        daemon_switches.push(DaemonSwitch {
            name: s.name.clone(),
            datapath_id: s.datapath_id,
            stats: s.stats.clone(),
            stats_key,
            ofports,
            devices,
        });
    }
    let mut reverse = BTreeMap::new();
    for (n, (i, s)) in switches.iter().enumerate() {
        for (k, p) in s.ports.iter().enumerate() {
            let here = port_of[&(n, p.number)];
            match &ends[n][k] {
                Some(End::Host(h)) => {
                    let (_, host) = &hosts[*h];
                    if plan_hosts[*h].nic_port != u32::MAX {
                        r.error(
                            &format!("switches[{i}].ports[{k}].to"),
                            format!("host {:?} is cabled to two switch ports (a host has one NIC towards the fabric)", host.name),
                        );
                        continue;
                    }
                    let nic = ports.len() as u32;
                    ports.push(PlanPort {
                        name: format!("{}->{}", host.name, s.name),
                        from: Node::Host(*h as u32),
                        to: Node::Switch(n as u32),
                        rate_bps: host.nic_rate.0,
                        delay_ns: 0,
                        queue: PlanQueue {
                            kind: "droptail".into(),
                            limit_packets: Some(100),
                            limit_bytes: None,
                            k_packets: None,
                            k_bytes: None,
                        },
                        loss_rate: None,
                    });
                    plan_hosts[*h].nic_port = nic;
                    reverse.insert(here, nic);
                    reverse.insert(nic, here);
                }
                Some(End::Switch(t, number)) => {
                    let back = switches[*t]
                        .1
                        .ports
                        .iter()
                        .position(|q| q.number == *number);
                    let points_back = back.is_some_and(|b| {
                        matches!(ends[*t][b], Some(End::Switch(u, m)) if u == n && m == p.number)
                    });
                    if !points_back {
                        r.error(
                            &format!("switches[{i}].ports[{k}].to"),
                            format!(
                                "{:?} has no port {number} cabled back to {}:{}",
                                switches[*t].1.name, s.name, p.number
                            ),
                        );
                        continue;
                    }
                    reverse.insert(here, port_of[&(*t, *number)]);
                }
                None => {}
            }
        }
    }
    for (j, (i, h)) in hosts.iter().enumerate() {
        if plan_hosts[j].nic_port == u32::MAX {
            r.error(
                &format!("hosts[{i}].name"),
                format!("host {:?} is cabled to no switch port", h.name),
            );
        }
    }

    let mut plan = Plan {
        name: file.to_string(),
        seed: 0,
        duration_ns: 0,
        hosts: plan_hosts,
        vms,
        switches: switches
            .iter()
            .map(|(_, s)| PlanSwitch {
                name: s.name.clone(),
                salt: s.datapath_id.wrapping_mul(0x2545_F491_4F6C_DD1D),
            })
            .collect(),
        ports,
        routes: Vec::new(),
        flows: Vec::new(),
        apps: Vec::new(),
        // The guests' stacks are Linux's, whose largest receive buffer sets the window
        // scale the mechanism assumes until it reads one.
        tcp: plan_tcp(&TcpConfig {
            rcv_buf: GUEST_RCV_BUF,
            ..TcpConfig::linux()
        }),
        output: PlanOutput {
            goodput_bin_ns: 0,
            queue_sample_ns: 0,
            ports: Vec::new(),
            pcap: Vec::new(),
            pcap_dropped: false,
        },
        mechanism: None,
        mechanism_keys: Vec::new(),
    };
    // The mechanism is built against the fabric only once every host has its NIC.
    let cabled = plan.hosts.iter().all(|h| h.nic_port != u32::MAX);
    if cabled {
        plan.routes = routes(&plan, &reverse);
    }

    match &mechanism {
        None => r.error(
            "mechanism",
            "expected a [mechanism] table: the mechanism the controller runs",
        ),
        Some(m) => {
            let vm_address = |n: &str| plan.vms.iter().find(|v| v.name == n).map(|v| v.ip());
            for p in m.check(&vm_address) {
                r.error(&p.key, p.message);
            }
            // Built against the fabric only once it is whole and sound.
            if cabled && !r.has_errors() {
                check_roles(&mut r, m, &plan, agents.is_some(), &switches);
            }
        }
    }
    r.finish()?;
    plan.mechanism = mechanism;
    Ok(ControllerDaemon {
        plan,
        openflow: openflow.expect("checked"),
        agents,
        keys,
        switches: daemon_switches,
        reverse,
        state_dir: state_dir.unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR)),
        metrics,
        log_json,
    })
}

type Packet = Ipv4Packet<Vec<u8>>;

/// What the mechanism's roles need of the fabric: a controller (else where the kind runs),
/// an address for the hosts' agents, the switch agents (their `stats`).
fn check_roles(
    r: &mut ConfigReader,
    m: &MechanismConfig,
    plan: &Plan,
    agents: bool,
    switches: &[(usize, SwitchTable)],
) {
    if matches!(m, MechanismConfig::None(_)) {
        r.error(
            "mechanism.kind",
            "expected a mechanism with a controller (sdn-gcc, sicc, sdn-ecn)",
        );
        return;
    }
    let inst = m.build::<Packet>(plan);
    let host_roles = inst.shims.iter().any(Option::is_some);
    if inst.controller.is_none() {
        let place = if host_roles {
            "the hosts' agents (tacc agent)"
        } else {
            "the switches"
        };
        r.error(
            "mechanism.kind",
            format!("{} has no controller: it runs in {place}", m.kind()),
        );
        return;
    }
    if host_roles && !agents {
        r.error(
            "agents",
            format!(
                "expected the address the hosts' agents connect to: {}'s controller sends \
                 them its notifications",
                m.kind()
            ),
        );
    }
    // SDN-GCC reads the ports' ECN marks and SICC their queues from the switch agents;
    // SDN-ECN reads OpenFlow's counters alone.
    if matches!(m, MechanismConfig::SdnGcc(_) | MechanismConfig::Sicc(_)) {
        for (i, _) in switches.iter().filter(|(_, s)| s.stats.is_none()) {
            r.error(
                &format!("switches[{i}].stats"),
                format!(
                    "expected its switch agent's socket: {} reads the ports' marks and queues there",
                    m.kind()
                ),
            );
        }
    }
}

/// Each switch's ports towards each VM on shortest paths (hop counts), every equal port kept.
fn routes(plan: &Plan, reverse: &BTreeMap<u32, u32>) -> Vec<PlanRoute> {
    let switches = plan.switches.len();
    let mut out = Vec::new();
    for (host, h) in plan.hosts.iter().enumerate() {
        // Hops from every switch to the host, by breadth-first search backwards from it.
        let mut dist = vec![u32::MAX; switches];
        let mut queue = VecDeque::new();
        let Some(&first) = reverse.get(&h.nic_port) else {
            continue;
        };
        let Node::Switch(edge) = plan.ports[first as usize].from else {
            continue;
        };
        dist[edge as usize] = 0;
        queue.push_back(edge as usize);
        while let Some(s) = queue.pop_front() {
            for p in &plan.ports {
                if let (Node::Switch(from), Node::Switch(to)) = (p.from, p.to) {
                    if to as usize == s && dist[from as usize] == u32::MAX {
                        dist[from as usize] = dist[s] + 1;
                        queue.push_back(from as usize);
                    }
                }
            }
        }
        for s in 0..switches {
            if dist[s] == u32::MAX {
                continue;
            }
            let ports: Vec<u32> = (0..plan.ports.len() as u32)
                .filter(|&i| {
                    let p = &plan.ports[i as usize];
                    p.from == Node::Switch(s as u32)
                        && match p.to {
                            Node::Host(t) => t as usize == host,
                            Node::Switch(t) => dist[s] > 0 && dist[t as usize] + 1 == dist[s],
                        }
                })
                .collect();
            for (vm, v) in plan.vms.iter().enumerate() {
                if v.host as usize == host {
                    out.push(PlanRoute {
                        switch: s as u32,
                        vm: vm as u32,
                        ports: ports.clone(),
                    });
                }
            }
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
