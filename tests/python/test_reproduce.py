"""`tacc reproduce`: the experiment registry, the papers' numbers, and one tiny end-to-end
run through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import child_env

import tacc
from tacc import reproduce
from tacc.reproduce import runner, sdn_ecn, sdn_gcc

TINY_FIGURE = "hygenicc-fig5"  # 6 runs of a 2-5 sender star


def tacc_cli(*args: str, env_extra: dict[str, str] | None = None,
             cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = child_env() | (env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "tacc", *args],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=300,
    )


# --------------------------------------------------------------------------- registry


def test_every_figure_id_and_paper_resolves() -> None:
    ids = [e.id for e in reproduce.EXPERIMENTS]
    assert len(ids) == len(set(ids))
    for exp_id in ids:
        assert [e.id for e in reproduce.select([exp_id])] == [exp_id]
    for paper in reproduce.PAPER_NAMES:
        chosen = reproduce.select([paper])
        assert chosen and all(e.paper == paper for e in chosen)
    assert reproduce.select([]) == reproduce.EXPERIMENTS
    assert {e.paper for e in reproduce.EXPERIMENTS} == set(reproduce.PAPER_NAMES)


def test_unknown_selection_is_an_error() -> None:
    with pytest.raises(reproduce.ReproduceError, match="nosuchfigure"):
        reproduce.select(["nosuchfigure"])


def test_variant_names_are_unique_and_rows_exist() -> None:
    for exp in reproduce.EXPERIMENTS:
        for scale in (1.0, 0.2):
            names = [v.name for v in exp.build(scale)]
            assert len(names) == len(set(names)), exp.id
        assert exp.rows(), exp.id
        assert exp.scenario_path.is_file(), exp.scenario_path


def test_every_scenario_file_and_variant_validates(engine: None) -> None:
    import tacc._core as core

    files = sorted(reproduce.scenario_dir().glob("*.toml"))
    assert len(files) >= 8
    for path in files:
        info = core.validate(str(path), sets=[])
        assert info["flows"] > 0, path
        text = path.read_text()
        assert text.startswith("#"), f"{path} needs a comment header"
    for exp in reproduce.EXPERIMENTS:
        for scale in (1.0, exp.quick_scale):
            for v in exp.build(scale):
                core.validate(str(exp.scenario_path), sets=list(v.sets))


def test_paper_numbers_are_the_transcribed_table() -> None:
    # spot checks against PAPERS.md
    assert sdn_gcc.PAPER["sdngcc"]["1a"] == {"tcp": 416, "dctcp": 319, "udp": 153}
    assert sdn_gcc.PAPER["sdngcc_ideal"][32] == 344
    assert sdn_ecn.PAPER["sdnecn"]["multihop_fct"]["sdn-ecn"] == 0.64


def test_scenarios_come_from_the_package_or_the_override(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert reproduce.scenario_dir() == Path(tacc.__file__).parent / "scenarios" / "papers"
    monkeypatch.setenv("TACC_SCENARIO_DIR", str(tmp_path))
    assert reproduce.BY_ID[TINY_FIGURE].scenario_path.parent == tmp_path


# --------------------------------------------------------------------------- end to end


def test_tiny_reproduction_end_to_end(engine: None, tmp_path: Path) -> None:
    out = tmp_path / "repro out"  # a space, to see the command recorded as typed
    start = time.monotonic()
    proc = tacc_cli("reproduce", TINY_FIGURE, "--quick", "--jobs", "2", "--out", str(out),
                    env_extra={runner.SCALE_ENV: "0.1"})
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - start < 60
    assert proc.stderr == ""  # no progress bar off a terminal
    report = out / "REPORT.md"
    assert report.is_file() and (out / "report.html").is_file()
    for ext in ("png", "svg"):
        assert (out / "figures" / f"{TINY_FIGURE}.{ext}").stat().st_size > 1000
    text = report.read_text()
    typed = f"tacc reproduce {TINY_FIGURE} --quick --jobs 2 --out '{out}'"
    assert f"Command: `{typed}`. Engine: local." in text
    table = [line for line in text.splitlines() if line.startswith(f"| {TINY_FIGURE} |")]
    expected = [r.quantity for r in reproduce.BY_ID[TINY_FIGURE].rows()]
    assert [line.split(" | ")[1] for line in table] == expected
    doc = json.loads((out / "report.json").read_text())
    assert doc["command"] == typed and doc["engine"] == "local" and doc["mode"] == "quick"
    rows = doc["rows"]
    assert [r["quantity"] for r in rows] == expected
    for row, line in zip(rows, table):
        # the Markdown table and report.json show the same numbers
        assert f"| {row['tacc']} |" in line, (row, line)
        assert row["tacc_mean"] is not None, row
    # The verdicts. Every claim of the figure held with tacc's settings, with margin, in this
    # run (scale 0.1, the figure's 2 quick seeds) with each of 19 disjoint seed pairs (1-2,
    # 3-4, ..., 21-22, 31-32, ..., 101-102): the tagged flow's goodput 253-256 Mb/s for the
    # 4-sender share of 250 (the claim: within 50), 140-144 Mb/s for the 8-sender share of
    # 125 (within 25: at least 6 Mb/s to spare, against about 1 Mb/s of variation of a
    # pair's mean), and settled within 25% of the share after one 100 ms bin (the claim:
    # within 1 s). So a verdict other than "holds" here is a regression of the mechanism or
    # of the report, not the seeds' luck. (With the paper's settings the verdicts against
    # TCP and DCTCP change from one seed pair to the next: not asserted.)
    assert all(r["holds"] is True and not r["within_seed_spread"] for r in rows), [
        (r["quantity"], r["tacc"], r["holds"]) for r in rows if r["holds"] is not True]
    html_text = (out / "report.html").read_text()
    assert f'src="figures/{TINY_FIGURE}.png"' in html_text
    # a second invocation runs nothing and says so through the same report
    proc2 = tacc_cli("reproduce", TINY_FIGURE, "--quick", "--jobs", "1", "--out", str(out),
                     env_extra={runner.SCALE_ENV: "0.1"})
    assert proc2.returncode == 0, proc2.stderr
    assert report.read_text().count(f"| {TINY_FIGURE} |") == len(expected)
    assert "--jobs 1" in report.read_text()


def test_cli_unknown_figure_exits_2_with_one_line() -> None:
    proc = tacc_cli("reproduce", "nosuchfigure")
    assert proc.returncode == 2
    assert proc.stderr.startswith("tacc: error:")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_cli_ray_engine_without_ray_exits_2(pythonpath_without_ray: str) -> None:
    proc = tacc_cli("reproduce", TINY_FIGURE, "--engine", "ray",
                    env_extra={"PYTHONPATH": pythonpath_without_ray})
    assert proc.returncode == 2
    assert "ray" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
