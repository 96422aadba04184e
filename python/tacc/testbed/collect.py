"""What a testbed run measured, as a result directory in the engine's formats: summary.json
(plus its `testbed` object), flows.csv, goodput.csv, queues.csv and, with host agents,
rates.csv. Rates are as measured (scaled); `testbed.rate_scale` says by how much. Times are
the scenario's: a run dilated in time (plan.time_dilation) has its divided back (`undilate`).

Sources: the traffic processes' records (bytes per goodput bin, completion, tcp_info),
the port qdiscs' counters (`tc -s -j qdisc show`: the root htb's packets, bytes, drops and
backlog; drops in clsact are the agents', i.e. the AQM's or a host shim's), the switch agents' port
counters (`time_s,port,tx_bytes,tx_pkts,marks,aqm_drops,queue_bytes`, cumulative but the last, ports
by name: the marks) and the host agents' rates (already in rates.csv's columns). The
agents' times count from their own start and are moved onto the flows' clock
(`agent_offset_s`).
"""

from __future__ import annotations

import csv
import json
import math
import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tacc.results import write_atomic, write_table
from tacc.testbed import shell

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from tacc.testbed.plan import Plan

NS = 1e9
CHECKSUM_COUNTERS = ("IpExtInCsumErrors", "TcpInCsumErrors", "UdpInCsumErrors",
                     "IcmpInCsumErrors")
FLOW_COLUMNS = ("name", "group", "src", "dst", "transport", "cc", "ecn", "bytes_delivered",
                "start", "end", "fct", "goodput_mbps", "completed", "retransmits",
                "fast_retransmits", "timeouts", "ecn_reductions")


@dataclass
class Measured:
    """Everything a run measured, in the traffic's time (0 = the flows' time zero)."""

    duration_ns: int
    traffic: dict[int, dict[str, Any]] = field(default_factory=dict)  # VM -> its records
    counters_start: dict[int, dict[str, int]] = field(default_factory=dict)
    counters_end: dict[int, dict[str, int]] = field(default_factory=dict)
    queue_samples: list[tuple[float, int, int, int]] = field(default_factory=list)
    agent_ports: list[dict[str, str]] = field(default_factory=list)
    agent_hosts: list[dict[str, str]] = field(default_factory=list)
    agent_offset_s: float = 0.0
    checksum_errors: dict[str, dict[str, int]] = field(default_factory=dict)
    # The machine in each second of the traffic.
    cpu: list[CpuSecond] = field(default_factory=list)


@dataclass(frozen=True)
class CpuSecond:
    """One second of the machine during the traffic (cpu.csv's row), from the kernel's own
    cumulative counts, so that a sampler woken late still reads the whole second."""

    idle: float  # share of the machine's CPU time idle (or waiting for I/O)
    steal: float  # share taken by the hypervisor: the cores ran someone else's work
    # The most any core's softirq thread (ksoftirqd/N) waited for its core, in ms (None where
    # the kernel keeps no scheduler statistics). Packet work the kernel hands that thread
    # waits with it, and it runs on its own core only: behind the run's real-time processes
    # there, while the other core may idle.
    softirq_wait_ms: float | None


class CpuCounters:
    """The machine's cumulative CPU counts, read again at each `second()`."""

    def __init__(self) -> None:
        self.threads = softirq_threads()
        self.last = self._read()

    def second(self) -> CpuSecond | None:
        """The shares and waits since the last reading (None if no tick has passed)."""
        now = self._read()
        (idle, steal, total, waits), (idle0, steal0, total0, waits0) = now, self.last
        self.last = now
        if total <= total0:
            return None
        wait = (max(b - a for a, b in zip(waits0, waits, strict=True)) / 1e6
                if waits and waits0 and len(waits) == len(waits0) else None)
        return CpuSecond(idle=(idle - idle0) / (total - total0),
                         steal=(steal - steal0) / (total - total0), softirq_wait_ms=wait)

    def _read(self) -> tuple[int, int, int, list[int]]:
        with open("/proc/stat", encoding="ascii") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
        # idle and iowait; steal; guest time is counted in user time already
        return ticks[3] + ticks[4], ticks[7], sum(ticks[:8]), run_delays(self.threads)


def softirq_threads() -> list[int]:
    """The pids of the kernel's per-core softirq threads (ksoftirqd/N), by core."""
    found = {}
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            name = comm.read_text(encoding="ascii").strip()
        except OSError:  # a process that exited meanwhile
            continue
        if name.startswith("ksoftirqd/"):
            found[int(name.split("/")[1])] = int(comm.parent.name)
    return [found[cpu] for cpu in sorted(found)]


def run_delays(pids: Sequence[int]) -> list[int]:
    """Each thread's total time runnable but waiting for a core, in ns (/proc/PID/schedstat's
    second field); [] where the kernel keeps no such statistics."""
    try:
        return [int(Path(f"/proc/{pid}/schedstat").read_text(encoding="ascii").split()[1])
                for pid in pids]
    except (OSError, IndexError, ValueError):
        return []


def cpu_summary(seconds: Sequence[CpuSecond]) -> dict[str, Any]:
    """summary.json's `testbed.cpu`: a testbed run shares the machine's cores among every
    host, switch and agent process; where none is left idle, packets wait for a core and the
    run measures the machine as much as the network. Stolen time and the softirq threads'
    waits say the same of a machine that looked idle: a hypervisor that ran someone else on
    the cores, or packet work queued behind the run's processes on one core."""
    idle = [s.idle for s in seconds]
    waits = [s.softirq_wait_ms for s in seconds if s.softirq_wait_ms is not None]
    return {"every_s": CPU_EVERY_S, "samples": len(idle),
            "idle_min": min(idle) if idle else None,
            "idle_mean": sum(idle) / len(idle) if idle else None,
            "saturated_s": sum(1 for x in idle if x < SATURATED_IDLE) * CPU_EVERY_S,
            "steal_max": max((s.steal for s in seconds), default=None),
            "softirq_wait_max_ms": max(waits, default=None)}


def host_during(out: Path, start: float, end: float) -> str:
    """What the machine did in the seconds of [start, end) s of a run's traffic (its
    cpu.csv), in words for a report or a failed test's message: a result measured while
    the host stalled measures the host too."""
    path = out / "cpu.csv"
    if not path.is_file():
        return "the host: not sampled"
    with path.open(newline="", encoding="utf-8") as f:
        seconds = [CpuSecond(float(r["idle"]), float(r["steal"]),
                             float(r["softirq_wait_ms"]) if r["softirq_wait_ms"] else None)
                   for r in csv.DictReader(f)]
    return describe_host(seconds, start, end)


def describe_host(seconds: Sequence[CpuSecond], start: float, end: float) -> str:
    """`host_during` of the seconds sampled from the traffic's start (`sample_cpu`)."""
    # A second counts if it overlaps the span.
    span = [s for i, s in enumerate(seconds)
            if i * CPU_EVERY_S < end and (i + 1) * CPU_EVERY_S > start]
    if not span:
        return f"the host: no sample in [{start:g}, {end:g}) s"
    waits = [s.softirq_wait_ms for s in span if s.softirq_wait_ms is not None]
    text = (f"the host in [{start:g}, {end:g}) s: least idle "
            f"{100 * min(s.idle for s in span):.0f}%, up to "
            f"{100 * max(s.steal for s in span):.1f}% stolen")
    return text + (f", softirq threads waiting up to {max(waits):.0f} ms a second"
                   if waits else "")


def sample_cpu(into: list[CpuSecond], t0: int, end: int) -> None:
    """The machine in each second from t0 to `end` (monotonic ns), appended to `into`: the
    body of a thread of its own, which it puts at shell.MEASUREMENT_PRIORITY, above the
    traffic, so that a saturated machine cannot silence it."""
    shell.realtime(shell.MEASUREMENT_PRIORITY)
    every = round(CPU_EVERY_S * NS)
    shell.sleep_until(t0)
    counters, at = CpuCounters(), t0 + every
    while at <= end:
        shell.sleep_until(at)
        if (second := counters.second()) is not None:
            into.append(second)
        at += every


def cpu_rows(m: Measured) -> list[list[Any]]:
    """cpu.csv: each second of the traffic from its start."""
    return [[i * CPU_EVERY_S, s.idle, s.steal, s.softirq_wait_ms] for i, s in enumerate(m.cpu)]


CPU_EVERY_S = 1.0
# Below this idle share a second counts as saturated: on two cores the runs first measured
# kept 14-48% idle in their least idle second where the machine kept up, and 0-0.5% in the
# four-rack scenario on Open vSwitch, which did not. sdn-gcc-two-bottlenecks.toml at 50 Mb/s
# on Open vSwitch, 34 runs as the machine's spare capacity came and went: every run whose
# least idle second kept 8.3% or more gave each TCP tenant 0.367-0.419 of its port; 6 of the
# 7 that kept 2.6-7.0% gave one of them 0.313-0.346, of which a second under 5% named 2.
SATURATED_IDLE = 0.10


def port_counters(devices: dict[int, tuple[str, str]]) -> dict[int, dict[str, int]]:
    """Each port's queue counters now: one `tc` call per namespace, each port's with the
    monotonic time its call returned (`read_ns`): on a saturated machine a call can wait
    seconds for the kernel's rtnl lock, and the namespaces are then read seconds apart."""
    by_ns: dict[str, dict[str, int]] = {}
    for port, (ns, dev) in devices.items():
        by_ns.setdefault(ns, {})[dev] = port
    counters = {}
    for ns, ports in by_ns.items():
        text = shell.run(["tc", "-n", ns, "-s", "-j", "qdisc", "show"])
        read_ns = time.monotonic_ns()
        for dev, values in parse_qdiscs(text).items():
            if dev in ports:
                counters[ports[dev]] = dict(values, read_ns=read_ns)
    return counters


def parse_qdiscs(text: str) -> dict[str, dict[str, int]]:
    """`tc -s -j qdisc show` -> per device: the root htb's (handle 1:) sent bytes and
    packets, drops and backlog, which count every class under it (a host agent's rate
    limiters beside the default leaf), and the drops of its clsact hook."""
    out: dict[str, dict[str, int]] = {}
    for q in json.loads(text or "[]"):
        dev = out.setdefault(q["dev"], {"tx_bytes": 0, "tx_pkts": 0, "dropped_overflow": 0,
                                        "backlog_pkts": 0, "backlog_bytes": 0,
                                        "dropped_aqm": 0})
        if q["kind"] == "htb" and q["handle"] == "1:":
            dev.update(tx_bytes=q["bytes"], tx_pkts=q["packets"], dropped_overflow=q["drops"],
                       backlog_pkts=q["qlen"], backlog_bytes=q["backlog"])
        elif q["kind"] == "clsact":
            dev["dropped_aqm"] = q["drops"]
    return out


def checksum_errors(namespaces: Iterable[str], prefix: str) -> dict[str, dict[str, int]]:
    """The kernel's checksum error counters of each namespace (named without the run's
    prefix): the agent rewrites headers, and a wrong checksum shows here."""
    errors = {}
    for ns in namespaces:
        stats = json.loads(shell.run(shell.in_ns(ns, "nstat", "-asz", "-j")))
        counters = stats.get("kernel", stats)
        errors[ns.removeprefix(prefix)] = {k: counters.get(k, 0) for k in CHECKSUM_COUNTERS}
    return errors


def read_csv(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def flow_summaries(plan: Plan, m: Measured, cc: dict[str, str]) -> list[dict[str, Any]]:
    """Per flow, the engine's FlowSummary fields (goodput over the flow's active time,
    exactly as the engine computes it), plus the Linux congestion control a TCP flow ran
    and the sends a UDP flow's kernel refused."""
    received = _by_flow(m.traffic, "received")
    sent = _by_flow(m.traffic, "sent")
    vms = plan["vms"]
    flows = []
    for i, f in enumerate(plan["flows"]):
        rx, tx = received.get(i, {}), sent.get(i, {})
        done = rx.get("done_ns")
        stop = f["stop_ns"]
        end = done if done is not None else (min(stop, m.duration_ns) if stop else None)
        active = max(end if end is not None else m.duration_ns, f["start_ns"]) - f["start_ns"]
        delivered = int(rx.get("bytes", 0))
        summary = {
            "name": f["name"], "group": f["group"],
            "src": vms[f["src_vm"]]["name"], "dst": vms[f["dst_vm"]]["name"],
            "transport": f["transport"], "cc": f["cc"] if f["transport"] == "tcp" else None,
            "ecn": bool(f["ecn"]), "bytes_delivered": delivered,
            "start": f["start_ns"] / NS, "end": None if end is None else end / NS,
            "fct": None if done is None else (done - f["start_ns"]) / NS,
            "goodput_mbps": delivered * 8 / (active / NS) / 1e6 if active > 0 else 0.0,
            "completed": done is not None,
            "retransmits": tx.get("retransmits") or 0,
            "fast_retransmits": None,
            "timeouts": tx.get("timeouts") or 0,
            "ecn_reductions": None,
        }
        if f["transport"] == "tcp":
            summary["linux_cc"] = cc.get(f["cc"])
        else:
            # What the source offered: the bytes its kernel took, and the datagrams it refused
            # (a full queue), which never reached the wire.
            summary["bytes_sent"] = int(tx.get("bytes", 0))
            summary["send_errors"] = tx.get("send_errors", 0)
        flows.append(summary)
    return flows


def start_lateness(plan: Plan, m: Measured) -> dict[str, float] | None:
    """How late the sources opened their TCP flows' connections (ms after each flow's start,
    median, 99th percentile and most): whether the VMs' processes kept up with the flows'
    arrivals. Flows starting at zero connect early on purpose and are left out."""
    sent = _by_flow(m.traffic, "sent")
    late = sorted((rec["began_ns"] - f["start_ns"]) / 1e6
                  for i, f in enumerate(plan["flows"])
                  if f["start_ns"] > 0 and (rec := sent.get(i, {})).get("began_ns") is not None)
    if not late:
        return None
    return {"flows": len(late), "median": statistics.median(late),
            "p99": late[min(len(late) - 1, round(0.99 * (len(late) - 1)))], "max": late[-1]}


def _by_flow(traffic: dict[int, dict[str, Any]], side: str) -> dict[int, dict[str, Any]]:
    return {int(flow): rec for records in traffic.values()
            for flow, rec in records.get(side, {}).items()}


def goodput_rows(plan: Plan, m: Measured, flows: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """goodput.csv as the engine writes it: every bin from the flow's start bin to its end
    bin, zeros included (a starving flow shows)."""
    bin_ns = plan["output"]["goodput_bin_ns"]
    bins = -(-m.duration_ns // bin_ns)
    received = _by_flow(m.traffic, "received")
    rows = []
    for i, (f, summary) in enumerate(zip(plan["flows"], flows, strict=True)):
        counted = {int(b): n for b, n in received.get(i, {}).get("bins", {}).items()}
        end_ns = m.duration_ns if summary["end"] is None else round(summary["end"] * NS)
        first, last = f["start_ns"] // bin_ns, max(0, min(end_ns, m.duration_ns) - 1) // bin_ns
        for b in range(first, min(last, bins - 1) + 1):
            mbps = counted.get(b, 0) * 8 / (bin_ns / NS) / 1e6
            rows.append([b * bin_ns / NS, f["name"], mbps])
    return rows


def port_summaries(plan: Plan, m: Measured, scale: float) -> list[dict[str, Any]]:
    """Per port, the engine's PortSummary fields; counters are the difference between the
    flows' time zero and the end, the backlog comes from the samples."""
    marks = agent_counter(plan, m, "marks")
    samples: dict[int, list[int]] = {}
    for _, port, pkts, _ in m.queue_samples:
        samples.setdefault(port, []).append(pkts)
    ports = []
    for i, p in enumerate(plan["ports"]):
        start, end = m.counters_start.get(i, {}), m.counters_end.get(i, {})
        grew = _growth(start, end)
        # Over the time between this port's own two readings (the run's, where untimed).
        window_s = (grew("read_ns") if "read_ns" in start and "read_ns" in end
                    else m.duration_ns) / NS
        rate = round(p["rate_bps"] * scale)
        backlog = samples.get(i, []) + [end.get("backlog_pkts", 0)]
        tx_bytes = grew("tx_bytes")
        ports.append({
            "name": p["name"], "rate_bps": rate,
            "enqueued": grew("tx_pkts") + end.get("backlog_pkts", 0),
            "dropped": grew("dropped_overflow") + grew("dropped_aqm"),
            "dropped_overflow": grew("dropped_overflow"), "dropped_aqm": grew("dropped_aqm"),
            "marked": marks.get(i, 0),
            "max_backlog_pkts": max(backlog), "mean_backlog_pkts": statistics.fmean(backlog),
            "tx_bytes": tx_bytes,
            "utilization": tx_bytes * 8 / (rate * window_s) if rate and window_s else 0.0,
        })
    return ports


def _growth(start: dict[str, int], end: dict[str, int]) -> Any:
    return lambda key: end.get(key, 0) - start.get(key, 0)


def agent_counter(plan: Plan, m: Measured, column: str) -> dict[int, int]:
    """A cumulative counter of the switch agents' CSVs, per port: its growth from the flows'
    time zero to the end, as the qdiscs' counters."""
    by_name = {p["name"]: i for i, p in enumerate(plan["ports"])}
    at_start: dict[int, tuple[float, int]] = {}
    at_end: dict[int, tuple[float, int]] = {}
    for row in m.agent_ports:
        port, t = by_name.get(row["port"]), float(row["time_s"]) - m.agent_offset_s
        if port is None:
            continue
        value = int(row[column])
        for last, until in ((at_start, 0.0), (at_end, m.duration_ns / NS)):
            if t <= until and t >= last.get(port, (-math.inf, 0))[0]:
                last[port] = (t, value)
    return {port: value - at_start.get(port, (0.0, 0))[1]
            for port, (_, value) in at_end.items()}


def agent_totals(plan: Plan, m: Measured) -> dict[str, int]:
    """The switch agents' marks and AQM drops over every port."""
    return {c: sum(agent_counter(plan, m, c).values()) for c in ("marks", "aqm_drops")}


def rates_rows(m: Measured) -> list[list[Any]]:
    """rates.csv from the host agents' CSVs (already in its columns: time_s, vm, dst,
    rate_mbps), on the flows' clock and within the run."""
    rows = []
    for row in m.agent_hosts:
        t = float(row["time_s"]) - m.agent_offset_s
        if 0 <= t <= m.duration_ns / NS:
            rows.append([t, row["vm"], row["dst"], float(row["rate_mbps"])])
    return rows


def summary(plan: Plan, m: Measured, flows: list[dict[str, Any]], *, scale: float,
            scenario_file: str, wall_seconds: float, sample_interval_ns: int,
            testbed: dict[str, Any], controller: dict[str, Any] | None = None) -> dict[str, Any]:
    """summary.json: the engine's keys (no event count: nothing here is an event; packet
    conservation not measured), the mechanism's keys the file gives, and `testbed`. With a
    controller, its counts of the control channel's real messages and bytes, by the
    engine's kinds (`control_messages`, `control_bytes`) and in the engine's `control`."""
    import tacc

    mechanism = plan["mechanism"] or {"kind": "none"}
    params = {k: v for k, v in mechanism.items() if k in plan.get("mechanism_keys", [])}
    section: dict[str, Any] = {"kind": mechanism["kind"], "params": params}
    extra: dict[str, Any] = {}
    if controller is not None:
        messages, sizes, events = (controller[k] for k in ("messages", "bytes", "events"))
        section.update({
            "control_latency_s": controller["latency_s"],
            "control_messages": dict(sorted(messages.items())),
            "control_bytes": dict(sorted(sizes.items())),
            "control_messages_total": sum(messages.values()),
            "control_bytes_total": sum(sizes.values()),
            "controller_events": dict(sorted(events.items())),
            "controller_starts": controller["starts"],
        })
        extra["control"] = {
            "rules_installed": events.get("rules_installed", 0),
            "rules_expired": events.get("rules_expired", 0),
            "packet_ins": messages.get("packet_in", 0),
            "rule_dropped": None,
        }
    return {
        "tacc_version": tacc.__version__, "scenario": plan["name"],
        "scenario_file": scenario_file, "seed": plan["seed"],
        "sim_seconds": m.duration_ns / NS, "wall_seconds": wall_seconds, "events": None,
        "goodput_bin_s": plan["output"]["goodput_bin_ns"] / NS,
        "queue_sample_s": sample_interval_ns / NS,
        "flows": flows, "ports": port_summaries(plan, m, scale),
        "conservation": {"measured": False,
                         "note": "not measured on a testbed: packets cross real kernels"},
        **extra,
        "mechanism": section,
        "testbed": testbed,
    }


def write_results(out: Path, plan: Plan, m: Measured, summary: dict[str, Any],
                  flows: Sequence[dict[str, Any]]) -> Path:
    """The result files, each written to a temporary name and renamed (as the engine does)."""
    out.mkdir(parents=True, exist_ok=True)
    sampled = set(plan["output"]["ports"])
    files = {
        "flows.csv": (FLOW_COLUMNS, [[f[c] for c in FLOW_COLUMNS] for f in flows]),
        "goodput.csv": (("time_s", "flow", "goodput_mbps"), goodput_rows(plan, m, flows)),
        "queues.csv": (("time_s", "port", "backlog_pkts", "backlog_bytes"),
                       [[t, plan["ports"][p]["name"], pkts, size]
                        for t, p, pkts, size in m.queue_samples if p in sampled]),
    }
    if m.cpu:
        files["cpu.csv"] = (("time_s", "idle", "steal", "softirq_wait_ms"), cpu_rows(m))
    rates = rates_rows(m)
    if rates:
        files["rates.csv"] = (("time_s", "vm", "dst", "rate_mbps"), rates)
    for name, (header, rows) in files.items():
        write_table(out / name, header, rows)
    write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    return out


# The time columns of each result file, in seconds of the run.
_TIME_COLUMNS = {"flows.csv": ("start", "end", "fct"), "goodput.csv": ("time_s",),
                 "queues.csv": ("time_s",), "rates.csv": ("time_s",), "cpu.csv": ("time_s",)}


def undilate(out: Path, factor: float) -> None:
    """A dilated run's result files (plan.dilated) in the scenario's time: every time and
    interval divided by `factor` (flows' starts, ends and FCTs, the series' times, the run's
    length, the bins and samples). Rates stay as measured, at the rate scale, as in any
    testbed run; `testbed.time_dilation` records the factor, and the testbed's own timings
    (wall_seconds, base RTT, agents' offset, start lateness) stay real."""
    if factor == 1.0:
        return
    for name, columns in _TIME_COLUMNS.items():
        path = out / name
        if not path.is_file():
            continue
        with path.open(newline="", encoding="utf-8") as f:
            header, *rows = list(csv.reader(f))
        at = [header.index(c) for c in columns]
        for row in rows:
            for i in at:
                if row[i]:
                    row[i] = str(float(row[i]) / factor)
        write_table(path, header, rows)
    path = out / "summary.json"
    summary = json.loads(path.read_text(encoding="utf-8"))
    for key in ("sim_seconds", "goodput_bin_s", "queue_sample_s"):
        summary[key] /= factor
    for flow in summary["flows"]:
        for key in _TIME_COLUMNS["flows.csv"]:
            if flow[key] is not None:
                flow[key] /= factor
    samples = summary["testbed"]["backlog_samples"]
    for key in ("every_s", "other_ports_every_s"):
        samples[key] /= factor
    write_atomic(path, json.dumps(summary, indent=2) + "\n")
