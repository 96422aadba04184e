"""`tacc agent` on hypervisors laid out as libvirt and docker lay them out, without `tacc
testbed`: each hypervisor a namespace with a Linux bridge, its VMs namespaces on veths
attached to the bridge, its uplink a bridge port cabled to a switch. The switch is a bridge
whose port to the receiver's hypervisor is the bottleneck (HTB at 100 Mb/s, a 100-packet
FIFO) and marks CE above K = 20 packets (tacc's switch agent, standing in for the ECN
marking the papers ask of the switches). The agents are started by their command line with
a config file, as an operator starts them."""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tacc
from tacc import _core
from tacc.testbed import collect, topology
from tacc.testbed.topology import Names

RATE_BPS = 100_000_000
BIN_NS = 100_000_000
DURATION_S = 6.0
MEASURED_FROM_S = 2.0  # after the rates settle (HyGenICC's cuts take tens of ms)
UDP_PAYLOAD = 1472 / 1500  # a 1500 B UDP packet's payload, which the sink counts


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def stopped(proc: subprocess.Popen[str]) -> str:
    """SIGTERM to a daemon, which must exit 0 within 10 s; its stderr."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, (proc.args, err)
    return err


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(Path(tacc.__file__).resolve().parents[1]))


class Fabric:
    """Three hypervisors (h0: VM a, h1: VM b, h2: VM c) on one switch, whose port p2 to h2
    is the bottleneck; addresses 10.77.0.0/24."""

    def __init__(self, names: Names, workdir: Path, *, ovs: bool = False,
                 guests: frozenset[str] = frozenset(), rate_bps: int = RATE_BPS,
                 ovs_hypervisors: frozenset[int] = frozenset()) -> None:
        self.names, self.workdir, self.ovs = names, workdir, ovs
        self.guests, self.rate_bps = guests, rate_bps  # VMs run by qemu; the bottleneck's rate
        self.sw = names.switch(0)
        self.hvs = [names.host(j) for j in range(3)]
        # Hypervisors whose VMs sit on an Open vSwitch bridge (the userspace datapath).
        self.ovs_hvs = {self.hvs[j] for j in ovs_hypervisors}
        self.ovs_bridges: dict[str, tuple[str, str]] = {}  # hypervisor -> its bridge, its db
        self.vms = {vm: (names.vm(k), self.hvs[k], f"10.77.0.{k + 1}")
                    for k, vm in enumerate("abc")}
        self.children: list[subprocess.Popen[str]] = []
        self.guest_consoles: dict[str, Path] = {}
        # Each flow's Mb/s per bin in the last traffic, and what the UDP source offered.
        self.last_bins: dict[str, list[float]] = {}
        # The machine in each second of the last traffic (`host`).
        self.last_host: list[collect.CpuSecond] = []
        # `ip netns exec` mounts a sysfs of its own, hiding /sys/fs/bpf: the agents pin their
        # maps in a BPF filesystem of the test's, which every namespace's mounts see.
        self.bpffs = workdir / "bpffs"

    def build(self) -> None:
        self.bpffs.mkdir()
        sh("mount", "-t", "bpf", "bpf", str(self.bpffs))
        for ns in (self.sw, *self.hvs,
                   *(v[0] for vm, v in self.vms.items() if vm not in self.guests)):
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        for ns in [n for n in (self.sw, *self.hvs)
                   if not (n == self.sw and self.ovs) and n not in self.ovs_hvs]:
            sh("ip", "-n", ns, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", ns, "link", "set", "br0", "up")
        for i, hv in enumerate(self.hvs):
            self._cable(hv, "up0", self.sw, f"p{i}")
            if self.guests:
                # A wire carries frames: a guest's TCP hands its virtio NIC 64 KB segments,
                # which veths would carry whole to the switch, to be queued, marked and
                # counted as one packet.
                sh("ip", "netns", "exec", hv, "ethtool", "-K", "up0", "tso", "off", "gso",
                   "off")
        for name, (ns, hv, address) in self.vms.items():
            if name in self.guests:  # qemu's tap, as libvirt makes it
                sh("ip", "-n", hv, "tuntap", "add", f"tap{name}", "mode", "tap")
                sh("ip", "-n", hv, "link", "set", f"tap{name}", "master", "br0", "up")
                continue
            sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name",
               f"tap{name}", "netns", hv)
            sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", hv, "link", "set", f"tap{name}", "up")
            if hv not in self.ovs_hvs:
                sh("ip", "-n", hv, "link", "set", f"tap{name}", "master", "br0")
            # A wire carries frames: with segmentation offload the VM's TCP hands its veth
            # 64 KB segments, which reach the switch whole, to be queued, marked and dropped
            # as one packet. OVS's userspace datapath reads the ports with packet sockets:
            # there the checksums must be filled in too.
            sh("ip", "netns", "exec", ns, "ethtool", "-K", "eth0", "tso", "off", "gso", "off",
               *(("tx", "off") if self.ovs or self.ovs_hvs else ()))
        # The bottleneck: the switch's port to h2.
        rate = (f"rate {self.rate_bps}bit ceil {self.rate_bps}bit quantum 1514 burst 3028 "
                "cburst 3028")
        subprocess.run(["tc", "-n", self.sw, "-batch", "-"], check=True, text=True, input="\n".join([
            "qdisc add dev p2 root handle 1: stab overhead -14 htb default 2",
            f"class add dev p2 parent 1: classid 1:1 htb {rate}",
            f"class add dev p2 parent 1:1 classid 1:2 htb {rate}",
            "qdisc add dev p2 parent 1:2 handle 2: bfifo limit 150000",
        ]) + "\n")

    def _cable(self, ns_a: str, dev_a: str, ns_b: str, dev_b: str) -> None:
        sh("ip", "link", "add", dev_a, "netns", ns_a, "type", "veth", "peer", "name", dev_b,
           "netns", ns_b)
        for ns, dev in ((ns_a, dev_a), (ns_b, dev_b)):
            if (self.ovs and ns == self.sw) or ns in self.ovs_hvs:  # an OVS port: taken later
                sh("ip", "-n", ns, "link", "set", dev, "up")
            else:
                sh("ip", "-n", ns, "link", "set", dev, "master", "br0", "up")

    def management_link(self, hv: str, to_switch: bool = False) -> str:
        """A veth from `hv` to the test's own namespace (or to the switch's, where the
        controller runs beside its switch), where a controller listens; returns the
        controller side's address."""
        j = self.hvs.index(hv)
        outside = f"tm{self.names.prefix.split('-')[1]}{j}"
        there = ["-n", self.sw] if to_switch else []
        sh("ip", "link", "add", outside, *(["netns", self.sw] if to_switch else []), "type",
           "veth", "peer", "name", "mgmt0", "netns", hv)
        sh("ip", *there, "addr", "add", f"10.99.{j}.1/30", "dev", outside)
        sh("ip", *there, "link", "set", outside, "up")
        sh("ip", "-n", hv, "addr", "add", f"10.99.{j}.2/30", "dev", "mgmt0")
        sh("ip", "-n", hv, "link", "set", "mgmt0", "up")
        return f"10.99.{j}.1"

    def start_ovs(self) -> None:
        """The switch as an Open vSwitch bridge (the userspace datapath, as the testbed's),
        ports p0-p2 as OpenFlow ports 1-3, datapath id 1, its controller at 198.18.0.1:6653
        (an address of the switch's own namespace: the controller runs beside it)."""
        from types import SimpleNamespace

        from tacc.testbed import ovs

        sh("ip", "-n", self.sw, "addr", "add", f"{ovs.controller_address(0)}/32", "dev", "lo")
        topo = SimpleNamespace(names=self.names, switch_ports={0: {i: f"p{i}" for i in range(3)}})
        self.switches = ovs.Switches(topo, self.workdir)  # type: ignore[arg-type]
        self.switches.start()

    def start_hypervisor_ovs(self) -> None:
        """Each OVS hypervisor's bridge: its uplink and VMs' ports on an Open vSwitch bridge
        with the userspace datapath, as the testbed's switches are built, but a plain
        learning switch (no controller, fail mode standalone), as a hypervisor's is."""
        from types import SimpleNamespace

        from tacc.testbed import ovs

        for j, hv in enumerate(self.hvs):
            if hv not in self.ovs_hvs:
                continue
            taps = [f"tap{vm}" for vm, v in self.vms.items() if v[1] == hv]
            topo = SimpleNamespace(names=SimpleNamespace(switch=lambda _, hv=hv: hv),
                                   switch_ports={j: dict(enumerate(["up0", *taps]))})
            (self.workdir / hv).mkdir()
            bridge = ovs.Switches(topo, self.workdir / hv)  # type: ignore[arg-type]
            bridge.start()
            bridge._vsctl(j, ["del-controller", f"sw{j}", "--", "del-fail-mode", f"sw{j}"])
            self.ovs_bridges[hv] = (f"sw{j}", bridge._db(j))

    def start_switch_agent(self) -> None:
        """Marks CE on p2 above K, as a star scenario's switch port to its receiver does."""
        scenario = self.workdir / "switch.toml"
        scenario.write_text(
            'duration = "1s"\n[topology]\nkind = "star"\nsenders = 1\nreceivers = 1\n'
            f'link_rate = "{self.rate_bps}bps"\nlink_delay = "25us"\n[queue]\nkind = "red-ecn"\nlimit = "100pkt"\n'
            'k = "20pkt"\n', encoding="utf-8")
        plan = json.loads(_core.plan(str(scenario)))
        ports = {p["name"]: i for i, p in enumerate(plan["ports"])}
        config = {"plan": plan, "switch": 0, "ports": {str(ports["sw0->r0"]): "p2"},
                  "start_mono_ns": time.monotonic_ns(), "sample_ns": 100_000_000,
                  "out": str(self.workdir / "ports.csv"),
                  "ready": str(self.workdir / "switch.ready")}
        path = self.workdir / "switch.json"
        path.write_text(json.dumps(config), encoding="utf-8")
        self._start(self.sw, ["-m", "tacc.testbed.agent", "switch", str(path)])
        self._wait_for(self.workdir / "switch.ready", "the switch agent")

    def start_agent(self, hv: str, config: str, state_dir: Path) -> subprocess.Popen[str]:
        """The agent of `hv` with `config`, its state in `state_dir` and its maps pinned in
        the test's BPF filesystem (one per hypervisor, as each machine has its own)."""
        path = self.workdir / f"{hv}.toml"
        pins = self.bpffs / hv
        path.write_text(f'state_dir = "{state_dir}"\npin_dir = "{pins}"\n' + config,
                        encoding="utf-8")
        proc = self._start(hv, ["-m", "tacc", "agent", "--config", str(path)])
        self._wait_for(state_dir / "status.json", f"the agent of {hv}", proc)
        return proc

    def status(self, state_dir: Path) -> str:
        return subprocess.run([sys.executable, "-m", "tacc", "agent", "status", "--state-dir",
                               str(state_dir)], check=True, capture_output=True, text=True,
                              env=_env()).stdout

    def _start(self, ns: str, argv: list[str]) -> subprocess.Popen[str]:
        proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, *argv],
                                env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        self.children.append(proc)
        return proc

    @staticmethod
    def _wait_for(path: Path, what: str, proc: subprocess.Popen[str] | None = None) -> None:
        deadline = time.monotonic() + 20
        while not path.exists():
            if proc is not None and proc.poll() is not None:
                pytest.fail(f"{what} exited: {proc.communicate()[1]}")
            assert time.monotonic() < deadline, f"{what} did not start"
            time.sleep(0.05)

    def _sources(self) -> dict[str, dict[str, Any]]:
        """A's TCP flow and b's UDP at line rate, both to c."""
        c = self.vms["c"][2]
        return {
            "a": {"flow": 0, "transport": "tcp", "dst": c, "dst_port": 5001,
                  "src_port": 30000, "start_ns": 0, "stop_ns": None, "bytes": None,
                  "cc": "reno", "ecn": False, "rate_bps": None, "packet_bytes": None},
            "b": {"flow": 1, "transport": "udp", "dst": c, "dst_port": 9, "src_port": 30001,
                  "start_ns": 0, "stop_ns": None, "bytes": None, "cc": None, "ecn": False,
                  "rate_bps": self.rate_bps, "packet_bytes": 1500},
        }

    def start_guests(self, image: Path, accel: str) -> None:
        """Boots each guest VM under qemu in its hypervisor, on its tap, with its source of
        `_sources` as the traffic program's arguments (the guest kernel's own TCP: Cubic),
        and waits until each says its traffic runs. A guest's TCP connects again whenever
        its sink listens, so one guest serves every `traffic` run."""
        for k, (vm, (_, hv, address)) in enumerate(self.vms.items()):
            if vm not in self.guests:
                continue
            src = self._sources()[vm]
            run = [src["transport"], src["dst"], str(src["dst_port"]), str(src["src_port"])]
            if src["transport"] == "udp":
                run.append(str(src["rate_bps"]))
            console = self.workdir / f"guest-{vm}.console"
            self.children.append(subprocess.Popen(
                ["ip", "netns", "exec", hv, "qemu-system-x86_64", "-accel", accel, "-m", "256",
                 "-smp", "1", "-nodefaults", "-display", "none", "-no-reboot",
                 "-kernel", str(image / "vmlinuz"), "-initrd", str(image / "initrd.gz"),
                 "-append", f"console=ttyS0 quiet panic=-1 tacc.addr={address}/24 "
                            f"tacc.run={','.join(run)}",
                 "-serial", f"file:{console}",
                 "-netdev", f"tap,id=n0,ifname=tap{vm},script=no,downscript=no",
                 "-device", f"virtio-net-pci,netdev=n0,mac=52:54:00:77:00:{k + 1:02x}"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            self.guest_consoles[vm] = console
        for vm, console in self.guest_consoles.items():
            # TCP says so once its sink listens: booted is enough here.
            self._wait_for_line(console, "tacc-guest: up", f"guest {vm}")
            if self._sources()[vm]["transport"] == "udp":
                self._wait_for_line(console, "tacc-guest: udp sending", f"guest {vm}")

    @staticmethod
    def _wait_for_line(path: Path, line: str, what: str) -> None:
        deadline = time.monotonic() + 90  # a boot under TCG: about 5 s alone
        while not (path.exists() and line in path.read_text(errors="replace")):
            assert time.monotonic() < deadline, \
                f"{what} did not say {line!r}: {path.read_text(errors='replace') if path.exists() else ''}"
            time.sleep(0.1)

    def traffic(self, tag: str, duration_s: float = DURATION_S) -> dict[str, float]:
        """A TCP flow from a and UDP at line rate from b, both to c, for `duration_s`; each
        flow's goodput in Mb/s from MEASURED_FROM_S on. A guest VM's source is its traffic
        program, running since it booted."""
        run = self.workdir / tag
        run.mkdir()
        sources = self._sources()
        sinks = [{"flow": s["flow"], "transport": s["transport"], "port": s["dst_port"],
                  "src": self.vms[vm][2], "src_port": s["src_port"], "bytes": None}
                 for vm, s in sources.items()]
        procs = []
        for k, (vm, (ns, _, address)) in enumerate(self.vms.items()):
            if vm in self.guests:
                continue
            spec = {"vm": k, "address": address, "seed": 1, "bin_ns": BIN_NS,
                    "rcv_buf_bytes": 1_000_000, "out": str(run / f"{vm}.json"),
                    "ready": str(run / f"{vm}.ready"), "go": str(run / "go"),
                    "listening": str(run / "listening"), "connected": str(run / "connected"),
                    "connect_s": 5.0, "sinks": sinks if vm == "c" else [],
                    "sources": [sources[vm]] if vm in sources else [], "triggered": [],
                    "aggregators": [], "workers": []}
            (run / f"{vm}.spec.json").write_text(json.dumps(spec), encoding="utf-8")
            procs.append(self._start(ns, ["-m", "tacc.testbed.traffic",
                                          str(run / f"{vm}.spec.json")]))
        for vm in self.vms.keys() - self.guests:
            self._wait_for(run / f"{vm}.ready", f"the traffic of {vm}")
        t0 = time.monotonic_ns() + 300_000_000
        (run / ".go").write_text(json.dumps({"start_mono_ns": t0,
                                             "end_mono_ns": t0 + round(duration_s * 1e9)}))
        os.replace(run / ".go", run / "go")
        self.last_host = []
        sampler = threading.Thread(target=collect.sample_cpu, daemon=True, args=(
            self.last_host, t0, t0 + round(duration_s * 1e9)))
        sampler.start()
        for p in procs:
            _, err = p.communicate(timeout=duration_s + 30)
            assert p.returncode == 0, err
        sampler.join(timeout=5)
        received = json.loads((run / "c.json").read_text())["received"]
        first = round(MEASURED_FROM_S * 1e9 / BIN_NS)
        span_s = duration_s - MEASURED_FROM_S

        def goodput(flow: str, side: dict[str, Any] = received) -> float:
            bins = side[flow]["bins"]
            return sum(v for b, v in bins.items() if int(b) >= first) * 8 / span_s / 1e6

        series = [("tcp", "0", received), ("udp", "1", received)]
        if "b" not in self.guests:  # what b's source offered, in payload as the sink counts
            series.append(("udp_sent", "1", json.loads((run / "b.json").read_text())["sent"]))
        self.last_bins = {name: [side[flow]["bins"].get(str(b), 0) * 8 / (BIN_NS / 1e9) / 1e6
                                 for b in range(round(duration_s * 1e9 / BIN_NS))]
                          for name, flow, side in series}
        return {name: goodput(flow, side) for name, flow, side in series}

    def host(self, start: float, end: float) -> str:
        """What the machine did in [start, end) s of the last traffic, for a failure's
        message."""
        return collect.describe_host(self.last_host, start, end)

    def repeated_traffic(self, tag: str, runs: int) -> list[dict[str, float]]:
        """`traffic` `runs` times, each run's goodputs. One run is one sample of a noisy
        system."""
        return [self.traffic(f"{tag}-{i}") for i in range(runs)]

    def median_traffic(self, tag: str, runs: int = 3) -> tuple[dict[str, float],
                                                               list[dict[str, float]]]:
        """`traffic` `runs` times: each flow's median goodput, and every run's. A share is
        judged on the median of three."""
        samples = self.repeated_traffic(tag, runs)
        return {k: statistics.median(s[k] for s in samples) for k in samples[0]}, samples

    def stop(self) -> None:
        for p in self.children:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.children:
            try:
                p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
        if self.bpffs.is_mount():
            sh("umount", str(self.bpffs))


def _built(tmp_path: Path, *, ovs: bool, **options: Any) -> Iterator[Fabric]:
    """The fabric built with its switch (a bridge and the switch agent, or OVS), taken down
    after the test, with nothing left of it."""
    names = Names(secrets.token_hex(2))
    made = Fabric(names, tmp_path, ovs=ovs, **options)
    try:
        made.build()
        made.start_hypervisor_ovs()
        if ovs:
            made.start_ovs()
        else:
            made.start_switch_agent()
        yield made
    finally:
        made.stop()
        assert topology.teardown(names) == []


@pytest.fixture
def fabric(testbed_machine: None, tmp_path: Path) -> Iterator[Fabric]:
    yield from _built(tmp_path, ovs=False)


def bridged(rate_bps: int = RATE_BPS, keys: str = "") -> str:
    """A host config whose VMs are every port of br0 but the uplink, learned from their
    traffic; `keys`: more of the mechanism's."""
    return f"""\
uplink = "up0"
uplink_rate = "{rate_bps}bps"
bridges = ["br0"]

[mechanism]
kind = "hygenicc"
on_shortage = "queue"
{keys}"""


BRIDGED = bridged()


def hygenicc_timers(rate_bps: int) -> str:
    """HyGenICC's three timers for a port of `rate_bps`: the defaults suit 100 Mb/s, and on a
    slower link each Tu must see as many packets, and so as many marks per cut (docs/deploy.md,
    slower links): the defaults lengthened in proportion."""
    stretch = RATE_BPS / rate_bps
    return (f'update_interval = "{round(500 * stretch)}us"\n'
            f'congestion_timeout = "{round(1000 * stretch)}us"\n'
            f'feedback_timeout = "{round(100 * stretch)}us"\n')

NAMED = """\
uplink = "up0"
uplink_rate = "100Mbps"
bpf_stats = true
log_format = "json"

[[vms]]
name = "c"
port = "tapc"
address = "10.77.0.3"

[mechanism]
kind = "hygenicc"
on_shortage = "queue"
"""


def _tc(ns: str, *args: str) -> str:
    return sh("tc", "-n", ns, *args)


@pytest.mark.testbed
def test_hygenicc_agents_give_a_tcp_vm_its_share_next_to_a_udp_vm(fabric: Fabric,
                                                                 tmp_path: Path) -> None:
    """Without agents, line-rate UDP from VM b takes the bottleneck from VM a's TCP. With a
    HyGenICC agent on each hypervisor, c's hypervisor echoes the switch's marks to their
    sources' hypervisors, which cut each pair's rate per mark: the UDP pair falls to what
    the queue at K allows and the TCP flow gets about half the port (the paper's claim, and
    the testbed's tagged-vs-udp). The agents of h0 and h1 learn their VMs' addresses from
    their traffic on the bridge; h2's config gives its VM's. On SIGTERM each detaches
    everything it attached."""
    base, _ = fabric.median_traffic("none")
    configs = (BRIDGED, BRIDGED, NAMED)
    states = [tmp_path / f"state-h{j}" for j in range(3)]
    agents = [fabric.start_agent(hv, config, state)
              for hv, config, state in zip(fabric.hvs, configs, states)]
    with_agents = fabric.traffic("hygenicc")
    for agent in agents:
        assert agent.poll() is None, agent.communicate()[1]
    metrics = [_scrape(hv) for hv in fabric.hvs]
    # Each agent kept only CAP_NET_ADMIN and CAP_BPF once set up, and so did its tc.
    for state in states:
        pid = json.loads((state / "status.json").read_text())["pid"]
        assert _capabilities(pid) == {"CapEff": KEPT, "CapPrm": KEPT, "CapBnd": KEPT}
    status = [json.loads((state / "status.json").read_text()) for state in states]
    printed = fabric.status(states[1])

    logs = []
    for agent, hv, state in zip(agents, fabric.hvs, states):
        err = stopped(agent)
        logs.append(err.splitlines())
        assert not (state / "status.json").exists() and not (state / "agent.pid").exists()
        taps = [f"tap{vm}" for vm, v in fabric.vms.items() if v[1] == hv]
        for dev in ("up0", *taps):
            assert "bpf" not in _tc(hv, "filter", "show", "dev", dev, "ingress"), dev
            assert "clsact" not in _tc(hv, "qdisc", "show", "dev", dev), dev
        assert "htb" not in _tc(hv, "qdisc", "show", "dev", "up0")

    print(f"no mechanism: {base}; HyGenICC: {with_agents}; lowest TCP bin from 2 s: "
          f"{min(fabric.last_bins['tcp'][20:]):.1f}; TCP bins from 2 s: "
          f"{[round(b) for b in fabric.last_bins['tcp'][20:60]]}")
    assert_hygenicc_halves(base, with_agents, RATE_BPS)
    # The marks went back: c's hypervisor cleared them and sent them back in feedback
    # packets (UDP has no reverse packets to carry them), as frames to the MAC of b's
    # packets (a bridged hypervisor has no route), which b's hypervisor consumed.
    counters = [s["counters"] for s in status]
    assert counters[2]["ce_cleared"] > 0 and counters[2]["feedback_packets_sent"] > 0, counters
    assert counters[2]["feedback_unsent"] == 0, counters[2]
    assert counters[1]["feedback_marks_received"] > 0, counters[1]
    # h0 and h1 learned their VM from its traffic and put it under a limit; h2 used the
    # address its config gives.
    for j, vm in enumerate("ab"):
        assert [(v["address"], v["port"], v["learned"]) for v in status[j]["vms"]] == [
            (f"10.77.0.{j + 1}", f"tap{vm}", True)]
        assert [r[1] for r in status[j]["rates"]] == ["10.77.0.3"], status[j]["rates"]
    assert [(v["name"], v["learned"]) for v in status[2]["vms"]] == [("c", False)]
    assert "tapb" in printed and "10.77.0.2" in printed and "hygenicc on up0" in printed
    # The metrics say the same, per pair: h1's rate for b towards c, the marks h2 cleared
    # from b, the feedback h1 consumed; h2 (bpf_stats) the programs' runs.
    assert metrics[1]['tacc_rate_bps{vm="tapb/10.77.0.2",dst="10.77.0.3"}'] > 0
    assert metrics[2]['tacc_pair_ce_cleared_total{vm="10.77.0.3",remote="10.77.0.2"}'] > 0
    assert metrics[1]['tacc_pair_feedback_marks_total{vm="10.77.0.2",remote="10.77.0.3"}'] > 0
    assert metrics[2]['tacc_bpf_runs_total{program="uplink_ingress"}'] > 0
    per_packet = {prog: metrics[2][f'tacc_bpf_run_seconds_total{{program="{prog}"}}'] /
                  metrics[2][f'tacc_bpf_runs_total{{program="{prog}"}}'] * 1e9
                  for prog in ("uplink_ingress", "uplink_egress")}
    print(f"h2's programs, ns per packet: {per_packet}")
    assert not any(k.startswith("tacc_bpf_") for k in metrics[0])
    # Logs: h2's as JSON lines, the others as text; each VM once, as it was found.
    events = [json.loads(line) for line in logs[2]]
    assert [e["event"] for e in events] == ["started", "port attached", "vm", "stopping"]
    assert events[2]["address"] == "10.77.0.3" and events[2]["address_is"] == "given"
    assert logs[1][0].startswith("tacc-agent: started name=") and \
        "tacc-agent: vm name=tapb/10.77.0.2 port=tapb address=10.77.0.2 address_is=learned" \
        in logs[1]


def assert_hygenicc_halves(base: dict[str, float], with_agents: dict[str, float],
                           rate_bps: int) -> None:
    """HyGenICC's claim on a port of `rate_bps`: without agents TCP backs off against UDP
    at line rate and keeps a few Mb/s at most; with them each gets near half the port. The
    pairs' rates saw around the fair point (a cut per mark every Tu, a climb of 1% of the
    NIC per Tu), and the testbed's own hosts measure 0.80-0.85 of half for the tagged flow:
    within 20% either way (namespaces, 7 runs: TCP 1.00-1.02 of half, UDP 0.96-0.97). The
    port stays full.

    Without agents the drop-tail port also gives TCP whatever the UDP source left unsent: at
    normal priority beside two ovs-vswitchd at real-time priority, the source woke late and
    offered 94.7-99.1% of line rate (6 runs), and TCP took 3.1-7.1 Mb/s, against 0.7-1.2 with
    the source held at its rate (at real-time priority, 5 of 6 runs). So the bound on TCP is
    the unsent rate above the few Mb/s, and the source must offer at least 7/8 of line rate:
    the baseline's bound then stays under half the bound with agents (0.4 of half against
    0.8), or the run does not show the contrast the mechanism is judged on. Like the shares
    with agents, the baseline is the median of three runs: in a clean checkout's suite one
    run's source offered 76.8 Mb/s, and the same test run again there offered 87.5 and then
    96.0. A guest's source is not measured; its rate is taken as offered."""
    ideal = rate_bps / 2 / 1e6 * UDP_PAYLOAD  # half the port, in payload
    offered = base.get("udp_sent", 2 * ideal)
    assert offered >= 0.875 * 2 * ideal, f"the UDP source offered too little: {base}"
    assert base["tcp"] < 0.15 * ideal + (2 * ideal - offered), base
    assert with_agents["tcp"] >= 0.8 * ideal, with_agents
    assert with_agents["udp"] <= 1.2 * ideal, with_agents
    assert with_agents["tcp"] + with_agents["udp"] >= 0.9 * 2 * ideal, with_agents


KEPT = (1 << 12) | (1 << 39)  # CAP_NET_ADMIN, CAP_BPF


def _capabilities(pid: int) -> dict[str, int]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: int(v, 16) for k, v in (line.split(":\t") for line in lines)
            if k in ("CapEff", "CapPrm", "CapBnd")}


def _scrape(hv: str) -> dict[str, float]:
    """The agent's metrics, from inside its hypervisor (the endpoint listens on loopback)."""
    code = ("import urllib.request; print(urllib.request.urlopen("
            "'http://127.0.0.1:9464/metrics', timeout=5).read().decode())")
    text = sh("ip", "netns", "exec", hv, sys.executable, "-c", code)
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def _bpf_filters(ns: str, dev: str) -> list[str]:
    return [line for hook in ("ingress", "egress")
            for line in _tc(ns, "filter", "show", "dev", dev, hook).splitlines()
            if "direct-action" in line]


@pytest.mark.testbed
def test_an_agent_killed_leaves_its_limits_and_one_started_again_takes_over(
        fabric: Fabric, tmp_path: Path) -> None:
    """SIGKILL leaves the programs, maps and classes in the kernel (the VMs keep the last
    rates: fail-static); an agent started again replaces the programs rather than adding its
    own after them, and its SIGTERM leaves nothing."""
    hv, state = fabric.hvs[1], tmp_path / "state"
    first = fabric.start_agent(hv, BRIDGED, state)
    before = {dev: _bpf_filters(hv, dev) for dev in ("up0", "tapb")}
    assert [len(f) for f in before.values()] == [2, 1], before
    first.kill()
    first.communicate()
    assert {dev: len(_bpf_filters(hv, dev)) for dev in before} == {"up0": 2, "tapb": 1}
    assert "htb" in _tc(hv, "qdisc", "show", "dev", "up0")
    (state / "status.json").unlink()  # what a killed agent leaves, besides its pid file
    pinned = sorted(p.name for p in (fabric.bpffs / hv).iterdir())
    assert {"bucket_rates", "classes", "pairs", "vm_sources"} <= set(pinned), pinned
    second = fabric.start_agent(hv, BRIDGED, state)
    after = {dev: _bpf_filters(hv, dev) for dev in before}
    assert [len(f) for f in after.values()] == [2, 1], after
    assert json.loads((state / "status.json").read_text())["resumed"]
    stopped(second)
    for dev in before:
        assert _bpf_filters(hv, dev) == [] and "clsact" not in _tc(hv, "qdisc", "show", "dev",
                                                                  dev)
    assert "htb" not in _tc(hv, "qdisc", "show", "dev", "up0")
    assert not (fabric.bpffs / hv).exists()  # stopped on purpose: the maps went too


def _restart_run(fabric: Fabric, tag: str) -> tuple[dict[str, float], list[float]]:
    """One run of the restart test, named `tag`: each flow's goodput and the TCP bins
    from the kill until the new agent has run for half a second (at least a second), after
    checking that the new agent resumed the learned VM and stopping every agent."""
    states = [fabric.workdir / f"{tag}-state-h{j}" for j in range(3)]
    agents = [fabric.start_agent(hv, config, state)
              for hv, config, state in zip(fabric.hvs, (BRIDGED, BRIDGED, NAMED), states)]
    restarted: list[subprocess.Popen[str]] = []
    go = fabric.workdir / tag / "go"
    killed_at: list[int] = []
    up_at: list[int] = []  # when the new agent had taken over

    def restart() -> None:
        while not go.exists():
            time.sleep(0.01)
        start = json.loads(go.read_text())["start_mono_ns"]
        time.sleep(max(0.0, (start - time.monotonic_ns()) / 1e9 + 3.0))
        killed_at.append(time.monotonic_ns() - start)
        agents[1].kill()
        agents[1].communicate()
        (states[1] / "status.json").unlink()
        restarted.append(fabric.start_agent(fabric.hvs[1], BRIDGED, states[1]))
        up_at.append(time.monotonic_ns() - start)

    killer = threading.Thread(target=restart, daemon=True)  # a failed start leaves it waiting
    killer.start()
    result = fabric.traffic(tag)
    killer.join()
    bins = fabric.last_bins
    status = json.loads((states[1] / "status.json").read_text())
    for agent in (*agents, *restarted):
        if agent.poll() is None:  # all but the one killed: each leaves nothing for the next run
            stopped(agent)
    kill, up = killed_at[0] // BIN_NS, up_at[0] // BIN_NS
    judged = bins["tcp"][kill:max(kill + 10, up + 5)]
    print(f"{tag}: {result}; lowest TCP bin from 2 s: {min(bins['tcp'][20:]):.1f}; "
          f"killed at {killed_at[0] / 1e9:.2f} s, taken over at {up_at[0] / 1e9:.2f} s; "
          f"judged: {[round(b) for b in judged]}; TCP bins from 2 s: "
          f"{[round(b) for b in bins['tcp'][20:60]]}; "
          f"UDP: {[round(b) for b in bins['udp'][20:60]]}")
    assert status["resumed"] and [v["address"] for v in status["vms"]] == ["10.77.0.2"]
    return result, judged


@pytest.mark.testbed
def test_an_agent_killed_and_restarted_while_traffic_runs_keeps_the_shares(
        fabric: Fabric) -> None:
    """The UDP sender's agent is killed 3 s into the run and started again at once: the
    datapath keeps its rates meanwhile (the programs and classes stay), and the new agent
    takes over the pinned maps (the learned VM, the classes, the counts)."""
    ideal = RATE_BPS / 2 / 1e6 * UDP_PAYLOAD
    # No stall of the TCP flow while the agent is replaced: a pause of 80 ms would leave its
    # 100 ms bin under 20% of half the port. HyGenICC's own sawtooth makes dips (the lowest bin
    # from 2 s on: 29.9-45.4 Mb/s in 7 runs with a restart, 29.9-46.1 in 45 without). While
    # the VMs' veths kept segmentation offload, 3 runs of 54 also stalled (a 64 KB segment
    # dropped whole at the switch: an RTO while the UDP pair climbed to line rate), one
    # 0.7 s after the takeover in CI's suite; with frames, none of 59 did. So the claim
    # is judged from the kill until the new shim has run for half a second (it resumes the
    # pinned rates in force), at least a second, and a run with a stall there is run again:
    # a stall the restart caused, if it came in every run, would come twice.
    for attempt in range(2):
        result, judged = _restart_run(fabric, f"restart-{attempt}")
        assert result["tcp"] >= 0.8 * ideal and result["udp"] <= 1.2 * ideal, result
        if min(judged) >= 0.2 * ideal:
            return
    raise AssertionError(f"the TCP flow stalled while the agent was replaced, twice: {judged}")


def on_ovs(vm: str, bridge: tuple[str, str] | None = None, rate_bps: int = RATE_BPS,
           keys: str = "") -> str:
    """A host config for a hypervisor whose VM `vm` (address learned) and uplink are ports
    of an Open vSwitch bridge with the userspace datapath: the VM named by its port, or
    every port of `bridge` (its name and database); `keys`: more of the mechanism's."""
    vms = (f'bridges = ["{bridge[0]}"]\novs_db = "{bridge[1]}"\n' if bridge else
           f'[[vms]]\nname = "{vm}"\nport = "tap{vm}"\n')
    return f"""\
uplink = "up0"
uplink_rate = "{rate_bps}bps"
ovs_userspace = true
{vms}
[mechanism]
kind = "hygenicc"
on_shortage = "queue"
{keys}"""


# Two hypervisors on Open vSwitch's userspace datapath take the CPU from the traffic: beside
# two ovs-vswitchd at real-time priority 2, each forwarding every packet through user space,
# the UDP source (priority 1) woke late and lost 2-46% of its 100 ms bins at 100 Mb/s: 23
# three-run baselines on the 2-core machine offered 72.6-93.8 Mb/s, 7 under the 85.9 the
# baseline needs (a CI run: 76.8). Half the rate halves that work.
OVS_HV_RATE_BPS = 50_000_000


@pytest.fixture
def ovs_hypervisors(ovs_machine: None, tmp_path: Path) -> Iterator[Fabric]:
    yield from _built(tmp_path, ovs=False, ovs_hypervisors=frozenset({1, 2}),
                      rate_bps=OVS_HV_RATE_BPS)


@pytest.mark.testbed
def test_hygenicc_agents_on_open_vswitch_hypervisors_give_the_tcp_vm_its_share(
        ovs_hypervisors: Fabric, tmp_path: Path) -> None:
    """The first test's case with the UDP VM's hypervisor and the receiver's on Open vSwitch
    bridges (the userspace datapath, its ports kernel interfaces), the TCP VM's on a Linux
    bridge. OVS reads its ports with packet sockets, before tc ingress, so there the
    agent (`ovs_userspace = true`) handles what arrives for a VM on its port's egress, and
    scrubs what the VMs send on the uplink's egress, which OVS's packets cross.

    The port runs at 50 Mb/s (OVS_HV_RATE_BPS), HyGenICC's timers twice the defaults. The
    TCP flow's share is judged on the median of three runs, at the first test's bound. Nine
    runs gave 23.9-25.0 Mb/s (0.97-1.02 of half), and without agents 0.3-0.6 Mb/s with the
    source offering 99.9% of line rate; at 100 Mb/s nine had given 48.1-51.1 (0.98-1.04 of
    half; the simulator at those rates splits the port evenly, 49.3 against 48.3), when the
    machine left the source the CPU. With ovs-vswitchd at normal priority, below the
    real-time traffic, it forwarded in bursts and single runs gave 34.2-47.1 of 100
    (docs/testbed.md, the switches' priorities)."""
    fabric = ovs_hypervisors
    base, _ = fabric.median_traffic("none")
    states = [tmp_path / f"state-h{j}" for j in range(3)]
    timers = hygenicc_timers(OVS_HV_RATE_BPS)
    configs = (bridged(OVS_HV_RATE_BPS, timers),
               on_ovs("b", fabric.ovs_bridges[fabric.hvs[1]], OVS_HV_RATE_BPS, timers),
               on_ovs("c", None, OVS_HV_RATE_BPS, timers))
    agents = [fabric.start_agent(hv, config, state)
              for hv, config, state in zip(fabric.hvs, configs, states)]
    with_agents, runs = fabric.median_traffic("hygenicc")
    # VM b forges a feedback packet (protocol 143), which would have c's hypervisor cut c's
    # rate towards b: b's hypervisor drops it on its uplink.
    forge = ("import socket; s = socket.socket(socket.AF_INET, socket.SOCK_RAW, 143); "
             "s.sendto(b'\\x00\\x01', ('10.77.0.3', 0))")
    sh("ip", "netns", "exec", fabric.vms["b"][0], sys.executable, "-c", forge)
    time.sleep(1.2)  # the status is written every second
    status = [json.loads((state / "status.json").read_text()) for state in states]
    programs = {hv: _bpf_filters(hv, "tap" + vm) for hv, vm in zip(fabric.hvs[1:], "bc")}
    for agent in agents:
        assert agent.poll() is None, agent.communicate()[1]
        stopped(agent)
    for hv, vm in zip(fabric.hvs[1:], "bc"):  # and each took its programs away
        assert _bpf_filters(hv, "tap" + vm) == _bpf_filters(hv, "up0") == [], hv
    print(f"OVS hypervisors: no mechanism: {base}; HyGenICC: {with_agents} (runs: {runs}); "
          f"counters: {[s['counters'] for s in status]}")
    assert_hygenicc_halves(base, with_agents, OVS_HV_RATE_BPS)
    counters = [s["counters"] for s in status]
    # c's hypervisor cleared the marks on c's port and sent them back; b's consumed them on
    # b's port, and dropped b's forgery on its uplink.
    assert counters[2]["ce_cleared"] > 0 and counters[2]["feedback_packets_sent"] > 0, counters
    assert counters[1]["feedback_marks_received"] > 0, counters[1]
    assert counters[1]["scrubbed_feedback"] == 1, counters[1]
    # b's hypervisor found b's port on its OVS bridge, and b's address from its traffic.
    assert [(v["address"], v["port"], v["learned"]) for v in status[1]["vms"]] == [
        ("10.77.0.2", "tapb", True)]
    # Each VM port carries the learning program on ingress and the arrivals' on egress.
    for hv, filters in programs.items():
        assert len(filters) == 2, (hv, filters)


# Real guests: a TCG guest's UDP source kept 52-148 Mb/s in each second beside a TCP guest
# on the 2-core machine (docs/deploy.md): line rate is half its worst second.
GUEST_RATE_BPS = 25_000_000


@pytest.fixture
def guest_image(testbed_machine: None) -> tuple[Path, str]:
    """The guest image `make test` builds (tools/guest-image.sh) and the accelerator that
    booted it, or a skip that says how to build it (a failure with TACC_REQUIRE_TESTBED=1)."""
    image = Path(__file__).resolve().parents[2] / "target" / "guest"
    if not (image / "accel").exists():
        reason = f"no guest image in {image}: tools/guest-image.sh builds it (make test does)"
        if os.environ.get("TACC_REQUIRE_TESTBED") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return image, (image / "accel").read_text().strip()


@pytest.fixture
def guest_fabric(guest_image: tuple[Path, str], tmp_path: Path) -> Iterator[Fabric]:
    yield from _built(tmp_path, ovs=False, guests=frozenset("ab"), rate_bps=GUEST_RATE_BPS)


@pytest.mark.testbed
def test_hygenicc_agents_give_a_real_guests_tcp_its_share_next_to_a_guests_udp(
        guest_fabric: Fabric, guest_image: tuple[Path, str], tmp_path: Path) -> None:
    """The first test's case with VMs a and b as real guests under qemu: Debian's kernel,
    its own TCP (Cubic) and a UDP source at line rate, each on a tap of its hypervisor's
    bridge as libvirt attaches them. The agents know nothing of the guests but their taps
    and their traffic; HyGenICC gives the guest's TCP its half as between namespaces."""
    fabric = guest_fabric
    fabric.start_guests(*guest_image)
    base = fabric.traffic("none")
    states = [tmp_path / f"state-h{j}" for j in range(3)]
    config = bridged(GUEST_RATE_BPS, hygenicc_timers(GUEST_RATE_BPS))
    agents = [fabric.start_agent(hv, config, state) for hv, state in zip(fabric.hvs, states)]
    with_agents = fabric.traffic("hygenicc")
    status = [json.loads((state / "status.json").read_text()) for state in states]
    for agent in agents:
        assert agent.poll() is None, agent.communicate()[1]
        stopped(agent)
    consoles = {vm: path.read_text(errors="replace") for vm, path in
                fabric.guest_consoles.items()}
    print(f"guests ({guest_image[1]}): no mechanism: {base}; HyGenICC: {with_agents}; "
          f"TCP bins from 2 s: {[round(b, 1) for b in fabric.last_bins['tcp'][20:60]]}; "
          f"UDP: {[round(b, 1) for b in fabric.last_bins['udp'][20:60]]}; consoles: {consoles}")
    # The guests ran Debian's kernel and its default congestion control, not the host's.
    assert all(f"tacc-guest: up 10.77.0.{k + 1}/24 " in consoles[vm] and " cubic" in consoles[vm]
               for k, vm in enumerate("ab")), consoles
    assert_hygenicc_halves(base, with_agents, GUEST_RATE_BPS)
    # Each guest's hypervisor found it on its tap, from its traffic.
    for j, vm in enumerate("ab"):
        assert [(v["address"], v["port"], v["learned"]) for v in status[j]["vms"]] == [
            (f"10.77.0.{j + 1}", f"tap{vm}", True)]
    assert status[2]["counters"]["ce_cleared"] > 0, status[2]["counters"]


SDN_GCC = """\
name = "h1"
uplink = "up0"
uplink_rate = "100Mbps"
bridges = ["br0"]

[controller]
address = "{address}"
key_file = "{key_file}"
fail_static = "1s"
retry_max = "500ms"

[mechanism]
kind = "sdn-gcc"
on_shortage = "queue"
"""


@pytest.mark.testbed
def test_an_sdn_gcc_agent_follows_its_controller_then_keeps_its_rates_then_lifts_them(
        fabric: Fabric, tmp_path: Path) -> None:
    """An SDN-GCC agent on the UDP sender's hypervisor, its controller the test: congestion
    notifications every 5 ms (the controller's Ti) from 1 s to 2.5 s hold the UDP VM at
    R_min; then the controller goes away: the agent keeps the last rates for fail_static
    (1 s), then lifts its limits and the UDP VM sends at line rate again."""
    from tacc.deploy.channel import ControllerEnd

    key_file = tmp_path / "h1.key"
    key_file.write_bytes(os.urandom(32))
    key_file.chmod(0o600)
    end = ControllerEnd({"h1": key_file.read_bytes()}, (fabric.management_link(fabric.hvs[1]), 0))
    state = tmp_path / "state"
    config = SDN_GCC.format(address=f"{end.address[0]}:{end.address[1]}", key_file=key_file)
    agent = fabric.start_agent(fabric.hvs[1], config, state)
    end.wait_for("h1", timeout_s=10)
    go = tmp_path / "controller" / "go"
    b, c = (int.from_bytes(bytes(map(int, fabric.vms[v][2].split("."))), "big") for v in "bc")

    def controller() -> None:
        while not go.exists():
            time.sleep(0.01)
        start = json.loads(go.read_text())["start_mono_ns"] / 1e9
        time.sleep(max(0.0, start + 1.0 - time.monotonic()))
        while True:
            end.send("h1", {"Congestion": {"to_src": b, "from_dst": c, "marks": 1000.0}})
            sent.append(time.monotonic())
            if time.monotonic() >= start + 2.5:
                break
            time.sleep(0.005)
        end.close()
        # The status written while the controller is away (once a second: one falls in
        # fail_static, and stays until the next), read until the agent is open: a window that
        # ended before fail_static did (at 3.4 s) missed a write in its last 0.1 s.
        while time.monotonic() < start + 5.0:
            seen = json.loads((state / "status.json").read_text())
            if seen["controller"] == "down":
                held.append(seen)
            if seen["controller"] == "open":
                break
            time.sleep(0.02)

    held: list[dict[str, Any]] = []
    sent: list[float] = []
    thread = threading.Thread(target=controller)
    thread.start()
    fabric.traffic("controller")
    thread.join()
    status = json.loads((state / "status.json").read_text())
    err = stopped(agent)
    udp = fabric.last_bins["udp"]
    print(f"UDP Mb/s per 100 ms: {[round(x) for x in udp]}")

    def mean(a: float, b: float, series: list[float] = udp) -> float:
        window = series[round(a * 10):round(b * 10)]
        return sum(window) / len(window)

    line = RATE_BPS / 1e6 * UDP_PAYLOAD
    # Before: the VM alone on its NIC, at line rate. Notified: R_min, 1% of its share, and
    # the slow climb between notifications. Down, within fail_static: the same rates.
    # Then open: line rate again.
    assert mean(0.3, 0.9) >= 0.9 * line
    assert mean(1.3, 2.5) <= 0.05 * line
    assert mean(2.6, 3.4) <= 0.05 * line
    assert mean(3.8, 6.0) >= 0.9 * line, (
        f"UDP {mean(3.8, 6.0):.1f} Mb/s after the lift, its source offering "
        f"{mean(3.8, 6.0, fabric.last_bins['udp_sent']):.1f}; {fabric.host(3.8, 6.0)}")
    # Down, the status shows the rates the datapath holds, the notified VM's at that low;
    # open, none.
    assert held, "no status written while the controller was away"
    name = next(v["name"] for v in held[-1]["vms"] if v["address"] == fabric.vms["b"][2])
    vm_b = [rate for vm, _, rate in held[-1]["rates"] if vm == name]
    assert vm_b and max(vm_b) <= 0.05 * RATE_BPS / 1e6, held[-1]["rates"]
    assert status["controller"] == "open" and status["rates"] == [], status
    counts = status["counters"]
    # Every notification sent arrived (one each 5 ms and a little more, as the test's
    # thread wakes: 1.5 s of them).
    assert len(sent) >= 200, len(sent)
    assert counts["controller_connects"] == 1 and counts["control_notify"] == len(sent), counts
    assert counts["control_forged"] == counts["control_replayed"] == 0, counts
    assert "fail-open: limits lifted" in err


@pytest.mark.testbed
def test_an_agent_stops_with_an_error_when_its_uplink_is_missing(fabric: Fabric,
                                                                tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(f'state_dir = "{tmp_path / "s"}"\n' + BRIDGED.replace('"up0"', '"up9"'))
    proc = subprocess.run(["ip", "netns", "exec", fabric.hvs[0], sys.executable, "-m",
                           "tacc", "agent", "--config", str(path)], capture_output=True,
                          text=True, env=_env(), timeout=30)
    assert proc.returncode == 3
    assert proc.stderr.strip() == "tacc: error: agent: uplink: no interface up9"
    assert "bpf" not in _tc(fabric.hvs[0], "filter", "show", "dev", "up0", "ingress")


def _agent_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tacc", "agent", *args], capture_output=True,
                          text=True, env=_env(), timeout=60)


def test_a_host_config_with_mistakes_gets_one_line_per_mistake(engine: None,
                                                                tmp_path: Path) -> None:
    path = tmp_path / "host.toml"
    path.write_text("""\
uplink = "eth0"
uplink_rate = "fast"
bridges = ["br0"]
colour = "red"

[[vms]]
name = "a"
port = "eth0"
address = "10.0.0.300"

[[vms]]
name = "a"
port = "v1"

[mechanism]
kind = "hygenicc"
update_interval = "0us"
interval = "5ms"
""")
    proc = _agent_cli("--config", str(path))
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert [line.split(": ")[2:4] for line in lines] == [
        [f"{path}:2", "uplink_rate"],
        [f"{path}:4", "colour"],
        [f"{path}:8", "vms[0].port"],
        [f"{path}:9", "vms[0].address"],
        [f"{path}:12", "vms[1].name"],
        [f"{path}:17", "mechanism.update_interval"],
        [f"{path}:18", "mechanism.interval"],
    ], lines
    assert all(line.startswith("tacc: error: ") for line in lines)
    assert "does not apply to kind \"hygenicc\"" in lines[-1]


def test_a_mechanism_in_the_switches_or_without_its_controller_is_refused(engine: None,
                                                                    tmp_path: Path) -> None:
    for kind, why in (("sdn-gcc", "takes its rates or clamps from a controller"),
                      ("rwndq", "runs in the switches"),
                      ("sicc", "takes its rates or clamps from a controller")):
        path = tmp_path / f"{kind}.toml"
        path.write_text(f'uplink = "eth0"\nuplink_rate = "1Gbps"\n[mechanism]\nkind = "{kind}"\n')
        proc = _agent_cli("--config", str(path), "--check")
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(f"tacc: error: {path}:4: mechanism.kind: kind \"{kind}\" "
                                      f"{why}"), proc.stderr


def test_an_ovs_hypervisors_database_is_where_ovs_vsctl_reaches_it(engine: None,
                                                                    tmp_path: Path) -> None:
    path = tmp_path / "host.toml"
    path.write_text(on_ovs("b", ("br0", "/run/openvswitch/db.sock")))
    proc = _agent_cli("--config", str(path), "--check")
    assert proc.returncode == 2
    assert proc.stderr == (f"tacc: error: {path}:5: ovs_db: expected Open vSwitch's database "
                           "as ovs-vsctl --db takes it: \"unix:/PATH\" or "
                           "\"tcp:ADDRESS:PORT\"\n")
    for config in (on_ovs("b"), on_ovs("b", ("br0", "unix:/run/openvswitch/db.sock"))):
        path.write_text(config)
        assert _agent_cli("--config", str(path), "--check").returncode == 0


def test_check_accepts_a_good_config_and_status_says_when_no_agent_runs(engine: None,
                                                                       tmp_path: Path) -> None:
    path = tmp_path / "host.toml"
    path.write_text(f'state_dir = "{tmp_path / "state"}"\n' + NAMED)
    proc = _agent_cli("--config", str(path), "--check")
    assert (proc.returncode, proc.stdout) == (0, f"{path}: ok\n"), proc.stderr
    proc = _agent_cli("status", "--config", str(path))
    assert proc.returncode == 3
    assert proc.stderr == f"tacc: error: no tacc agent runs with state directory {tmp_path / 'state'}\n"


def test_the_example_configs_pass_the_check(engine: None, tmp_path: Path) -> None:
    """Each example, with its key file (where it has one) made here."""
    key = tmp_path / "host.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    examples = sorted((Path(__file__).resolve().parents[2] / "deploy").glob("*.toml"))
    assert [p.stem for p in examples] == ["hygenicc-bridge", "hygenicc-named-vms",
                                          "hygenicc-ovs", "sdn-gcc", "sicc", "static-rate"]
    for example in examples:
        path = tmp_path / example.name
        path.write_text(example.read_text().replace("/etc/tacc/host.key", str(key)))
        proc = _agent_cli("--config", str(path), "--check")
        assert (proc.returncode, proc.stdout) == (0, f"{path}: ok\n"), proc.stderr


def test_metrics_beyond_localhost_need_the_key_that_says_so(engine: None,
                                                              tmp_path: Path) -> None:
    base = 'uplink = "eth0"\nuplink_rate = "1Gbps"\n'
    cases = [
        ('metrics = "0.0.0.0:9464"\n', "tacc: error: {path}:3: metrics: 0.0.0.0:9464 is "
         "beyond localhost: the metrics say what runs on this host; set "
         "metrics_beyond_localhost = true to listen there"),
        ('metrics = "0.0.0.0:9464"\nmetrics_beyond_localhost = true\n', None),
        ('metrics = "off"\n', None),
        ('metrics = "localhost"\n', 'tacc: error: {path}:3: metrics: expected an address and '
         'port such as "127.0.0.1:9464", or "off", got "localhost"'),
        ('log_format = "xml"\n', 'tacc: error: {path}:3: log_format: expected "text" or '
         '"json", got "xml"'),
    ]
    for i, (extra, error) in enumerate(cases):
        path = tmp_path / f"{i}.toml"
        path.write_text(base + extra)
        proc = _agent_cli("--config", str(path), "--check")
        if error is None:
            assert proc.returncode == 0, proc.stderr
        else:
            assert (proc.returncode, proc.stderr) == (2, error.format(path=path) + "\n")


def test_a_controller_key_that_others_may_read_is_refused(engine: None, tmp_path: Path) -> None:
    key = tmp_path / "host.key"
    key.write_bytes(os.urandom(32))
    path = tmp_path / "host.toml"
    path.write_text(SDN_GCC.format(address="127.0.0.1:7400", key_file=key))
    key.chmod(0o644)
    proc = _agent_cli("--config", str(path), "--check")
    assert (proc.returncode, proc.stderr) == (2, f"tacc: error: {path}:8: controller.key_file: "
                                              f"{key} is readable or writable by others than "
                                              f"its owner (mode 644): chmod 600 it\n")
    key.chmod(0o600)
    assert _agent_cli("--config", str(path), "--check").returncode == 0
    key.write_bytes(b"short")
    proc = _agent_cli("--config", str(path), "--check")
    assert proc.stderr == (f"tacc: error: {path}:8: controller.key_file: {key}: expected 32 "
                           f"bytes, found 5\n")


@pytest.fixture
def ovs_fabric(ovs_machine: None, tmp_path: Path) -> Iterator[Fabric]:
    """The same hypervisors, their uplinks cabled to an Open vSwitch switch."""
    yield from _built(tmp_path, ovs=True)


FABRIC = """\
openflow = "0.0.0.0:6653"
agents = "0.0.0.0:7400"
state_dir = "{state}"
metrics = "127.0.0.1:9465"

[[hosts]]
name = "h0"
nic_rate = "100Mbps"
key_file = "{keys}/h0.key"
vms = [{{ name = "a", address = "10.77.0.1" }}]

[[hosts]]
name = "h1"
nic_rate = "100Mbps"
key_file = "{keys}/h1.key"
vms = [{{ name = "b", address = "10.77.0.2" }}]

[[hosts]]
name = "h2"
nic_rate = "100Mbps"
vms = [{{ name = "c", address = "10.77.0.3" }}]

[[switches]]
name = "sw0"
datapath_id = 1
{stats}

[[switches.ports]]
number = 1
to = "h0"
rate = "100Mbps"
buffer = "100pkt"
device = "p0"

[[switches.ports]]
number = 2
to = "h1"
rate = "100Mbps"
buffer = "100pkt"
device = "p1"

[[switches.ports]]
number = 3
to = "h2"
rate = "100Mbps"
buffer = "100pkt"
marking = "20pkt"
device = "p2"

[mechanism]
kind = "sdn-gcc"
on_shortage = "queue"
"""


SDN_GCC_TABLE = 'kind = "sdn-gcc"\non_shortage = "queue"\n'
# What the controller tests run: the multiplicative cut, whose shares hold run after run
# (docs/deploy.md; the test of a TCP VM's share next to a UDP VM has the figures).
SDN_GCC_STEADY = SDN_GCC_TABLE + 'decrease = "multiplicative"\n'


class ControllerDaemons:
    """`tacc switch-agent` and `tacc controller` in the OVS switch's namespace, `tacc agent`
    on the senders' hypervisors (h0: the TCP VM's, h1: the UDP VM's), each started by its
    command line with its config file, all running `mechanism` (SDN-GCC's table with the
    multiplicative cut by default), the agents logging JSON (`stop` returns their events).
    The switch agent serves its stats on a Unix socket, or with `stats_over_udp` on the
    switch's address over UDP, signed with its key, as for a controller on another machine."""

    def __init__(self, fabric: Fabric, tmp_path: Path, *, stats_over_udp: bool = False,
                 mechanism: str = SDN_GCC_STEADY, fail_static: str = "1s") -> None:
        self.fabric = fabric
        keys = tmp_path / "keys"
        keys.mkdir(mode=0o700)
        for h in ("h0", "h1", "sw0"):
            (keys / f"{h}.key").write_bytes(os.urandom(32))
            (keys / f"{h}.key").chmod(0o600)
        self.state = tmp_path / "controller"
        self.config = tmp_path / "fabric.toml"
        from tacc.testbed import ovs

        stats = (f'stats = "{ovs.controller_address(0)}:7401"\n'
                 f'stats_key_file = "{keys}/sw0.key"' if stats_over_udp else
                 f'stats = "{self.state}/sw0.sock"')
        self.config.write_text(FABRIC.format(state=self.state, keys=keys, stats=stats)
                               .replace(SDN_GCC_TABLE, mechanism), encoding="utf-8")
        self.switch_agent = fabric._start(fabric.sw, ["-m", "tacc", "switch-agent", "--config",
                                                      str(self.config), "--switch", "sw0"])
        fabric._wait_for(self.state / "switch-sw0.ready", "the switch agent", self.switch_agent)
        self.controller = self.start_controller()
        self.agent_states = {hv: tmp_path / f"state-{hv}" for hv in fabric.hvs[:2]}
        self.agents = {}
        for j, hv in enumerate(fabric.hvs[:2]):
            address = fabric.management_link(hv, to_switch=True)
            self.agents[hv] = fabric.start_agent(
                hv, 'log_format = "json"\n' + SDN_GCC.replace('name = "h1"', f'name = "h{j}"')
                .replace(SDN_GCC_TABLE, mechanism)
                .replace('fail_static = "1s"', f'fail_static = "{fail_static}"').format(
                    address=f"{address}:7400", key_file=keys / f"h{j}.key"),
                self.agent_states[hv])
        self.wait_connected()

    def start_controller(self) -> subprocess.Popen[str]:
        controller = self.launch_controller()
        self.fabric._wait_for(self.state / "ready", "the controller", controller)
        return controller

    def launch_controller(self) -> subprocess.Popen[str]:
        """The controller's process, started: it is ready once the state dir's `ready`
        exists (it has its switch)."""
        (self.state / "ready").unlink(missing_ok=True)  # a killed one's
        return self.fabric._start(self.fabric.sw, ["-m", "tacc", "controller",
                                                   "--config", str(self.config)])

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = json.loads((self.state / "status.json").read_text())
        return status

    def agent_status(self, hv: str) -> dict[str, Any]:
        status: dict[str, Any] = json.loads((self.agent_states[hv] / "status.json").read_text())
        return status

    def wait_connected(self) -> None:
        """Until the controller has its switch and both agents (10 s at most)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            status = self.status()
            if status.get("agents_connected") == ["h0", "h1"] and \
                    status.get("switches_connected") == ["sw0"]:
                return
            time.sleep(0.1)
        raise AssertionError(f"not connected: {self.status()}")

    def stop(self) -> dict[str, list[dict[str, Any]]]:
        """SIGTERM to every daemon, the agents first (so that none logs the controller's
        going); each must exit 0. Returns each agent's log events."""
        logs = {}
        for procs in (self.agents, {"controller": self.controller, "switch": self.switch_agent}):
            for p in procs.values():
                p.send_signal(signal.SIGTERM)
            for name, p in procs.items():
                _, err = p.communicate(timeout=10)
                assert p.returncode == 0, (p.args, err)
                logs[name] = err
        return {hv: [json.loads(line) for line in logs[hv].splitlines() if line.startswith("{")]
                for hv in self.agents}


@pytest.mark.testbed
def test_sdn_gcc_by_tacc_controller_gives_a_tcp_vm_its_share_next_to_a_udp_vm(
        ovs_fabric: Fabric, tmp_path: Path) -> None:
    """The controller reads the bottleneck's ECN marks from the switch agent (over UDP,
    signed) and notifies the UDP VM's hypervisor, whose limiter then leaves the TCP VM its
    share of the port."""
    fabric = ovs_fabric
    daemons = ControllerDaemons(fabric, tmp_path, stats_over_udp=True)
    runs = fabric.repeated_traffic("sdn-gcc", 3)
    shares = {k: statistics.fmean(r[k] for r in runs) for k in runs[0]}
    status = daemons.status()
    udp_agent = daemons.agent_status(fabric.hvs[1])
    scraped = subprocess.run(
        ["ip", "netns", "exec", fabric.sw, sys.executable, "-c",
         "import urllib.request; print(urllib.request.urlopen("
         "'http://127.0.0.1:9465/metrics', timeout=5).read().decode())"],
        check=True, capture_output=True, text=True).stdout
    daemons.stop()
    print(f"goodput Mb/s, mean: {shares}; runs: {runs}; controller: {status}")
    print(f"UDP agent: {udp_agent['counters']}")
    # Each VM's share is half the port. SDN-GCC holds the UDP VM near it (below it while
    # the marks last), and TCP takes the rest: the TCP VM within 25% of its share or above,
    # the UDP VM no more than 25% above, and the port kept busy (without the mechanism the
    # TCP VM gets 2 Mb/s: the HyGenICC test above). Judged on three runs' 12 s together
    # (their mean), and each run's TCP VM above half its share (not starved). With the
    # multiplicative cut (SDN_GCC_STEADY) 6 runs of 4 s gave the TCP VM 43.2-48.7 Mb/s
    # (mean 45.1, sd 2.0): the bound is 7 sd of the mean of three under it. With the
    # additive cut (Algorithm 3 as printed, the default) both VMs get the same cut per
    # poll, nothing pulls their rates together, and the difference wanders with the hosts'
    # timing: 45 single runs gave 32.8-57.8 (sd 6.0), 6 more 34.3-62.3 (sd 10.0).
    half = RATE_BPS / 2 / 1e6 * UDP_PAYLOAD
    assert shares["tcp"] >= 0.75 * half, shares
    assert min(r["tcp"] for r in runs) >= 0.5 * half, runs
    assert shares["udp"] <= 1.25 * half, shares
    assert shares["tcp"] + shares["udp"] >= 0.85 * 2 * half, shares
    assert status["messages"].get("host_message", 0) > 0, status
    # The readings came back signed for their requests (SDN-GCC asks each interval): all
    # but one the status may have caught on its way, and any that took longer than the
    # controller waits (50 ms; none in 7 runs here), whose late replies are then refused.
    sent, answered = status["messages"]["stats_request"], status["messages"]["stats_reply"]
    late = status["events"].get("stats_timeouts", 0)
    assert sent > 0 and 0 <= sent - answered - late <= 1 and late <= sent // 100, status
    assert status["events"].get("stats_replies_refused", 0) <= late, status
    assert udp_agent["counters"]["control_notify"] > 0, udp_agent["counters"]
    assert "tacc_controller_switches_connected 1" in scraped, scraped
    assert "tacc_controller_agents_connected 2" in scraped, scraped
    assert not (daemons.state / "controller.pid").exists()


@pytest.mark.testbed
def test_sicc_by_tacc_controller_hears_of_syns_from_the_switch_agent_not_from_open_vswitch(
        ovs_fabric: Fabric, tmp_path: Path) -> None:
    """With its switch agent on the controller's machine, SICC's SYN and FIN copies come from
    the agent's port programs (an OpenFlow copy rule would have Open vSwitch's userspace
    datapath make each copy in the thread that forwards): the switch holds no copy rule,
    and the controller hears of the TCP flow's SYN, its SYN-ACK and its FINs."""
    fabric = ovs_fabric
    daemons = ControllerDaemons(fabric, tmp_path, mechanism='kind = "sicc"\n')
    rules = fabric.switches.dump_flows(0)
    shares = fabric.traffic("sicc")
    status = daemons.status()
    daemons.stop()
    print(f"goodput Mb/s: {shares}; controller: {status}")
    assert not [r for r in rules if "tcp_flags" in r or "CONTROLLER" in r], rules
    # The TCP flow from a to c: its SYN, c's SYN-ACK, a FIN each way when it stops (the
    # status is written every 0.5 s: the last FINs may come after it).
    assert status["events"].get("port_copies", 0) >= 2, status
    assert status["messages"]["packet_in"] == status["events"]["port_copies"], status
    assert "port_copies_ignored" not in status["events"], status
    # SICC reads the queue of the port the SYN went through, every T.
    assert status["messages"].get("stats_request", 0) > 0, status


@pytest.mark.testbed
def test_a_tacc_controller_killed_mid_run_and_started_again_takes_back_its_switch_and_agents(
        ovs_fabric: Fabric, tmp_path: Path) -> None:
    """Garbage on the controller's ports is refused; then SIGKILL to the controller 3 s
    into the traffic, a new one started at once: the
    switch forwards by its rules meanwhile (fail_mode secure) and the agents keep their
    rates (fail_static) until the new controller is in control; it takes the switch and
    both agents back, and its notifications hold the UDP VM again."""
    fabric = ovs_fabric
    # fail_static past the new controller's start-up (0.8-2.2 s, below) and an agent's next
    # try (retry_max 0.5 s): the agents hold their rates until it is in control, and never
    # lift them (fail-open has its own test, with the agent's controller the test).
    daemons = ControllerDaemons(fabric, tmp_path, fail_static="3s")
    # Garbage first, on both of the controller's ports: each connection is refused, and
    # the controller goes on with its switch and agents.
    for port, garbage in ((7400, b"GET / HTTP/1.0\r\nHost: x\r\n\r\n"),
                          (7400, b"TACC1" + bytes(17)),
                          (6653, b"\x04\x00\x00\x08\x00\x00\x00\x01garbage")):
        subprocess.run(["ip", "netns", "exec", fabric.sw, sys.executable, "-c",
                        "import socket, sys; s = socket.create_connection(('127.0.0.1', "
                        f"{port}), timeout=5); s.sendall({garbage!r}); s.recv(64)"],
                       capture_output=True, timeout=20)
    time.sleep(0.6)  # the status is written every 0.5 s
    daemons.wait_connected()
    status = daemons.status()
    assert status["agents_refused"] == 2, status
    assert sorted(status["agents_refused_recently"]) == ["no key for host ''",
                                                          "not a tacc agent"], status
    restarted: list[float] = []
    # The UDP VM's HTB class on its hypervisor's uplink, read while the controller is away:
    # (seconds since the traffic's start, its rate in b/s).
    class_rates: list[tuple[float, float]] = []
    away = threading.Event()

    def read_class(start: float) -> None:
        while away.is_set():
            shown = subprocess.run(["tc", "-n", fabric.hvs[1], "class", "show", "dev", "up0"],
                                   capture_output=True, text=True).stdout
            found = re.search(r"class htb 1:10 .*? rate ([0-9.]+)([KMG]?)bit", shown)
            if found:
                scale = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[found[2]]
                class_rates.append((time.monotonic() - start, float(found[1]) * scale))
            time.sleep(0.05)

    def restart() -> None:
        go = tmp_path / "restart" / "go"
        deadline = time.monotonic() + 60
        while not go.exists():
            if time.monotonic() > deadline:
                return  # the traffic did not start: fabric.traffic says why
            time.sleep(0.01)
        start = json.loads(go.read_text())["start_mono_ns"] / 1e9
        time.sleep(max(0.0, start + 3.0 - time.monotonic()))
        daemons.controller.kill()
        daemons.controller.communicate(timeout=10)
        killed = time.monotonic()
        away.set()
        reader = threading.Thread(target=read_class, args=(start,))
        reader.start()
        daemons.controller = daemons.launch_controller()
        listening = _listening_at(daemons.controller, 6653)
        fabric._wait_for(daemons.state / "ready", "the controller", daemons.controller)
        restarted.extend(t - start for t in (killed, listening, time.monotonic()))
        away.clear()
        reader.join()

    thread = threading.Thread(target=restart)
    thread.start()
    shares = fabric.traffic("restart", duration_s=8.0)
    thread.join()
    daemons.wait_connected()
    status = daemons.status()
    agents = {hv: daemons.agent_status(hv)["counters"] for hv in fabric.hvs[:2]}
    logs = daemons.stop()
    tcp, udp = fabric.last_bins["tcp"], fabric.last_bins["udp"]
    # The agents' events, in seconds since the traffic's start (their clock is the wall's).
    start = json.loads((tmp_path / "restart" / "go").read_text())["start_mono_ns"] / 1e9
    wall_at_start = time.time() - time.monotonic() + start
    events = {hv: [(e["time"] - wall_at_start, e["event"], e.get("rates")) for e in log]
              for hv, log in logs.items()}
    print(f"UDP Mb/s per 100 ms: {[round(x) for x in udp]}")
    print(f"TCP Mb/s per 100 ms: {[round(x) for x in tcp]}")
    print(f"goodput Mb/s: {shares}; the controller killed, the new one listening and "
          f"ready at {restarted} s; controller: {status}")
    for hv, evs in events.items():
        print(hv, [(round(t, 3), e, r) for t, e, r in evs])
    print(f"the UDP VM's class while the controller was away: {class_rates}")
    assert len(restarted) == 3, restarted
    killed, listening, ready = restarted
    # Open vSwitch tries its controller again 1 s after the connection closed or a try failed
    # (rconn's backoff, 1 s at first and after each try past its deadline): the new controller
    # has the switch at the first try after it listens, plus the handshake, its rules and a
    # barrier (ready 0.15-0.26 s after listening in 3 runs, at the first try). Its start-up,
    # kill to listening, took 0.82-0.90 s on an idle machine; in clean-checkout suites past
    # 1 s, and the switch came at the second try, 2.10-2.21 s after the kill.
    assert ready - listening < 1.0 + 0.3, restarted
    assert listening - killed < 5.0, restarted  # a daemon's start, not a hang
    assert status["starts"] == 2, status
    for hv, counters in agents.items():
        assert counters["controller_connects"] == 2, (hv, counters)
    half = RATE_BPS / 2 / 1e6 * UDP_PAYLOAD
    # Meanwhile the agents hold the rates of the moment they lost it (fail_static), a point
    # of SDN-GCC's sawtooth, which runs from R_min to line rate (1.0-89 Mb/s sampled from the
    # UDP VM's agent before the kill, 9 samples; 100 at the kill in 4 runs of 6). They
    # reconnect at their first try after the new controller listens and go on holding until
    # it has its switch and says it is in control: before that hold, their shims resumed at
    # once, with nothing to cut them, and the UDP VM went to 86-96 Mb/s for 0.3 s. The agent
    # logs the rates it holds, and the datapath holds them: its HTB class keeps that rate
    # (read with tc while the controller is away) and lets through at most that rate in
    # Ethernet frames (1514 B for 1472 B of payload) plus its burst. The sink's 100 ms bins,
    # read by a process at normal priority, take a few Mb/s from their neighbours (68 and 58
    # in turn for a held 65.1 Mb/s, whose ceiling is 63.3). A rate held near line rate
    # leaves the bins nothing to show: the class's rate is the check there.
    udp_vm = events[fabric.hvs[1]]
    lost = [(t, r) for t, e, r in udp_vm if e == "controller lost: rates held"]
    in_control = [t for t, e, _ in udp_vm
                  if e == "controller in control: the rates follow it again"]
    assert len(lost) == 1 and len(in_control) == 1, udp_vm
    assert not any(e.startswith("fail-open") for _, e, _ in udp_vm), udp_vm
    (t_lost, held_text), t_back = lost[0], in_control[0]
    assert abs(t_lost - killed) < 0.2, (t_lost, killed)  # the loss seen at once
    assert ready - 0.2 < t_back < ready + 0.5, (t_back, ready)  # until in control
    assert held_text.count(":") == 1, held_text  # the UDP VM's one rate, to every remote
    held = float(held_text.split(":")[1].removesuffix("Mbps"))
    # The traffic lasts 8 s: the new controller must be in control with time to show it.
    assert t_back <= 6.5, (t_back, restarted)
    read = [bps for t, bps in class_rates if t_lost + 0.05 < t < t_back - 0.05]
    assert len(read) >= 3, (class_rates, t_lost, t_back)
    for bps in read:  # tc shows the rate in whole Kbit/s
        assert abs(bps - held * 1e6) <= 1e3 + 1e-4 * held * 1e6, (read, held)
    hold_bins = range(math.ceil(t_lost * 10), math.floor(t_back * 10))
    assert len(hold_bins) >= 5, (t_lost, t_back)
    ceiling = held * 1472 / 1514
    assert statistics.mean(udp[b] for b in hold_bins) <= ceiling + 1, (held, udp)
    for b in hold_bins:  # nor climbs in a bin, as a resumed shim would (1 Mb/s a ms)
        assert udp[b] <= 1.1 * ceiling + 2, (b, udp[b], held, udp)
    # No 100 ms passes without the TCP VM moving where the UDP VM's limit leaves it a fifth
    # of the line: while the controller is in control, and during the hold if held there.
    settled = math.ceil(t_back * 10) + 5  # the first bin 0.5 s after it is in control
    moving = [*range(20, 30), *range(settled, len(tcp))]
    if held <= 0.8 * RATE_BPS / 1e6:
        moving += hold_bins
    assert min(tcp[b] for b in moving) > 0, tcp
    # From 0.5 s after it is in control, the new controller holds the UDP VM well under line.
    udp_after = udp[settled:]
    assert sum(udp_after) / len(udp_after) <= 0.75 * 2 * half, udp_after


def _listening_at(proc: subprocess.Popen[str], port: int) -> float:
    """When (time.monotonic) the process's network namespace first has a TCP socket
    listening on `port`: read from its /proc net table, which is the namespace's."""
    table = Path(f"/proc/{proc.pid}/net/tcp")
    local = f":{port:04X}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            lines = []
        # Fields: sl, local address:port (hex), remote, state (0A: LISTEN), ...
        if any(f[1].endswith(local) and f[3] == "0A" for f in map(str.split, lines)):
            return time.monotonic()
        time.sleep(0.005)
    raise AssertionError(f"nothing listens on port {port} after 20 s")


def _controller_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tacc", "controller", *args],
                          capture_output=True, text=True, env=_env(), timeout=60)


def test_a_fabric_config_with_mistakes_gets_one_line_per_mistake(engine: None,
                                                                  tmp_path: Path) -> None:
    path = tmp_path / "fabric.toml"
    path.write_text("""\
openflow = "nowhere"
colour = "red"

[[hosts]]
name = "hv1"
nic_rate = "0Gbps"
vms = [{ name = "a", address = "10.0.0.300" }]

[[hosts]]
name = "hv2"
nic_rate = "1Gbps"
key_file = "/nonexistent/hv2.key"

[[switches]]
name = "s"
datapath_id = 0

[[switches.ports]]
number = 1
to = "hv1"
rate = "1Gbps"
buffer = "100pkt"
marking = "200pkt"

[[switches.ports]]
number = 1
to = "t:4"
rate = "1Gbps"
buffer = "100pkt"

[mechanism]
kind = "sdn-gcc"
""")
    proc = _controller_cli("--config", str(path))
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert [line.split(": ")[2:4] for line in lines] == [
        [f"{path}:1", "openflow"],
        [f"{path}:2", "colour"],
        [f"{path}:6", "hosts[0].nic_rate"],
        [f"{path}:7", "hosts[0].vms[0].address"],
        [f"{path}:10", "hosts[1].name"],
        [f"{path}:12", "hosts[1].key_file"],
        [f"{path}:16", "switches[0].datapath_id"],
        [f"{path}:23", "switches[0].ports[0].marking"],
        [f"{path}:26", "switches[0].ports[1].number"],
        [f"{path}:27", "switches[0].ports[1].to"],
    ], lines
    assert all(line.startswith("tacc: error: ") for line in lines)
    assert "cabled to no switch port" in lines[4]


@pytest.mark.parametrize(("kind", "why"), [("hygenicc", "runs in the hosts' agents (tacc agent)"),
                                           ("rwndq", "runs in the switches")])
def test_a_mechanism_without_a_controller_is_refused_by_the_controller(
        engine: None, tmp_path: Path, kind: str, why: str) -> None:
    path = tmp_path / "fabric.toml"
    path.write_text(f"""\
[[hosts]]
name = "hv1"
nic_rate = "1Gbps"

[[switches]]
name = "s"
datapath_id = 1
ports = [{{ number = 1, to = "hv1", rate = "1Gbps", buffer = "100pkt" }}]

[mechanism]
kind = "{kind}"
""")
    proc = _controller_cli("--config", str(path), "--check")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"tacc: error: {path}:11: mechanism.kind: {kind} has no controller: it {why}"]


def test_sdn_gcc_without_the_agents_address_is_refused(engine: None, tmp_path: Path) -> None:
    path = tmp_path / "fabric.toml"
    path.write_text("""\
[[hosts]]
name = "hv1"
nic_rate = "1Gbps"

[[switches]]
name = "s"
datapath_id = 1
ports = [{ number = 1, to = "hv1", rate = "1Gbps", buffer = "100pkt" }]

[mechanism]
kind = "sdn-gcc"
""")
    proc = _controller_cli("--config", str(path), "--check")
    assert proc.returncode == 2
    assert "agents: expected the address the hosts' agents connect to" in proc.stderr


@pytest.mark.parametrize(("stats", "key", "line"), [
    ('stats = "tor:7401"\nstats_key_file = "{keys}/sw0.key"', "stats",
     "expected a Unix socket's absolute path, or the UDP address"),
    ('stats = "198.18.0.1:7401"', "stats_key_file", "the stats of a switch agent reached over "
                                                    "UDP are signed"),
    ('stats = "/run/sw0.sock"\nstats_key_file = "{keys}/sw0.key"', "stats_key_file",
     "expected none with a Unix socket"),
    ('stats = "198.18.0.1:7401"\nstats_key_file = "{keys}/h0.key.open"', "stats_key_file",
     "readable or writable by others than its owner"),
])
def test_a_switch_agents_stats_over_udp_need_an_address_and_a_key_of_its_own(
        engine: None, tmp_path: Path, stats: str, key: str, line: str) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    for name in ("h0", "h1", "sw0"):
        (keys / f"{name}.key").write_bytes(os.urandom(32))
        (keys / f"{name}.key").chmod(0o600)
    (keys / "h0.key.open").write_bytes(os.urandom(32))
    (keys / "h0.key.open").chmod(0o644)
    path = tmp_path / "fabric.toml"
    path.write_text(FABRIC.format(state=tmp_path / "state", keys=keys,
                                  stats=stats.format(keys=keys)), encoding="utf-8")
    proc = _controller_cli("--config", str(path), "--check")
    assert proc.returncode == 2, proc
    (error,) = proc.stderr.splitlines()
    assert f": switches[0].{key}: " in error and line in error, error
    # With the address and a key of its own the switch is read, and its switch agent,
    # which reads no other key, finds it too.
    path.write_text(FABRIC.format(state=tmp_path / "state", keys=keys,
                                  stats=f'stats = "198.18.0.1:7401"\n'
                                        f'stats_key_file = "{keys}/sw0.key"'), encoding="utf-8")
    assert _controller_cli("--config", str(path), "--check").returncode == 0
    from tacc.deploy import controller

    (keys / "h0.key").unlink()
    sw = controller.read(path, keys=False, switch="sw0")["switches"][0]
    assert (sw["stats"], sw["stats_key"]) == ("198.18.0.1:7401", (keys / "sw0.key").read_bytes().hex())


def test_the_controller_takes_only_the_signed_reply_to_its_own_request(engine: None) -> None:
    """The controller's end of the signed stats over UDP, against a switch agent written
    here from the protocol: a reply recorded earlier (another nonce), one signed with
    another key and one changed on the way are each refused, and the true one is taken."""
    import hashlib
    import hmac
    import socket

    from tacc.testbed.controller import _UdpStats

    key = os.urandom(32)
    agent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    agent.bind(("127.0.0.1", 0))

    def signed(k: bytes, nonce: bytes, body: bytes) -> bytes:
        return nonce + hmac.new(k, b"reply" + nonce + body, hashlib.sha256).digest() + body

    def serve() -> None:
        data, peer = agent.recvfrom(4096)
        magic, nonce, tag, body = data[:6], data[6:22], data[22:54], data[54:]
        assert magic == b"TACCS1" and hmac.compare_digest(
            tag, hmac.new(key, b"request" + nonce + body, hashlib.sha256).digest())
        reply = b'{"QueueLength": {"switch": 0, "port": 2, "pkts": 7}}'
        agent.sendto(signed(key, os.urandom(16), reply), peer)
        agent.sendto(signed(os.urandom(32), nonce, reply), peer)
        agent.sendto(signed(key, nonce, reply)[:-2] + b"9}", peer)
        agent.sendto(signed(key, nonce, reply), peer)

    thread = threading.Thread(target=serve)
    thread.start()
    refused: list[int] = []
    stats = _UdpStats(f"127.0.0.1:{agent.getsockname()[1]}", key.hex())
    reply = stats.ask(b'{"QueueLength": {"switch": 0, "port": 2}}', lambda: refused.append(1))
    thread.join()
    assert reply == b'{"QueueLength": {"switch": 0, "port": 2, "pkts": 7}}'
    assert len(refused) == 3
    # No answer at all: the wait ends at the stats timeout.
    with pytest.raises(TimeoutError):
        stats.ask(b"{}", lambda: None)


def test_the_example_fabric_configs_pass_the_check(engine: None, tmp_path: Path) -> None:
    examples = sorted((Path(__file__).resolve().parents[2] / "deploy" / "fabric").glob("*.toml"))
    assert [p.stem for p in examples] == ["sdn-ecn", "sdn-gcc"]
    keys = tmp_path / "keys"
    keys.mkdir()
    for h in ("hv1", "hv2", "hv3"):
        (keys / f"{h}.key").write_bytes(os.urandom(32))
        (keys / f"{h}.key").chmod(0o600)
    for example in examples:
        path = tmp_path / example.name
        path.write_text(example.read_text().replace("/etc/tacc/keys", str(keys)))
        proc = _controller_cli("--config", str(path), "--check")
        assert (proc.returncode, proc.stdout) == (0, f"{path}: ok\n"), proc.stderr


def test_sdn_gcc_needs_each_switchs_agent_and_real_cables(
        engine: None, tmp_path: Path) -> None:
    path = tmp_path / "fabric.toml"
    path.write_text("""\
agents = "[::]:7400"

[[hosts]]
name = "hv1"
nic_rate = "1Gbps"

[[switches]]
name = "s"
datapath_id = 1
ports = [
  { number = 1, to = "hv1", rate = "1Gbps", buffer = "100pkt" },
  { number = 2, to = "s:2", rate = "1Gbps", buffer = "100pkt" },
]

[mechanism]
kind = "sdn-gcc"
""")
    proc = _controller_cli("--config", str(path), "--check")
    assert proc.returncode == 2
    assert [line.split(": ")[2:4] for line in proc.stderr.splitlines()] == [
        [f"{path}:1", "agents"],
        [f"{path}:10", "switches[0].ports[1].to"],
    ], proc.stderr
    # Mended, the roles' needs: the switch's agent.
    path.write_text(path.read_text().replace("[::]", "0.0.0.0").replace(
        '{ number = 2, to = "s:2", rate = "1Gbps", buffer = "100pkt" },\n', ""))
    proc = _controller_cli("--config", str(path), "--check")
    assert proc.returncode == 2
    assert [line.split(": ")[2:4] for line in proc.stderr.splitlines()] == [
        [f"{path}:7", "switches[0].stats"],
    ], proc.stderr
