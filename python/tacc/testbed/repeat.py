"""Repeated testbed runs (`tacc testbed --repeat N`) and their spread. A testbed run is one
sample of a noisy real system: the scenario runs N times, each a full `run.run_testbed`
with the same sets and options, into DIR/run-1 ... DIR/run-N, and DIR/repeat.json and
DIR/repeat.csv hold, per flow (by name), the median over the runs, the min and max, and a
95% confidence interval for the median of
- its goodput, in Mb/s at the scenario's rates (a run's goodput / its testbed.rate_scale),
- its share of the bottleneck, as `tacc compare` defines a share (goodput over the
  bottleneck port's rate as that run ran it),
- its completion time, over the runs in which it completed (`completed` counts them).

The interval is the distribution-free one for a median, from order statistics of the
binomial (the sign test's interval; e.g. Conover, Practical Nonparametric Statistics, the
confidence interval for a quantile): of n sorted values x(1) <= ... <= x(n), the interval
[x(j), x(n+1-j)] with the largest j for which P(j <= B <= n-j) >= 0.95, B ~ Binomial(n, 1/2).
It assumes only that the runs are independent samples of one distribution. Below 6 runs no
such interval reaches 95%: the interval is then min..max, whose confidence 1 - 2^(1-n) is
lower (94% for 5 runs, 50% for 2, 0 for one). `ci_level` is always the confidence the
interval has (1 - 2 P(B < j)).

repeat.json: `scenario` (its name), `scenario_file`, `sets` ([key, value] pairs), `runs`
(how many were asked for), `run_dirs` (every run's directory, relative to DIR),
`summarized` (those of the runs that succeeded: the statistics are over these), `failed`
(`run`, `dir`, `error` of each run that failed under --keep-going), `bottleneck` (the port
the shares are of, chosen as `tacc compare` chooses it, over all the summarized runs; null
when no port carried traffic), `saturated` (`dir` and `saturated_s` of each summarized run
that left under a tenth of the CPU idle for seconds of its traffic, testbed.cpu: its figures
are the machine's as much as the mechanism's), `interval` (how the interval was found) and
`flows`: per
flow `flow`, `group`, `runs`, `goodput_mbps`, `share` (null without a bottleneck),
`completed` and `fct_s` (null when it never completed), each quantity an object of `n`,
`median`, `min`, `max`, `ci_low`, `ci_high` and `ci_level`. repeat.csv has the same rows,
one column per number (`goodput_mbps_median`, ..., `fct_s_ci_level`).

For tests and scripts that judge a median over runs: `run_repeated`, `run_dirs`,
`values_of`, `median_of` and `median_over`.
"""

from __future__ import annotations

import dataclasses
import errno
import math
import os
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tacc.summary import (format_seconds, read_json_object, read_summary, render_table,
                          saturated_seconds)
from tacc.testbed.compare import Run, bottleneck_of, format_fraction, same_flows, share

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from tacc.testbed.run import Options

REPEAT_FILE = "repeat.json"
CSV_FILE = "repeat.csv"
LEVEL = 0.95
QUANTITIES = ("goodput_mbps", "share", "fct_s")
STATS_FIELDS = ("median", "min", "max", "ci_low", "ci_high", "ci_level")
CSV_HEADER = [
    "flow", "group", "runs", *(f"goodput_mbps_{s}" for s in STATS_FIELDS),
    *(f"share_{s}" for s in STATS_FIELDS), "completed", *(f"fct_s_{s}" for s in STATS_FIELDS),
]
INTERVAL = ("95% confidence interval of the median, distribution-free: order statistics "
            "[x(j), x(n+1-j)] of the n runs, the largest j with P(j <= B <= n-j) >= 0.95, "
            "B ~ Binomial(n, 1/2); below 6 runs min..max, its confidence (ci_level) lower")
FLOW_ROW_LIMIT = 40  # rows of the printed table; repeat.csv has them all

Dirs = str | os.PathLike[str] | Iterable[str | os.PathLike[str]]


@dataclass(frozen=True)
class Stats:
    """One quantity over runs: how many values, their median, min and max, and the
    interval of the median with the confidence it has."""

    n: int
    median: float
    min: float
    max: float
    ci_low: float
    ci_high: float
    ci_level: float


@dataclass(frozen=True)
class FlowSpread:
    """A flow over the runs: goodput (Mb/s at the scenario's rates), share of the
    bottleneck (None without one) and, over the runs where it completed, its FCT (s)."""

    flow: str
    group: str
    runs: int
    goodput_mbps: Stats
    share: Stats | None
    completed: int
    fct_s: Stats | None

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> FlowSpread:
        def stats(value: dict[str, Any] | None) -> Stats | None:
            return None if value is None else Stats(**value)

        goodput = stats(row["goodput_mbps"])
        assert goodput is not None
        return cls(row["flow"], row["group"], row["runs"], goodput, stats(row["share"]),
                   row["completed"], stats(row["fct_s"]))

    def csv_row(self) -> list[Any]:
        def cells(s: Stats | None) -> list[Any]:
            return [None if s is None else getattr(s, f) for f in STATS_FIELDS]

        return [self.flow, self.group, self.runs, *cells(self.goodput_mbps),
                *cells(self.share), self.completed, *cells(self.fct_s)]


def median_interval(n: int) -> tuple[int, int, float]:
    """The distribution-free 95% interval of the median of n values: the 0-based indices
    (lo, hi) of its bounds in the sorted values and the confidence it has (>= 0.95 from 6
    values on; below that (0, n - 1), min..max, at 1 - 2^(1-n))."""
    if n < 1:
        raise ValueError("median_interval of no values")
    total = 2 ** n
    j, below = 1, 1  # below: 2^n P(B <= j - 1), in integers
    while 2 * (j + 1) <= n + 1:
        more = below + math.comb(n, j)
        if 40 * more > total:  # 2 P(B <= j) > 0.05: x(j+1) would cover less than 95%
            break
        j, below = j + 1, more
    return j - 1, n - j, 1 - 2 * below / total


def stats_of(values: Iterable[float]) -> Stats | None:
    """Median, min, max and the median's interval of the values; None when there are none."""
    x = sorted(float(v) for v in values)
    if not x:
        return None
    lo, hi, level = median_interval(len(x))
    return Stats(len(x), statistics.median(x), x[0], x[-1], x[lo], x[hi], level)


def flow_spreads(dirs: Dirs, bottleneck: str | None = None) -> list[FlowSpread]:
    """Per flow of the runs in `dirs` (result directories, or a repeat directory: its
    summarized runs), in the first run's order, the spread over the runs. The shares are of
    `bottleneck`, or of the port `tacc compare` would choose over all the runs. Raises
    ValueError when the runs' flows differ."""
    runs = read_runs(dirs)
    return spreads_of_runs(runs, bottleneck_of(runs, bottleneck))


def spreads_of_runs(runs: Sequence[Run], port: str | None) -> list[FlowSpread]:
    """flow_spreads of runs already read, the shares of `port` (none when it is None)."""
    for run in runs[1:]:
        same_flows(runs[0], run)
    flows = [run.flows() for run in runs]
    rows = []
    for name, first in flows[0].items():
        each = [(run, f[name]) for run, f in zip(runs, flows, strict=True)]
        goodput = stats_of(quantity_of(run, f, "goodput_mbps", port) for run, f in each)
        assert goodput is not None
        shares = None if port is None else stats_of(quantity_of(run, f, "share", port)
                                                     for run, f in each)
        fcts = [v for run, f in each if (v := quantity_of(run, f, "fct_s", port)) is not None]
        rows.append(FlowSpread(name, str(first.get("group") or ""), len(runs), goodput, shares,
                               len(fcts), stats_of(fcts)))
    return rows


def quantity_of(run: Run, flow: dict[str, Any], quantity: str, port: str | None) -> float | None:
    """A flow's goodput in Mb/s at the scenario's rates, its share of `port` (0 where the
    port carried none of it) or its FCT (None where it did not complete) in one run."""
    if quantity == "goodput_mbps":
        return flow["goodput_mbps"] / run.scale
    if quantity == "share":
        return share(run, flow, port) or 0.0
    fct = flow.get("fct")
    return None if fct is None else float(fct)


def read_runs(dirs: Dirs) -> list[Run]:
    paths = expand(dirs)
    if not paths:
        raise ValueError("no result directories")
    return [Run(p, read_summary(p)) for p in paths]


def expand(dirs: Dirs) -> list[Path]:
    """Result directories: each repeat directory among `dirs` (one, or several) stands for
    its summarized runs."""
    items = [dirs] if isinstance(dirs, str | os.PathLike) else list(dirs)
    return [p for d in items for p in (run_dirs(d) if is_repeat_dir(d) else [Path(d)])]


def is_repeat_dir(directory: str | os.PathLike[str]) -> bool:
    return (Path(directory) / REPEAT_FILE).is_file()


def read_header(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """A repeat directory's repeat.json."""
    path = Path(directory) / REPEAT_FILE
    if not path.is_file():
        raise FileNotFoundError(errno.ENOENT, f"not a repeat directory (no {REPEAT_FILE})",
                                str(directory))
    return read_json_object(path, ("scenario", "runs", "run_dirs", "summarized", "failed",
                                   "bottleneck", "flows"))


def run_dirs(directory: str | os.PathLike[str]) -> list[Path]:
    """The result directories of a repeat directory's summarized runs (not the failed)."""
    return [Path(directory) / d for d in read_header(directory)["summarized"]]


def values_of(dirs: Dirs, flow: str, quantity: str, bottleneck: str | None = None) -> list[float]:
    """The flow's `quantity` in each run of `dirs` (result directories, or a repeat
    directory): "goodput_mbps" (Mb/s at the scenario's rates), "share" (of `bottleneck`, or
    of the port `tacc compare` would choose) or "fct_s" (only the runs where it completed)."""
    if quantity not in QUANTITIES:
        raise ValueError(f"quantity: expected one of {', '.join(QUANTITIES)}, got {quantity!r}")
    runs = read_runs(dirs)
    port = None
    if quantity == "share":
        port = bottleneck_of(runs, bottleneck)
        if port is None:
            raise ValueError("no shares: no port all the runs have carried traffic")
    values = []
    for run in runs:
        f = run.flows().get(flow)
        if f is None:
            raise ValueError(f"{run.dir}: no flow named {flow!r}")
        if (value := quantity_of(run, f, quantity, port)) is not None:
            values.append(value)
    return values


def median_of(dirs: Dirs, flow: str, quantity: str, bottleneck: str | None = None) -> float:
    """The median over the runs of values_of(dirs, flow, quantity, bottleneck), e.g.
    median_of(run_repeated(...), "tagged", "goodput_mbps")."""
    values = values_of(dirs, flow, quantity, bottleneck)
    if not values:
        raise ValueError(f"flow {flow!r} completed in none of the runs")
    return statistics.median(values)


def median_over(dirs: Dirs, measure: Callable[[Path], float]) -> float:
    """The median over the runs of any measure of a result directory, e.g.
    median_over(out, lambda run: goodput(run, "tagged", 3.0, 6.0))."""
    paths = expand(dirs)
    if not paths:
        raise ValueError("no result directories")
    return statistics.median(measure(p) for p in paths)


def run_repeated(scenario: str | os.PathLike[str], sets: Sequence[tuple[str, str]],
                 options: Options | None, n: int) -> Path:
    """Runs the scenario n times on the testbed into DIR/run-1 ... DIR/run-n, DIR being
    options.out or out/<scenario name>-testbed, writes DIR/repeat.json and DIR/repeat.csv
    and returns DIR. Prints "run i of n: DIR/run-i" before each run unless options.quiet.
    A failed run (TestbedError) ends it, unless options.keep_going: then it is recorded in
    repeat.json's `failed`, left out of the statistics (its directory, if it wrote one,
    stays), and the next run starts; when every run failed the header is written and a
    TestbedError raised. TestbedUnavailable (the machine lacks what a run needs) always
    ends it."""
    from tacc.testbed import TestbedError, TestbedUnavailable, run
    from tacc.testbed.run import Options

    if n < 1:
        raise ValueError(f"repeat: expected a positive number of runs, got {n}")
    options = options or Options()
    out = options.out
    if out is None:
        from tacc.testbed.plan import load_plan

        out = Path("out") / f"{load_plan(scenario, sets)['name']}-testbed"
    names = [f"run-{i}" for i in range(1, n + 1)]
    done: list[Path] = []
    failed: list[dict[str, Any]] = []
    for i, name in enumerate(names, start=1):
        if not options.quiet:
            print(f"run {i} of {n}: {out / name}", flush=True)
        try:
            done.append(run.run_testbed(scenario, sets,
                                        dataclasses.replace(options, out=out / name)))
        except TestbedUnavailable:
            raise
        except TestbedError as exc:
            if not options.keep_going:
                raise TestbedError("\n".join(f"run {i} of {n}: {line}"
                                             for line in str(exc).splitlines())) from exc
            failed.append({"run": i, "dir": name, "error": str(exc)})
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            print(f"tacc: warning: run {i} of {n} failed: {first} (--keep-going)",
                  file=sys.stderr)
    runs = [Run(p, read_summary(p)) for p in done]
    port = bottleneck_of(runs) if runs else None
    rows = spreads_of_runs(runs, port) if runs else []
    header = {
        "scenario": runs[0].summary["scenario"] if runs else Path(scenario).stem,
        "scenario_file": str(scenario), "sets": [list(kv) for kv in sets],
        "runs": n, "run_dirs": names,
        "summarized": [relative(p, out) for p in done],
        "failed": failed, "bottleneck": port, "saturated": saturated_runs(runs, out),
        "interval": INTERVAL,
        "flows": [row.as_json() for row in rows],
    }
    write_repeat(out, header, rows)
    if not runs:
        raise TestbedError("\n".join([*(f"run {f['run']} of {n}: {line}" for f in failed
                                        for line in f["error"].splitlines()),
                                      f"no run of {n} succeeded (recorded in "
                                      f"{out / REPEAT_FILE})"]))
    return out


def saturated_runs(runs: Sequence[Run], out: Path) -> list[dict[str, Any]]:
    """The runs that left under a tenth of the CPU idle for a while, with those seconds."""
    return [{"dir": relative(r.dir, out), "saturated_s": s}
            for r in runs if (s := saturated_seconds(r.summary["testbed"]))]


def relative(p: Path, out: Path) -> str:
    """A run's directory as repeat.json names it: relative to the repeat's, where it is in it."""
    return p.relative_to(out).as_posix() if p.is_relative_to(out) else str(p)


def write_repeat(directory: Path, header: dict[str, Any], rows: Sequence[FlowSpread]) -> None:
    """repeat.json (the header, with the rows) and repeat.csv (the rows)."""
    import json

    from tacc.results import write_atomic, write_table

    directory.mkdir(parents=True, exist_ok=True)
    write_atomic(directory / REPEAT_FILE, json.dumps(header, indent=2) + "\n")
    write_table(directory / CSV_FILE, CSV_HEADER, [row.csv_row() for row in rows])


def spread_table(directory: str | os.PathLike[str]) -> str:
    """A repeat directory as a text table: per flow the median over the runs, min..max and
    the interval of goodput, the median share, and FCT where the flow completed."""
    header = read_header(directory)
    rows = [FlowSpread.from_json(r) for r in header["flows"]]
    failed = [f["dir"] for f in header["failed"]]
    lines = [f"scenario {header['scenario']}: {header['runs']} testbed runs in {directory}, "
             f"{len(header['summarized'])} summarized"
             + (f" (failed: {', '.join(failed)})" if failed else ""),
             f"bottleneck: {header['bottleneck'] or 'none (no port carried traffic); no shares'}"]
    saturated = header.get("saturated") or []
    if saturated:
        runs = ", ".join(f"{r['dir']} ({r['saturated_s']:g}s)" for r in saturated)
        lines.append(f"CPU saturated in {len(saturated)} of {len(header['summarized'])} runs: "
                     f"{runs} with under a tenth of it idle; their figures measure the machine "
                     f"as well as the network (a lower --rate-cap leaves it room)")
    lines.append("")
    table = [[r.flow, r.group, f"{r.runs}", *spread_cells(r.goodput_mbps, format_mbps),
              format_fraction(None if r.share is None else r.share.median),
              f"{r.completed}/{r.runs}",
              *(spread_cells(r.fct_s, format_seconds)[:2] if r.fct_s else ["-", "-"])]
             for r in rows[:FLOW_ROW_LIMIT]]
    lines += [f"flows ({len(rows)}): median over the runs, min..max and the median's 95% CI",
              *render_table(["flow", "group", "runs", "Mb/s", "min..max", "95% CI", "share",
                             "done", "FCT", "FCT min..max"], table, text_columns=2)]
    if len(rows) > FLOW_ROW_LIMIT:
        lines.append(f"  ... and {len(rows) - FLOW_ROW_LIMIT} more flows in {CSV_FILE}")
    lines += [f"  {note}" for note in (GOODPUT_NOTE, "FCT: over the runs in which the flow "
                                       "completed (done)", INTERVAL_NOTE)]
    return "\n".join(lines)


GOODPUT_NOTE = ("Mb/s at the scenario's rates (goodput / rate scale); share: of the "
                "bottleneck's rate as each run ran it")
INTERVAL_NOTE = ("95% CI: distribution-free interval of the median (order statistics); below "
                 "6 runs min..max, its confidence (lower) in brackets")


def spread_cells(stats: Stats | None, fmt: Callable[[float], str]) -> list[str]:
    """[median, min..max, interval] as text; the interval's confidence in brackets when it
    is under 95%."""
    if stats is None:
        return ["-", "-", "-"]
    interval = f"{fmt(stats.ci_low)}..{fmt(stats.ci_high)}"
    if stats.ci_level < LEVEL:
        interval += f" ({100 * stats.ci_level:.0f}%)"
    return [fmt(stats.median), f"{fmt(stats.min)}..{fmt(stats.max)}", interval]


def format_mbps(value: float) -> str:
    return f"{value:.1f}"

