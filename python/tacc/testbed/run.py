"""A testbed run, start to end: check the machine, get the plan, build the namespaces,
start the agents, measure the base RTT, run the traffic for the scenario's duration, read
the counters, write the result directory, and tear everything down on every way out
(success, an error, Ctrl-C, SIGTERM, a child that dies).

Each run has an id R (4 hex digits) naming its namespaces (`tacc-R-*`), its BPF directory
(/sys/fs/bpf/tacc-R) and its working directory (<tmp>/tacc-testbed-R: the children's
configs, ready files, records and stderr; it holds the orchestrator's pid, so that
`cleanup` can tell a live run from leftovers).

Clocks: the agents' `start_mono_ns` is the moment they are launched; the flows' time
zero (T0) comes once every agent and traffic process is ready. The agents' times are moved
onto the flows' clock when the results are written (`testbed.agent_offset_s` = T0 minus
the agents' start).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import tacc
from tacc._progress import simulation_bar
from tacc.testbed import (
    TestbedError, TestbedUnavailable, apps, collect, control, dctcp, features, ovs, shell,
    topology, traffic,
)
from tacc.testbed.departures import Departure, scenario_departures
from tacc.testbed.plan import (
    DEFAULT_RATE_CAP_BPS, PlanError, dilated, load_plan, plan_notes, rate_scale, scale_message,
    path_ports, time_dilation, unloaded_rtt_ns, vm_tcp_ecn,
)
from tacc.testbed.topology import Names

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from tacc.testbed.plan import Plan

READY_TIMEOUT_S = 10.0
# The links' delay lines: the base RTT within this fraction of the scenario's, after at most
# this many measurements of the namespaces' own latency.
WIRE_TOLERANCE = 0.05
WIRE_ROUNDS = 3
TRAFFIC_LEAD_S = 0.2  # from the go file to the flows' time zero
STOP_GRACE_S = 5.0  # a child asked to stop gets this long to write its records
MIN_SAMPLE_NS = 100_000_000  # one `tc` call per sampled namespace: 1 ms would cost a core
OTHERS_EVERY = 10  # ports not in output.ports are sampled every 10th time (for the summary)
MIN_AGENT_SAMPLE_NS = 1_000_000
PING = ("-n", "-c", "20", "-i", "0.01", "-W", "1")
PING_IP_BYTES = 84  # ping's default 56 bytes of data, ICMP's 8 and IP's 20
RUN_DIR = re.compile(r"^tacc-testbed-([0-9a-f]{4})$")


@dataclass
class Options:
    out: Path | None = None
    duration_s: float | None = None
    rate_cap_bps: float = DEFAULT_RATE_CAP_BPS
    keep_going: bool = False
    quiet: bool = False
    # Host agents drop what only a shim may send (feedback packets, IPR bits) when a VM sends
    # it; off only to measure what a forging VM could do without the protection.
    scrub: bool = True
    # The switches: "linux" (each switch a namespace that routes), "ovs" (an Open vSwitch
    # bridge driven by the SDN controller) or "auto" (ovs where the mechanism's controller
    # needs OpenFlow, linux otherwise: `controller_kind`).
    switches: str = "auto"
    # The mechanism's clock: "real", "dilated" (its time runs at the rate scale times real
    # time, see mechanism_time_scale) or "auto" (dilated for SDN-GCC, real for the others).
    mechanism_clock: str = "auto"
    # The links' delays through delay lines (topology), or none: the veths' own.
    link_delays: bool = False
    # Run a scenario whose keys the testbed does not all honour (departures), listing them.
    approximate: bool = False
    # Called in a thread of its own once the traffic has started, with the run's names, its
    # working directory (agents' control sockets: agent-h<j>.sock) and the flows' time zero:
    # for tests and experiments that act on a running testbed.
    during: Callable[[Names, Path, int], None] | None = None


class Interrupted(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that the same `finally` tears the run down."""


def run_testbed(scenario: str | os.PathLike[str], sets: Sequence[tuple[str, str]] = (),
                options: Options | None = None) -> Path:
    """Runs a scenario file (or "default") on the testbed; returns the result directory."""
    options = options or Options()
    plan = load_plan(scenario, sets)
    path = tacc._scenario_file(scenario)
    found = scenario_departures(Path(path), sets)
    refused = [message for message, d in found if not d.output_only]
    if refused and not options.approximate:
        raise PlanError("\n".join([*refused, "the testbed does not emulate the keys above; "
                                   "--approximate runs the scenario anyway and lists them in "
                                   "summary.json's testbed.not_emulated"]))
    if plan["apps"]:
        plan = apps.expand(plan, apps.workload(scenario, sets))
    return run_plan(plan, options, scenario_file=path, departures=found)


def run_plan(plan: Plan, options: Options, scenario_file: str = "",
             departures: Sequence[tuple[str, Departure]] = ()) -> Path:
    """Runs a plan; `departures` (the scenario's keys the testbed does not honour, each
    "WHERE: KEY: REASON" with its table entry) are recorded in `testbed.not_emulated`."""
    started = time.monotonic()
    dilation = time_dilation(plan, rate_scale(plan, options.rate_cap_bps))
    if dilation != 1.0 and options.mechanism_clock == "real":
        raise PlanError(f"--mechanism-clock real: this run's time is dilated x{dilation:g} "
                        "(applications at a rate scale under 1) and its mechanism's clock "
                        "with it; leave the clock to auto or dilated")
    names, workdir = _new_run()
    run = _Run(dilated(plan, dilation), options, names, workdir, departures, dilation)
    _RUNNING[workdir] = run
    try:
        with _signals_raise():
            return run.go(scenario_file, started)
    finally:
        del _RUNNING[workdir]
        with _signals_ignored():  # a second Ctrl-C must not leave namespaces behind
            run.children.stop_all()
            problems = topology.teardown(names)
            if run.registered_dctcp:
                problems += dctcp.unregister()
            shutil.rmtree(workdir, ignore_errors=True)
        for problem in problems:
            print(f"tacc: warning: teardown: {problem}", file=sys.stderr)


def running(workdir: Path) -> _Run:
    """The run whose working directory is `workdir` (it must be running in this process)."""
    return _RUNNING[workdir]


def restart_controller(workdir: Path) -> None:
    """Kills the running testbed's controller (as a crash would) and starts a new one, which
    must find its switches again; returns once it has configured them all. For tests and
    experiments run from `Options.during`."""
    _RUNNING[workdir].restart_controller()


def restart_switch(workdir: Path, switch: int) -> None:
    """Kills switch `switch`'s ovs-vswitchd and starts it again; its bridge comes back from
    the database, its rules from the controller."""
    run = _RUNNING[workdir]
    if run.switches is None:
        raise TestbedError("this run has no OVS switches")
    run.switches.restart(switch)


def cleanup() -> list[str]:
    """Removes what earlier runs left (namespaces, BPF directories, working directories)
    unless their orchestrator still runs; returns what was removed."""
    ids = {m.group(1) for ns in topology.run_namespaces()
           if (m := topology.RUN_ID.match(ns))}
    if topology.BPFFS.is_dir():
        ids |= {m.group(1) for p in topology.BPFFS.iterdir()
                if (m := topology.RUN_ID.match(p.name + "-"))}
    ids |= {m.group(1) for p in Path(tempfile.gettempdir()).iterdir()
            if (m := RUN_DIR.match(p.name))}
    removed = []
    for run_id in sorted(ids):
        if _alive(run_id):
            continue
        names = Names(run_id)
        namespaces = topology.run_namespaces(names.prefix)
        problems = topology.teardown(names)
        shutil.rmtree(_run_dir(run_id), ignore_errors=True)
        if problems:
            raise TestbedError("\n".join(problems))
        removed.append(f"run {run_id}: {len(namespaces)} namespaces")
    if not any(_alive(run_id) for run_id in ids) and dctcp.registered():
        problems = dctcp.unregister()
        if problems:
            raise TestbedError("\n".join(problems))
        removed.append("the BPF DCTCP (unregistered)")
    return removed


def _run_dir(run_id: str) -> Path:
    return Path(tempfile.gettempdir()) / f"tacc-testbed-{run_id}"


def _alive(run_id: str) -> bool:
    try:
        pid = int((_run_dir(run_id) / "pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return False
    return b"tacc" in cmdline


def _new_run() -> tuple[Names, Path]:
    for _ in range(100):
        run_id = secrets.token_hex(2)
        workdir = _run_dir(run_id)
        if topology.run_namespaces(Names(run_id).prefix):
            continue
        try:
            workdir.mkdir(mode=0o700)
        except FileExistsError:
            continue
        (workdir / "pid").write_text(str(os.getpid()))
        return Names(run_id), workdir
    raise TestbedError(f"no free run id in {tempfile.gettempdir()} (try tacc testbed --cleanup)")


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM and SIGINT raise, even where SIGINT came ignored (a background job): either
    way the run's `finally` tears it down."""

    def terminated(_signum: int, _frame: object) -> None:
        raise Interrupted()

    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, terminated),
                signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    stderr: Path
    reported: bool = False  # its early exit is recorded (--keep-going)

    def said(self) -> str:
        """The last lines of its stderr, for an error message."""
        try:
            lines = self.stderr.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return ""
        return " | ".join(line.strip() for line in lines[-5:] if line.strip())


@dataclass
class Children:
    """The run's child processes, each in its own session (process group), so that
    stopping one stops whatever it started."""

    all: list[Child] = field(default_factory=list)

    def start(self, name: str, ns: str, args: Sequence[str], workdir: Path,
              priority: int | None = None) -> Child:
        """`python -m ARGS` in namespace `ns`, under SCHED_FIFO at `priority` (shell.realtime)
        from before its interpreter starts: a controller that imported os-ken at normal
        priority next to the real-time traffic took 2-3 s instead of 0.8 to start."""
        env = dict(os.environ)
        # The children import this same tacc, installed or from the source tree.
        root = str(Path(tacc.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        return self.spawn(name, ns, [sys.executable, "-m", *args], workdir, priority, env)

    def spawn(self, name: str, ns: str, argv: Sequence[str], workdir: Path,
              priority: int | None = None, env: dict[str, str] | None = None) -> Child:
        """Program `argv` in namespace `ns`, its stderr in `workdir/NAME.stderr`."""
        stderr = workdir / f"{name}.stderr"
        with stderr.open("wb") as err:
            proc = subprocess.Popen(shell.in_ns(ns, *argv),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=err, env=env, start_new_session=True,
                                    preexec_fn=None if priority is None
                                    else functools.partial(shell.realtime, priority))
        child = Child(name, proc, stderr)
        self.all.append(child)
        return child

    def stop(self, children: Sequence[Child], grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM to each group, then SIGKILL to what is left after `grace_s`."""
        for child in children:
            _signal_group(child, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in children:
            try:
                child.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(child, signal.SIGKILL)
                child.proc.wait()

    def stop_all(self) -> None:
        self.stop([c for c in self.all if c.proc.poll() is None], grace_s=2.0)


def _signal_group(child: Child, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.proc.pid, sig)


class _Run:
    def __init__(self, plan: Plan, options: Options, names: Names, workdir: Path,
                 departures: Sequence[tuple[str, Departure]], dilation: float = 1.0) -> None:
        self.plan, self.options, self.names, self.workdir = plan, options, names, workdir
        self.departures = list(departures)
        # The plan's times are already this many times the scenario's (plan.dilated); the
        # result files get the scenario's back (collect.undilate).
        self.dilation = dilation
        self.children = Children()
        self.traffic: list[Child] = []
        self.agent_csvs: list[tuple[str, Path]] = []  # (role, the agent's CSV)
        self.sample_interval_ns = max(plan["output"]["queue_sample_ns"], MIN_SAMPLE_NS)
        self.failures: list[str] = []
        self.registered_dctcp = False
        self.time_scale = 1.0
        # The namespaces' own round trip: the base RTT over the scenario's, with the links'
        # delays (_start_wire).
        self.stack_rtt_us: float | None = None
        self.controller: Child | None = None
        self.switches: ovs.Switches | None = None
        self.switch_kind = "linux"  # or "ovs": resolve_switches
        self.controller_kind: str | None = None  # controller_kind
        self.captures: list[Child] = []  # tcpdump per port of output.pcap

    def say(self, text: str) -> None:
        if not self.options.quiet:
            print(text, flush=True)

    def go(self, scenario_file: str, started: float) -> Path:
        plan, options = self.plan, self.options
        control.new_key(self.workdir)  # before the agents and the controller, who read it
        found = features.check(plan, self.names.probe, options.keep_going)
        if found.bpf_dctcp and not dctcp.registered():
            dctcp.register(self.workdir)
            self.registered_dctcp = True
        scale = rate_scale(plan, options.rate_cap_bps)
        # A dilated run's mechanism keeps the scenario's timing: its clock is dilated too.
        self.time_scale = mechanism_time_scale(
            plan, scale, "dilated" if self.dilation != 1.0 else options.mechanism_clock)
        duration_ns = plan["duration_ns"]
        if options.duration_s is not None:
            duration_ns = min(duration_ns, round(options.duration_s * 1e9 * self.dilation))
        message = scale_message(plan, scale)
        if message:
            self.say(message)
        if self.dilation != 1.0:
            self.say(f"time dilated x{self.dilation:g}: the applications' epochs and loads "
                     f"keep their packets per second of the scenario's time "
                     f"({duration_ns / self.dilation / 1e9:g}s take {duration_ns / 1e9:g}s)")
        self.say(f"testbed {self.names.run_id}: {len(plan['switches'])} switches, "
                 f"{len(plan['hosts'])} hosts, {len(plan['vms'])} VMs, "
                 f"{len(plan['flows'])} flows, {duration_ns / 1e9:g}s")
        self.controller_kind = controller_kind(plan)
        switches = self.switch_kind = resolve_switches(self.controller_kind, options.switches)
        topo = topology.build(plan, self.names, scale, switches, options.link_delays)
        agents_start = time.monotonic_ns()
        if switches == "ovs" or self.controller_kind == "agents":
            self._start_controller(topo, scale, agents_start, openflow=switches == "ovs")
        wire, rtts = self._start_wire(topo, scale)
        if rtts is not None:
            self.say(f"base RTT {rtts[0]:.0f}us (first flow's endpoints, median of 20 pings; "
                     f"the scenario's at x{scale:g} the rates: {rtts[1]:.0f}us)")
        agents = self._start_agents(topo, scale, agents_start)
        self._start_captures(topo)
        m = collect.Measured(duration_ns=duration_ns)
        t0 = self._start_traffic(found.cc, scale, duration_ns)
        m.agent_offset_s = (t0 - agents_start) / 1e9
        during = None
        if options.during is not None:
            during = threading.Thread(target=options.during, args=(self.names, self.workdir, t0),
                                      daemon=True)
            during.start()
        self._emulate(topo, m, t0, agents)
        if during is not None:
            during.join()
        m.checksum_errors = collect.checksum_errors(topo.namespaces, self.names.prefix)
        self.children.stop(agents + wire + self.captures
                           + ([self.controller] if self.controller else []))
        self._read_records(m)
        plan = self.plan = apps.settle(plan, m)  # the records are renumbered to match
        flows = collect.flow_summaries(plan, m, found.cc)
        counts = self._controller_counts()
        summary = collect.summary(
            plan, m, flows, scale=scale, scenario_file=scenario_file,
            wall_seconds=time.monotonic() - started, sample_interval_ns=self.sample_interval_ns,
            testbed=self._testbed(m, found, scale, rtts, counts), controller=counts,
        )
        out = options.out or Path("out") / f"{plan['name']}-testbed"
        collect.write_results(out, plan, m, summary, flows)
        collect.undilate(out, self.dilation)
        self._write_captures(out)
        if self.failures:
            raise TestbedError("\n".join([*self.failures, f"results written to {out}"]))
        return out

    def _start_controller(self, topo: topology.Topology, scale: float, start_ns: int,
                          openflow: bool) -> None:
        """The SDN controller, then the OVS switches it drives; returns once the controller
        has configured every switch (before that, nothing forwards). Without `openflow`
        (Linux switches), the controller alone, in a namespace of its own with no link."""
        plan, workdir = self.plan, self.workdir
        self._controller_config = {
            "openflow": openflow,
            "plan": plan, "rate_scale": scale, "time_scale": self.time_scale,
            "start_mono_ns": start_ns, "go": str(workdir / "go"),
            "listen": ovs.CONTROLLER_PORT, "reply_socket": str(workdir / "stats.sock"),
            "agents": {str(j): str(workdir / f"agent-h{j}.sock")
                       for j in range(len(plan["hosts"]))},
            "switch_stats": {str(i): str(workdir / f"agent-sw{i}.stats.sock")
                             for i in range(len(plan["switches"]))},
            # Every switch agent makes the flags-only copies in its ports.
            "reports": str(workdir / "reports.sock"),
            "port_copies": list(range(len(plan["switches"]))),
            "control_key": str(workdir / "control.key"),
            "counts": str(workdir / "controller-counts.json"),
            "ready": str(workdir / "controller.ready"),
        }
        if importlib.util.find_spec("os_ken") is None:
            raise TestbedUnavailable(["os-ken: not installed (pip install os-ken): the "
                                      "testbed's controller runs on it"])
        path = workdir / "controller.json"
        path.write_text(json.dumps(self._controller_config), encoding="utf-8")
        if openflow:
            self.switches = ovs.Switches(topo, workdir)
            self.switches.management_network()
        else:
            topo.add_namespace(self.names.mgmt)
        self._launch_controller()
        if self.switches is not None:
            self.switches.start()
        self._wait_ready([self.controller], time.monotonic_ns() + round(READY_TIMEOUT_S * 1e9),
                         "controller")

    def _launch_controller(self) -> None:
        self.controller = self.children.start(
            "controller", self.names.mgmt,
            ["tacc.testbed.controller", str(self.workdir / "controller.json")],
            self.workdir, shell.MECHANISM_PRIORITY)

    def restart_controller(self) -> None:
        old = self.controller
        if old is None:
            raise TestbedError("this run has no controller")
        old.reported = True  # its death is meant
        _signal_group(old, signal.SIGKILL)
        old.proc.wait()
        (self.workdir / "controller.ready").unlink(missing_ok=True)
        self._launch_controller()
        self._wait_ready([self.controller], time.monotonic_ns() + round(READY_TIMEOUT_S * 1e9),
                         "controller")

    def _controller_counts(self) -> dict[str, Any] | None:
        if self.controller is None:
            return None
        path = self.workdir / "controller-counts.json"
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise TestbedError(f"the controller wrote no counts: {exc}: "
                               f"{self.controller.said() or 'no message'}") from exc

    def _unserved(self, counts: dict[str, Any] | None) -> list[str]:
        """The controller's rules and OpenFlow requests that found no OpenFlow switch, from
        its `counts`."""
        n = (counts or {}).get("events", {}).get("openflow_unavailable", 0)
        return [f"the {self.plan['mechanism']['kind']} controller: {n} rules or OpenFlow "
                "requests not served (Linux switches have no OpenFlow)"] if n else []

    def _host_agent_counts(self) -> dict[str, dict[str, float]]:
        """Each host agent's last counters (its shim's and its control socket's), by host."""
        counts = {}
        for j, host in enumerate(self.plan["hosts"]):
            path = self.workdir / f"agent-h{j}.counts.json"
            if path.is_file():  # written by every host agent that runs a shim
                counts[host["name"]] = json.loads(path.read_text(encoding="utf-8"))
        return counts

    def _start_agents(self, topo: topology.Topology, scale: float,
                      start_ns: int) -> list[Child]:
        """A switch agent in every switch (ECN marking at K, port counters); a host agent
        in every host when there is a mechanism. Their plan has the scenario's rates: they
        run the mechanism at those and scale what reaches the datapath by `rate_scale`."""
        plan, names, workdir = self.plan, self.names, self.workdir
        configs = []
        for i in range(len(plan["switches"])):
            configs.append((f"agent-sw{i}", names.switch(i), "switch", {
                "plan": plan, "switch": i, "rate_scale": scale, "time_scale": self.time_scale,
                "ports": {str(p): dev for p, dev in topo.switch_ports.get(i, {}).items()},
                "start_mono_ns": start_ns,
                "sample_ns": max(plan["output"]["queue_sample_ns"], MIN_AGENT_SAMPLE_NS),
                "out": str(workdir / f"ports-sw{i}.csv"),
                "ready": str(workdir / f"agent-sw{i}.ready"),
                "stats": (str(workdir / f"agent-sw{i}.stats.sock")
                          if self.controller is not None else None),
                "reports": (str(workdir / "reports.sock")
                            if self.controller is not None else None),
            }))
        if (plan["mechanism"] or {}).get("kind", "none") != "none":
            for j in range(len(plan["hosts"])):
                configs.append((f"agent-h{j}", names.host(j), "host", {
                    "plan": plan, "host": j, "rate_scale": scale,
                    "time_scale": self.time_scale, "uplink": "up0",
                    "vm_ports": {str(k): dev for k, dev in topo.host_vm_ports.get(j, {}).items()},
                    "start_mono_ns": start_ns,
                    # The engine samples the allocated rates every goodput bin.
                    "sample_ns": plan["output"]["goodput_bin_ns"],
                    "out": str(workdir / f"agent-h{j}.csv"),
                    "ready": str(workdir / f"agent-h{j}.ready"),
                    "control": str(workdir / f"agent-h{j}.sock"),
                    "control_key": str(workdir / control.KEY_FILE),
                    "counts": str(workdir / f"agent-h{j}.counts.json"),
                    "scrub": self.options.scrub,
                    # Taken by an agent whose shim does not poll (shell.MECHANISM_PRIORITY).
                    "realtime_priority": shell.MECHANISM_PRIORITY,
                }))
        agents = []
        for name, ns, role, config in configs:
            path = workdir / f"{name}.json"
            path.write_text(json.dumps(config), encoding="utf-8")
            # The host agents start at normal priority (shell.MECHANISM_PRIORITY says why).
            priority = shell.MECHANISM_PRIORITY if role == "switch" else None
            agents.append(self.children.start(name, ns, ["tacc.testbed.agent", role, str(path)],
                                              workdir, priority))
            self.agent_csvs.append((role, Path(config["out"])))
        self._wait_ready(agents, time.monotonic_ns() + round(READY_TIMEOUT_S * 1e9), "agent")
        return agents

    def _start_wire(self, topo: topology.Topology,
                    scale: float) -> tuple[list[Child], tuple[float, float] | None]:
        """The links' delay lines (topology's wire namespace), at the priority of the
        switches, for they are part of the network too; returns them and the base RTT as
        measured and as the scenario gives it (measure_base_rtt).

        The namespaces' own forwarding adds about 100 us to a round trip, which the
        simulator's links do not have: the wire is first started with the scenario's delays
        to measure it (the RTT less the delays and the serialization), then again with each
        delay less that latency's share per delayed link crossed, so that the base RTT is
        the scenario's. (A wire without delays would measure its own wake-ups too, which
        delayed frames do not meet: their delay counts from the kernel's receive time.)

        A measurement the machine disturbed (a CI run once took 164 us too many out of
        1,027) is corrected by the next: while the RTT is off the scenario's by more than
        WIRE_TOLERANCE, the latency taken out moves by the difference, at most
        WIRE_ROUNDS times."""
        if not topo.wires:
            return [], measure_base_rtt(self.plan, self.names, scale)
        wire = self._launch_wire(topo.wires)
        rtts = measure_base_rtt(self.plan, self.names, scale)
        if rtts is None:
            return wire, rtts
        flow = self.plan["flows"][0]
        delayed = {d["from"] for d in topo.wires}
        crossed = max(1, sum(f"w{p}" in delayed for p in (
            path_ports(self.plan, flow["src_vm"], flow["dst_vm"])
            + path_ports(self.plan, flow["dst_vm"], flow["src_vm"]))))
        self.stack_rtt_us = 0.0
        for round_ in range(WIRE_ROUNDS):
            error_us = rtts[0] - rtts[1]
            if round_ and abs(error_us) <= WIRE_TOLERANCE * rtts[1]:
                break
            self.children.stop(wire)
            self.stack_rtt_us = max(0.0, self.stack_rtt_us + error_us)
            less = self.stack_rtt_us * 1e3 / crossed
            wire = self._launch_wire([{**d, "delay_ns": max(0, round(d["delay_ns"] - less))}
                                      for d in topo.wires])
            rtts = measure_base_rtt(self.plan, self.names, scale) or rtts
        return wire, rtts

    def _launch_wire(self, directions: list[dict[str, Any]]) -> list[Child]:
        path = self.workdir / "wire.json"
        path.write_text(json.dumps({"directions": directions,
                                    "ready": str(self.workdir / "wire.ready")}),
                        encoding="utf-8")
        (self.workdir / "wire.ready").unlink(missing_ok=True)
        wire = self.children.start("wire", self.names.wire,
                                   ["tacc.testbed.agent", "wire", str(path)], self.workdir,
                                   shell.MECHANISM_PRIORITY)
        self._wait_ready([wire], time.monotonic_ns() + round(READY_TIMEOUT_S * 1e9), "wire")
        return [wire]

    def _wait_ready(self, children: Sequence[Child], deadline_ns: int, what: str,
                    marker: str = "ready") -> None:
        """Until each child has written WORKDIR/<name>.<marker>; TestbedError if one exits
        first or the deadline passes."""
        waiting = list(children)
        while waiting:
            for child in list(waiting):
                if (self.workdir / f"{child.name}.{marker}").exists():
                    waiting.remove(child)
                elif child.proc.poll() is not None:
                    raise TestbedError(f"{child.name} exited with status "
                                       f"{child.proc.returncode} before it was {marker}: "
                                       f"{child.said() or 'no message'}")
            if waiting and time.monotonic_ns() > deadline_ns:
                raise TestbedError(f"{what}s not ready in time: " + ", ".join(
                    f"{c.name} ({c.said() or 'no message'})" for c in waiting))
            time.sleep(0.02)

    def _start_captures(self, topo: topology.Topology) -> None:
        """tcpdump on each port of `output.pcap`: what its interface sends (`-Q out`: after
        the port's qdisc and the switch agent's marks, as the engine's captures), its first
        snap length's bytes, nanosecond stamps. Returns once each has opened its interface."""
        from tacc import _core

        for port in self.plan["output"]["pcap"]:
            ns, dev = topo.port_devices[port]
            self.captures.append(self.children.spawn(
                f"pcap-{port}", ns,
                # Immediate mode: libpcap's default hands packets over in blocks retired
                # after up to a second, and the last block was lost when tcpdump stopped.
                # -U: each packet written whole as it comes.
                ["tcpdump", "-i", dev, "-Q", "out", "-n", "-s", str(_core.PCAP_SNAPLEN),
                 "--immediate-mode", "-U", "--time-stamp-precision=nano",
                 "-w", str(self.workdir / f"pcap-{port}.pcap")],
                self.workdir))
        deadline = time.monotonic_ns() + round(READY_TIMEOUT_S * 1e9)
        for child in self.captures:
            while "listening on" not in child.stderr.read_text(errors="replace"):
                if child.proc.poll() is not None or time.monotonic_ns() > deadline:
                    raise TestbedError(f"{child.name}: tcpdump did not start: "
                                       f"{child.said() or 'no message'}")
                time.sleep(0.02)

    def _write_captures(self, out: Path) -> None:
        """The captures as the engine writes them, under the engine's file names in
        out/pcap (its capture files of an earlier run removed); a capture that cannot be
        read is a failure of the run, one that lost packets a warning."""
        from tacc import _core

        ports = self.plan["output"]["pcap"]
        if not ports:
            return
        (out / "pcap").mkdir(parents=True, exist_ok=True)
        for old in (out / "pcap").glob("*.pcapng"):
            old.unlink()
        names = [self.plan["ports"][p]["name"] for p in ports]
        for port, name, file, child in zip(ports, names, _core.capture_files(names),
                                           self.captures):
            try:
                _, cut_short = _core.pcap_to_pcapng(
                    str(self.workdir / f"pcap-{port}.pcap"), str(out / "pcap" / file), name)
            except (OSError, ValueError) as exc:
                self.failures.append(f"capture of {name}: {exc}")
                continue
            said = child.stderr.read_text(errors="replace")
            lost = [int(m.group(1)) for m in re.finditer(r"(\d+) packets? dropped by kernel",
                                                          said)]
            problems = ([f"tcpdump lost {sum(lost)} packets"] if sum(lost) else []) + (
                ["its file ends inside a packet, which is left out"] if cut_short else [])
            for problem in problems:
                print(f"tacc: warning: capture of {name}: {problem}", file=sys.stderr)

    def _start_traffic(self, cc: dict[str, str], scale: float, duration_ns: int) -> int:
        """One process per VM that sends or receives, started once every sink listens
        (the go file); returns the flows' time zero."""
        specs = traffic_specs(self.plan, cc, scale, self.workdir, duration_ns)
        for k, spec in specs.items():
            path = self.workdir / f"traffic-v{k}.json"
            path.write_text(json.dumps(spec), encoding="utf-8")
            self.traffic.append(self.children.start(
                f"traffic-v{k}", self.names.vm(k), ["tacc.testbed.traffic", str(path)],
                self.workdir, shell.APPLICATION_PRIORITY))
        self._wait_ready(self.traffic, time.monotonic_ns() + round(READY_TIMEOUT_S * 1e9),
                         "traffic process")
        # Every worker listens now: the aggregators reach theirs before time zero.
        aggregators = [c for k, c in zip(specs, self.traffic, strict=True)
                       if specs[k]["aggregators"]]
        if aggregators:
            (self.workdir / "listening").touch()
            self._wait_ready(aggregators, time.monotonic_ns()
                             + round((traffic.CONNECT_S + READY_TIMEOUT_S) * 1e9),
                             "incast aggregator", marker="connected")
        t0 = time.monotonic_ns() + round(TRAFFIC_LEAD_S * 1e9)
        go = self.workdir / "go"
        tmp = go.with_name(".go.tmp")  # renamed: a process never reads half of it
        tmp.write_text(json.dumps({"start_mono_ns": t0, "end_mono_ns": t0 + duration_ns}))
        os.replace(tmp, go)
        return t0

    def _emulate(self, topo: topology.Topology, m: collect.Measured, t0: int,
                 agents: list[Child]) -> None:
        """Waits out the run, watching the children: the backlog of the scenario's sampled
        ports every sample interval (queues.csv), of every port every 10th (the summary's
        backlog figures); the counters at the flows' time zero and at the end."""
        plan = self.plan
        sampled = {p: topo.port_devices[p] for p in plan["output"]["ports"]}
        interval, tick = self.sample_interval_ns, 0
        # A thread of its own, started first: a reading of the counters waits for the
        # kernel's rtnl lock, which a process the saturated machine leaves without a core
        # may hold for seconds (the first reading of a four-rack run took 13-26 s).
        cpu = threading.Thread(target=collect.sample_cpu, args=(m.cpu, t0, t0 + m.duration_ns),
                               daemon=True)
        cpu.start()
        shell.sleep_until(t0)
        m.counters_start = collect.port_counters(topo.port_devices)
        end = t0 + m.duration_ns
        bar = None if self.options.quiet else simulation_bar(desc="emulating")
        try:
            next_sample = t0
            while (now := time.monotonic_ns()) < end:
                if now >= next_sample:
                    ports = topo.port_devices if tick % OTHERS_EVERY == 0 else sampled
                    for port, c in collect.port_counters(ports).items():
                        m.queue_samples.append(((now - t0) / 1e9, port, c["backlog_pkts"],
                                                c["backlog_bytes"]))
                    next_sample += interval
                    tick += 1
                watched = agents + self.traffic + self.captures + (
                    [self.controller] if self.controller else [])
                self._watch(watched, t0, end)
                if bar is not None:
                    bar(now - t0, m.duration_ns)
                shell.sleep_until(min(next_sample, end))
        finally:
            if bar is not None:
                bar.close()
        cpu.join()
        m.counters_end = collect.port_counters(topo.port_devices)
        deadline = time.monotonic() + STOP_GRACE_S
        for child in self.traffic:  # they stop by themselves at the end
            try:
                child.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.children.stop([child])

    def _watch(self, children: Sequence[Child], t0: int, end: int) -> None:
        """Fails (or, with --keep-going, records) a child that exited before the end. The
        clock is read after the child's status: on a loaded machine this loop runs late, and
        the traffic processes exit by themselves once the end has passed."""
        for child in children:
            status = child.proc.poll()
            if status is None or child.reported:
                continue
            now = time.monotonic_ns()
            if now >= end and child in self.traffic:
                continue
            at_ns = now - t0
            failure = (f"{child.name} exited with status {status} at {at_ns / 1e9:.1f}s: "
                       f"{child.said() or 'no message'}")
            if not self.options.keep_going:
                raise TestbedError(failure)
            child.reported = True
            self.failures.append(failure)
            print(f"tacc: warning: {failure} (--keep-going)", file=sys.stderr)

    def _read_records(self, m: collect.Measured) -> None:
        for child in self.traffic:
            path = self.workdir / f"{child.name}.out.json"
            if not path.is_file():
                raise TestbedError(f"{child.name} wrote no records: "
                                   f"{child.said() or 'no message'}")
            records = json.loads(path.read_text(encoding="utf-8"))
            m.traffic[records["vm"]] = records
            for flow, rec in records["sent"].items():
                if rec.get("error"):
                    name = self.plan["flows"][int(flow)]["name"]
                    self.failures.append(f"flow {name}: {rec['error']}")
            self.failures += [f"{child.name}: {e}" for e in records.get("errors", [])]
        for role, path in self.agent_csvs:
            (m.agent_ports if role == "switch" else m.agent_hosts).extend(collect.read_csv(path))

    def _testbed(self, m: collect.Measured, found: features.Features, scale: float,
                 rtts: tuple[float, float] | None,
                 counts: dict[str, Any] | None) -> dict[str, Any]:
        """summary.json's `testbed` object: how this run differs from a simulation."""
        plan = self.plan
        _, disagreements = vm_tcp_ecn(plan)
        return {
            "run_id": self.names.run_id, "kernel": found.kernel,
            "rate_scale": scale, "rate_cap_bps": self.options.rate_cap_bps,
            "mechanism_time_scale": self.time_scale,
            "time_dilation": self.dilation,
            "base_rtt_us": rtts and rtts[0], "scenario_base_rtt_us": rtts and rtts[1],
            "stack_rtt_us": self.stack_rtt_us,
            "cpu": collect.cpu_summary(m.cpu),
            "limiter": limiter_of(plan),
            "link_delays": self.options.link_delays,
            "not_emulated": [*(message for message, _ in self.departures),
                             *plan_notes(plan, self.options.link_delays,
                                         {d.pattern for _, d in self.departures}),
                             *switch_notes(plan, self.controller_kind, self.switch_kind),
                             *found.notes,
                             *self._unserved(counts), *disagreements],
            "backlog_samples": {
                "ports": [plan["ports"][p]["name"] for p in plan["output"]["ports"]],
                "every_s": self.sample_interval_ns / 1e9,
                "other_ports_every_s": OTHERS_EVERY * self.sample_interval_ns / 1e9,
            },
            "switches": "ovs" if self.switches is not None else "linux",
            "agent_offset_s": m.agent_offset_s,
            "start_lateness_ms": collect.start_lateness(plan, m),
            "agents": collect.agent_totals(plan, m),
            "host_agents": self._host_agent_counts(),
            # Impossible windows the kernel handed tacc's BPF DCTCP, repaired (dctcp.bpf.c).
            "bpf_dctcp_repairs": dctcp.repairs() if found.bpf_dctcp else None,
            "checksum_errors": m.checksum_errors,
            "failures": self.failures,
        }


_RUNNING: dict[Path, _Run] = {}


def resolve_switches(kind: str | None, switches: str) -> str:
    """"auto": OVS switches where the mechanism's controller needs OpenFlow (`kind`, as
    controller_kind gives it)."""
    if switches not in ("auto", "linux", "ovs"):
        raise TestbedError(f"switches: expected auto, linux or ovs, got {switches!r}")
    if switches == "auto":
        switches = "ovs" if kind == "openflow" else "linux"
    return switches


def controller_kind(plan: Plan) -> str | None:
    """How the mechanism's controller app meets the switches: None, it has none;
    "openflow", it needs Open vSwitch switches: a switch hook (SDN-GCC's and SDN-ECN's,
    which show the app each flow's first packet and count its bytes in an OpenFlow rule), or
    initial rules the switch agents do not serve; "agents", neither (SICC: its copy rules on
    TCP flags alone are the agents' port copies), so it runs beside Linux switches too.
    Rules or OpenFlow counters such an app asked for later would not be served: the run
    lists them (`_unserved`)."""
    from tacc import _core

    ctl = _core.Controller(json.dumps(plan))
    if not ctl.has_app():
        return None
    if any(ctl.has_hook(s) or ctl.initial_rules(s, port_copies=True)
           for s in range(len(plan["switches"]))):
        return "openflow"
    return "agents"


def switch_notes(plan: Plan, kind: str | None, switches: str) -> list[str]:
    """What the switches chosen leave out of the mechanism: Linux switches have no
    OpenFlow, so a controller app that needs it (`kind`) does not run (its host agents do)."""
    if switches == "linux" and kind == "openflow":
        return [f"the {plan['mechanism']['kind']} controller: not run (it needs OpenFlow, "
                "which Linux switches do not have; --switches ovs or auto runs it), the host "
                "agents run alone"]
    return []


LIMITER_KINDS = ("static-rate", "hygenicc", "sdn-gcc")


def limiter_of(plan: Plan) -> str | None:
    """How the host agents enforce the mechanism's rates, as its `on_shortage` says (default
    "drop", as the [mechanism] table's): "bpf", a token bucket in the egress program that
    drops what exceeds the rate, or "htb", an HTB class per rate whose FIFO holds it; None
    without rates."""
    mechanism = plan["mechanism"] or {}
    if mechanism.get("kind") not in LIMITER_KINDS:
        return None
    return "htb" if mechanism.get("on_shortage", "drop") == "queue" else "bpf"


def mechanism_time_scale(plan: Plan, scale: float, clock: str) -> float:
    """How fast the mechanism's clock runs against real time (agents and controller).

    Dilated, it runs at the rate scale: a timer of the scenario's length then spans as many
    of the port's packets, and as large a part of a queue's fill and drain, as in the
    simulator. SDN-GCC needs it: in real time its controller polled every 5 ms a queue that
    fills and drains ten times slower than the scenario's, read a tenth of the marks a poll,
    and held rates twice the simulator's (docs/testbed.md, "SDN-GCC"). The other mechanisms
    keep real time, the timing their testbed results were measured with (docs/testbed.md:
    HyGenICC dilated splits the link as the simulator's Linux TCP does with queueing
    limiters, but its TCP flows time out at dropping ones)."""
    if clock not in ("auto", "real", "dilated"):
        raise TestbedError(f"mechanism clock: expected auto, real or dilated, got {clock!r}")
    if clock == "auto":
        clock = "dilated" if (plan["mechanism"] or {}).get("kind") == "sdn-gcc" else "real"
    return scale if clock == "dilated" else 1.0


def traffic_specs(plan: Plan, cc: dict[str, str], scale: float, workdir: Path,
                  duration_ns: int) -> dict[int, dict[str, Any]]:
    """Each VM's traffic spec (see tacc.testbed.traffic), for the VMs that send or receive
    a flow starting before the end; UDP rates scaled as the links are."""
    specs: dict[int, dict[str, Any]] = {}

    def spec(k: int) -> dict[str, Any]:
        return specs.setdefault(k, {
            "vm": k, "address": plan["vms"][k]["address"], "seed": plan["seed"],
            "bin_ns": plan["output"]["goodput_bin_ns"],
            "rcv_buf_bytes": plan["tcp"]["rcv_buf_bytes"],
            "out": str(workdir / f"traffic-v{k}.out.json"),
            "ready": str(workdir / f"traffic-v{k}.ready"), "go": str(workdir / "go"),
            "listening": str(workdir / "listening"),
            "connected": str(workdir / f"traffic-v{k}.connected"),
            "connect_s": traffic.CONNECT_S,
            "sinks": [], "sources": [], "triggered": [], "aggregators": [], "workers": [],
        })

    for i, f in enumerate(plan["flows"]):
        if f["start_ns"] >= duration_ns:
            continue
        spec(f["dst_vm"])["sinks"].append({
            "flow": i, "transport": f["transport"], "port": f["dst_port"],
            "src": plan["vms"][f["src_vm"]]["address"], "src_port": f["src_port"],
            "bytes": f["bytes"], "cc": cc.get(f["cc"]),
        })
        source = {
            "flow": i, "transport": f["transport"],
            "dst": plan["vms"][f["dst_vm"]]["address"], "dst_port": f["dst_port"],
            "src_port": f["src_port"], "start_ns": f["start_ns"], "stop_ns": f["stop_ns"],
            "bytes": f["bytes"], "cc": cc.get(f["cc"]), "ecn": bool(f["ecn"]),
            "rate_bps": None if f["rate_bps"] is None else round(f["rate_bps"] * scale),
            "packet_bytes": f["packet_bytes"],
        }
        # An incast worker's flow starts when its aggregator asks (the spec's `workers`).
        spec(f["src_vm"])["triggered" if "incast" in f else "sources"].append(source)
    aggregators, workers = apps.incast_specs(plan, duration_ns)
    for k, parts in aggregators.items():
        spec(k)["aggregators"] = parts
    for k, parts in workers.items():
        spec(k)["workers"] = parts
    return specs


def measure_base_rtt(plan: Plan, names: Names, scale: float) -> tuple[float, float] | None:
    """The median of 20 pings between the first flow's endpoints, in microseconds, before
    any traffic (and before the agents), and what the scenario's links give the same
    packets at `scale` times their rates (delays dilated as the wire does). No answer means
    the topology does not forward."""
    if not plan["flows"]:
        return None
    flow = plan["flows"][0]
    dst = plan["vms"][flow["dst_vm"]]["address"]
    try:
        said = shell.run(shell.in_ns(names.vm(flow["src_vm"]), "ping", *PING, dst))
    except TestbedError as exc:
        raise TestbedError(f"base RTT: {exc}: VM {plan['vms'][flow['src_vm']]['name']} "
                           f"cannot reach {plan['vms'][flow['dst_vm']]['name']} ({dst})") from exc
    times = [float(t) for t in re.findall(r"time=([0-9.]+) ms", said)]
    if not times:
        return None
    scenario_ns = unloaded_rtt_ns(plan, flow["src_vm"], flow["dst_vm"], PING_IP_BYTES)
    return statistics.median(times) * 1e3, scenario_ns / scale / 1e3
