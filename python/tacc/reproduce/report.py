"""The reproduction report: every row of every experiment evaluated from the result files
(the paper's number, tacc's mean and 95% CI over seeds, the ideal, whether the claim holds),
written as REPORT.md and, from the same lines, report.html; the same rows go to report.json
for programs."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tacc.reproduce.registry import PAPER_NAMES, Experiment, Less, fmt
from tacc.reproduce.runner import engine_version
from tacc.reproduce.stats import mean_ci


@dataclass
class RowResult:
    experiment: str
    paper_name: str
    quantity: str
    paper: str
    ideal: str
    tacc: str
    holds: bool | None
    cause: str
    # the verdict compares two means that differ by less than the seeds' variation
    spread: bool = False
    # the numbers `tacc` and `ideal` show (NaN where there is none)
    mean: float = math.nan
    ci: float = math.nan
    ideal_value: float = math.nan
    unit: str = ""


@dataclass
class ExperimentResult:
    exp: Experiment
    rows: list[RowResult] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    runs: int = 0
    seeds: int = 0
    scale: float = 1.0
    wall: float = 0.0


def evaluate(exp: Experiment, runs: dict[str, list[Path]], out: Path,
             scale: float) -> ExperimentResult:
    means = exp.means(runs, scale)
    res = ExperimentResult(exp, scale=scale)
    res.runs = sum(len(d) for d in runs.values())
    res.seeds = max((len(d) for d in runs.values()), default=0)
    res.wall = sum(float(json.loads((d / "summary.json").read_text())["wall_seconds"])
                   for ds in runs.values() for d in ds if (d / "summary.json").is_file())
    for row in exp.rows():
        values = row.value(means)
        m, ci = mean_ci(values)
        has_ci = bool(ci) and not math.isnan(ci) and len(values) > 1
        if row.text is not None:
            shown = row.text(means)
        else:
            shown = fmt(m, row.unit, ci if has_ci else None)
        holds = None if math.isnan(m) else row.holds(m, means)
        spread = isinstance(row.holds, Less) and holds is not None and bool(
            row.holds.spread(means))
        res.rows.append(RowResult(
            exp.id, exp.paper, row.quantity, row.paper,
            "-" if row.ideal is None else fmt(row.ideal, row.unit), shown,
            None if holds is None else bool(holds),
            row.cause if holds is False else "", spread, m, ci if has_ci else math.nan,
            math.nan if row.ideal is None else row.ideal, row.unit))
    res.figures = exp.plot(exp, runs, out / "figures", scale)
    return res


def _verdict(r: RowResult) -> str:
    v = {True: "yes", False: "no", None: "-"}[r.holds]
    return f"{v}, within seed spread" if r.spread else v


def write_report(results: Sequence[ExperimentResult], out: Path, *, quick: bool,
                 wall: float, command: str, engine: str) -> tuple[Path, Path]:
    """REPORT.md and report.html in `out`, and report.json beside them; `command` is the
    command line as typed and `engine` what ran the simulations (local or ray)."""
    rows = [r for e in results for r in e.rows]
    held = sum(1 for r in rows if r.holds)
    judged = sum(1 for r in rows if r.holds is not None)
    spread = sum(1 for r in rows if r.spread)
    mode = "quick (shortened runs, fewer seeds)" if quick else "full"
    md = ["# tacc reproduction report", ""]
    md.append(f"Command: `{command}`. Engine: {engine}. Mode: {mode}; "
              f"tacc {engine_version()}; {sum(e.runs for e in results)} runs, "
              f"wall time {_hms(wall)} (simulation time in runs "
              f"{_hms(sum(e.wall for e in results))}). ")
    md.append("")
    md.append(f"**{held} of {judged} judged claims hold.** Paper numbers come from the "
              "table `PAPER` of each paper's module under `python/tacc/reproduce/` "
              "(transcribed from PAPERS.md); "
              "every tacc number is computed from the result files under `runs/`. "
              "With several seeds tacc shows mean ± 95% CI half-width, and a comparison of "
              "two variants whose means differ by less than Welch's t-test (95%) can tell "
              f"from seed-to-seed variation is marked \"within seed spread\" ({spread} "
              "here): its verdict could flip with other seeds.")
    md.append("")
    md.append("Settings that matter (see each scenario's header): rate-limiter experiments "
              "(HyGenICC, SDN-GCC, static) use `tcp.rcv_buf = 29200B` (20 segments, ns-2's "
              "default window_) and `on_shortage = \"queue\"`: with Linux-size windows and "
              "drop-on-shortage, TCP (which never sees the hidden marks) overflows the "
              "100-packet buffer in slow start and stalls in RTO backoff. SICC runs use "
              "`ecn_syn`, `rto_init = 300us` and `evaluate_on_syn` (the 1 ms poll alone "
              "reacts too late at RTT 100 us).")
    md.append("")
    if quick:
        md.append("Quick mode: 1/5 of the simulated time (the SDN-ECN runs keep their full "
                  "length) and fewer seeds, so start-up transients weigh about 5 times more "
                  "than in the papers' runs; treat these numbers as indicative and run "
                  "without --quick for the comparison.")
        md.append("")
    md.append("## Headline table")
    md.append("")
    header = "| figure | quantity | paper | ideal | tacc | holds |"
    md += [header, "|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r.experiment} | {r.quantity} | {r.paper} | {r.ideal} | {r.tacc} | "
                  f"{_verdict(r)} |")
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
        md += ["| quantity | paper | ideal | tacc | holds |", "|---|---|---|---|---|"]
        for r in e.rows:
            md.append(f"| {r.quantity} | {r.paper} | {r.ideal} | {r.tacc} | "
                      f"{_verdict(r)} |")
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


def _number(x: float) -> float | None:
    return None if math.isnan(x) else x


def _write_json(rows: Sequence[RowResult], path: Path, *, quick: bool, command: str,
                engine: str) -> None:
    """The headline table's rows with their numbers, for programs (JSON has no NaN: null)."""
    doc = {
        "command": command, "engine": engine, "mode": "quick" if quick else "full",
        "tacc": engine_version(),
        "rows": [{
            "experiment": r.experiment, "quantity": r.quantity, "paper": r.paper,
            "unit": r.unit, "tacc_mean": _number(r.mean), "tacc_ci95": _number(r.ci),
            "tacc": r.tacc, "ideal": _number(r.ideal_value), "holds": r.holds,
            "within_seed_spread": r.spread, "cause": r.cause,
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
            cls = {"yes": "ok", "no": "bad"}.get(r[-1].split(",")[0], "")
            body.append(f'<tr class="{cls}">' + "".join(f"<td>{_inline_md(c)}</td>" for c in r)
                        + "</tr>")
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
             "padding:2px 6px}tr.ok td:last-child{background:#dfd}"
             "tr.bad td:last-child{background:#fdd}")
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>tacc reproduction"
            f"</title><style>{style}</style></head><body>\n" + "\n".join(body)
            + "\n</body></html>\n")
