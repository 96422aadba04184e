"""Repeated testbed runs (`tacc testbed --repeat N`, tacc.testbed.repeat) and their spread in
`tacc compare`, on synthetic result directories: no root, no engine, no testbed. The runs are
the synthetic result of conftest made a testbed run at a tenth of the rates (test_compare's
as_testbed_run); a fake run_testbed writes them where a repeat asks."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from test_cli import assert_one_line_error, tacc_cli
from test_compare import as_testbed_run

from tacc import cli, testbed
from tacc.summary import read_summary
from tacc.testbed import repeat, run
from tacc.testbed.compare import Run

# f0's goodput as the runs measured it at x0.1 of the rates: 1 to 5 Mb/s, i.e. 10 to 50 Mb/s
# at the scenario's rates and 1% to 5% of the 100 Mb/s the bottleneck ran at.
MEASURED = [4.0, 2.0, 5.0, 1.0, 3.0]


def set_flow(root: Path, name: str, **fields: Any) -> Path:
    """Sets fields of one flow in a result directory's summary.json."""
    path = root / "summary.json"
    summary = json.loads(path.read_text())
    next(f for f in summary["flows"] if f["name"] == name).update(fields)
    path.write_text(json.dumps(summary))
    return root


@pytest.fixture
def testbed_runs(tmp_path: Path, write_result: Callable[..., Path]) -> list[Path]:
    """Five testbed runs at x0.1; f0 measured MEASURED, and completed in runs 1, 3 and 5 only
    (5, 3 and 1 ms)."""
    runs = []
    for i, goodput in enumerate(MEASURED, start=1):
        root = as_testbed_run(write_result(tmp_path / "rep" / f"run-{i}"))
        fct = {1: 0.005, 3: 0.003, 5: 0.001}.get(i)
        runs.append(set_flow(root, "f0", goodput_mbps=goodput, fct=fct,
                             completed=fct is not None))
    return runs


def fake_run_testbed(monkeypatch: pytest.MonkeyPatch, write_result: Callable[..., Path],
                     measured: Sequence[float], fail: Sequence[int] = (),
                     saturated_s: Sequence[float] = ()) -> list[Any]:
    """Puts in run.run_testbed's place a fake that writes a testbed run into options.out, f0
    measured measured[i - 1] in call i (and the CPU saturated for saturated_s[i - 1]
    seconds, if given), and fails the calls in `fail`; returns its calls."""
    calls: list[Any] = []

    def run_testbed(scenario: str, sets: Sequence[tuple[str, str]],
                    options: run.Options) -> Path:
        calls.append((scenario, list(sets), options))
        if len(calls) in fail:
            raise testbed.TestbedError(
                f"agent-sw0 exited with status 1 at 2.5s: call {len(calls)}\n"
                f"results written to {options.out}")
        assert options.out is not None
        root = as_testbed_run(write_result(options.out))
        set_flow(root, "f0", goodput_mbps=measured[len(calls) - 1])
        if saturated_s:
            summary = json.loads((root / "summary.json").read_text())
            summary["testbed"]["cpu"] = {"every_s": 1.0, "samples": 6, "idle_min": 0.0,
                                         "idle_mean": 0.1,
                                         "saturated_s": saturated_s[len(calls) - 1]}
            (root / "summary.json").write_text(json.dumps(summary))
        return options.out

    monkeypatch.setattr(run, "run_testbed", run_testbed)
    return calls


def test_the_interval_of_the_median_is_of_order_statistics() -> None:
    # Below 6 runs no interval reaches 95%: min..max, at 1 - 2^(1-n).
    assert repeat.median_interval(1) == (0, 0, 0.0)
    assert repeat.median_interval(2) == (0, 1, 0.5)
    assert repeat.median_interval(5) == (0, 4, 1 - 2 / 32)
    assert repeat.median_interval(6) == (0, 5, 1 - 2 / 64)
    # The textbook intervals: x(2)..x(8) of 9 (96.1%), x(2)..x(9) of 10 (97.9%),
    # x(6)..x(15) of 20 (95.9%).
    assert repeat.median_interval(9) == (1, 7, 1 - 2 * 10 / 512)
    assert repeat.median_interval(10) == (1, 8, 1 - 2 * 11 / 1024)
    assert repeat.median_interval(20) == (5, 14, 1 - 2 * 21700 / 2 ** 20)
    with pytest.raises(ValueError):
        repeat.median_interval(0)


def test_stats_of_values() -> None:
    five = repeat.stats_of([5, 1, 4, 2, 3])
    assert five == repeat.Stats(n=5, median=3.0, min=1.0, max=5.0, ci_low=1.0, ci_high=5.0,
                                ci_level=0.9375)
    ten = repeat.stats_of(range(1, 11))
    assert ten is not None
    assert (ten.median, ten.ci_low, ten.ci_high) == (5.5, 2.0, 9.0)
    assert ten.ci_level > 0.95
    assert repeat.stats_of([]) is None


def test_flow_spreads_over_testbed_runs(testbed_runs: list[Path]) -> None:
    rows = {r.flow: r for r in repeat.flow_spreads(testbed_runs)}

    f0 = rows["f0"]
    assert (f0.group, f0.runs) == ("bulk", 5)
    # goodput / rate_scale: 1..5 Mb/s measured at x0.1 are 10..50 at the scenario's rates
    assert f0.goodput_mbps == repeat.Stats(5, 30.0, 10.0, 50.0, 10.0, 50.0, 0.9375)
    # share: of the bottleneck sw0->r0 as the runs ran it, 100 Mb/s
    assert f0.share is not None
    assert f0.share.median == pytest.approx(0.03)
    assert (f0.share.min, f0.share.max) == (pytest.approx(0.01), pytest.approx(0.05))
    # FCT only where it completed: 3 of 5 runs
    assert f0.completed == 3
    assert f0.fct_s == repeat.Stats(3, 0.003, 0.001, 0.005, 0.001, 0.005, 0.75)
    # f2 never completes (conftest): no FCT
    assert (rows["f2"].completed, rows["f2"].fct_s) == (0, None)


def test_runs_of_different_scenarios_are_refused(testbed_runs: list[Path],
                                                 write_result: Callable[..., Path],
                                                 tmp_path: Path) -> None:
    four = write_result(tmp_path / "four", n_flows=4)

    with pytest.raises(ValueError, match="not runs of one scenario"):
        repeat.flow_spreads([*testbed_runs, four])


def test_the_helpers_judge_a_median_over_runs(testbed_runs: list[Path]) -> None:
    assert repeat.values_of(testbed_runs, "f0", "goodput_mbps") == [40.0, 20.0, 50.0, 10.0, 30.0]
    assert repeat.median_of(testbed_runs, "f0", "goodput_mbps") == 30.0
    assert repeat.median_of(testbed_runs, "f0", "share") == pytest.approx(0.03)
    assert repeat.median_of(testbed_runs, "f0", "share", bottleneck="sw0->s0") == \
        pytest.approx(0.03)
    assert repeat.values_of(testbed_runs, "f0", "fct_s") == [0.005, 0.003, 0.001]
    assert repeat.median_of(testbed_runs, "f0", "fct_s") == 0.003
    assert repeat.median_over(testbed_runs, lambda d: float(d.name[-1])) == 3.0
    with pytest.raises(ValueError, match="completed in none of the runs"):
        repeat.median_of(testbed_runs, "f2", "fct_s")
    with pytest.raises(ValueError, match="no flow named 'f9'"):
        repeat.median_of(testbed_runs, "f9", "goodput_mbps")
    with pytest.raises(ValueError, match="quantity: expected one of"):
        repeat.median_of(testbed_runs, "f0", "goodput")


def test_run_repeated_runs_each_into_its_directory_and_summarizes(
    monkeypatch: pytest.MonkeyPatch, write_result: Callable[..., Path], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls = fake_run_testbed(monkeypatch, write_result, MEASURED)
    out = tmp_path / "rep"

    written = repeat.run_repeated("s.toml", [("duration", "2s")],
                                  run.Options(out=out, keep_going=False), 5)

    assert written == out
    assert [c[2].out for c in calls] == [out / f"run-{i}" for i in range(1, 6)]
    assert all(c[:2] == ("s.toml", [("duration", "2s")]) for c in calls)
    assert "run 2 of 5: " + str(out / "run-2") in capsys.readouterr().out.splitlines()
    header = json.loads((out / "repeat.json").read_text())
    assert {k: header[k] for k in ("scenario", "scenario_file", "sets", "runs", "run_dirs",
                                   "summarized", "failed", "bottleneck")} == {
        "scenario": "synthetic", "scenario_file": "s.toml", "sets": [["duration", "2s"]],
        "runs": 5, "run_dirs": [f"run-{i}" for i in range(1, 6)],
        "summarized": [f"run-{i}" for i in range(1, 6)], "failed": [], "bottleneck": "sw0->r0"}
    f0 = header["flows"][0]
    assert f0["flow"] == "f0" and f0["goodput_mbps"]["median"] == 30.0
    assert repeat.median_of(out, "f0", "goodput_mbps") == 30.0  # a repeat dir: its runs
    with (out / "repeat.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == repeat.CSV_HEADER
    assert [r["flow"] for r in rows] == ["f0", "f1", "f2"]
    assert (rows[0]["goodput_mbps_median"], rows[0]["goodput_mbps_ci_level"]) == ("30.0", "0.9375")
    assert (rows[2]["completed"], rows[2]["fct_s_median"]) == ("0", "")


def test_a_repeat_names_the_runs_that_saturated_the_machine(
    monkeypatch: pytest.MonkeyPatch, write_result: Callable[..., Path], tmp_path: Path,
) -> None:
    fake_run_testbed(monkeypatch, write_result, [1.0, 2.0, 3.0], saturated_s=[5.0, 0.0, 4.0])

    out = repeat.run_repeated("s.toml", [], run.Options(out=tmp_path / "rep", quiet=True), 3)

    assert repeat.read_header(out)["saturated"] == [
        {"dir": "run-1", "saturated_s": 5.0}, {"dir": "run-3", "saturated_s": 4.0}]
    assert ("CPU saturated in 2 of 3 runs: run-1 (5s), run-3 (4s) with under a tenth of it idle"
            in repeat.spread_table(out))
    fake_run_testbed(monkeypatch, write_result, [1.0, 2.0], saturated_s=[0.0, 0.0])
    calm = repeat.run_repeated("s.toml", [], run.Options(out=tmp_path / "calm", quiet=True), 2)
    assert repeat.read_header(calm)["saturated"] == []
    assert "CPU saturated" not in repeat.spread_table(calm)


def test_a_repeat_goes_where_a_single_run_would(
    engine: None, monkeypatch: pytest.MonkeyPatch, write_result: Callable[..., Path],
    tmp_path: Path,
) -> None:
    calls = fake_run_testbed(monkeypatch, write_result, [1.0, 2.0])
    monkeypatch.chdir(tmp_path)

    written = repeat.run_repeated("default", [], run.Options(quiet=True), 2)

    assert written == Path("out/motivating-testbed")
    assert [c[2].out for c in calls] == [written / "run-1", written / "run-2"]
    assert (tmp_path / written / "repeat.json").is_file()


def test_a_failed_run_stops_a_repeat_unless_keep_going(
    monkeypatch: pytest.MonkeyPatch, write_result: Callable[..., Path], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls = fake_run_testbed(monkeypatch, write_result, MEASURED, fail=[2])

    with pytest.raises(testbed.TestbedError, match="^run 2 of 3: agent-sw0 exited"):
        repeat.run_repeated("s.toml", [], run.Options(out=tmp_path / "stop", quiet=True), 3)
    assert len(calls) == 2 and not (tmp_path / "stop" / "repeat.json").exists()

    calls = fake_run_testbed(monkeypatch, write_result, [1.0, 0.0, 2.0, 3.0], fail=[2])
    out = repeat.run_repeated("s.toml", [], run.Options(out=tmp_path / "go", quiet=True,
                                                        keep_going=True), 4)

    header = repeat.read_header(out)
    assert header["summarized"] == ["run-1", "run-3", "run-4"]
    assert [(f["run"], f["dir"]) for f in header["failed"]] == [(2, "run-2")]
    assert header["failed"][0]["error"].startswith("agent-sw0 exited with status 1 at 2.5s")
    assert repeat.values_of(out, "f0", "goodput_mbps") == [10.0, 20.0, 30.0]
    assert capsys.readouterr().err == (
        "tacc: warning: run 2 of 4 failed: agent-sw0 exited with status 1 at 2.5s: call 2 "
        "(--keep-going)\n")


def test_a_repeat_of_failures_only_is_an_error(monkeypatch: pytest.MonkeyPatch,
                                                 write_result: Callable[..., Path],
                                                 tmp_path: Path) -> None:
    fake_run_testbed(monkeypatch, write_result, [], fail=[1, 2])

    with pytest.raises(testbed.TestbedError, match="no run of 2 succeeded"):
        repeat.run_repeated("s.toml", [], run.Options(out=tmp_path / "none", quiet=True,
                                                      keep_going=True), 2)
    assert repeat.read_header(tmp_path / "none")["summarized"] == []


def test_a_machine_without_the_testbed_ends_a_keep_going_repeat(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = []

    def unavailable(*args: object) -> Path:
        calls.append(args)
        raise testbed.TestbedUnavailable(["not root: x"])

    monkeypatch.setattr(run, "run_testbed", unavailable)

    with pytest.raises(testbed.TestbedUnavailable):
        repeat.run_repeated("s.toml", [], run.Options(out=tmp_path, quiet=True,
                                                      keep_going=True), 3)
    assert len(calls) == 1


def test_the_cli_refuses_repeat_0() -> None:
    proc = tacc_cli("testbed", "--repeat", "0")

    assert_one_line_error(proc)
    assert proc.stderr == "tacc: error: --repeat: expected a positive number of runs, got 0\n"


def test_the_cli_repeats_and_prints_the_spread(
    monkeypatch: pytest.MonkeyPatch, write_result: Callable[..., Path], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls = fake_run_testbed(monkeypatch, write_result, MEASURED)
    out = tmp_path / "rep"

    assert cli.main(["testbed", "s.toml", "--repeat", "5", "--out", str(out), "--no-plot",
                     "--duration", "2s"]) == 0

    assert len(calls) == 5 and calls[0][2].duration_s == 2.0
    text = capsys.readouterr().out
    assert "run 5 of 5: " in text
    assert f"scenario synthetic: 5 testbed runs in {out}, 5 summarized" in text
    f0 = next(line.split() for line in text.splitlines() if line.strip().startswith("f0 "))
    assert f0 == ["f0", "bulk", "5", "30.0", "10.0..50.0", "10.0..50.0", "(94%)", "0.030",
                  "5/5", "5.000ms", "5.000ms..5.000ms"]
    assert str(out / "repeat.csv") in text


def test_the_cli_names_the_failed_runs_of_a_keep_going_repeat(
    monkeypatch: pytest.MonkeyPatch, write_result: Callable[..., Path], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_run_testbed(monkeypatch, write_result, [1.0, 0.0, 2.0], fail=[2])
    out = tmp_path / "rep"

    assert cli.main(["testbed", "--repeat", "3", "--keep-going", "--out", str(out),
                     "--no-plot", "--quiet"]) == 3

    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "tacc: warning: run 2 of 3 failed: agent-sw0 exited with status 1 at 2.5s: call 2 "
        "(--keep-going)",
        "tacc: error: testbed: run 2 of 3: agent-sw0 exited with status 1 at 2.5s: call 2",
        f"tacc: error: testbed: run 2 of 3: results written to {out / 'run-2'}",
        f"tacc: error: testbed: 2 of 3 runs summarized in {out / 'repeat.json'}",
    ]


@pytest.fixture
def repeat_dir(testbed_runs: list[Path]) -> Path:
    """The five testbed runs as `tacc testbed --repeat 5` leaves them."""
    out = testbed_runs[0].parent
    runs = [Run(p, read_summary(p)) for p in testbed_runs]
    rows = repeat.spreads_of_runs(runs, "sw0->r0")
    repeat.write_repeat(out, {
        "scenario": "synthetic", "scenario_file": "s.toml", "sets": [], "runs": 5,
        "run_dirs": [p.name for p in testbed_runs], "summarized": [p.name for p in testbed_runs],
        "failed": [], "bottleneck": "sw0->r0", "interval": repeat.INTERVAL,
        "flows": [r.as_json() for r in rows]}, rows)
    return out


def test_compare_shows_a_repeats_spread_beside_a_simulation(
    repeat_dir: Path, make_result_dir: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    sim = make_result_dir()

    assert cli.main(["compare", str(sim), str(repeat_dir)]) == 0

    out = capsys.readouterr().out
    assert f"A: {sim} (simulation): scenario synthetic, seed 42" in out
    assert (f"B: {repeat_dir} (repeat: 5 of 5 runs): 5 testbed runs, rates x0.1, base RTT "
            "80us: scenario synthetic, seed 42") in out
    assert "bottleneck: sw0->r0 (A 1Gbps, B 100Mbps = 1Gbps x0.1)" in out
    # f0: 100 Mb/s (a tenth of the link) in the simulation; 10..50, median 30, on the testbed
    f0 = next(line.split() for line in out.splitlines() if line.strip().startswith("f0 "))
    assert f0 == ["f0", "bulk", "100.0", "-", "-", "30.0", "10.0..50.0", "10.0..50.0", "(94%)",
                  "0.100", "0.030", "-70.0%"]
    fct = out.split("flow completion times")[1]
    f0 = next(line.split() for line in fct.splitlines() if line.strip().startswith("f0 "))
    assert f0 == ["f0", "5.000ms", "-", "1/1", "3.000ms", "1.000ms..5.000ms", "3/5", "-40.0%"]
    assert "A Jain" in out and "sw0->r0" in out.split("ports with traffic")[1]


def test_compare_sets_several_simulations_against_a_repeat(
    repeat_dir: Path, write_result: Callable[..., Path], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seeds = []
    for seed, goodput in ((1, 90.0), (2, 110.0), (3, 100.0)):
        root = write_result(tmp_path / f"sim-seed{seed}")
        summary = json.loads((root / "summary.json").read_text())
        summary["seed"] = seed
        (root / "summary.json").write_text(json.dumps(summary))
        seeds.append(set_flow(root, "f0", goodput_mbps=goodput))
    report = tmp_path / "cmp.md"

    assert cli.main(["compare", "-A", *map(str, seeds), "-B", str(repeat_dir),
                     "--out", str(report)]) == 0

    out = capsys.readouterr().out
    assert (f"A: {', '.join(map(str, seeds))}: 3 simulation runs: scenario synthetic, "
            "seeds 1, 2, 3") in out
    f0 = next(line.split() for line in out.splitlines() if line.strip().startswith("f0 "))
    assert f0 == ["f0", "bulk", "100.0", "90.0..110.0", "90.0..110.0", "(75%)", "30.0",
                  "10.0..50.0", "10.0..50.0", "(94%)", "0.100", "0.030", "-70.0%"]
    assert "| flow | group | A Mb/s | A min..max | A 95% CI | B Mb/s |" in report.read_text()
    # the repeat directory may also be side A, a directory alone then side B
    assert cli.main(["compare", str(seeds[0]), "-A", str(repeat_dir)]) == 0
    assert f"A: {repeat_dir} (repeat: 5 of 5 runs)" in capsys.readouterr().out


def test_compare_wants_two_sides(make_result_dir: Callable[..., Path],
                                 capsys: pytest.CaptureFixture[str]) -> None:
    one = make_result_dir()

    assert cli.main(["compare", str(one)]) == 2

    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tacc: error: compare: expected two")
