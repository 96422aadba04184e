"""The reproduction report: every row of every experiment evaluated from the result files
(the paper's number, tacc's mean and 95% CI over seeds, the ideal, whether the claim holds,
and with --testbed the same on real Linux), written as REPORT.md and, from the same lines,
report.html; the same rows go to report.json for programs."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tacc.reproduce import on_testbed
from tacc.reproduce.registry import (
    LINUX,
    PAPER_NAMES,
    PUBLISHED,
    Experiment,
    Less,
    Means,
    Row,
    fmt,
    one_changed,
    profile_means,
)
from tacc.reproduce.runner import MAX_SEED_FACTOR, engine_version
from tacc.reproduce.stats import mean_ci
from tacc.summary import saturated_seconds


@dataclass
class Verdict:
    """A row's number and verdict under one profile of settings."""

    shown: str
    holds: bool | None
    # the verdict compares two means that differ by less than the seeds' variation
    spread: bool
    mean: float  # the number `shown` shows (NaN where there is none)
    ci: float


def judge(row: Row, means: Means) -> Verdict:
    vals = row.value(means)
    m, ci = mean_ci(vals)
    has_ci = bool(ci) and not math.isnan(ci) and len(vals) > 1
    shown = row.text(means) if row.text is not None else fmt(m, row.unit,
                                                               ci if has_ci else None)
    holds = None if math.isnan(m) else row.holds(m, means)
    spread = isinstance(row.holds, Less) and holds is not None and bool(row.holds.spread(means))
    return Verdict(shown, None if holds is None else bool(holds), spread, m,
                   ci if has_ci else math.nan)


@dataclass
class RowResult:
    experiment: str
    paper_name: str
    quantity: str
    paper: str
    ideal: str
    tacc: Verdict
    # the same row with the algorithm as the paper specifies it (None: tacc's experiment)
    published: Verdict | None
    # the settings each of which alone, changed from the paper's value to tacc's, gives
    # tacc's verdict, where the two verdicts differ
    differs_by: list[str]
    cause: str
    ideal_value: float = math.nan
    unit: str = ""
    # the same row with the simulator's Linux TCP (None: the experiment does not run it)
    linux: Verdict | None = None
    # the same row on the testbed (None: not asked for)
    testbed: Verdict | None = None


@dataclass
class ExperimentResult:
    exp: Experiment
    rows: list[RowResult] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    runs: int = 0
    seeds: int = 0
    scale: float = 1.0
    wall: float = 0.0
    testbed: on_testbed.Runs | None = None


def _disagree(a: Verdict, b: Verdict) -> bool:
    """Both judged, and judged differently."""
    return None not in (a.holds, b.holds) and a.holds != b.holds


def verdicts(exp: Experiment, row: Row, everything: Means
             ) -> tuple[Verdict, Verdict | None, list[str]]:
    """A row's verdict with tacc's settings and with the paper's (None for tacc's own
    experiments), and where they differ, each setting that alone, changed from the paper's
    value to tacc's, gives tacc's verdict. `everything` holds every profile's means."""
    tacc = judge(row, profile_means(everything, None))
    if exp.published is None:
        return tacc, None, []
    if not exp.published:
        return tacc, tacc, []
    paper = judge(row, profile_means(everything, PUBLISHED))
    if not _disagree(tacc, paper):
        return tacc, paper, []
    if len(exp.published) == 1:
        return tacc, paper, [exp.published[0].key]
    return tacc, paper, [s.key for s in exp.published
                         if judge(row, profile_means(everything, one_changed(s.key))).holds
                         == tacc.holds]


def evaluate(exp: Experiment, runs: dict[str, list[Path]], out: Path,
             scale: float, testbed: on_testbed.Runs | None = None) -> ExperimentResult:
    everything = exp.means(runs, scale)
    res = ExperimentResult(exp, scale=scale, testbed=testbed)
    on_linux = None if testbed is None else on_testbed.means(exp, testbed.dirs, scale)
    dirs = {d for ds in runs.values() for d in ds}
    res.runs = len(dirs)
    res.seeds = max((len(d) for d in runs.values()), default=0)
    res.wall = sum(float(json.loads((d / "summary.json").read_text())["wall_seconds"])
                   for d in dirs if (d / "summary.json").is_file())
    for row in exp.rows():
        tacc, paper, differs_by = verdicts(exp, row, everything)
        failed = tacc.holds is False or (paper is not None and paper.holds is False)
        linux = judge(row, profile_means(everything, LINUX)) if exp.linux_tcp else None
        res.rows.append(RowResult(
            exp.id, exp.paper, row.quantity, row.paper,
            "-" if row.ideal is None else fmt(row.ideal, row.unit), tacc, paper, differs_by,
            row.cause if failed else "",
            math.nan if row.ideal is None else row.ideal, row.unit, linux,
            None if on_linux is None else judge(row, on_linux)))
    res.figures = exp.plot(exp, runs, out / "figures", scale)
    return res


def unresolved(res: ExperimentResult) -> bool:
    """Whether a comparison of the experiment is within the seeds' spread, under either
    profile."""
    return any(v is not None and v.spread
               for r in res.rows for v in (r.tacc, r.published, r.linux))


def tally(verdicts: Sequence[Verdict]) -> str:
    """Every row counted once: it holds, it fails, or it is not resolved (a comparison the
    seeds' spread could explain, or a row with no number to judge)."""
    spread = sum(1 for v in verdicts if v.holds is not None and v.spread)
    unjudged = sum(1 for v in verdicts if v.holds is None)
    held = sum(1 for v in verdicts if v.holds is True and not v.spread)
    failed = sum(1 for v in verdicts if v.holds is False and not v.spread)
    return (f"{held} hold, {failed} fail, {spread + unjudged} not resolved ({spread} within "
            f"the seeds' spread, {unjudged} not judged)")


def summary_line(rows: Sequence[RowResult]) -> str:
    """Every row of the report counted: the papers' claims with tacc's settings and as
    published (the same rows), and tacc's own experiments' apart."""
    papers = [r for r in rows if r.published is not None]
    own = [r.tacc for r in rows if r.published is None]
    line = (f"The papers' claims ({len(papers)} rows): with tacc's settings "
            f"{tally([r.tacc for r in papers])}; with the algorithms as the papers specify "
            f"them {tally([r.published for r in papers if r.published])}")
    linux = [r.linux for r in rows if r.linux is not None]
    if linux:
        line += f"; with Linux's TCP ({len(linux)} rows) {tally(linux)}"
    testbed = [r.testbed for r in papers if r.testbed is not None]
    if testbed:
        line += f"; on the testbed ({len(testbed)} rows) {tally(testbed)}"
    return line + (f"; tacc's own experiments ({len(own)} rows): {tally(own)}" if own else "")


def _verdict(v: Verdict | None) -> str:
    if v is None:
        return "-"
    text = {True: "yes", False: "no", None: "-"}[v.holds]
    return f"{text}, within seed spread" if v.spread else text


def _cells(r: RowResult, testbed: bool) -> str:
    """The row's cells after the ideal: tacc's number and verdict, the paper's settings'
    number and verdict, what makes them differ, the simulator's Linux TCP's, and with
    `testbed` the testbed's."""
    if r.published is None:
        paper = "| (tacc's experiment) | - | - |"
    else:
        if r.differs_by:
            why = ", ".join(f"`{k}`" for k in r.differs_by)
        elif _disagree(r.tacc, r.published):
            why = "no single setting"
        else:
            why = ""
        paper = f"| {r.published.shown} | {_verdict(r.published)} | {why} |"
    linux = "-" if r.linux is None else r.linux.shown
    cells = f"| {r.tacc.shown} | {_verdict(r.tacc)} {paper} {linux} | {_verdict(r.linux)} |"
    if testbed:
        cells += f" {'-' if r.testbed is None else r.testbed.shown} | {_verdict(r.testbed)} |"
    return cells


def table_head(testbed: bool) -> tuple[str, str]:
    """The columns after the ideal, and their markdown rule."""
    head = "| tacc | holds | as published | holds | verdicts differ by | Linux TCP | holds |"
    n = 7
    if testbed:
        head += " testbed | holds |"
        n += 2
    return head, "|---" * n + "|"


def _departures(results: Sequence[ExperimentResult]) -> list[str]:
    """Where tacc's settings depart from the papers', once per setting and paper."""
    seen: dict[tuple[str, str], tuple[str, list[str]]] = {}
    for e in results:
        for s in e.exp.published or ():
            key = (e.exp.paper, s.key)
            line = (f"- {PAPER_NAMES[e.exp.paper]}: `{s.key}`: tacc {s.tacc}, the paper "
                    f"{s.paper}. {s.why}")
            seen.setdefault(key, (line, []))[1].append(e.exp.id)
    return [f"{line} ({', '.join(ids)})" for line, ids in seen.values()]


def write_report(results: Sequence[ExperimentResult], out: Path, *, quick: bool,
                 wall: float, command: str, engine: str) -> tuple[Path, Path]:
    """REPORT.md and report.html in `out`, and report.json beside them; `command` is the
    command line as typed and `engine` what ran the simulations (local or ray)."""
    rows = [r for e in results for r in e.rows]
    spread = sum(1 for r in rows if r.tacc.spread)
    mode = "quick (shortened runs, fewer seeds)" if quick else "full"
    md = ["# tacc reproduction report", ""]
    md.append(f"**{summary_line(rows)}** (mode: {mode}).")
    md.append("")
    md.append(f"Command: `{command}`. Engine: {engine}. Mode: {mode}; "
              f"tacc {engine_version()}; {sum(e.runs for e in results)} runs"
              f"{_testbed_count(results)}, "
              f"wall time {_hms(wall)} (simulation time in runs "
              f"{_hms(sum(e.wall for e in results))}). ")
    md.append("")
    md.append("Paper numbers come from the "
              "table `PAPER` of each paper's module under `python/tacc/reproduce/` "
              "(transcribed from PAPERS.md); "
              "every tacc number is computed from the result files under `runs/`. "
              "With several seeds tacc shows mean ± 95% CI half-width, and a comparison of "
              "two variants whose means differ by less than Welch's t-test (95%) can tell "
              f"from seed-to-seed variation is marked \"within seed spread\" ({spread} "
              "here): its verdict could flip with other seeds. An experiment with such a "
              "comparison runs again with twice the seeds, up to "
              f"{MAX_SEED_FACTOR} times its own; the mark stays on a comparison those do "
              "not resolve.")
    md.append("")
    departures = _departures(results)
    if departures:
        md.append("Every claim is judged twice: with tacc's recommended settings and with the "
                  "algorithm as the paper specifies it. Where the two verdicts differ, the "
                  "column \"verdicts differ by\" names each setting that alone, changed from "
                  "the paper's value to tacc's, gives tacc's verdict. tacc departs from the "
                  "papers here:")
        md.append("")
        md += departures
        md.append("")
    if any(e.exp.linux_tcp for e in results):
        md.append("Claims about short flows also get a verdict with Linux's TCP (column "
                  "\"Linux TCP\": tacc's settings with `tcp.profile = \"linux\"`, the "
                  "scenario's own TCP keys kept): the papers' simulators wait out a "
                  "retransmission timeout where Linux repairs a lost tail with a probe and "
                  "RACK, which changes what a mechanism that prevents losses gains.")
        md.append("")
    if quick:
        md.append("Quick mode: 1/5 of the simulated time (the SDN-ECN runs keep their full "
                  "length) and fewer seeds, so start-up transients weigh about 5 times more "
                  "than in the papers' runs; treat these numbers as indicative and run "
                  "without --quick for the comparison.")
        md.append("")
    testbed = any(e.testbed is not None for e in results)
    if testbed:
        md += [_testbed_paragraph(results), ""]
    head, rule = table_head(testbed)
    md.append("## Headline table")
    md.append("")
    md += ["| figure | quantity | paper | ideal " + head, "|---|---|---|---" + rule]
    for r in rows:
        md.append(f"| {r.experiment} | {r.quantity} | {r.paper} | {r.ideal} "
                  f"{_cells(r, testbed)}")
    md.append("")
    for e in results:
        md.append(f"## {e.exp.id}: {e.exp.title}")
        md.append("")
        md.append(f"Paper: {PAPER_NAMES[e.exp.paper]}. Scenario: `scenarios/{e.exp.scenario}`; "
                  f"{e.runs} runs, {e.seeds} seed(s), time scale {e.scale:g}.")
        if e.exp.notes:
            md.append("")
            md.append(e.exp.notes)
        md.append("")
        for f in e.figures:
            if f.suffix == ".png":
                md.append(f"![{e.exp.id}]({f.relative_to(out).as_posix()})")
        md.append("")
        if e.testbed is not None:
            md += [_testbed_runs(e.testbed), ""]
        md += ["| quantity | paper | ideal " + head, "|---|---|---" + rule]
        for r in e.rows:
            md.append(f"| {r.quantity} | {r.paper} | {r.ideal} {_cells(r, testbed)}")
        causes = list(dict.fromkeys(r.cause for r in e.rows if r.cause))
        if causes:
            md.append("")
            md.append("Where tacc disagrees, the likely cause: " + " / ".join(causes) + ".")
        md.append("")
    out.mkdir(parents=True, exist_ok=True)
    md_path = out / "REPORT.md"
    md_path.write_text("\n".join(md) + "\n", encoding="utf-8")
    html_path = out / "report.html"
    html_path.write_text(_markdown_to_html(md), encoding="utf-8")
    _write_json(rows, out / "report.json", quick=quick, command=command, engine=engine)
    return md_path, html_path


def _testbed_paragraph(results: Sequence[ExperimentResult]) -> str:
    scales = sorted({_rate_scale(d) for e in results if e.testbed
                     for ds in e.testbed.dirs.values() for d in ds if _rate_scale(d)})
    shown = ", ".join(f"x{s:g}" for s in scales) or "-"
    return ("Column \"testbed\": the same variants (tacc's settings) on real Linux, "
            "`tacc testbed` with its default options (network namespaces, veth pairs, tc "
            "queues, the kernel's own TCP, the mechanisms' eBPF shims and agents; rates "
            f"scaled so that the fastest link runs at 100 Mb/s: {shown} here; no link "
            "delays but the veths' own; a scenario with applications at a scaled rate runs "
            "that many times slower, its times put back in the scenario's; every variant of "
            "an experiment on Open vSwitch switches where one of them has a controller "
            "that needs OpenFlow, its baselines too; SICC's controller beside Linux "
            "switches), each variant "
            "run as many times as the experiment has seeds, one run after another. Goodputs "
            "and rates are shown at the scenario's rates (measured / scale); queue lengths, "
            "times and packet counts as measured. A row whose variants the testbed cannot "
            "run shows \"-\"; each experiment's section says why, and which variants ran "
            "without keys the testbed does not honour (--approximate).")


def _testbed_count(results: Sequence[ExperimentResult]) -> str:
    runs = [d for e in results if e.testbed for ds in e.testbed.dirs.values() for d in ds]
    return f" and {len(runs)} testbed runs" if runs else ""


def _testbed_of(d: Path) -> dict[str, Any]:
    """A finished testbed run's summary.json `testbed` object ({} while it has none)."""
    path = d / "summary.json"
    return json.loads(path.read_text())["testbed"] if path.is_file() else {}


def _rate_scale(d: Path) -> float | None:
    return _testbed_of(d).get("rate_scale")


def _saturated_s(d: Path) -> float:
    return saturated_seconds(_testbed_of(d))


def _testbed_runs(runs: on_testbed.Runs) -> str:
    n = sum(len(ds) for ds in runs.dirs.values())
    text = f"Testbed: {n} runs of {len(runs.dirs)} variant(s)."
    saturated = {v: [s for d in ds if (s := _saturated_s(d))] for v, ds in runs.dirs.items()}
    saturated = {v: s for v, s in saturated.items() if s}
    if saturated:
        each = ", ".join(f"{v} ({len(s)} of {len(runs.dirs[v])} runs, up to {max(s):g} s)"
                         for v, s in saturated.items())
        text += (" The machine's CPU was saturated (under a tenth of it idle for seconds of the "
                 "traffic) in runs of " + each
                 + ": packets waited for a core there, so their numbers measure the machine "
                 "as well as the mechanism.")
    for reason, names in runs.fit.refused.items():
        text += f" Not on the testbed: {', '.join(names)} ({reason})."
    for reason, names in runs.fit.approximated.items():
        text += (f" Run without the keys the testbed does not honour (--approximate): "
                 f"{', '.join(names)} ({reason}).")
    return text


def _number(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _write_json(rows: Sequence[RowResult], path: Path, *, quick: bool, command: str,
                engine: str) -> None:
    """The headline table's rows with their numbers, for programs (JSON has no NaN: null)."""
    def verdict(v: Verdict | None) -> dict[str, object] | None:
        if v is None:
            return None
        return {"mean": _number(v.mean), "ci95": _number(v.ci), "shown": v.shown,
                "holds": v.holds, "within_seed_spread": v.spread}

    doc = {
        "command": command, "engine": engine, "mode": "quick" if quick else "full",
        "tacc": engine_version(),
        "rows": [{
            "experiment": r.experiment, "quantity": r.quantity, "paper": r.paper,
            "unit": r.unit, "tacc_mean": _number(r.tacc.mean), "tacc_ci95": _number(r.tacc.ci),
            "tacc": r.tacc.shown, "ideal": _number(r.ideal_value), "holds": r.tacc.holds,
            "within_seed_spread": r.tacc.spread, "published": verdict(r.published),
            "differs_by": r.differs_by, "cause": r.cause, "linux_tcp": verdict(r.linux),
            "testbed": verdict(r.testbed),
        } for r in rows],
    }
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def _hms(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 60}:{s % 60:02d}"


def _inline_md(text: str) -> str:
    out = html.escape(text)
    parts = out.split("`")
    out = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
    parts = out.split("**")
    return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))


def _markdown_to_html(lines: Sequence[str]) -> str:
    """The small markdown subset write_report emits: headings, tables, images, paragraphs."""
    body: list[str] = []
    table: list[str] = []

    def flush() -> None:
        if not table:
            return
        rows = [[c.strip() for c in t.strip().strip("|").split("|")] for t in table]
        body.append("<table>")
        body.append("<tr>" + "".join(f"<th>{_inline_md(c)}</th>" for c in rows[0]) + "</tr>")
        for r in rows[2:]:
            # verdict cells: "yes" or "no", perhaps ", within seed spread"
            cells = [(c, {"yes": "ok", "no": "bad"}.get(c.split(",")[0], "")) for c in r]
            body.append("<tr>" + "".join(f'<td class="{cls}">{_inline_md(c)}</td>'
                                         for c, cls in cells) + "</tr>")
        body.append("</table>")
        table.clear()

    for line in lines:
        if line.startswith("|"):
            table.append(line)
            continue
        flush()
        if line.startswith("## "):
            body.append(f"<h2>{_inline_md(line[3:])}</h2>")
        elif line.startswith("# "):
            body.append(f"<h1>{_inline_md(line[2:])}</h1>")
        elif line.startswith("!["):
            alt, src = line[2:].split("](", 1)
            body.append(f'<p><img src="{html.escape(src.rstrip(")"))}" alt="{html.escape(alt)}" '
                        'style="max-width:100%"></p>')
        elif line.strip():
            body.append(f"<p>{_inline_md(line)}</p>")
    flush()
    style = ("body{font-family:sans-serif;max-width:1200px;margin:auto}"
             "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
             "padding:2px 6px}td.ok{background:#dfd}td.bad{background:#fdd}")
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>tacc reproduction"
            f"</title><style>{style}</style></head><body>\n" + "\n".join(body)
            + "\n</body></html>\n")
