"""The plan's world in network namespaces: one namespace per switch, host (hypervisor) and
VM; a veth pair per link; pure L3 forwarding by /32 routes; a queue on every plan port.

Naming, with the run's id R (4 hex digits) so that a run's namespaces are found again and
interface names stay within 15 characters: namespaces `tacc-R-sw<i>`, `tacc-R-h<j>`,
`tacc-R-v<k>`; in a switch the interface of port p is `p<p>`; a host's uplink (its NIC
port) is `up0`; VM k is joined to its host by `eth0` (in the VM) and `vm<k>` (in the host).

A link with a propagation delay (the kernel has no netem) is two veth pairs instead of one:
port p's interface is paired with `w<p>` in the namespace `tacc-R-wire`, and a wire process
there (the `wire` agent) sends what arrives at `w<a>` out of `w<b>` after port a's delay,
and back. Delays are dilated by the rate scale, as every time on the testbed: at a tenth of
the rates a 25 us link holds the packet 250 us, so that a link keeps its bandwidth-delay
product in packets.

With Open vSwitch switches (`switches="ovs"`, for a controller that needs OpenFlow) a switch
namespace holds an OVS bridge instead (tacc.testbed.ovs): its ports carry no address and the
namespace does not route; the controller's rules forward. Every link end then has a MAC made
from its port index (`port_mac`), so that rules can address the next hop, and each host's
uplink reaches every remote VM through a static neighbour entry for its switch port's MAC.

Each plan port is the egress of one veth end, with this queue (rates already scaled):

    root 1: htb (size table: overhead -14, so that every length tc counts is the IP
             packet's, as the engine counts: rates, the buffer, the byte counters)
      1:1  rate = ceil = port rate         (the agent adds its rate limiters under it)
        1:2  rate = ceil = port rate, the default class
          2: bfifo limit = the port's buffer (a limit in packets x 1500 B, as htb and bfifo count a full packet)

htb's quantum is one full packet (1514 B with the Ethernet header), so that classes the
agent adds share the link packet by packet; its burst is 2 full packets or 100 us at the
rate, whichever is more: enough to keep the rate when the qdisc watchdog fires late, and
little enough that the next queue does not see bursts the simulated link would not send.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tacc.testbed import TestbedError, shell
from tacc.testbed.plan import buffer_bytes, port_pairs, vm_tcp_ecn

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from tacc.testbed.plan import Plan

BPFFS = Path("/sys/fs/bpf")
MTU_FRAME = 1514  # a full packet on a veth: 1500 B of IP and the Ethernet header
BURST_TIME_S = 100e-6
RUN_ID = re.compile(r"^tacc-([0-9a-f]{4})-")


@dataclass(frozen=True)
class Names:
    """The run's namespace names, from its id."""

    run_id: str

    @property
    def prefix(self) -> str:
        return f"tacc-{self.run_id}-"

    @property
    def probe(self) -> str:
        return f"{self.prefix}probe"

    @property
    def mgmt(self) -> str:
        """The management namespace: the SDN controller, linked to every switch."""
        return f"{self.prefix}mgmt"

    @property
    def bpffs(self) -> Path:
        """Where the run's agents pin their BPF objects."""
        return BPFFS / f"tacc-{self.run_id}"

    def switch(self, i: int) -> str:
        return f"{self.prefix}sw{i}"

    def host(self, j: int) -> str:
        return f"{self.prefix}h{j}"

    def vm(self, k: int) -> str:
        return f"{self.prefix}v{k}"

    @property
    def wire(self) -> str:
        """The namespace of the links' delay lines."""
        return f"{self.prefix}wire"


@dataclass
class Topology:
    """What was built: each plan port's (namespace, interface), the interfaces the agents
    drive, and every namespace in build order."""

    names: Names
    port_devices: dict[int, tuple[str, str]] = field(default_factory=dict)
    host_vm_ports: dict[int, dict[int, str]] = field(default_factory=dict)
    switch_ports: dict[int, dict[int, str]] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)
    # Plan port -> its reverse (the other direction of the same link).
    reverse: dict[int, int] = field(default_factory=dict)
    # The wire agent's directions: frames arriving at `from` leave by `to` `delay_ns` later.
    wires: list[dict[str, Any]] = field(default_factory=list)

    def add_namespace(self, ns: str) -> None:
        """A new namespace of the run (removed with it), IPv6 off before any interface
        exists, so that none sends router solicitations or multicast reports into the
        queues."""
        shell.run(["ip", "netns", "add", ns])
        self.namespaces.append(ns)
        shell.sysctl(ns, {"net.ipv6.conf.all.disable_ipv6": 1,
                          "net.ipv6.conf.default.disable_ipv6": 1})


def port_mac(port: int) -> str:
    """The MAC of the interface whose egress is plan port `port` (locally administered)."""
    return "02:74:63:" + ":".join(f"{b:02x}" for b in port.to_bytes(3, "big"))


def build(plan: Plan, names: Names, scale: float, switches: str = "linux",
          link_delays: bool = False) -> Topology:
    """Builds the namespaces, links, addresses, routes, kernel settings and queues (and the
    delay lines' links with `link_delays`). What is made is recorded in the returned
    Topology as it is made, but teardown finds a run's namespaces by their names: a build
    that fails halfway leaves nothing behind."""
    if not link_delays:
        plan = dict(plan, ports=[dict(p, delay_ns=0) for p in plan["ports"]])
    topo = Topology(names)
    _namespaces(plan, topo)
    interfaces = _links(plan, topo, scale)
    ovs = switches == "ovs"
    for ns, lines in _addresses_and_routes(plan, topo, interfaces, ovs).items():
        shell.batch("ip", ns, lines)
    for ns, settings in _forwarding_settings(plan, names, interfaces, ovs).items():
        shell.sysctl(ns, settings)
    for k in range(len(plan["vms"])):
        shell.sysctl(names.vm(k), _vm_settings(plan, k))
    for ns, devices in interfaces.items():
        for dev in devices:
            # Without offloads tc sees (and counts, and queues) the packets on the wire, and
            # every checksum is computed by the sender and checked by the receiver: a veth
            # otherwise passes TCP checksums unfilled and unchecked, so a wrong rewrite by the
            # agent would go unseen (its updates need complete checksums to patch).
            shell.run(shell.in_ns(ns, "ethtool", "-K", dev, "tso", "off", "gso", "off",
                                  "gro", "off", "tx", "off", "rx", "off"))
    for ns, lines in _queues(plan, topo, scale).items():
        shell.batch("tc", ns, lines)
    return topo


def _namespaces(plan: Plan, topo: Topology) -> None:
    names = topo.names
    made = [names.switch(i) for i in range(len(plan["switches"]))]
    made += [names.host(j) for j in range(len(plan["hosts"]))]
    made += [names.vm(k) for k in range(len(plan["vms"]))]
    if any(_delayed(plan, a, b) for a, b in port_pairs(plan)):
        made.append(names.wire)
    for ns in made:
        topo.add_namespace(ns)


def _delayed(plan: Plan, a: int, b: int) -> bool:
    return bool(plan["ports"][a]["delay_ns"] or plan["ports"][b]["delay_ns"])


def _links(plan: Plan, topo: Topology, scale: float) -> dict[str, list[str]]:
    """The veth pairs, made straight into their namespaces (through the wire namespace for
    a link with a delay); returns each namespace's interfaces."""
    names = topo.names
    interfaces: dict[str, list[str]] = defaultdict(list)
    for i, port in enumerate(plan["ports"]):
        topo.port_devices[i] = _port_device(plan, names, i)
        if "switch" in port["from"]:
            topo.switch_ports.setdefault(port["from"]["switch"], {})[i] = f"p{i}"
    lines = []
    for a, b in port_pairs(plan):
        (ns_a, dev_a), (ns_b, dev_b) = topo.port_devices[a], topo.port_devices[b]
        topo.reverse[a], topo.reverse[b] = b, a
        if not _delayed(plan, a, b):
            lines.append(f"link add name {dev_a} address {port_mac(a)} netns {ns_a} type veth "
                         f"peer name {dev_b} address {port_mac(b)} netns {ns_b}")
            continue
        for p, dev, ns in ((a, dev_a, ns_a), (b, dev_b, ns_b)):
            lines.append(f"link add name {dev} address {port_mac(p)} netns {ns} type veth "
                         f"peer name w{p} netns {names.wire}")
            interfaces[names.wire].append(f"w{p}")
        for p, q in ((a, b), (b, a)):
            delay_ns = round(plan["ports"][p]["delay_ns"] / scale)
            topo.wires.append({"from": f"w{p}", "to": f"w{q}", "delay_ns": delay_ns})
    for k, vm in enumerate(plan["vms"]):
        lines.append(f"link add name eth0 netns {names.vm(k)} type veth "
                     f"peer name vm{k} netns {names.host(vm['host'])}")
        topo.host_vm_ports.setdefault(vm["host"], {})[k] = f"vm{k}"
    shell.batch("ip", None, lines)
    for ns, dev in topo.port_devices.values():
        interfaces[ns].append(dev)
    for k, vm in enumerate(plan["vms"]):
        interfaces[names.vm(k)].append("eth0")
        interfaces[names.host(vm["host"])].append(f"vm{k}")
    return dict(interfaces)


def _port_device(plan: Plan, names: Names, i: int) -> tuple[str, str]:
    """The (namespace, interface) whose egress is plan port i."""
    node = plan["ports"][i]["from"]
    if "switch" in node:
        return names.switch(node["switch"]), f"p{i}"
    host = node["host"]
    if plan["hosts"][host]["nic_port"] != i:
        raise TestbedError(f"plan: port {plan['ports'][i]['name']} leaves host "
                           f"{plan['hosts'][host]['name']} but is not its nic_port")
    return names.host(host), "up0"


def _addresses_and_routes(plan: Plan, topo: Topology, interfaces: dict[str, list[str]],
                          ovs: bool) -> dict[str, list[str]]:
    """`ip` lines per namespace: VMs get their address and a default route carrying the
    scenario's TCP settings; hosts and switches a /32 route per VM (an OVS switch none, and
    its hosts a neighbour entry per remote VM)."""
    tcp, names = plan["tcp"], topo.names
    lines: dict[str, list[str]] = {}
    for k, vm in enumerate(plan["vms"]):
        lines[names.vm(k)] = [
            f"addr add {vm['address']}/32 dev eth0",
            "link set lo up",
            "link set eth0 up",
            f"route add default dev eth0 initcwnd {tcp['init_cwnd']} "
            f"rto_min {max(1, round(tcp['rto_min_ns'] / 1e6))}ms advmss {tcp['mss']}",
        ]
    forwarders = [names.switch(i) for i in range(len(plan["switches"]))]
    forwarders += [names.host(j) for j in range(len(plan["hosts"]))]
    for n, ns in enumerate(forwarders, start=1):
        # Proxy ARP answers only requests that carry a sender address, and these namespaces
        # have none on the data path: each gets one on lo, link-local, which the plan's
        # addresses never use.
        lines[ns] = [f"addr add 169.254.{n >> 8}.{n & 255}/32 dev lo", "link set lo up"]
        lines[ns] += [f"link set {dev} up" for dev in interfaces.get(ns, [])]
    if names.wire in interfaces:
        # The wire's ends take every frame, whatever its address: the wire is no next hop.
        lines[names.wire] = [f"link set {dev} promisc on up" for dev in interfaces[names.wire]]
    for j, host in enumerate(plan["hosts"]):
        lines[names.host(j)] += [
            f"route add {vm['address']}/32 dev " + (f"vm{k}" if vm["host"] == j else "up0")
            for k, vm in enumerate(plan["vms"])
        ]
        if ovs:
            switch_port = port_mac(topo.reverse[host["nic_port"]])
            lines[names.host(j)] += [
                f"neigh replace {vm['address']} lladdr {switch_port} dev up0 nud permanent"
                for vm in plan["vms"] if vm["host"] != j
            ]
    for route in plan["routes"] if not ovs else []:
        s, address = route["switch"], plan["vms"][route["vm"]]["address"]
        for p in route["ports"]:
            if plan["ports"][p]["from"] != {"switch": s}:
                raise TestbedError(f"plan: a route of switch {plan['switches'][s]['name']} "
                                   f"leaves by port {plan['ports'][p]['name']}, not its own")
        via = " ".join(f"nexthop dev p{p}" for p in route["ports"])
        if len(route["ports"]) == 1:
            via = f"dev p{route['ports'][0]}"
        lines[names.switch(s)].append(f"route add {address}/32 {via}")
    return lines


def _forwarding_settings(plan: Plan, names: Names, interfaces: dict[str, list[str]],
                         ovs: bool) -> dict[str, dict[str, object]]:
    """Hosts and switches route, never filter by reverse path, and answer ARP for what
    they route (no proxy delay: the default waits up to 0.8 s before answering). An OVS
    switch's kernel must not route: OVS forwards, and the kernel would send a second copy."""
    multipath = {r["switch"] for r in plan["routes"] if len(r["ports"]) > 1}
    settings: dict[str, dict[str, object]] = {}
    forwarders = [] if ovs else [(names.switch(i), i in multipath)
                                 for i in range(len(plan["switches"]))]
    forwarders += [(names.host(j), False) for j in range(len(plan["hosts"]))]
    for ns, ecmp in forwarders:
        s: dict[str, object] = {"net.ipv4.ip_forward": 1, "net.ipv4.conf.all.rp_filter": 0}
        for dev in interfaces.get(ns, []):
            s[f"net.ipv4.conf.{dev}.rp_filter"] = 0
            s[f"net.ipv4.conf.{dev}.proxy_arp"] = 1
            s[f"net.ipv4.neigh.{dev}.proxy_delay"] = 0
        if ecmp:
            s["net.ipv4.fib_multipath_hash_policy"] = 1  # by 5-tuple, as the engine's ECMP
        settings[ns] = s
    return settings


def _vm_settings(plan: Plan, k: int) -> dict[str, object]:
    """A VM's TCP: ECN as its flows ask, SACK as the scenario says, the receive buffer
    capped at the scenario's (the sinks also set it on their sockets), no metrics cached
    between connections."""
    tcp = plan["tcp"]
    ecn, _ = vm_tcp_ecn(plan)
    rcv = int(tcp["rcv_buf_bytes"])
    return {
        "net.ipv4.tcp_ecn": ecn.get(k, 2),
        "net.ipv4.tcp_sack": int(bool(tcp["sack"])),
        "net.ipv4.tcp_rmem": f"4096 {min(131072, rcv)} {rcv}",
        "net.ipv4.tcp_no_metrics_save": 1,
    }


def _queues(plan: Plan, topo: Topology, scale: float) -> dict[str, list[str]]:
    lines: dict[str, list[str]] = defaultdict(list)
    for i, port in enumerate(plan["ports"]):
        ns, dev = topo.port_devices[i]
        rate = max(1, round(port["rate_bps"] * scale))
        burst = max(2 * MTU_FRAME, round(rate * BURST_TIME_S / 8))
        shape = f"rate {rate}bit ceil {rate}bit quantum {MTU_FRAME} burst {burst} cburst {burst}"
        lines[ns] += [
            f"qdisc add dev {dev} root handle 1: stab overhead -14 htb default 2",
            f"class add dev {dev} parent 1: classid 1:1 htb {shape}",
            f"class add dev {dev} parent 1:1 classid 1:2 htb {shape}",
            f"qdisc add dev {dev} parent 1:2 handle 2: bfifo limit {buffer_bytes(port)}",
        ]
    return dict(lines)


def run_namespaces(prefix: str = "tacc-") -> list[str]:
    """The namespaces whose names start with `prefix` (none without `ip`: nothing can have
    been built)."""
    if shutil.which("ip") is None:
        return []
    listed = shell.run(["ip", "netns", "list"])
    return [line.split()[0] for line in listed.splitlines()
            if line.strip() and line.split()[0].startswith(prefix)]


KILL_WAIT_S = 5.0


def teardown(names: Names) -> list[str]:
    """Removes every namespace of the run (killing what still runs in it) and its BPF
    filesystem directory; returns what could not be removed."""
    problems = []
    for ns in run_namespaces(names.prefix):
        problems += remove_namespace(ns)
    if names.bpffs.exists():
        try:
            shutil.rmtree(names.bpffs)
        except OSError as exc:
            problems.append(f"{names.bpffs}: {exc.strerror}")
    return problems


def remove_namespace(ns: str) -> list[str]:
    """A namespace lives on while a process is in it: those are killed first, and waited
    for, so that nothing of the run (the OVS daemons, detached from it) outlives it."""
    try:
        pids = [int(pid) for pid in shell.run(["ip", "netns", "pids", ns]).split()]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shell.run(["ip", "netns", "del", ns])
    except TestbedError as exc:
        return [str(exc)]
    alive = shell.wait_exited(pids, KILL_WAIT_S)
    return [f"{ns}: processes {', '.join(map(str, alive))} still running {KILL_WAIT_S:g}s "
            "after SIGKILL"] if alive else []
