"""tacc: a packet-level data-center network simulator.

The engine is Rust (the compiled module `tacc._core`); this package runs scenarios
through it and reads, tabulates and plots the result directories it writes.
Reading and plotting results work without the compiled engine. numpy, pandas and
matplotlib are imported only by what needs them, so that the CLI starts quickly.
"""

from __future__ import annotations

import errno
import importlib
import os
from collections.abc import Iterable, Mapping
from os import PathLike
from types import ModuleType

from tacc._progress import simulation_bar
from tacc.summary import jain_index, summary_table

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at start-up
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from tacc._core import ScenarioError as ScenarioError
    from tacc.results import Result as Result
    from tacc.results import load as load

    Scenario = str | PathLike[str]
    Overrides = Mapping[str, Any] | Iterable[tuple[str, Any]] | None

# ScenarioError is left out: star-importing it would need the compiled engine.
__all__ = [
    "EngineUnavailableError",
    "Result",
    "default_scenario_path",
    "jain_index",
    "load",
    "run",
    "run_dir",
    "summary_table",
    "validate",
]


class EngineUnavailableError(ImportError):
    """The compiled engine `tacc._core` cannot be imported."""


def default_scenario_path() -> Path:
    """The built-in scenario used when none is given (`"default"`)."""
    from pathlib import Path

    return Path(_default_scenario_file())


def _default_scenario_file() -> str:
    # The package is always unpacked on disk (a wheel or the source tree), so its own
    # folder will do, without importlib.resources and what that imports.
    return os.path.join(os.path.dirname(__file__), "scenarios", "default.toml")


def run(
    scenario: Scenario,
    seed: int | None = None,
    sets: Overrides = None,
    out: str | PathLike[str] | None = None,
    *,
    progress: bool = False,
    threads: int | None = None,
    partitions: int | None = None,
) -> Result:
    """Run a scenario file (or "default") and load its result directory.

    `sets` overrides scenario keys, e.g. {"topology.senders": 8, "duration": "10ms"}.
    Without `out` the result goes to a new temporary directory, which is kept.
    `progress` draws a bar of simulated time on stderr when stderr is a terminal.
    `threads` (default: the machine's cores) run the scenario's partitions, at most
    `partitions` of them (default: 2 on a fabric of 1,024 hosts or more; 1: none); the threads
    never change the results, the partitions do as another seed would.
    Raises ScenarioError for bad input and FileNotFoundError for a missing file.
    """
    from tacc.results import load

    return load(run_dir(scenario, seed, sets, out, progress=progress, threads=threads,
                        partitions=partitions))


def run_dir(
    scenario: Scenario,
    seed: int | None = None,
    sets: Overrides = None,
    out: str | PathLike[str] | None = None,
    *,
    progress: bool = False,
    threads: int | None = None,
    partitions: int | None = None,
) -> Path:
    """Like `run`, but returns the result directory without reading it (no pandas)."""
    from pathlib import Path

    return Path(_run_dir(scenario, seed, sets, out, progress=progress, threads=threads,
                         partitions=partitions))


def _run_dir(
    scenario: Scenario,
    seed: int | None = None,
    sets: Overrides = None,
    out: str | PathLike[str] | None = None,
    *,
    progress: bool = False,
    threads: int | None = None,
    partitions: int | None = None,
) -> str:
    """`run_dir` with the directory as a string: `tacc run` then needs no pathlib, whose
    import is about 3 ms of its start."""
    path = _scenario_file(scenario)
    engine = _engine()
    if out is None:
        import tempfile

        out_dir = tempfile.mkdtemp(prefix="tacc-")
    else:
        out_dir = os.path.normpath(out)  # as a Path would give it ("o/" as "o", "" as ".")
    bar = simulation_bar() if progress else None
    try:
        written: str = engine.run(
            path, seed=seed, sets=_set_pairs(sets), out=out_dir, progress=bar,
            threads=threads, partitions=partitions,
        )
    except BaseException:
        if out is None:
            import shutil

            shutil.rmtree(out_dir, ignore_errors=True)  # an empty temp dir is no use
        raise
    finally:
        if bar is not None:
            bar.close()
    return written


def validate(scenario: Scenario, sets: Overrides = None) -> dict[str, Any]:
    """Check a scenario without running it; returns its name, duration and sizes."""
    return dict(_engine().validate(_scenario_file(scenario), sets=_set_pairs(sets)))


def _scenario_file(scenario: Scenario) -> str:
    # normpath: the text a Path would give ("./x.toml" as "x.toml"), the engine's to report.
    path = _default_scenario_file() if scenario == "default" else os.path.normpath(scenario)
    if not os.path.isfile(path):
        raise FileNotFoundError(errno.ENOENT, "no such scenario file", path)
    return path


def _set_pairs(sets: Overrides) -> list[tuple[str, str]]:
    items = sets.items() if isinstance(sets, Mapping) else (sets or ())
    return [(str(key), _toml_text(value)) for key, value in items]


def _toml_text(value: Any) -> str:
    # str(True) is "True", which TOML would not read as a boolean.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _engine() -> ModuleType:
    # Imported on demand so that `import tacc`, `load` and plotting work without it.
    try:
        return importlib.import_module("tacc._core")
    except ImportError as exc:
        raise EngineUnavailableError(
            f"the compiled engine tacc._core is not available ({exc}); "
            "build it with `maturin develop --release` or install the tacc wheel"
        ) from exc


def __getattr__(name: str) -> Any:
    if name == "ScenarioError":
        return _engine().ScenarioError
    if name in ("Result", "load"):
        # tacc.results (dataclasses, pandas when loading) is not needed to start the CLI.
        from tacc import results

        return getattr(results, name)
    if name == "__version__":
        # The engine's version is the package's (both come from the Cargo workspace), and
        # asking it is far quicker than importlib.metadata.
        try:
            return _engine().version()
        except EngineUnavailableError:  # a source checkout without the built engine
            return "0+unknown"
    raise AttributeError(f"module 'tacc' has no attribute {name!r}")
