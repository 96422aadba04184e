"""Reproduce the papers' experiments: a registry, a parallel runner with a cache, figures and
a report.

`tacc reproduce [PAPER|FIGURE ...] [--quick] [--jobs N] [--engine local|ray] [--out DIR]
[--testbed [--approximate]]`

Every experiment (one figure of a paper, or a group of panels) is a scenario file under
`tacc/scenarios/papers/` (shipped in the package; TACC_SCENARIO_DIR points elsewhere) plus
a list of variants, each a list of `--set` overrides of that file. The experiments are data,
declared one module per paper: `hygenicc`, `sdn_gcc`, `sicc`, `sdn_ecn` (the tagged-flow
dumbbell that HyGenICC and SDN-GCC share is in `tagged`), each with its variants, report rows
and metric functions, and a `PAPER` table of the numbers the paper prints, transcribed from
PAPERS.md. The rest does not depend on any paper:

- `registry`: what an experiment, a variant and a report row are, and the helpers the
  papers' modules declare them with;
- `runner`: tasks, cache keys (scenario text, overrides, seed, tacc version and engine
  build), execution in a local process pool or on a Ray cluster;
- `stats`: mean and 95% CI over seeds, Welch's test of whether two means differ by more
  than the seeds' spread;
- `plots`: the kinds of figure (PNG and SVG);
- `report`: evaluation of every row from the result files, REPORT.md and report.html, which
  record the command as typed and the engine that ran it;
- `on_testbed`: with --testbed, the same experiments on real Linux (`tacc.testbed`): which
  variants fit on the machine, their repeated runs, a third verdict per row.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from tacc.reproduce import hygenicc, on_testbed, sdn_ecn, sdn_gcc, sicc
from tacc.reproduce.registry import PAPER_NAMES, Experiment, ReproduceError, scenario_dir
from tacc.reproduce.report import ExperimentResult, evaluate, unresolved, write_report
from tacc.reproduce.runner import (
    MAX_SEED_FACTOR,
    SCALE_ENV,
    base_seeds,
    execute,
    plan,
    ray_available,
)

__all__ = [
    "BY_ID",
    "EXPERIMENTS",
    "MAX_SEED_FACTOR",
    "PAPER_NAMES",
    "SCALE_ENV",
    "Experiment",
    "ExperimentResult",
    "ReproduceError",
    "registry_table",
    "testbed_table",
    "reproduce",
    "scenario_dir",
    "select",
]

EXPERIMENTS: list[Experiment] = [
    *hygenicc.EXPERIMENTS, *sdn_gcc.EXPERIMENTS, *sicc.EXPERIMENTS, *sdn_ecn.EXPERIMENTS,
]
BY_ID = {e.id: e for e in EXPERIMENTS}


def select(names: Sequence[str]) -> list[Experiment]:
    """Experiments by paper name or figure id (all when empty), in registry order."""
    if not names:
        return list(EXPERIMENTS)
    chosen: set[str] = set()
    for name in names:
        key = name.lower()
        if key in BY_ID:
            chosen.add(key)
        elif key in PAPER_NAMES:
            chosen |= {e.id for e in EXPERIMENTS if e.paper == key}
        else:
            raise ReproduceError(
                f"unknown paper or figure {name!r}; choose from: "
                + ", ".join([*PAPER_NAMES, *BY_ID])
            )
    return [e for e in EXPERIMENTS if e.id in chosen]


def reproduce(names: Sequence[str] = (), *, quick: bool = False, jobs: int = 1,
              engine: str = "local", out: Path = Path("out/reproduce"),
              command: str = "tacc reproduce", testbed: bool = False,
              approximate: bool = False) -> tuple[Path, list[ExperimentResult]]:
    """Run (or take from the cache) the selected experiments and write the report; returns
    REPORT.md's path and the evaluated experiments. `command` is recorded in the report.
    With `testbed`, the variants that fit on the testbed also run there (as root), each as
    many times as the experiment has seeds, and every row gets the testbed's verdict; with
    `approximate` also the variants with scenario keys the testbed does not honour."""
    experiments = select(names)
    if engine not in ("local", "ray"):
        raise ReproduceError(f"unknown engine {engine!r}; choose local or ray")
    if engine == "ray" and not ray_available():
        raise ReproduceError("--engine ray needs the optional package ray "
                             "(pip install 'ray[default]'); use --engine local")
    if jobs < 1:
        raise ReproduceError("--jobs must be at least 1")
    for exp in experiments:
        if not exp.scenario_path.is_file():
            raise FileNotFoundError(2, "no such scenario file", str(exp.scenario_path))
    start = time.monotonic()
    seeds = {e.id: base_seeds(e, quick) for e in experiments}
    tasks, dirs, scales = plan(experiments, out, quick, seeds)
    on_tb: dict[str, on_testbed.Runs] = {}
    if testbed:
        fits = [on_testbed.fit(e, scales[e.id], approximate) for e in experiments]
        if not any(f.variants for f in fits):
            raise ReproduceError("no selected experiment fits on the testbed: "
                                 + "; ".join(f"{f.exp.id}: {', '.join(f.refused)}"
                                             for f in fits))
        tb_tasks, tb_dirs = on_testbed.plan(fits, out, dict(seeds))
        on_testbed.check(tb_tasks)  # before the simulations, not after them
        on_tb = {f.exp.id: on_testbed.Runs(f, tb_dirs[f.exp.id]) for f in fits}
    execute(tasks, jobs, engine)
    if testbed:
        on_testbed.execute(tb_tasks)

    def evaluated(e: Experiment) -> ExperimentResult:
        return evaluate(e, dirs[e.id], out, scales[e.id], on_tb.get(e.id))

    results = [evaluated(e) for e in experiments]
    # A comparison the seeds' spread could explain runs again with twice the seeds, up to
    # MAX_SEED_FACTOR times the experiment's own; one still within it then is not resolved.
    while more := {r.exp.id: 2 * seeds[r.exp.id] for r in results
                   if unresolved(r) and 2 * seeds[r.exp.id]
                   <= MAX_SEED_FACTOR * base_seeds(r.exp, quick)}:
        seeds.update(more)
        tasks, dirs, _ = plan([e for e in experiments if e.id in more], out, quick, seeds)
        execute(tasks, jobs, engine)
        results = [evaluated(r.exp) if r.exp.id in more else r for r in results]
    md, _html = write_report(results, out, quick=quick, wall=time.monotonic() - start,
                             command=command, engine=engine)
    return md, results


def registry_table() -> str:
    """One line per experiment: id, paper, scenario, variants, seeds."""
    lines = []
    for e in EXPERIMENTS:
        n = len(e.build(1.0))
        lines.append(f"{e.id:18} {e.paper:9} {e.scenario:26} {n:3} variants x {e.seeds} seeds"
                     f" ({len(e.rows())} report rows)")
    return "\n".join(lines)


def testbed_table(names: Sequence[str] = (), quick: bool = False,
                  approximate: bool = False) -> str:
    """Per selected experiment, what of it fits on the testbed (its variants, runs and an
    estimate of the time) or why nothing does."""
    lines = []
    for e in select(names):
        _tasks, _dirs, scales = plan([e], Path("."), quick)
        lines.append(on_testbed.fit(e, scales[e.id], approximate).line(base_seeds(e, quick)))
    return "\n".join(lines)
