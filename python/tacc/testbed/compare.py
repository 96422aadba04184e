"""Two result directories side by side (`tacc compare A B`): a simulation and a testbed
run of one scenario, or any two runs with the same flows. Either side may be several runs:
a repeat directory (`tacc testbed --repeat N`: its summarized runs) or several directories
(`tacc compare -A DIR... -B DIR...`, e.g. the simulator's seeds against a repeat); the
comparison then shows, per flow, the median over a side's runs, their min..max and the 95%
interval of the median (`tacc.testbed.repeat`), beside the other side's value or spread.

A testbed runs its links at `testbed.rate_scale` times the scenario's rates, so goodputs
are compared as shares of the bottleneck: a flow's goodput over the bottleneck port's rate
as that run ran it (the scenario's rate x the run's scale; a simulation's scale is 1).
Differences are in Mb/s at the scenario's rates (goodput / scale). The bottleneck is the
most congested port the runs share (drops and marks, then the deepest queue, then the
utilization, summed over all the runs), unless named.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path

from tacc.summary import format_rate, format_seconds, jain_index, read_summary, render_table

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from tacc.testbed.repeat import FlowSpread, Stats

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
    same_flows(a, b)
    port = bottleneck_of([a, b], bottleneck)
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


def compare_sides(side_a: Sequence[str | PathLike[str]], side_b: Sequence[str | PathLike[str]],
                  bottleneck: str | None = None) -> Comparison:
    """Each side one or more result directories or repeat directories. With one run on
    each side and no repeat directory, compare_dirs; otherwise each side's median, min..max
    and 95% interval over its runs. Raises ValueError when the runs' flows differ."""
    a, b = _read_side(side_a), _read_side(side_b)
    if not a.spread and not b.spread:
        return compare_dirs(a.runs[0].dir, b.runs[0].dir, bottleneck)
    from tacc.testbed.repeat import spreads_of_runs

    runs = a.runs + b.runs
    for run in runs[1:]:
        same_flows(runs[0], run)
    port = bottleneck_of(runs, bottleneck)
    header = [f"A: {a.describe()}", f"B: {b.describe()}", _sides_bottleneck_line(a, b, port)]
    durations = sorted({run.summary["sim_seconds"] for run in runs})
    if len(durations) > 1:
        header.append(f"note: the runs lasted {', '.join(map(format_seconds, durations))}")
    spreads = [{s.flow: s for s in spreads_of_runs(side.runs, port)} for side in (a, b)]
    sections = [_spread_flow_section(a, b, *spreads), _spread_group_section(a, b, port)]
    fct = _spread_fct_section(a, b, *spreads)
    if fct.rows:
        sections.append(fct)
    sections.append(_spread_port_section(a, b))
    return Comparison(header, sections)


@dataclass
class Side:
    """One side of a comparison: the runs of its directories, a repeat directory's being
    its summarized runs."""

    sources: list[Path]
    runs: list[Run]
    repeats: dict[Path, dict[str, Any]]  # the repeat directories' repeat.json

    @property
    def spread(self) -> bool:
        return len(self.runs) > 1 or bool(self.repeats)

    def describe(self) -> str:
        if not self.spread:
            return self.runs[0].describe()
        where = ", ".join(
            f"{src} (repeat: {len(self.repeats[src]['summarized'])} of "
            f"{self.repeats[src]['runs']} runs)" if src in self.repeats else str(src)
            for src in self.sources)
        kinds = Counter(run.kind for run in self.runs)
        counted = " and ".join(f"{n} {kind}" for kind, n in kinds.items())
        extra = ""
        testbed = [run for run in self.runs if run.kind == "testbed"]
        if testbed:
            scales = sorted({run.scale for run in testbed})
            extra = ", rates " + " or ".join(f"x{s:g}" for s in scales)
            rtts = [r for run in testbed
                    if (r := run.summary["testbed"].get("base_rtt_us")) is not None]
            if rtts:
                low, high = f"{min(rtts):.0f}", f"{max(rtts):.0f}"
                extra += f", base RTT {low if low == high else f'{low}..{high}'}us"
        seeds = [str(v) for v in sorted({run.summary["seed"] for run in self.runs})]
        s = self.runs[0].summary
        return (f"{where}: {counted} run{'s' if len(self.runs) > 1 else ''}{extra}: "
                f"scenario {s['scenario']}, seed{'s' if len(seeds) > 1 else ''} "
                f"{', '.join(seeds)}, {format_seconds(s['sim_seconds'])}")


def _read_side(dirs: Sequence[str | PathLike[str]]) -> Side:
    from tacc.testbed.repeat import is_repeat_dir, read_header, run_dirs

    side = Side([], [], {})
    for d in map(Path, dirs):
        side.sources.append(d)
        if is_repeat_dir(d):
            side.repeats[d] = header = read_header(d)
            if not header["summarized"]:
                raise ValueError(f"{d}: no run to compare: all {header['runs']} failed")
            side.runs += [Run(p, read_summary(p)) for p in run_dirs(d)]
        else:
            side.runs.append(Run(d, read_summary(d)))
    if not side.runs:
        raise ValueError("a side of the comparison has no directory")
    return side


def same_flows(a: Run, b: Run) -> None:
    """Raises ValueError naming the flows only one of the runs has."""
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


def bottleneck_of(runs: Sequence[Run], name: str | None = None) -> str | None:
    """The port the shares are of: `name`, which every run must have, or the most congested
    port all the runs have (drops and marks, then the deepest queue, then the utilization,
    summed over the runs); None when none of them carried traffic."""
    ports = [run.ports() for run in runs]
    if name is not None:
        for run, named in zip(runs, ports, strict=True):
            if name not in named:
                raise ValueError(f"{run.dir}: no port named {name!r}")
        return name
    common = [n for n in ports[0] if all(n in p for p in ports[1:])]

    def congestion(n: str) -> tuple[float, float, float]:
        each = [p[n] for p in ports]
        return (sum(p["dropped"] + p["marked"] for p in each),
                sum(p["max_backlog_pkts"] for p in each),
                sum(p["utilization"] for p in each))

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


def share(run: Run, flow: dict[str, Any], port: str | None) -> float | None:
    """The flow's goodput over the port's rate as the run ran it; None without a port."""
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
            format_fraction(share(a, x, port)), format_fraction(share(b, y, port)),
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
            shares = [share(run, flows[n], port) for n in names]
            cells.append(format_fraction(None if port is None else sum(s or 0 for s in shares)))
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


def format_fraction(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _relative(a: float | None, b: float | None) -> str:
    if a is None or b is None or a == 0:
        return "-"
    return f"{100 * (b - a) / a:+.1f}%"


def _sides_bottleneck_line(a: Side, b: Side, port: str | None) -> str:
    if port is None:
        return "bottleneck: none (no port all the runs have carried traffic); no shares"
    rates = []
    for label, side in (("A", a), ("B", b)):
        each = sorted({(run.ports()[port]["rate_bps"], run.scale) for run in side.runs})
        rates.append(f"{label} " + " or ".join(
            format_rate(rate) + ("" if scale == 1 else f" = {format_rate(rate / scale)} "
                                                       f"x{scale:g}") for rate, scale in each))
    return f"bottleneck: {port} ({', '.join(rates)})"


def _spread_cells(side: Side, stats: Stats | None,
                  fmt: Callable[[float], str]) -> list[str]:
    """A side's median, min..max and interval; a side of one run has only its value."""
    from tacc.testbed.repeat import spread_cells

    cells = spread_cells(stats, fmt)
    return cells if side.spread else [cells[0], "-", "-"]


def _spread_flow_section(a: Side, b: Side, sa: dict[str, FlowSpread],
                         sb: dict[str, FlowSpread]) -> Section:
    from tacc.testbed.repeat import GOODPUT_NOTE, INTERVAL_NOTE, format_mbps

    rows = []
    for name, x in sa.items():
        y = sb[name]
        rows.append([
            name, x.group,
            *_spread_cells(a, x.goodput_mbps, format_mbps),
            *_spread_cells(b, y.goodput_mbps, format_mbps),
            format_fraction(None if x.share is None else x.share.median),
            format_fraction(None if y.share is None else y.share.median),
            _relative(x.goodput_mbps.median, y.goodput_mbps.median),
        ])
    notes = ["a side of several runs: the median over them, their min..max and the median's "
             "95% CI; rel: B's median against A's", GOODPUT_NOTE, INTERVAL_NOTE]
    return Section(f"flows ({len(rows)}): goodput, median over each side's runs",
                   ["flow", "group", "A Mb/s", "A min..max", "A 95% CI", "B Mb/s",
                    "B min..max", "B 95% CI", "A share", "B share", "rel"], rows,
                   text_columns=2, notes=notes)


def _spread_group_section(a: Side, b: Side, port: str | None) -> Section:
    first = a.runs[0].flows()
    groups: dict[str, list[str]] = {}
    for name, f in first.items():
        groups.setdefault(str(f.get("group") or "(none)"), []).append(name)
    groups["(all)"] = list(first)
    flows = [[run.flows() for run in side.runs] for side in (a, b)]
    rows = []
    for group, names in groups.items():
        cells = [group, f"{len(names)}"]
        for each in flows:
            jain = statistics.median(jain_index(f[n]["goodput_mbps"] for n in names)
                                     for f in each)
            cells.append(f"{jain:.3f}")
        for side, each in zip((a, b), flows, strict=True):
            cells.append(format_fraction(None if port is None else statistics.median(
                sum(share(run, f[n], port) or 0.0 for n in names)
                for run, f in zip(side.runs, each, strict=True))))
        rows.append(cells)
    notes = ["medians over each side's runs; a group's share adds its flows' shares, each over "
             "the flow's own active time"]
    return Section("flow groups: Jain's fairness index of goodput, and the group's share",
                   ["group", "flows", "A Jain", "B Jain", "A share", "B share"], rows,
                   notes=notes)


def _spread_fct_section(a: Side, b: Side, sa: dict[str, FlowSpread],
                        sb: dict[str, FlowSpread]) -> Section:
    rows = []
    for name, x in sa.items():
        y = sb[name]
        if x.fct_s is None and y.fct_s is None:
            continue
        rows.append([name, *_spread_cells(a, x.fct_s, format_seconds)[:2],
                     f"{x.completed}/{x.runs}", *_spread_cells(b, y.fct_s, format_seconds)[:2],
                     f"{y.completed}/{y.runs}",
                     _relative(*(None if s is None else s.median for s in (x.fct_s, y.fct_s)))])
    notes = ["median over the runs in which the flow completed (done)"]
    return Section("flow completion times (flows that completed in any run)",
                   ["flow", "A FCT", "A min..max", "A done", "B FCT", "B min..max", "B done",
                    "rel"], rows, notes=notes)


def _spread_port_section(a: Side, b: Side) -> Section:
    ports = [[run.ports() for run in side.runs] for side in (a, b)]
    names: list[str] = []
    for each in ports:
        for p in each:
            names += [n for n, port in p.items() if _busy(port) and n not in names]
    rows = []
    for n in names:
        cells = [n]
        for key in ("dropped", "marked", "utilization"):
            for each in ports:
                values = [p[n][key] for p in each if n in p and key in p[n]]
                if not values:
                    cells.append("-")
                elif key == "utilization":
                    cells.append(_percent(statistics.median(values)))
                else:
                    cells.append(_median_count(values))
        rows.append(cells)
    notes = ["medians over each side's runs"] if rows else ["no port carried traffic"]
    return Section("ports with traffic in any run (matched by name)",
                   ["port", "A drops", "B drops", "A marks", "B marks", "A util %", "B util %"],
                   rows, notes=notes)


def _median_count(values: list[int]) -> str:
    m = statistics.median(values)
    return f"{m:,.0f}" if m == int(m) else f"{m:,.1f}"
