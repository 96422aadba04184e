"""The reproduction's run cache and the report's record of how it was run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tacc import reproduce
from tacc.reproduce import runner
from tacc.reproduce.report import ExperimentResult, RowResult, write_report

TINY_FIGURE = "hygenicc-fig5"  # 6 runs of a 2-5 sender star


def test_cache_key_depends_on_every_input(tmp_path: Path) -> None:
    scen = tmp_path / "a.toml"
    scen.write_text("x = 1\n")
    base = runner.cache_key(scen, [("k", "1")], 1, "v1")
    assert base == runner.cache_key(scen, [("k", "1")], 1, "v1")
    assert base != runner.cache_key(scen, [("k", "2")], 1, "v1")
    assert base != runner.cache_key(scen, [("k", "1")], 2, "v1")
    assert base != runner.cache_key(scen, [("k", "1")], 1, "v2")
    scen.write_text("x = 2\n")
    assert base != runner.cache_key(scen, [("k", "1")], 1, "v1")


def test_second_run_reuses_cached_results(engine: None, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runner.SCALE_ENV, "0.05")
    exp = reproduce.select([TINY_FIGURE])
    tasks, _dirs, _ = runner.plan(exp, tmp_path, quick=True)
    tasks = tasks[:2]
    assert runner.execute(tasks, jobs=1) == 2
    stamps = [(Path(t.out) / "summary.json").stat().st_mtime_ns for t in tasks]
    assert runner.execute(tasks, jobs=1) == 0
    assert [(Path(t.out) / "summary.json").stat().st_mtime_ns for t in tasks] == stamps
    # the same plan maps to the same directories
    again, _, _ = runner.plan(exp, tmp_path, quick=True)
    assert [t.out for t in again[:2]] == [t.out for t in tasks]


def test_report_records_the_command_and_the_engine(tmp_path: Path) -> None:
    md, html = write_report([], tmp_path, quick=True, wall=61.0,
                            command="tacc reproduce sicc --engine ray", engine="ray")

    text = md.read_text()
    assert "Command: `tacc reproduce sicc --engine ray`. Engine: ray. Mode: quick" in text
    assert "wall time 1:01" in text
    assert "<code>tacc reproduce sicc --engine ray</code>. Engine: ray." in html.read_text()


def test_report_json_has_the_markdown_rows_with_their_numbers(tmp_path: Path) -> None:
    exp = reproduce.BY_ID[TINY_FIGURE]
    rows = [
        RowResult(TINY_FIGURE, "hygenicc", "goodput", "250", "250 Mb/s", "253.0 Mb/s ± 1.5",
                  True, "", mean=253.0, ci=1.5, ideal_value=250.0, unit="Mb/s"),
        RowResult(TINY_FIGURE, "hygenicc", "FCT a vs b", "shorter", "-", "1 vs 2", True, "",
                  spread=True, mean=1.0, unit="s"),
        RowResult(TINY_FIGURE, "hygenicc", "never measured", "-", "-", "-", None, "",
                  unit="%"),
    ]
    write_report([ExperimentResult(exp, rows=rows)], tmp_path, quick=False, wall=1.0,
                 command="tacc reproduce hygenicc-fig5", engine="local")

    def no_nan(name: str) -> None:
        raise AssertionError(f"{name} in report.json, which JSON readers refuse")

    doc = json.loads((tmp_path / "report.json").read_text(), parse_constant=no_nan)
    assert (doc["command"], doc["engine"], doc["mode"]) == (
        "tacc reproduce hygenicc-fig5", "local", "full")
    got = [(r["quantity"], r["paper"], r["tacc_mean"], r["tacc_ci95"], r["ideal"], r["unit"],
            r["holds"], r["within_seed_spread"]) for r in doc["rows"]]
    assert got == [
        ("goodput", "250", 253.0, 1.5, 250.0, "Mb/s", True, False),
        ("FCT a vs b", "shorter", 1.0, None, None, "s", True, True),
        ("never measured", "-", None, None, None, "%", None, False),
    ]
    # the Markdown's headline rows are the same rows
    md = (tmp_path / "REPORT.md").read_text().splitlines()
    for r in doc["rows"]:
        assert any(line.startswith(f"| {TINY_FIGURE} | {r['quantity']} | {r['paper']} |")
                   and f"| {r['tacc']} |" in line for line in md), r
