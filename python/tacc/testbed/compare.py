"""Two result directories side by side (`tacc compare A B`): a simulation and a testbed
run of one scenario, or any two runs with the same flows.

A testbed runs its links at `testbed.rate_scale` times the scenario's rates, so goodputs
are compared as shares of the bottleneck: a flow's goodput over the bottleneck port's rate
as that run ran it (the scenario's rate x the run's scale; a simulation's scale is 1).
Differences are in Mb/s at the scenario's rates (goodput / scale). The bottleneck is the
most congested port the runs share (drops and marks, then the deepest queue, then the
utilization, summed over both runs), unless named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path

from tacc.summary import format_rate, format_seconds, jain_index, read_summary, render_table

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

NAMES_SHOWN = 5  # names listed in a mismatch error


@dataclass(frozen=True)
class Run:
    dir: Path
    summary: dict[str, Any]

    @property
    def kind(self) -> str:
        return "testbed" if "testbed" in self.summary else "simulation"

    @property
    def scale(self) -> float:
        return float(self.summary.get("testbed", {}).get("rate_scale", 1.0))

    def flows(self) -> dict[str, dict[str, Any]]:
        return {f["name"]: f for f in self.summary["flows"]}

    def ports(self) -> dict[str, dict[str, Any]]:
        return {p["name"]: p for p in self.summary["ports"]}

    def describe(self) -> str:
        s = self.summary
        extra = ""
        if self.kind == "testbed":
            rtt = s["testbed"].get("base_rtt_us")
            extra = f", rates x{self.scale:g}" + ("" if rtt is None else f", base RTT {rtt:.0f}us")
        return (f"{self.dir} ({self.kind}{extra}): scenario {s['scenario']}, seed {s['seed']}, "
                f"{format_seconds(s['sim_seconds'])}")


@dataclass
class Section:
    title: str
    headers: list[str]
    rows: list[list[str]]
    text_columns: int = 1
    notes: list[str] = field(default_factory=list)


@dataclass
class Comparison:
    header: list[str]
    sections: list[Section]

    def text(self) -> str:
        lines = list(self.header)
        for s in self.sections:
            lines += ["", s.title, *render_table(s.headers, s.rows, s.text_columns)]
            lines += [f"  {note}" for note in s.notes]
        return "\n".join(lines)

    def markdown(self) -> str:
        lines = ["# tacc compare", "", *(f"- {line}" for line in self.header)]
        for s in self.sections:
            lines += ["", f"## {s.title}", "", _md_row(s.headers)]
            lines.append(_md_row([":--" if i < s.text_columns else "--:"
                                  for i in range(len(s.headers))]))
            lines += [_md_row(row) for row in s.rows]
            if s.notes:
                lines += ["", *s.notes]
        return "\n".join(lines) + "\n"


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def compare_dirs(dir_a: str | PathLike[str], dir_b: str | PathLike[str],
                 bottleneck: str | None = None) -> Comparison:
    """Raises ValueError when the two runs do not have the same flows (by name)."""
    a, b = Run(Path(dir_a), read_summary(dir_a)), Run(Path(dir_b), read_summary(dir_b))
    _same_flows(a, b)
    port = _bottleneck(a, b, bottleneck)
    header = [f"A: {a.describe()}", f"B: {b.describe()}", _bottleneck_line(a, b, port)]
    if a.summary["sim_seconds"] != b.summary["sim_seconds"]:
        header.append(f"note: the runs lasted {format_seconds(a.summary['sim_seconds'])} and "
                      f"{format_seconds(b.summary['sim_seconds'])}")
    sections = [_flow_section(a, b, port), _group_section(a, b, port)]
    fct = _fct_section(a, b)
    if fct.rows:
        sections.append(fct)
    sections.append(_port_section(a, b))
    return Comparison(header, sections)


def _same_flows(a: Run, b: Run) -> None:
    only_a = [n for n in a.flows() if n not in b.flows()]
    only_b = [n for n in b.flows() if n not in a.flows()]
    if only_a or only_b:
        parts = [f"only in {run.dir}: {_some(names)}"
                 for run, names in ((a, only_a), (b, only_b)) if names]
        raise ValueError(f"{a.dir} and {b.dir} are not runs of one scenario (their flows "
                         f"differ): {'; '.join(parts)}")


def _some(names: list[str]) -> str:
    shown = ", ".join(names[:NAMES_SHOWN])
    return shown + (f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else "")


def _bottleneck(a: Run, b: Run, name: str | None) -> str | None:
    pa, pb = a.ports(), b.ports()
    if name is not None:
        for run, ports in ((a, pa), (b, pb)):
            if name not in ports:
                raise ValueError(f"{run.dir}: no port named {name!r}")
        return name
    common = [n for n in pa if n in pb]

    def congestion(n: str) -> tuple[float, float, float]:
        both = (pa[n], pb[n])
        return (sum(p["dropped"] + p["marked"] for p in both),
                sum(p["max_backlog_pkts"] for p in both),
                sum(p["utilization"] for p in both))

    busy = [n for n in common if congestion(n) > (0, 0, 0)]
    return max(busy, key=congestion) if busy else None


def _bottleneck_line(a: Run, b: Run, port: str | None) -> str:
    if port is None:
        return "bottleneck: none (no port the runs share carried traffic); no shares"
    rates = []
    for label, run in (("A", a), ("B", b)):
        rate = run.ports()[port]["rate_bps"]
        scaled = "" if run.scale == 1 else f" = {format_rate(rate / run.scale)} x{run.scale:g}"
        rates.append(f"{label} {format_rate(rate)}{scaled}")
    return f"bottleneck: {port} ({', '.join(rates)})"


def _share(run: Run, flow: dict[str, Any], port: str | None) -> float | None:
    if port is None:
        return None
    return flow["goodput_mbps"] * 1e6 / run.ports()[port]["rate_bps"]


def _flow_section(a: Run, b: Run, port: str | None) -> Section:
    fa, fb = a.flows(), b.flows()
    rows = []
    for name, x in fa.items():
        y = fb[name]
        at_a, at_b = x["goodput_mbps"] / a.scale, y["goodput_mbps"] / b.scale
        rows.append([
            name, str(x.get("group", "")),
            f"{x['goodput_mbps']:.1f}", f"{y['goodput_mbps']:.1f}",
            _fraction(_share(a, x, port)), _fraction(_share(b, y, port)),
            f"{at_b - at_a:+.1f}", _relative(at_a, at_b),
        ])
    notes = ["Mb/s as measured; diff and rel at the scenario's rates (goodput / rate scale); "
             "share: of the bottleneck's rate as the run ran it"]
    return Section(f"flows ({len(rows)}): goodput", ["flow", "group", "A Mb/s", "B Mb/s",
                   "A share", "B share", "diff Mb/s", "rel"], rows, text_columns=2,
                   notes=notes)


def _group_section(a: Run, b: Run, port: str | None) -> Section:
    groups: dict[str, list[str]] = {}
    for name, f in a.flows().items():
        groups.setdefault(str(f.get("group") or "(none)"), []).append(name)
    groups["(all)"] = list(a.flows())
    fa, fb = a.flows(), b.flows()
    rows = []
    for group, names in groups.items():
        cells = [group, f"{len(names)}"]
        for flows in (fa, fb):
            cells.append(f"{jain_index(flows[n]['goodput_mbps'] for n in names):.3f}")
        for run, flows in ((a, fa), (b, fb)):
            shares = [_share(run, flows[n], port) for n in names]
            cells.append(_fraction(None if port is None else sum(s or 0 for s in shares)))
        rows.append(cells)
    notes = ["a group's share adds its flows' shares, each over the flow's own active time"]
    return Section("flow groups: Jain's fairness index of goodput, and the group's share",
                   ["group", "flows", "A Jain", "B Jain", "A share", "B share"], rows,
                   notes=notes)


def _fct_section(a: Run, b: Run) -> Section:
    fb = b.flows()
    rows = []
    for name, x in a.flows().items():
        y = fb[name]
        if x.get("fct") is None and y.get("fct") is None:
            continue
        rows.append([name, format_seconds(x.get("fct")), format_seconds(y.get("fct")),
                     _relative(x.get("fct"), y.get("fct"))])
    return Section("flow completion times (flows that completed in either run)",
                   ["flow", "A FCT", "B FCT", "rel"], rows)


def _port_section(a: Run, b: Run) -> Section:
    pa, pb = a.ports(), b.ports()
    names = [n for n in pa if _busy(pa[n]) or (n in pb and _busy(pb[n]))]
    names += [n for n in pb if n not in pa and _busy(pb[n])]
    absent: dict[str, Any] = {}
    rows = []
    for n in names:
        x, y = pa.get(n, absent), pb.get(n, absent)
        rows.append([n, *(_count(p, "dropped") for p in (x, y)),
                     *(_count(p, "marked") for p in (x, y)),
                     *(_percent(p.get("utilization")) for p in (x, y))])
    notes = [] if rows else ["no port carried traffic"]
    return Section("ports with traffic in either run (matched by name)",
                   ["port", "A drops", "B drops", "A marks", "B marks", "A util %", "B util %"],
                   rows, notes=notes)


def _busy(port: dict[str, Any]) -> bool:
    return port.get("enqueued", 0) > 0


def _count(port: dict[str, Any], key: str) -> str:
    return "-" if key not in port else f"{port[key]:,}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _fraction(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _relative(a: float | None, b: float | None) -> str:
    if a is None or b is None or a == 0:
        return "-"
    return f"{100 * (b - a) / a:+.1f}%"
