"""The papers' experiments on the testbed (`tacc reproduce --testbed`): which of tacc's
variants the testbed can run on this machine and why it cannot run the others, the runs
(each variant repeated as many times as the experiment has seeds, one after another, cached
under OUT/testbed-runs/ like the simulator's runs), and their metrics at the scenario's
rates, which the report judges as a third verdict beside the paper's and the simulator's.

The testbed runs tacc's variants only: the paper's settings and the simulator's Linux TCP
are simulator profiles, and the testbed's TCP is Linux's own. A variant the testbed cannot
run leaves the rows that need it unjudged there ("-")."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tacc._progress import task_bar
from tacc.reproduce.registry import Experiment, Means, Variant
from tacc.reproduce.runner import Task, cache_key, engine_version, slug

RUNS_DIR = "testbed-runs"
# Part of every testbed run's cache key: the testbed's settings a reproduction uses.
SETTINGS = ("testbed: default options (rates capped at 100Mbps, no link delays), run i with "
            "seed i")
# A run's setting up and tearing down, beside its duration, for the estimates of --list.
OVERHEAD_S = 6.0


@dataclass
class Fit:
    """What of an experiment the testbed runs: its variants (with the scenario keys each
    runs without, under --approximate), and for the others why not (the reasons, joined,
    with the variants they refuse)."""

    exp: Experiment
    variants: list[Variant] = field(default_factory=list)
    refused: dict[str, list[str]] = field(default_factory=dict)
    # the departures, joined, with the variants that run without those keys
    approximated: dict[str, list[str]] = field(default_factory=dict)
    duration_s: float = 0.0  # the longest variant's, dilated where the run is
    # Every variant on one kind of switch: Open vSwitch where one of them has a controller
    # app that needs OpenFlow (`tacc testbed --switches`), so that a baseline is not judged
    # on Linux's cheaper forwarding against the mechanism on OVS's userspace datapath.
    switches: str = "auto"

    def line(self, runs: int) -> str:
        """One line for --list: what runs and how long it takes, or why nothing does."""
        total = len(self.variants) + sum(len(names) for names in self.refused.values())
        if not self.variants:
            return f"{self.exp.id:19} does not fit: {' / '.join(self.refused)}"
        minutes = len(self.variants) * runs * (self.duration_s + OVERHEAD_S) / 60
        out = (f"{self.exp.id:19} fits: {len(self.variants)} of {total} variants x {runs} "
               f"runs, about {minutes:.0f} min"
               + (", every variant on Open vSwitch switches" if self.switches == "ovs" else ""))
        for reason, names in self.refused.items():
            out += f"\n{'':22}not {', '.join(names)}: {reason}"
        for reason, names in self.approximated.items():
            out += f"\n{'':22}approximated {', '.join(names)}: {reason}"
        return out


@dataclass(frozen=True)
class Admission:
    """Whether the testbed runs a scenario, and how long the run takes."""

    refused: list[str]  # what the testbed cannot build at all
    departures: list[str]  # the keys it does not honour ("KEYS: REASON")
    duration_s: float  # dilated, with applications at a scaled rate
    openflow: bool = False  # the mechanism's controller needs OpenFlow (it runs on OVS)


def admission(scenario: Path, sets: Sequence[tuple[str, str]]) -> Admission:
    from tacc.testbed.departures import scenario_departures
    from tacc.testbed.plan import (
        DEFAULT_RATE_CAP_BPS,
        PlanError,
        load_plan,
        rate_scale,
        time_dilation,
    )
    from tacc.testbed.run import controller_kind

    try:
        plan = load_plan(scenario, sets)
    except PlanError as exc:
        return Admission([line for line in str(exc).splitlines() if line.strip()], [], 0.0)
    reasons: dict[str, list[str]] = {}
    for message, d in scenario_departures(scenario, sets):
        if not d.output_only:
            # "WHERE: KEY: REASON"; WHERE itself may hold a colon ("FILE:LINE").
            key = message[:-len(d.reason) - 2].rsplit(": ", 1)[-1]
            reasons.setdefault(d.reason, []).append(key)
    dilation = time_dilation(plan, rate_scale(plan, DEFAULT_RATE_CAP_BPS))
    return Admission([], [f"{', '.join(keys)}: {reason}" for reason, keys in reasons.items()],
                     plan["duration_ns"] * dilation / 1e9,
                     controller_kind(plan) == "openflow")


def fit(exp: Experiment, scale: float, approximate: bool = False) -> Fit:
    """The variants the testbed runs; with `approximate`, also those with scenario keys it
    does not honour (as `tacc testbed --approximate`), each departure recorded."""
    found = Fit(exp)
    for v in exp.build(scale):
        checked = admission(exp.scenario_path, v.sets)
        departures = "; ".join(checked.departures)
        if checked.refused or (departures and not approximate):
            found.refused.setdefault("; ".join(checked.refused or checked.departures),
                                     []).append(v.name)
            continue
        found.variants.append(v)
        found.duration_s = max(found.duration_s, checked.duration_s)
        if checked.openflow:
            found.switches = "ovs"
        if departures:
            found.approximated.setdefault(departures, []).append(v.name)
    return found


def plan(fits: Sequence[Fit], out: Path, runs: Mapping[str, int]
         ) -> tuple[list[Task], dict[str, dict[str, list[Path]]]]:
    """Every testbed run (cached or not) and, per experiment, the result dirs of each
    variant it runs, `runs[id]` runs a variant. Run i runs with seed i, so that its random
    draws (start jitter, workloads, incast jitter) are the simulator's seed i's."""
    version = engine_version()
    tasks: list[Task] = []
    dirs: dict[str, dict[str, list[Path]]] = {}
    for f in fits:
        dirs[f.exp.id] = {}
        for v in f.variants:
            for i in range(1, runs[f.exp.id] + 1):
                settings = f"{SETTINGS}, switches {f.switches}"
                key = cache_key(f.exp.scenario_path, (*v.sets, ("", settings)), i, version)
                d = out / RUNS_DIR / f.exp.id / f"{slug(v.name)}-r{i}-{key}"
                dirs[f.exp.id].setdefault(v.name, []).append(d)
                tasks.append(Task(f.exp.id, v.name, str(f.exp.scenario_path), v.sets, i,
                                  str(d), f.switches))
    return tasks, dirs


@dataclass(frozen=True)
class Runs:
    """An experiment on the testbed: what fits, and the result dirs of each variant run."""

    fit: Fit
    dirs: dict[str, list[Path]]


def check(tasks: Sequence[Task]) -> None:
    """Raises TestbedUnavailable when runs are to be made and this process cannot make
    them (the testbed's own checks of the machine come with the first run)."""
    from tacc.testbed import TestbedUnavailable

    if _pending(tasks) and os.geteuid() != 0:
        raise TestbedUnavailable(["not root: the testbed's namespaces, qdiscs and the BPF "
                                  "filesystem need euid 0"])


def _pending(tasks: Sequence[Task]) -> list[Task]:
    return [t for t in tasks if not (Path(t.out) / "summary.json").is_file()]


def execute(tasks: Sequence[Task]) -> int:
    """Runs the tasks not in the cache, one at a time (a testbed run takes the machine);
    returns how many ran. A run that fails raises TestbedError: the runs done stay cached,
    so the same command goes on from there."""
    from tacc.testbed.run import Options, run_testbed

    check(tasks)
    todo = _pending(tasks)
    # Only what `fit` let in is a task: a departure here was asked for with --approximate.
    with task_bar(len(tasks), done=len(tasks) - len(todo), desc="testbed") as step:
        for t in todo:
            tmp = Path(t.out + ".partial")
            shutil.rmtree(tmp, ignore_errors=True)
            run_testbed(t.scenario, (*t.sets, ("seed", str(t.seed))),
                        Options(out=tmp, quiet=True, approximate=True,
                                    switches=t.switches))
            tmp.rename(t.out)
            step(1)
    return len(todo)


def means(exp: Experiment, runs: dict[str, list[Path]], scale: float) -> Means:
    """The metrics of the testbed's runs, their rates brought to the scenario's."""
    from tacc.results import at_scenario_rates, load

    return exp.means(runs, scale, lambda d: at_scenario_rates(load(d)))
