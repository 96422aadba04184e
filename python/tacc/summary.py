"""A run's summary.json: read it, and print it as a text table (flows or flow groups, busy
ports, packet conservation; for a testbed run, what it emulated and how). Light on imports,
for the CLI: only the per-group table of a run with many flows needs pandas.
"""

from __future__ import annotations

import errno
import math
from collections.abc import Iterable, Sequence
from os import PathLike

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at start-up
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

FLOW_ROW_LIMIT = 40  # above this many flows the table shows per-group aggregates
PORT_ROW_LIMIT = 20

_SUMMARY_KEYS = (
    "scenario", "seed", "sim_seconds", "wall_seconds", "events",
    "flows", "ports", "conservation",
)


def read_summary(directory: str | PathLike[str]) -> dict[str, Any]:
    """Only summary.json of a result directory: cheap even for huge runs."""
    from pathlib import Path  # not needed by a quiet `tacc run`

    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(errno.ENOENT, "no such result directory", str(root))
    path = root / "summary.json"
    if not path.is_file():
        raise FileNotFoundError(
            errno.ENOENT, "not a tacc result directory (no summary.json)", str(root)
        )
    return read_json_object(path, _SUMMARY_KEYS)


def read_json_object(path: Path, keys: Sequence[str]) -> dict[str, Any]:
    """A JSON file holding an object with (at least) `keys`; ValueError naming the file
    otherwise."""
    import json

    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: invalid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a JSON object")
    missing = [key for key in keys if key not in value]
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)}")
    return value


def jain_index(values: Iterable[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 is fair, 1/n is one-takes-all."""
    x = [float(v) for v in values]
    if not x:
        raise ValueError("jain_index of no values")
    if any(v < 0 or not math.isfinite(v) for v in x):
        raise ValueError("jain_index needs finite, non-negative values")
    squares = math.fsum(v * v for v in x)
    if squares == 0.0:
        return 1.0  # everyone got the same share: nothing
    return math.fsum(x) ** 2 / (len(x) * squares)


def summary_table(summary: dict[str, Any], max_flow_rows: int = FLOW_ROW_LIMIT) -> str:
    """Fixed-width text report of a run: flows (or flow groups), busy ports, totals."""
    flows = summary["flows"]
    lines = [_title_line(summary), ""]
    if len(flows) > max_flow_rows:
        lines += _group_section(flows)
    else:
        lines += _flow_section(flows)
    lines += ["", *_port_section(summary["ports"]), ""]
    lines.append(_conservation_line(summary["conservation"]))
    lines += _testbed_lines(summary) if "testbed" in summary else [_events_line(summary)]
    return "\n".join(lines)


def _title_line(summary: dict[str, Any]) -> str:
    source = summary.get("scenario_file")
    origin = f" from {source}" if source else ""
    return f"scenario {summary['scenario']} (seed {summary['seed']}){origin}"


def _flow_section(flows: list[dict[str, Any]]) -> list[str]:
    headers = ["flow", "transport", "start", "end", "goodput Mb/s", "FCT", "retx/TO"]
    rows = [
        [
            str(f["name"]),
            _transport_label(f),
            format_seconds(f.get("start")),
            format_seconds(f.get("end")),
            f"{f['goodput_mbps']:.1f}",
            format_seconds(f.get("fct")),
            f"{f.get('retransmits', 0)}/{f.get('timeouts', 0)}",
        ]
        for f in flows
    ]
    return [
        f"flows ({len(flows)})", *render_table(headers, rows, text_columns=2),
        _fairness_line(flows),
    ]


def _group_section(flows: list[dict[str, Any]]) -> list[str]:
    import numpy as np
    import pandas as pd

    # Only the columns the table reads: a frame of every key of 100,000 flows' records
    # takes a second to build.
    columns = ("group", "goodput_mbps", "completed", "fct")
    frame = pd.DataFrame({c: [f.get(c) for f in flows] for c in columns})
    frame["group"] = frame["group"].fillna("").replace("", "(none)")
    headers = ["group", "flows", "done", "mean Mb/s", "min Mb/s", "max Mb/s", "mean FCT", "p99 FCT"]
    rows = []
    for group, members in frame.groupby("group", sort=True):
        goodput = members["goodput_mbps"]
        fct = members["fct"].dropna().to_numpy(dtype=float)
        rows.append([
            str(group),
            f"{len(members):,}",
            f"{int(members['completed'].sum()):,}",
            f"{goodput.mean():.1f}",
            f"{goodput.min():.1f}",
            f"{goodput.max():.1f}",
            format_seconds(fct.mean() if fct.size else None),
            format_seconds(np.percentile(fct, 99) if fct.size else None),
        ])
    title = f"flows ({len(flows):,}, by group; FCT over completed flows)"
    return [title, *render_table(headers, rows), _fairness_line(flows)]


def _fairness_line(flows: list[dict[str, Any]]) -> str:
    if not flows:
        return "  no flows"
    index = jain_index(f["goodput_mbps"] for f in flows)
    return f"  goodput fairness (Jain index, all flows): {index:.3f}"


def _transport_label(flow: dict[str, Any]) -> str:
    label = str(flow.get("transport", "?"))
    if flow.get("cc"):
        label += f"/{flow['cc']}"
    if flow.get("ecn"):
        label += "+ecn"
    return label


def _port_section(ports: list[dict[str, Any]]) -> list[str]:
    busy = [p for p in ports if p.get("enqueued", 0) > 0]
    # Bottlenecks first: the deepest queues, then the most utilised links.
    busy.sort(key=lambda p: (p["max_backlog_pkts"], p["utilization"]), reverse=True)
    title = f"ports with traffic ({len(busy)} of {len(ports)})"
    if len(busy) > PORT_ROW_LIMIT:
        title += f", the {PORT_ROW_LIMIT} with the deepest queues"
    if not busy:
        return [title]
    headers = ["port", "rate", "util %", "mean backlog", "max backlog", "drops", "marks"]
    rows = [
        [
            str(p["name"]),
            format_rate(p["rate_bps"]),
            f"{100 * p['utilization']:.1f}",
            f"{p['mean_backlog_pkts']:.1f}",
            f"{p['max_backlog_pkts']:,}",
            f"{p['dropped']:,}",
            f"{p['marked']:,}",
        ]
        for p in busy[:PORT_ROW_LIMIT]
    ]
    return [title, *render_table(headers, rows)]


def _conservation_line(c: dict[str, Any]) -> str:
    if c.get("measured") is False:  # a testbed's packets cross real kernels
        return f"packet conservation: {c.get('note', 'not measured')}"
    verdict = "ok" if c["ok"] else "VIOLATED"
    return (
        f"packet conservation: sent {c['sent']:,} = delivered {c['delivered']:,}"
        f" + dropped {c['dropped']:,} + in flight {c['in_flight']:,}: {verdict}"
    )


def _events_line(summary: dict[str, Any]) -> str:
    events, wall = summary["events"], summary["wall_seconds"]
    rate = f"{events / wall:,.0f} events/s" if wall > 0 else "- events/s"
    return (
        f"events {events:,}, simulated {format_seconds(summary['sim_seconds'])}"
        f" in {wall:.3f}s wall ({rate})"
    )


def saturated_seconds(testbed: dict[str, Any]) -> float:
    """The seconds of a testbed run's traffic that left under a tenth of the CPU idle (its
    summary.json `testbed` object; 0 for a run that sampled no CPU)."""
    return float((testbed.get("cpu") or {}).get("saturated_s") or 0.0)


def _testbed_lines(summary: dict[str, Any]) -> list[str]:
    """How a testbed run differs from a simulation: scaled rates, the measured base RTT,
    what was not emulated, what failed."""
    tb = summary["testbed"]
    rtt = tb.get("base_rtt_us")
    lines = [
        f"testbed: emulated {format_seconds(summary['sim_seconds'])} in "
        f"{summary['wall_seconds']:.3f}s wall, rates as measured at x{tb['rate_scale']:g} "
        f"the scenario's, base RTT {'-' if rtt is None else f'{rtt:.0f}us'}"
    ]
    lines += [f"  not emulated: {note}" for note in tb.get("not_emulated", [])]
    cpu = tb.get("cpu") or {}
    if cpu.get("saturated_s"):
        lines.append(f"  CPU saturated: {cpu['saturated_s']:g}s of the traffic with under a "
                     f"tenth of it idle (least idle {100 * cpu['idle_min']:.0f}%): packets "
                     f"waited for a core, the results measure the machine as well as the network")
    if cpu.get("softirq_wait_max_ms") is not None:
        lines.append(f"  host: up to {100 * cpu['steal_max']:.1f}% of the CPU stolen and the "
                     f"softirq threads waiting up to {cpu['softirq_wait_max_ms']:.0f}ms for "
                     f"their core in a second (cpu.csv)")
    lines += [f"  failed: {failure}" for failure in tb.get("failures", [])]
    return lines


def render_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], text_columns: int = 1
) -> list[str]:
    """Indented columns: the leading text columns left-aligned, the numbers right-aligned."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        padded = [
            c.ljust(w) if i < text_columns else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return ("  " + "  ".join(padded)).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *map(line, rows)]


def format_seconds(seconds: float | None) -> str:
    """Human time with a unit suited to data-center scales: 850us, 12.500ms, 1.250s."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    if seconds == 0:
        return "0"
    if abs(seconds) >= 1:
        return f"{seconds:.3f}s"
    if abs(seconds) >= 1e-3:
        return f"{seconds * 1e3:.3f}ms"
    return f"{seconds * 1e6:.1f}us"


def format_rate(bps: float) -> str:
    """Link rate in the scenario files' own notation: 1Gbps, 100Mbps."""
    if bps >= 1e9:
        return f"{bps / 1e9:g}Gbps"
    if bps >= 1e6:
        return f"{bps / 1e6:g}Mbps"
    return f"{bps:g}bps"
