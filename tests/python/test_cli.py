"""The `tacc` command, run as a subprocess (`python -m tacc`).

Tests taking the `engine` fixture need the compiled `tacc._core`: they fail when it cannot be
imported, or skip with TACC_SKIP_ENGINE=1.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import child_env, run_python

import tacc
from tacc import cli

TINY_SCENARIO = """\
name = "tiny"
duration = "50ms"
[topology]
kind = "star"
senders = 1
receivers = 1
link_rate = "1Gbps"
link_delay = "25us"
[[flows]]
name = "bulk"
src = "s0"
dst = "r0"
transport = "tcp"
"""


def tacc_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tacc", *args],
        capture_output=True, text=True, env=child_env(), cwd=cwd, timeout=300,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("tacc: error:")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.fixture
def tiny_scenario(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_SCENARIO)
    return path


def test_plot_writes_pngs_and_prints_their_paths(result_dir: Path) -> None:
    proc = tacc_cli("plot", str(result_dir))

    assert proc.returncode == 0, proc.stderr
    assert (result_dir / "goodput.png").stat().st_size > 0
    assert (result_dir / "queues.png").stat().st_size > 0
    assert str(result_dir / "goodput.png") in proc.stdout


def test_show_prints_the_summary_table(result_dir: Path) -> None:
    proc = tacc_cli("show", str(result_dir))

    assert proc.returncode == 0, proc.stderr
    assert "scenario synthetic (seed 42)" in proc.stdout
    assert "f0" in proc.stdout and "sw0->r0" in proc.stdout
    assert "packet conservation" in proc.stdout


def test_plot_of_a_missing_directory_is_a_one_line_error(tmp_path: Path) -> None:
    proc = tacc_cli("plot", str(tmp_path / "absent"))

    assert_one_line_error(proc)
    assert "absent" in proc.stderr


def test_show_of_a_directory_that_is_no_result_is_a_one_line_error(tmp_path: Path) -> None:
    proc = tacc_cli("show", str(tmp_path))

    assert_one_line_error(proc)
    assert "not a tacc result directory" in proc.stderr


def test_plot_of_a_corrupt_result_is_a_one_line_error(result_dir: Path) -> None:
    (result_dir / "queues.csv").write_text("")

    assert_one_line_error(tacc_cli("plot", str(result_dir)))


def test_run_of_a_missing_scenario_file_is_a_one_line_error(tmp_path: Path) -> None:
    proc = tacc_cli("run", str(tmp_path / "nope.toml"), cwd=tmp_path)

    assert_one_line_error(proc)
    assert "nope.toml: no such scenario file" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_run_rejects_a_set_without_equals(tiny_scenario: Path) -> None:
    proc = tacc_cli("run", str(tiny_scenario), "--set", "duration")

    assert proc.returncode == 2
    assert "KEY=VALUE" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_no_command_is_a_usage_error() -> None:
    proc = tacc_cli()

    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def test_validate_accepts_the_default_scenario(engine: None) -> None:
    proc = tacc_cli("validate", "default")

    assert proc.returncode == 0, proc.stderr
    assert ": OK: scenario" in proc.stdout


def test_validate_describes_the_tiny_scenario(engine: None, tiny_scenario: Path) -> None:
    proc = tacc_cli("validate", str(tiny_scenario))

    assert proc.returncode == 0, proc.stderr
    assert "scenario 'tiny'" in proc.stdout and "1 flows" in proc.stdout


def test_run_writes_results_plots_and_table(
    engine: None, tiny_scenario: Path, tmp_path: Path
) -> None:
    proc = tacc_cli("run", str(tiny_scenario), cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out" / "tiny"  # the default: out/<scenario file stem>
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scenario"] == "tiny"
    assert [f["name"] for f in summary["flows"]] == ["bulk"]
    for name in ("flows.csv", "goodput.csv", "queues.csv", "goodput.png", "queues.png"):
        assert (out / name).is_file(), name
    assert "bulk" in proc.stdout
    assert str(Path("out") / "tiny" / "summary.json") in proc.stdout


def test_run_applies_seed_and_overrides(engine: None, tiny_scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "seeded"
    proc = tacc_cli("run", str(tiny_scenario), "--out", str(out), "--seed", "7",
                    "--set", "duration=10ms", "--no-plot", "--quiet")

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert json.loads((out / "summary.json").read_text())["seed"] == 7
    assert not (out / "goodput.png").exists()


FAT_TREE = """\
name = "ft"
duration = "30ms"
[topology]
kind = "fat-tree"
k = 4
link_rate = "1Gbps"
link_delay = "1us"
[[traffic]]
name = "web"
cdf = "websearch"
load = 0.5
"""


def test_a_partitioned_run_writes_the_same_files_on_one_thread_and_two(
        engine: None, tmp_path: Path) -> None:
    scenario = tmp_path / "ft.toml"
    scenario.write_text(FAT_TREE)
    written = {}
    for threads in ("1", "2"):
        out = tmp_path / threads
        proc = tacc_cli("run", str(scenario), "--out", str(out), "--threads", threads,
                        "--partitions", "4", "--no-plot", "--quiet")
        assert proc.returncode == 0, proc.stderr
        files = {p.name: p.read_text() for p in sorted(out.iterdir())}
        summary = json.loads(files["summary.json"])
        assert summary["partitions"]["count"] == 4  # a pod each
        del summary["wall_seconds"], summary["partitions"]["barrier_wall_seconds"]
        files["summary.json"] = summary
        written[threads] = files
    assert written["1"] == written["2"]
    assert len(written["1"]["flows.csv"].splitlines()) > 10


def test_run_refuses_no_threads(tiny_scenario: Path) -> None:
    proc = tacc_cli("run", str(tiny_scenario), "--threads", "0")
    assert proc.returncode == 2
    assert "--threads: expected a positive whole number, got '0'" in proc.stderr


def test_run_reports_an_unknown_key_with_file_and_line(engine: None, tmp_path: Path) -> None:
    lines = TINY_SCENARIO.splitlines()
    lines.insert(2, 'colour = "red"')  # line 3, still in the top-level table
    bad = tmp_path / "bad.toml"
    bad.write_text("\n".join(lines) + "\n")

    proc = tacc_cli("run", str(bad), cwd=tmp_path)

    assert_one_line_error(proc)
    assert re.search(r"bad\.toml:3\b", proc.stderr), proc.stderr
    assert "colour" in proc.stderr


def test_run_reports_a_bad_unit(engine: None, tmp_path: Path) -> None:
    bad = tmp_path / "units.toml"
    bad.write_text(TINY_SCENARIO.replace('duration = "50ms"', 'duration = "5 parsecs"'))

    proc = tacc_cli("run", str(bad), cwd=tmp_path)

    assert_one_line_error(proc)
    assert "units.toml" in proc.stderr and "duration" in proc.stderr


# What a quick command does without: seconds of imports, and pathlib's milliseconds (with
# what it imports, about 3 ms: 1.5% of a 10 s dumbbell's run).
HEAVY = ("numpy", "pandas", "matplotlib", "tqdm", "pathlib")


def heavy_imports_after(*args: str, cwd: Path | None = None) -> list[str]:
    """The heavy libraries loaded once `tacc ARGS` has run in a fresh interpreter."""
    code = (
        "import json, sys\n"
        "from tacc.cli import main\n"
        f"status = main({list(args)!r})\n"
        f"print(json.dumps([status, [m for m in {HEAVY!r} if m in sys.modules]]))\n"
    )
    proc = run_python(code, cwd)
    assert proc.returncode == 0, proc.stderr
    status, loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert status == 0, proc.stdout
    return loaded


def test_the_command_still_runs_the_exit_handlers_of_its_host(engine: None) -> None:
    # `tacc` skips the interpreter's teardown only when nothing is registered to run at exit.
    code = (
        "import atexit, sys\n"
        "atexit.register(print, 'handler ran')\n"
        "sys.argv = ['tacc', 'validate', 'default']\n"
        "from tacc.cli import entry\n"
        "entry()\n"
    )
    proc = run_python(code)

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().endswith("handler ran"), proc.stdout


def test_the_command_runs_with_its_output_closed(engine: None) -> None:
    # As a daemon launcher may start it: Python then has no sys.stdout to print or flush.
    proc = subprocess.run(["sh", "-c", 'exec "$0" -m tacc validate default >&-', sys.executable],
                          capture_output=True, text=True, env=child_env(), timeout=300)

    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_validate_starts_without_the_heavy_libraries(engine: None) -> None:
    assert heavy_imports_after("validate", "default") == []


def test_a_quiet_run_without_plots_needs_no_heavy_library(
    engine: None, tiny_scenario: Path, tmp_path: Path
) -> None:
    loaded = heavy_imports_after("run", str(tiny_scenario), "--out", str(tmp_path / "o"),
                                 "--no-plot", "--quiet")

    assert loaded == []
    assert (tmp_path / "o" / "summary.json").is_file()


def test_each_line_of_a_scenario_error_is_an_error_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class ScenarioError(ValueError):
        pass

    def validate(*_args: object, **_kwargs: object) -> dict[str, object]:
        raise ScenarioError("bad.toml:3: colour: unknown key\n"
                            "bad.toml:7: flows[0].rate: expected a rate, got \"fast\"\n")

    monkeypatch.setattr(tacc, "validate", validate)

    status = cli.main(["validate", "bad.toml"])

    assert status == 2
    assert capsys.readouterr().err.splitlines() == [
        "tacc: error: bad.toml:3: colour: unknown key",
        'tacc: error: bad.toml:7: flows[0].rate: expected a rate, got "fast"',
    ]


def test_an_error_without_a_message_names_its_kind(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def validate(*_args: object, **_kwargs: object) -> dict[str, object]:
        raise ValueError()

    monkeypatch.setattr(tacc, "validate", validate)

    assert cli.main(["validate", "x.toml"]) == 2
    assert capsys.readouterr().err == "tacc: error: ValueError\n"
