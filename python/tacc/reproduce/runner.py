"""Running the experiments: every (variant, seed) is a task whose result directory is cached
under OUT/runs/, keyed by a hash of (scenario text, overrides, seed, tacc version and engine
build); the tasks not in the cache run in a local process pool or on a Ray cluster."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import tacc
from tacc._progress import task_bar
from tacc.reproduce.registry import Experiment

SCALE_ENV = "TACC_REPRODUCE_SCALE"  # overrides the --quick time scale (tests use it)


@dataclass(frozen=True)
class Task:
    experiment: str
    variant: str
    scenario: str
    sets: tuple[tuple[str, str], ...]
    seed: int
    out: str
    switches: str = "auto"  # a testbed run's (`tacc testbed --switches`)


@functools.cache
def engine_version() -> str:
    """Package and engine versions plus a digest of the compiled engine, so that a rebuilt
    engine (same version number, changed code) does not reuse cached runs."""
    try:
        import tacc._core as core

        build = hashlib.sha256(Path(core.__file__).read_bytes()).hexdigest()[:12]
        return f"{tacc.__version__}/{core.version()} (engine build {build})"
    except (ImportError, AttributeError, OSError):
        return tacc.__version__


def cache_key(scenario: Path, sets: Sequence[tuple[str, str]], seed: int,
              version: str | None = None) -> str:
    h = hashlib.sha256()
    h.update(scenario.read_bytes())
    h.update(json.dumps([list(s) for s in sets]).encode())
    h.update(str(seed).encode())
    h.update((version or engine_version()).encode())
    return h.hexdigest()[:16]


def slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)


# The most seeds a comparison within the seeds' spread gets, over the experiment's own.
MAX_SEED_FACTOR = 4


def base_seeds(exp: Experiment, quick: bool) -> int:
    return exp.quick_seeds if quick else exp.seeds


def plan(experiments: Sequence[Experiment], out: Path, quick: bool,
         seeds: Mapping[str, int] | None = None) -> tuple[
        list[Task], dict[str, dict[str, list[Path]]], dict[str, float]]:
    """All runs (cached or not) and, per experiment, the result dirs of each variant; each
    experiment with its own number of seeds unless `seeds` gives one by id."""
    version = engine_version()
    tasks: list[Task] = []
    dirs: dict[str, dict[str, list[Path]]] = {}
    scales: dict[str, float] = {}
    env_scale = os.environ.get(SCALE_ENV)
    for exp in experiments:
        scale = exp.quick_scale if quick else 1.0
        if quick and env_scale:
            scale = float(env_scale)
        scales[exp.id] = scale
        n_seeds = (seeds or {}).get(exp.id, base_seeds(exp, quick))
        dirs[exp.id] = {}
        # A variant whose settings the paper's profile leaves as they are runs once.
        made: dict[str, Path] = {}
        for v in exp.variants(scale):
            for seed in range(1, n_seeds + 1):
                key = cache_key(exp.scenario_path, v.sets, seed, version)
                if key in made:
                    dirs[exp.id].setdefault(v.name, []).append(made[key])
                    continue
                d = made[key] = out / "runs" / exp.id / f"{slug(v.name)}-s{seed}-{key}"
                dirs[exp.id].setdefault(v.name, []).append(d)
                tasks.append(Task(exp.id, v.name, str(exp.scenario_path), v.sets, seed, str(d)))
    return tasks, dirs, scales


def run_task(task: Task) -> str:
    """One simulation (in a worker process); a no-op when its summary.json exists."""
    if (Path(task.out) / "summary.json").is_file():
        return task.out
    import tacc._core as core

    # Written aside and renamed, so that an interrupted run never looks finished.
    tmp = Path(task.out + ".partial")
    core.run(task.scenario, seed=task.seed, sets=list(task.sets), out=str(tmp))
    if Path(task.out).exists():
        shutil.rmtree(task.out)
    tmp.rename(task.out)
    return task.out


def execute(tasks: Sequence[Task], jobs: int, engine: str = "local") -> int:
    """Run the tasks not in the cache; returns how many were run. A bar on stderr counts
    the runs done when stderr is a terminal."""
    todo = [t for t in tasks if not (Path(t.out) / "summary.json").is_file()]
    if not todo:
        return 0
    with task_bar(len(tasks), done=len(tasks) - len(todo), desc="reproduce") as step:
        if engine == "ray":
            _execute_ray(todo, step)
        elif jobs <= 1:
            for t in todo:
                run_task(t)
                step(1)
        else:
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                pending = {pool.submit(run_task, t) for t in todo}
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in done:
                        f.result()
                        step(1)
    return len(todo)


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _execute_ray(todo: Sequence[Task], step: Callable[[int], None]) -> None:
    import ray

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS") or None, log_to_driver=False)
    remote = ray.remote(run_task)
    pending = [remote.remote(t) for t in todo]
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        ray.get(done)
        step(len(done))
