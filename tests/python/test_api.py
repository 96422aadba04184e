"""tacc.run / tacc.validate plumbing, against a stand-in for the compiled engine."""

from __future__ import annotations

import shutil
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tacc


class FakeEngine(types.ModuleType):
    """Records its calls and writes a synthetic result directory like the engine."""

    class ScenarioError(ValueError):
        pass

    def __init__(self, write_result: Callable[[Path], Path]) -> None:
        super().__init__("tacc._core")
        self.write_result = write_result
        self.calls: list[dict[str, Any]] = []
        self.fail = False

    def run(self, path: str, **kwargs: Any) -> str:
        self.calls.append({"path": path, **kwargs})
        if self.fail:
            raise self.ScenarioError(f"{path}:1: duration: bad")
        self.write_result(Path(kwargs["out"]))
        return kwargs["out"]

    def validate(self, path: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append({"path": path, **kwargs})
        return {"name": "x", "duration_s": 0.01, "hosts": 2, "switches": 1, "links": 2, "flows": 1}

    def version(self) -> str:
        return "9.8.7"


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "s.toml"
    path.write_text('name = "s"\n')
    return path


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch, write_result: Callable[[Path], Path]) -> FakeEngine:
    fake = FakeEngine(write_result)
    monkeypatch.setitem(sys.modules, "tacc._core", fake)
    return fake


def test_run_passes_scenario_seed_and_overrides(
    engine: FakeEngine, scenario: Path, tmp_path: Path
) -> None:
    result = tacc.run(scenario, seed=3, sets={"topology.ecn": True, "topology.senders": 4},
                      out=tmp_path / "out")

    assert engine.calls == [{
        "path": str(scenario), "seed": 3, "out": str(tmp_path / "out"), "progress": None,
        "sets": [("topology.ecn", "true"), ("topology.senders", "4")],
        "threads": None, "partitions": None,
    }]
    assert result.dir == tmp_path / "out"
    assert list(result.flows["name"]) == ["f0", "f1", "f2"]


def test_the_engine_gets_paths_as_a_path_would_write_them(
    engine: FakeEngine, scenario: Path, tmp_path: Path
) -> None:
    # In summary.json and in error messages: "./x.toml" as "x.toml", "out/" as "out".
    tacc.run_dir(f"{scenario.parent}/./{scenario.name}", out=f"{tmp_path}//out/")

    assert engine.calls[0]["path"] == str(scenario)
    assert engine.calls[0]["out"] == str(tmp_path / "out")


def test_run_accepts_overrides_as_pairs(engine: FakeEngine, scenario: Path, tmp_path: Path) -> None:
    tacc.run(scenario, sets=[("duration", "10ms")], out=tmp_path / "out")

    assert engine.calls[0]["sets"] == [("duration", "10ms")]


def test_run_without_out_uses_a_fresh_temp_dir(engine: FakeEngine, scenario: Path) -> None:
    result = tacc.run(scenario)

    assert result.dir.name.startswith("tacc-")
    assert (result.dir / "summary.json").is_file()
    shutil.rmtree(result.dir)


def test_run_removes_its_temp_dir_when_the_engine_fails(engine: FakeEngine, scenario: Path) -> None:
    engine.fail = True

    with pytest.raises(ValueError, match="duration: bad"):
        tacc.run(scenario)

    assert not Path(engine.calls[0]["out"]).exists()


def test_run_default_uses_the_built_in_scenario(
    engine: FakeEngine, monkeypatch: pytest.MonkeyPatch, scenario: Path, tmp_path: Path
) -> None:
    monkeypatch.setattr(tacc, "_default_scenario_file", lambda: str(scenario))

    tacc.run("default", out=tmp_path / "out")

    assert engine.calls[0]["path"] == str(scenario)


def test_default_scenario_path_points_into_the_package() -> None:
    path = tacc.default_scenario_path()

    assert path.parent == Path(tacc.__file__).parent / "scenarios"
    assert path.name == "default.toml"


def test_run_of_a_missing_file_fails_before_the_engine(engine: FakeEngine, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such scenario file"):
        tacc.run(tmp_path / "absent.toml")

    assert engine.calls == []


def test_validate_returns_the_engine_description(engine: FakeEngine, scenario: Path) -> None:
    info = tacc.validate(scenario, sets={"duration": "1ms"})

    assert info["hosts"] == 2
    assert engine.calls == [{"path": str(scenario), "sets": [("duration", "1ms")]}]


def test_scenario_error_comes_from_the_engine(engine: FakeEngine) -> None:
    assert tacc.ScenarioError is engine.ScenarioError


def test_version_is_the_engines(engine: FakeEngine) -> None:
    assert tacc.__version__ == "9.8.7"


def test_run_dir_returns_the_directory_unread(
    engine: FakeEngine, scenario: Path, tmp_path: Path
) -> None:
    written = tacc.run_dir(scenario, out=tmp_path / "out")

    assert written == tmp_path / "out"
    assert (written / "summary.json").is_file()


def test_without_the_engine_only_running_fails(
    monkeypatch: pytest.MonkeyPatch, scenario: Path, result_dir: Path
) -> None:
    monkeypatch.setitem(sys.modules, "tacc._core", None)  # makes the import fail

    assert tacc.load(result_dir).summary["seed"] == 42
    with pytest.raises(tacc.EngineUnavailableError, match="maturin develop"):
        tacc.run(scenario)
    with pytest.raises(tacc.EngineUnavailableError):
        _ = tacc.ScenarioError
    assert tacc.__version__ == "0+unknown"
