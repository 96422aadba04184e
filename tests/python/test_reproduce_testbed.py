"""`tacc reproduce --testbed`: which experiments fit on the testbed and why the others do
not, a refusal before anything runs, the testbed's runs judged at the scenario's rates as a
third verdict, and their cache. The last test runs the testbed (root)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_compare import as_testbed_run

from tacc import cli, reproduce, testbed
from tacc.reproduce import on_testbed, runner
from tacc.testbed import collect
from tacc.results import at_scenario_rates, load

# SDN-GCC's static per-VM limit at the fair share (Fig. 1-6's dumbbell, 3 variants): the
# tagged flow's goodput is its limiter's 250 Mb/s whatever the competitors are.
STATIC = "sdn-gcc-static"
STATIC_SHARE_MBPS = 250.0


def test_at_scenario_rates_divides_rates_by_the_testbeds_scale(
        write_result: Callable[..., Path], tmp_path: Path) -> None:
    sim = load(write_result(tmp_path / "sim"))
    tb = load(as_testbed_run(write_result(tmp_path / "tb"), scale=0.1))
    scaled = at_scenario_rates(tb)

    assert at_scenario_rates(sim) is sim
    # (as_testbed_run scales summary.json's flows, not the CSV files)
    assert [f["goodput_mbps"] for f in scaled.summary["flows"]] == pytest.approx(
        [f["goodput_mbps"] for f in sim.summary["flows"]])
    assert list(scaled.flows["goodput_mbps"]) == pytest.approx(
        list(tb.flows["goodput_mbps"] * 10))
    assert list(scaled.goodput["goodput_mbps"]) == pytest.approx(
        list(tb.goodput["goodput_mbps"] * 10))
    assert list(scaled.ports["rate_bps"]) == pytest.approx(list(sim.ports["rate_bps"]), rel=1e-6)
    # what is not a rate stays as measured
    assert scaled.queues.equals(tb.queues)
    assert list(scaled.ports["dropped"]) == list(tb.ports["dropped"])


def _listed(text: str) -> dict[str, str]:
    """testbed_table's lines by experiment (an experiment's indented lines with it)."""
    by_id: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if not line.startswith(" "):
            current = line.split()[0]
        by_id.setdefault(current, []).append(" ".join(line.split()))
    return {k: "\n".join(v) for k, v in by_id.items()}


def test_list_says_which_experiments_fit_and_why_the_others_do_not(engine: None) -> None:
    chosen = ["sicc-dumbbell", "sdn-ecn-topo1", "hygenicc-fig5", "hygenicc-attack"]
    listed = _listed(reproduce.testbed_table(chosen))

    assert listed["hygenicc-fig5"].startswith("hygenicc-fig5 fits: 6 of 6 variants x 3 runs")
    # the forging VM needs raw packets, which the testbed's sources do not send
    assert "does not fit: plan: flow forged-feedback forges signals" in \
        listed["hygenicc-attack"]
    # SDN-ECN's RED baseline needs the red qdisc, which the testbed's kernel lacks
    assert "fits: 3 of 4 variants x 3 runs" in listed["sdn-ecn-topo1"]
    assert "not red: queue.kind: classic RED runs as drop-tail" in listed["sdn-ecn-topo1"]
    # SICC's files set ns-2's TCP timers, which Linux does not take
    assert "sicc-dumbbell does not fit: " in listed["sicc-dumbbell"]
    assert "tcp.rto_init: Linux's initial RTO is 1s" in listed["sicc-dumbbell"]

    # --approximate runs them without those keys, and says so; the in-switch SICC and the
    # forging VM cannot be approximated
    listed = _listed(reproduce.testbed_table(chosen, approximate=True))
    sicc = listed["sicc-dumbbell"]
    assert "fits: 12 of 15 variants x 3 runs" in sicc
    assert "not 1:3/sicc-switch, 1:1/sicc-switch, 3:1/sicc-switch: plan: SICC's in-switch" in sicc
    assert "approximated 1:3/dctcp, 1:1/dctcp, 3:1/dctcp: tcp.rto_init" in sicc
    assert "fits: 4 of 4 variants" in listed["sdn-ecn-topo1"]
    assert "approximated red: queue.kind" in listed["sdn-ecn-topo1"]
    assert "does not fit" in listed["hygenicc-attack"]


def test_a_selection_that_does_not_fit_is_refused(engine: None, tmp_path: Path) -> None:
    with pytest.raises(reproduce.ReproduceError, match="no selected experiment fits on the "
                       "testbed: hygenicc-attack: plan: flow forged-feedback"):
        reproduce.reproduce(["hygenicc-attack"], quick=True, out=tmp_path, testbed=True,
                            approximate=True)
    assert not (tmp_path / "runs").exists()


def test_without_root_nothing_runs_and_the_error_is_one_line(
        engine: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)

    status = cli.main(["reproduce", "--testbed", "--quick", STATIC, "--out", str(tmp_path)])

    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith("tacc: error: testbed: not root") and len(err.splitlines()) == 1
    # refused before the simulations, not after them
    assert not (tmp_path / "runs").exists()


def test_the_testbeds_verdicts_stand_beside_the_simulators(
        testbed_machine: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 3 s runs (the experiment's 30 s x 0.1), two of each of the 3 variants: about 40 s
    monkeypatch.setenv(runner.SCALE_ENV, "0.1")
    md, results = reproduce.reproduce([STATIC], quick=True, out=tmp_path, testbed=True)

    rows = json.loads((tmp_path / "report.json").read_text())["rows"]
    assert len(rows) == 6 and all(r["testbed"] is not None for r in rows)
    # Judged at the scenario's rates: the limiter holds the tagged flow to its 250 Mb/s (25
    # measured at x0.1) against line-rate UDP, which only the limiters keep off the port;
    # the row's own bound is 20% of the share.
    udp = [r for r in rows if r["quantity"].endswith("10-20 s vs UDP")]
    assert len(udp) == 1
    assert udp[0]["testbed"]["holds"] is True
    assert udp[0]["testbed"]["mean"] == pytest.approx(STATIC_SHARE_MBPS, rel=0.2)
    text = md.read_text()
    assert "| testbed | holds |" in text
    assert "on the testbed (6 rows)" in text
    assert "Testbed: 6 runs of 3 variant(s)." in text
    runs = sorted((tmp_path / on_testbed.RUNS_DIR / STATIC).iterdir())
    assert len(runs) == 6
    for d in runs:
        tb = json.loads((d / "summary.json").read_text())["testbed"]
        assert tb["rate_scale"] == 0.1
        # the machine's idle share, every second of the 3 s of traffic
        assert 0.0 <= tb["cpu"]["idle_min"] <= tb["cpu"]["idle_mean"] <= 1.0, tb["cpu"]

    # A second reproduction takes every testbed run from the cache.
    def no_run(*_args: object, **_kwargs: object) -> Path:
        raise AssertionError("a cached testbed run ran again")

    monkeypatch.setattr("tacc.testbed.run.run_testbed", no_run)
    _md, again = reproduce.reproduce([STATIC], quick=True, out=tmp_path, testbed=True)
    assert [r.testbed.shown for r in again[0].rows if r.testbed] == \
        [r.testbed.shown for r in results[0].rows if r.testbed]


def test_a_second_under_a_tenth_idle_counts_as_saturated_and_the_report_says_where(
        tmp_path: Path) -> None:
    from tacc.reproduce.report import _testbed_runs

    def idle_summary(idle: list[float]) -> dict[str, Any]:
        return collect.cpu_summary([collect.CpuSecond(x, 0.0, 5.0) for x in idle])

    assert idle_summary([0.40, 0.09, 0.0, 0.11]) == {
        "every_s": 1.0, "samples": 4, "idle_min": 0.0, "idle_mean": pytest.approx(0.15),
        "saturated_s": 2.0, "steal_max": 0.0, "softirq_wait_max_ms": 5.0}
    assert idle_summary([])["saturated_s"] == 0 and idle_summary([])["samples"] == 0
    # A kernel without scheduler statistics: the waits unknown, not zero.
    unknown = [collect.CpuSecond(0.5, 0.02, None), collect.CpuSecond(0.3, 0.07, None)]
    assert collect.cpu_summary(unknown) == {
        "every_s": 1.0, "samples": 2, "idle_min": 0.3, "idle_mean": pytest.approx(0.4),
        "saturated_s": 0.0, "steal_max": 0.07, "softirq_wait_max_ms": None}
    dirs: dict[str, list[Path]] = {}
    for variant, idle in (("tcp", [[0.3, 0.4], [0.2, 0.5]]), ("sicc", [[0.3, 0.01], [0.2]])):
        for i, seconds in enumerate(idle):
            d = tmp_path / f"{variant}-{i}"
            d.mkdir()
            (d / "summary.json").write_text(json.dumps(
                {"testbed": {"rate_scale": 0.1, "cpu": idle_summary(seconds)}}))
            dirs.setdefault(variant, []).append(d)
    text = _testbed_runs(on_testbed.Runs(on_testbed.Fit(reproduce.BY_ID[STATIC]), dirs))
    assert text == ("Testbed: 4 runs of 2 variant(s). The machine's CPU was saturated (under a "
                    "tenth of it idle for seconds of the traffic) in runs of sicc (1 of 2 runs, "
                    "up to 1 s): "
                    "packets waited for a core there, so their numbers measure the machine as "
                    "well as the mechanism.")


def test_testbed_unavailable_is_what_check_raises(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    task = runner.Task("x", "v", "s.toml", (), 1, str(tmp_path / "run"))
    with pytest.raises(testbed.TestbedUnavailable):
        on_testbed.check([task])
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "summary.json").write_text("{}")
    on_testbed.check([task])  # cached: nothing to run, nothing to refuse
