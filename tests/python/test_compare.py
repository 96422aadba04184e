"""`tacc compare`: two result directories side by side, here a synthetic simulation and a
synthetic testbed run of it at a tenth of the rates (no root, no engine needed)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import run_python

from tacc import cli
from tacc.testbed.compare import compare_dirs


def as_testbed_run(root: Path, scale: float = 0.1, slower: float = 1.0) -> Path:
    """Rewrites a synthetic result as a testbed run at `scale` of the rates, its flows
    getting `slower` times their share."""
    path = root / "summary.json"
    summary = json.loads(path.read_text())
    for port in summary["ports"]:
        port["rate_bps"] = round(port["rate_bps"] * scale)
    for flow in summary["flows"]:
        flow["goodput_mbps"] *= scale * slower
    summary.update(events=None, conservation={"measured": False, "note": "not measured"},
                   testbed={"rate_scale": scale, "base_rtt_us": 80.0, "not_emulated": [],
                            "failures": []})
    path.write_text(json.dumps(summary))
    return root


@pytest.fixture
def runs(make_result_dir: Callable[..., Path]) -> tuple[Path, Path]:
    return make_result_dir(), as_testbed_run(make_result_dir(), slower=0.5)


def test_compare_prints_both_runs_and_shares(runs: tuple[Path, Path],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    sim, tb = runs

    assert cli.main(["compare", str(sim), str(tb)]) == 0

    out = capsys.readouterr().out
    assert f"A: {sim} (simulation): scenario synthetic, seed 42" in out
    assert f"B: {tb} (testbed, rates x0.1, base RTT 80us): scenario synthetic" in out
    assert "bottleneck: sw0->r0 (A 1Gbps, B 100Mbps = 1Gbps x0.1)" in out
    # f0: 100 Mb/s of 1 Gb/s in the simulation; half that share on the testbed (5 of 100).
    f0 = next(line.split() for line in out.splitlines() if line.strip().startswith("f0 "))
    assert f0 == ["f0", "bulk", "100.0", "5.0", "0.100", "0.050", "-50.0", "-50.0%"]
    assert "(all)" in out and "A Jain" in out
    assert "flow completion times" in out
    assert "sw0->r0" in out.split("ports with traffic")[1]


def test_compare_writes_markdown(runs: tuple[Path, Path], tmp_path: Path) -> None:
    report = tmp_path / "cmp.md"

    assert cli.main(["compare", *map(str, runs), "--out", str(report)]) == 0

    text = report.read_text()
    assert text.startswith("# tacc compare\n")
    assert "| flow | group | A Mb/s | B Mb/s | A share | B share | diff Mb/s | rel |" in text
    assert "| :-- | :-- | --: |" in text


def test_a_named_bottleneck_must_exist_in_both(runs: tuple[Path, Path]) -> None:
    comparison = compare_dirs(*runs, bottleneck="sw0->s0")
    assert "bottleneck: sw0->s0" in comparison.text()
    with pytest.raises(ValueError, match="no port named 'nowhere'"):
        compare_dirs(*runs, bottleneck="nowhere")


def test_two_runs_of_different_scenarios_are_refused(
    make_result_dir: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    three, four = make_result_dir(n_flows=3), make_result_dir(n_flows=4)

    assert cli.main(["compare", str(three), str(four)]) == 2

    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"tacc: error: {three} and {four} are not runs of one scenario")
    assert f"only in {four}: f3" in err


def test_a_run_compared_with_itself_differs_nowhere(make_result_dir: Callable[..., Path]) -> None:
    run = make_result_dir()

    text = compare_dirs(run, run).text()

    # The first two lines name the directories, whose temporary paths may hold any number.
    body = "\n".join(line for line in text.splitlines() if not line.startswith(("A: ", "B: ")))
    assert "+0.0%" in body and "-50" not in body


def test_the_cli_starts_without_the_testbed_package() -> None:
    code = (
        "import sys\n"
        "from tacc.cli import main\n"
        "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
        "print('tacc.testbed' in sys.modules)\n"
    )
    proc = run_python(code)

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "False"
