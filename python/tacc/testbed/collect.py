"""What a testbed run measured, as a result directory in the engine's formats: summary.json
(plus its `testbed` object), flows.csv, goodput.csv, queues.csv and, with host agents,
rates.csv. Rates are as measured (scaled); `testbed.rate_scale` says by how much.

Sources: the traffic processes' records (bytes per goodput bin, completion, tcp_info),
the port qdiscs' counters (`tc -s -j qdisc show`: the bfifo's packets, bytes, drops and
backlog; drops in clsact are the agent's, i.e. the AQM's), the switch agents' port counters
(marks) and the host agents' rates. The agents' counters are taken as cumulative since
their start, and their times are moved onto the traffic's clock (`agent_offset_s`).
"""

from __future__ import annotations

import csv
import json
import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

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
                "fast_retransmits", "timeouts")


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


def port_counters(devices: dict[int, tuple[str, str]]) -> dict[int, dict[str, int]]:
    """Each port's queue counters now: one `tc` call per namespace."""
    by_ns: dict[str, dict[str, int]] = {}
    for port, (ns, dev) in devices.items():
        by_ns.setdefault(ns, {})[dev] = port
    counters = {}
    for ns, ports in by_ns.items():
        for dev, values in parse_qdiscs(shell.run(["tc", "-n", ns, "-s", "-j", "qdisc",
                                                   "show"])).items():
            if dev in ports:
                counters[ports[dev]] = values
    return counters


def parse_qdiscs(text: str) -> dict[str, dict[str, int]]:
    """`tc -s -j qdisc show` -> per device: the bfifo's (handle 2:) sent bytes and packets,
    drops and backlog, and the drops of its clsact hook."""
    out: dict[str, dict[str, int]] = {}
    for q in json.loads(text or "[]"):
        dev = out.setdefault(q["dev"], {"tx_bytes": 0, "tx_pkts": 0, "dropped_overflow": 0,
                                        "backlog_pkts": 0, "backlog_bytes": 0,
                                        "dropped_aqm": 0})
        if q["kind"] == "bfifo" and q["handle"] == "2:":
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
        }
        if f["transport"] == "tcp":
            summary["linux_cc"] = cc.get(f["cc"])
        else:  # datagrams the source's kernel refused (a full queue): never on the wire
            summary["send_errors"] = tx.get("send_errors", 0)
        flows.append(summary)
    return flows


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
    marks = _last_per_port(plan, m, "marks")
    samples: dict[int, list[int]] = {}
    for _, port, pkts, _ in m.queue_samples:
        samples.setdefault(port, []).append(pkts)
    ports = []
    for i, p in enumerate(plan["ports"]):
        end = m.counters_end.get(i, {})
        grew = _growth(m.counters_start.get(i, {}), end)
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
            "utilization": tx_bytes * 8 / (rate * m.duration_ns / NS) if rate else 0.0,
        })
    return ports


def _growth(start: dict[str, int], end: dict[str, int]) -> Any:
    return lambda key: end.get(key, 0) - start.get(key, 0)


def _last_per_port(plan: Plan, m: Measured, column: str) -> dict[int, int]:
    """The last value of a cumulative switch agent counter per port, up to the end."""
    by_name = {p["name"]: i for i, p in enumerate(plan["ports"])}
    last: dict[int, tuple[float, int]] = {}
    for row in m.agent_ports:
        port = _port_index(row["port"], by_name)
        t = float(row["time_s"]) - m.agent_offset_s
        if port is not None and t <= m.duration_ns / NS and t >= last.get(port, (-1e9, 0))[0]:
            last[port] = (t, int(float(row[column])))
    return {port: value for port, (_, value) in last.items()}


def _port_index(text: str, by_name: dict[str, int]) -> int | None:
    """An agent names a port by its index, its interface (p<index>) or its name."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    if text.startswith("p") and text[1:].isdigit():
        return int(text[1:])
    return by_name.get(text)


def agent_totals(m: Measured) -> dict[str, dict[str, int]]:
    """The agents' cumulative counters summed over ports and VMs."""
    totals: dict[str, dict[str, int]] = {}
    for role, rows, key_columns, counters in (
        ("switch", m.agent_ports, ("port",), ("marks", "phantom_bytes")),
        ("host", m.agent_hosts, ("host", "vm"), ("feedback_marks", "ce_marks")),
    ):
        if not rows:
            continue
        peak: dict[tuple[str, ...], dict[str, int]] = {}
        for row in rows:
            seen = peak.setdefault(tuple(row[k] for k in key_columns), {})
            for c in counters:
                seen[c] = max(seen.get(c, 0), int(float(row[c] or 0)))
        totals[role] = {c: sum(s.get(c, 0) for s in peak.values()) for c in counters}
    return totals


def rates_rows(plan: Plan, m: Measured) -> list[list[Any]]:
    """rates.csv (time_s, vm, dst, rate_mbps) from the host agents' rows, in the traffic's
    time; `vm` and `key` may be a VM index, an address or the address as an integer."""
    names = _vm_names(plan)
    rows = []
    for row in m.agent_hosts:
        t = float(row["time_s"]) - m.agent_offset_s
        if 0 <= t <= m.duration_ns / NS:
            rows.append([t, names(row["vm"], index_ok=True), names(row["key"], index_ok=False),
                         float(row["rate_bps"]) / 1e6])
    return rows


def _vm_names(plan: Plan) -> Any:
    by_address = {vm["address"]: vm["name"] for vm in plan["vms"]}

    def name(text: str, index_ok: bool) -> str:
        text = text.strip()
        if text in by_address:
            return by_address[text]
        if text.isdigit():
            value = int(text)
            if index_ok and value < len(plan["vms"]):
                return plan["vms"][value]["name"]
            dotted = ".".join(str((value >> s) & 255) for s in (24, 16, 8, 0))
            return by_address.get(dotted, "" if value == 0 else text)
        return text

    return name


def summary(plan: Plan, m: Measured, flows: list[dict[str, Any]], *, scale: float,
            scenario_file: str, wall_seconds: float, sample_interval_ns: int,
            testbed: dict[str, Any]) -> dict[str, Any]:
    """summary.json: the engine's keys (no event count: nothing here is an event; packet
    conservation not measured), the mechanism as the plan gives it, and `testbed`."""
    import tacc

    mechanism = dict(plan["mechanism"] or {"kind": "none"})
    return {
        "tacc_version": tacc.__version__, "scenario": plan["name"],
        "scenario_file": scenario_file, "seed": plan["seed"],
        "sim_seconds": m.duration_ns / NS, "wall_seconds": wall_seconds, "events": None,
        "goodput_bin_s": plan["output"]["goodput_bin_ns"] / NS,
        "queue_sample_s": sample_interval_ns / NS,
        "flows": flows, "ports": port_summaries(plan, m, scale),
        "conservation": {"measured": False,
                         "note": "not measured on a testbed: packets cross real kernels"},
        "mechanism": {"kind": mechanism.pop("kind"), "params": mechanism},
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
    rates = rates_rows(plan, m)
    if rates:
        files["rates.csv"] = (("time_s", "vm", "dst", "rate_mbps"), rates)
    for name, (header, rows) in files.items():
        _write_atomic(out / name, _csv_text(header, rows))
    _write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    return out


def _csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    import io

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([_cell(v) for v in row] for row in rows)
    return buf.getvalue()


def _cell(value: Any) -> str:
    # As the engine writes them: empty for none, lower-case booleans.
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
