"""The wheel as a user gets it: built by maturin, installed with pip into a fresh virtual
environment, and its `tacc` command run from a directory outside the source tree.

The build reuses the cargo target directory target/wheel, so after the first build it is
incremental; pip takes numpy, pandas, matplotlib and tqdm from the package index (from its
cache after `make setup`). Without maturin or the network these tests fail rather than
skip: they are what shows that an installed tacc works.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tacc import reproduce

REPO = Path(__file__).resolve().parents[2]
CHEAP_FIGURE = "sdn-ecn-bufferbloat"  # 6 runs of a 3-host star at 100 Mb/s


def run(cmd: Sequence[str | Path], *, timeout: float, **kwargs: object) -> str:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          timeout=timeout, **kwargs)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    env = {**os.environ, "CARGO_TARGET_DIR": str(REPO / "target" / "wheel")}
    run([sys.executable, "-m", "maturin", "build", "--release", "--interpreter",
         sys.executable, "--out", dist], cwd=REPO, env=env, timeout=3600)
    wheels = sorted(dist.glob("tacc-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def venv_bin(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("venv")
    # This interpreter's pip installs into the new environment (no pip of its own to set
    # up); modules are compiled when first imported rather than all of them up front.
    run([sys.executable, "-m", "venv", "--without-pip", venv], timeout=300)
    run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install",
         "--quiet", "--no-compile", wheel], timeout=1800)
    return venv / "bin"


Tacc = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def user(venv_bin: Path, tmp_path: Path) -> Tacc:
    """user(*args, env_extra=None) runs the installed `tacc` in tmp_path, as a user would:
    no source tree on the path, no scenario directory override."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "TACC_SCENARIO_DIR", reproduce.SCALE_ENV, "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join([str(venv_bin), env.get("PATH", "")])

    def tacc(*args: str, env_extra: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(venv_bin / "tacc"), *args], capture_output=True, text=True,
                              cwd=tmp_path, env={**env, **(env_extra or {})}, timeout=600)

    return tacc


def test_the_wheel_ships_every_scenario(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())

    assert "tacc/scenarios/default.toml" in names
    assert "tacc/scenarios/fattree.toml" in names
    shipped = sorted((REPO / "python" / "tacc" / "scenarios").glob("**/*.toml"))
    assert any(path.parent.name == "papers" for path in shipped)
    for path in shipped:
        assert path.relative_to(REPO / "python").as_posix() in names


def test_installed_reproduction_finds_its_scenarios_in_the_package(venv_bin: Path,
                                                                   tmp_path: Path) -> None:
    code = ("import json, tacc; from tacc import reproduce; "
            "print(json.dumps([tacc.__file__, str(reproduce.scenario_dir()), "
            "[e.scenario_path.is_file() for e in reproduce.EXPERIMENTS]]))")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TACC_SCENARIO_DIR")}
    module, scenarios, found = json.loads(
        run([venv_bin / "python", "-c", code], cwd=tmp_path, env=env, timeout=300))

    assert Path(module).is_relative_to(venv_bin.parent / "lib"), module  # not the source tree
    assert Path(scenarios) == Path(module).parent / "scenarios" / "papers"
    assert found and all(found)


def test_installed_tacc_lists_and_reproduces(user: Tacc, tmp_path: Path) -> None:
    listed = user("reproduce", "--list")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == list(reproduce.BY_ID)

    # 1/20 of the simulated time: seconds instead of minutes
    proc = user("reproduce", CHEAP_FIGURE, "--quick", "--out", "repro",
                env_extra={reproduce.SCALE_ENV: "0.05"})

    assert proc.returncode == 0, proc.stderr
    rows = len(reproduce.BY_ID[CHEAP_FIGURE].rows())  # not a figure of the paper: tacc's own
    assert "The papers' claims (0 rows)" in proc.stdout
    assert f"tacc's own experiments ({rows} rows): " in proc.stdout
    report = (tmp_path / "repro" / "REPORT.md").read_text()
    assert f"Command: `tacc reproduce {CHEAP_FIGURE} --quick --out repro`" in report
    assert report.count(f"| {CHEAP_FIGURE} |") == len(reproduce.BY_ID[CHEAP_FIGURE].rows())
    assert (tmp_path / "repro" / "figures" / f"{CHEAP_FIGURE}.png").is_file()


def test_installed_tacc_runs_the_default_scenario(user: Tacc, tmp_path: Path) -> None:
    proc = user("run", "--no-plot", "--out", "default")

    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "default" / "summary.json").read_text())
    assert summary["scenario"] == "motivating" and summary["flows"]
    assert not (tmp_path / "default" / "goodput.png").exists()


def test_installed_tacc_rejects_a_bad_file_one_line_per_error(user: Tacc, tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text('name = "bad"\nduration = "5 parsecs"\n')

    proc = user("validate", "bad.toml")

    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    # Both mistakes, each on its own line naming the file: the bad unit (with its line) and
    # the missing topology.
    assert proc.stderr.splitlines() == [
        'tacc: error: bad.toml:2: duration: expected a duration such as "25us", "5ms" or "30s",'
        ' got "5 parsecs"',
        "tacc: error: bad.toml: missing field `topology`",
    ], proc.stderr
