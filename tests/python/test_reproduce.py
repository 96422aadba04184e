"""`tacc reproduce`: the experiment registry, the run cache, and one tiny end-to-end run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tacc
from tacc import reproduce

TINY_FIGURE = "hygenicc-fig5"  # 6 runs of a 2-5 sender star


@pytest.fixture
def engine() -> None:
    pytest.importorskip("tacc._core", reason="the compiled engine tacc._core is not built")


def tacc_cli(*args: str, env_extra: dict[str, str] | None = None,
             cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    package_root = str(Path(tacc.__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    env.update(env_extra or {})
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
    assert reproduce.PAPER["sdngcc"]["1a"] == {"tcp": 416, "dctcp": 319, "udp": 153}
    assert reproduce.PAPER["sdngcc_ideal"][32] == 344
    assert reproduce.PAPER["sdnecn"]["multihop_fct"]["sdn-ecn"] == 0.64


def test_mean_ci() -> None:
    assert reproduce.mean_ci([5.0]) == (5.0, 0.0)
    m, ci = reproduce.mean_ci([1.0, 3.0])
    assert m == 2.0 and ci == pytest.approx(12.706 * 2 ** 0.5 / 2 ** 0.5)
    # 12 seeds: 11 degrees of freedom, between the table's 10 and 15, take 10's wider 2.228
    # (not the normal 1.96)
    values = [float(i % 2) for i in range(12)]
    m, ci = reproduce.mean_ci(values)
    sd = float(np.std(values, ddof=1))
    assert m == 0.5 and ci == pytest.approx(2.228 * sd / 12 ** 0.5)
    assert reproduce.t95(100) == 2.042 and reproduce.t95(1) == 12.706


def test_within_spread_is_welch_t_test() -> None:
    # means 2 and 11, each sample variance 1 over 3 seeds: standard error sqrt(2/3), Welch
    # df 4, t = 2.776: the difference 9 is far outside 2.776 * 0.816 = 2.27
    assert reproduce.within_spread([1, 2, 3], [10, 11, 12]) is False
    # a difference of 1 is inside it
    assert reproduce.within_spread([1, 2, 3], [2, 3, 4]) is True
    # one seed on a side: nothing to judge the spread by
    assert reproduce.within_spread([1.0], [2.0, 3.0]) is None


def test_noisy_comparison_is_marked_within_seed_spread() -> None:
    claim = reproduce._Less("a", "b", "fct")
    noisy = {("a", "fct"): [1.0, 3.0, 2.0], ("b", "fct"): [2.5, 2.0, 3.0]}
    clear = {("a", "fct"): [1.0, 1.1, 0.9], ("b", "fct"): [2.5, 2.4, 2.6]}
    assert claim(0.0, noisy) and claim.spread(noisy)
    assert claim(0.0, clear) and not claim.spread(clear)
    row = reproduce.RowResult("x", "p", "q", "-", "-", "1 vs 2", True, "", spread=True)
    assert reproduce._verdict(row) == "yes, within seed spread"


# --------------------------------------------------------------------------- cache


def test_cache_key_depends_on_every_input(tmp_path: Path) -> None:
    scen = tmp_path / "a.toml"
    scen.write_text("x = 1\n")
    base = reproduce.cache_key(scen, [("k", "1")], 1, "v1")
    assert base == reproduce.cache_key(scen, [("k", "1")], 1, "v1")
    assert base != reproduce.cache_key(scen, [("k", "2")], 1, "v1")
    assert base != reproduce.cache_key(scen, [("k", "1")], 2, "v1")
    assert base != reproduce.cache_key(scen, [("k", "1")], 1, "v2")
    scen.write_text("x = 2\n")
    assert base != reproduce.cache_key(scen, [("k", "1")], 1, "v1")


def test_second_run_reuses_cached_results(engine: None, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(reproduce.SCALE_ENV, "0.05")
    exp = reproduce.select([TINY_FIGURE])
    tasks, _dirs, _ = reproduce.plan(exp, tmp_path, quick=True)
    tasks = tasks[:2]
    assert reproduce.execute(tasks, jobs=1) == 2
    stamps = [(Path(t.out) / "summary.json").stat().st_mtime_ns for t in tasks]
    assert reproduce.execute(tasks, jobs=1) == 0
    assert [(Path(t.out) / "summary.json").stat().st_mtime_ns for t in tasks] == stamps
    # the same plan maps to the same directories
    again, _, _ = reproduce.plan(exp, tmp_path, quick=True)
    assert [t.out for t in again[:2]] == [t.out for t in tasks]


# --------------------------------------------------------------------------- end to end


def test_tiny_reproduction_end_to_end(engine: None, tmp_path: Path) -> None:
    out = tmp_path / "repro"
    start = time.monotonic()
    proc = tacc_cli("reproduce", TINY_FIGURE, "--quick", "--jobs", "2", "--out", str(out),
                    env_extra={reproduce.SCALE_ENV: "0.1"})
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - start < 60
    assert "runs" in proc.stderr  # progress line
    report = out / "REPORT.md"
    assert report.is_file() and (out / "report.html").is_file()
    for ext in ("png", "svg"):
        assert (out / "figures" / f"{TINY_FIGURE}.{ext}").stat().st_size > 1000
    text = report.read_text()
    table = [line for line in text.splitlines() if line.startswith(f"| {TINY_FIGURE} |")]
    expected = [r.quantity for r in reproduce.BY_ID[TINY_FIGURE].rows()]
    assert [line.split(" | ")[1] for line in table] == expected
    for line in table:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[4] != "-", line  # every row has a tacc number
        assert cells[5] in ("yes", "no", "-", "yes, within seed spread", "no, within seed spread")
    html_text = (out / "report.html").read_text()
    assert f'src="figures/{TINY_FIGURE}.png"' in html_text
    # a second invocation runs nothing and says so through the same report
    proc2 = tacc_cli("reproduce", TINY_FIGURE, "--quick", "--jobs", "1", "--out", str(out),
                     env_extra={reproduce.SCALE_ENV: "0.1"})
    assert proc2.returncode == 0, proc2.stderr
    assert report.read_text().count(f"| {TINY_FIGURE} |") == len(expected)


def test_cli_unknown_figure_exits_2_with_one_line() -> None:
    proc = tacc_cli("reproduce", "nosuchfigure")
    assert proc.returncode == 2
    assert proc.stderr.startswith("tacc: error:")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_cli_ray_engine_without_ray_exits_2() -> None:
    if reproduce.ray_available():
        pytest.skip("ray is installed")
    proc = tacc_cli("reproduce", TINY_FIGURE, "--engine", "ray")
    assert proc.returncode == 2
    assert "ray" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
