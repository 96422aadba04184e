"""The reproduction's run cache and the report's record of how it was run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tacc import reproduce
from tacc.reproduce import runner
from tacc.reproduce.report import write_report

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
