"""What an experiment is (variants, report rows, metrics), and the helpers the papers'
modules declare theirs with: `--set` literals, a row's numbers over seeds, their display."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import tacc
from tacc.reproduce.stats import mean_ci, within_spread
from tacc.results import Result, load

if TYPE_CHECKING:
    import pandas as pd

# means[(variant, metric)] = that metric of the variant's runs, one value per seed
Means = dict[tuple[str, str], list[float]]
# plot(experiment, result dirs by variant, figure dir, time scale) -> files written
Plot = Callable[["Experiment", dict[str, list[Path]], Path, float], list[Path]]

PAPER_NAMES = {
    "hygenicc": "HyGenICC (001/003, 000 §III-V)",
    "sdn-gcc": "SDN-GCC (000 §VI-IX)",
    "sicc": "SICC (002)",
    "sdn-ecn": "SDN-ECN (004)",
}

UNFINISHED_FCT_S = 2.0  # the SICC scripts count a flow that never finishes as 2000 ms


class ReproduceError(ValueError):
    """Bad selection or option: reported as one line, exit status 2."""


def scenario_dir() -> Path:
    """The papers' scenario files: in the installed package, or TACC_SCENARIO_DIR."""
    env = os.environ.get("TACC_SCENARIO_DIR")
    if env:
        return Path(env)
    return tacc.default_scenario_path().parent / "papers"


@dataclass(frozen=True)
class Variant:
    name: str  # unique within the experiment, e.g. "d/udp"
    sets: tuple[tuple[str, str], ...]
    panel: str = ""  # which panel (system) of the figure it belongs to
    series: str = ""  # which line of the panel (competitor type, ratio...)


@dataclass(frozen=True)
class Row:
    """One number (or claim) the paper prints, and how tacc's is computed and judged."""

    quantity: str
    paper: str  # as printed (a number or the paper's words)
    ideal: float | None
    unit: str
    # value(means) -> tacc's number, one per seed
    value: Callable[[Means], list[float]]
    # holds(mean of value, means) -> True / False / None (no judgement)
    holds: Callable[[float, Means], bool | None]
    cause: str = ""  # likely cause if it does not hold
    text: Callable[[Means], str] | None = None


@dataclass(frozen=True)
class Setting:
    """A setting where tacc's recommended value departs from what the paper specifies.
    `override(variant)` is what gives the variant the paper's value (nothing where the
    setting does not apply to it, e.g. a limiter setting on a run without limiters)."""

    key: str
    tacc: str  # tacc's value, as the report shows it
    paper: str  # what the paper specifies
    why: str  # why tacc departs from it
    override: Callable[[Variant], tuple[tuple[str, str], ...]]


MECHANISM_KIND = re.compile(r'kind="([a-z-]+)"')
MECHANISM_MODE = re.compile(r'mode="([a-z-]+)"')


def mechanism_setting(key: str, kinds: tuple[str, ...], literal: str, tacc: str, paper: str,
                      why: str) -> Setting:
    """A [mechanism] key given the paper's value (a TOML literal) on the variants whose
    mechanism (set inline) is one of `kinds`: a kind, or "kind:mode" for a kind's mode."""
    def override(v: Variant) -> tuple[tuple[str, str], ...]:
        mech = [m for k, m in v.sets if k == "mechanism"]
        kind = MECHANISM_KIND.search(mech[-1]) if mech else None
        if not kind:
            return ()
        mode = MECHANISM_MODE.search(mech[-1])
        name = f"{kind.group(1)}:{mode.group(1)}" if mode else kind.group(1)
        return ((f"mechanism.{key}", literal),) if name in kinds else ()
    return Setting(key, tacc, paper, why, override)


def scenario_setting(key: str, literal: str, tacc: str, paper: str, why: str) -> Setting:
    """A scenario key given the paper's value (a TOML literal) on every variant."""
    return Setting(key, tacc, paper, why, lambda _v: ((key, literal),))


PUBLISHED = "paper"  # the variants' names as the paper specifies them: "paper|<name>"
# tacc's variants with the simulator's Linux TCP (tcp.profile = "linux"): "linux|<name>"
LINUX = "linux"
LINUX_SETS = (("tcp.profile", '"linux"'),)


def one_changed(key: str) -> str:
    """The profile of the paper's settings with tacc's value of `key` alone."""
    return f"paper, tacc's {key}"


@dataclass
class Experiment:
    id: str
    paper: str
    title: str
    scenario: str
    build: Callable[[float], list[Variant]]  # time scale -> variants
    metrics: Callable[[Result, float], dict[str, float]]
    rows: Callable[[], list[Row]]
    plot: Plot
    seeds: int = 3
    quick_seeds: int = 2
    quick_scale: float = 0.2
    notes: str = ""
    # Where tacc's settings depart from the paper's: the experiment also runs as the paper
    # specifies and every claim gets both verdicts. () means tacc runs it as specified; None
    # marks tacc's own experiments (sensitivity, attacks), judged with tacc's settings only.
    published: tuple[Setting, ...] | None = ()
    # Claims about short flows, whose FCTs turn on how TCP repairs a loss: tacc's variants
    # also run with Linux's TCP (RACK-TLP, D-SACK, quick-ACK, its RTO, HyStart, Minshall's
    # rule; the scenario's own TCP keys kept), and every claim gets that verdict too.
    linux_tcp: bool = False

    @property
    def scenario_path(self) -> Path:
        return scenario_dir() / self.scenario

    def profiles(self) -> list[tuple[str, tuple[Setting, ...]]]:
        """The settings of each profile beside tacc's: the paper's, and with two or more
        departures, the paper's with each one setting set back to tacc's value."""
        settings = self.published or ()
        if not settings:
            return []
        out = [(PUBLISHED, settings)]
        if len(settings) > 1:
            out += [(one_changed(s.key), tuple(o for o in settings if o is not s))
                    for s in settings]
        return out

    def variants(self, scale: float) -> list[Variant]:
        """What runs: tacc's variants (`build`) and each of them in every profile, named
        "<profile>|<name>", and with Linux's TCP where the claims need it."""
        tacc = self.build(scale)
        out = list(tacc)
        for profile, settings in self.profiles():
            for v in tacc:
                extra = tuple(o for s in settings for o in s.override(v))
                out.append(Variant(f"{profile}|{v.name}", v.sets + extra, v.panel, v.series))
        if self.linux_tcp:
            out += [Variant(f"{LINUX}|{v.name}", v.sets + LINUX_SETS, v.panel, v.series)
                    for v in tacc]
        return out

    def means(self, runs: dict[str, list[Path]], scale: float,
              loader: Callable[[Path], Result] = load) -> Means:
        """The metrics of every finished run (read by `loader`), by (variant, metric), in
        seed order."""
        means: Means = {}
        for variant, dirs in runs.items():
            for d in dirs:
                if not (d / "summary.json").is_file():
                    continue
                for k, v in self.metrics(loader(d), scale).items():
                    means.setdefault((variant, k), []).append(v)
        return means


def profile_means(means: Means, profile: str | None) -> Means:
    """The means of one profile's runs under tacc's variant names (None: tacc's own)."""
    if profile is None:
        return {k: v for k, v in means.items() if "|" not in k[0]}
    prefix = profile + "|"
    return {(k[0][len(prefix):], k[1]): v for k, v in means.items()
            if k[0].startswith(prefix)}


@dataclass(frozen=True)
class Less:
    """The claim "variant a's metric is below factor x variant b's", judged on the means over
    seeds; `spread` says whether the two differ by less than the seeds' variation."""

    a: str
    b: str
    metric: str
    factor: float = 1.0

    def __call__(self, _v: float, m: Means) -> bool:
        return mean_of(m, self.a, self.metric) < self.factor * mean_of(m, self.b, self.metric)

    def spread(self, m: Means) -> bool | None:
        return within_spread(values(m, self.a, self.metric),
                             [self.factor * v for v in values(m, self.b, self.metric)])


# --------------------------------------------------------------------------- --set literals


def time_lit(seconds: float) -> str:
    """A TOML time literal for --set."""
    return f'"{round(seconds * 1e6)}us"'


# One-way controller latencies of the sensitivity sections, ms.
CONTROL_LATENCIES_MS = (0.0, 0.1, 1.0, 10.0, 50.0)


def duration(ms: float) -> str:
    """A duration for an `inline` table (a string there: `inline` quotes it)."""
    return f"{round(ms * 1000)}us"


def quoted(text: str) -> str:
    return json.dumps(text)


def inline(**kv: Any) -> str:
    """A TOML inline table, e.g. for `mechanism` or one of `flows`."""
    parts = []
    for k, v in kv.items():
        if isinstance(v, bool):
            parts.append(f"{k}={'true' if v else 'false'}")
        elif isinstance(v, (int, float)):
            parts.append(f"{k}={v}")
        else:
            parts.append(f"{k}={quoted(str(v))}")
    return "{" + ",".join(parts) + "}"


# --------------------------------------------------------------------------- rows' numbers


def values(means: Means, variant: str, metric: str) -> list[float]:
    return means.get((variant, metric), [])


def mean_of(means: Means, variant: str, metric: str) -> float:
    """Mean over seeds of one variant's metric (NaN when absent)."""
    return mean_ci(values(means, variant, metric))[0]


def near(tol: float, ref: float) -> Callable[[float, Any], bool]:
    return lambda v, _m: abs(v - ref) <= tol


def fmt(value: float, unit: str, ci: float | None = None) -> str:
    """`value` in `unit` (seconds below 1 s as ms), with ` ± ci` in the same unit if given."""
    if value is None or math.isnan(value):
        return "-"
    if unit == "s":
        scale, shown = (1e3, "ms") if abs(value) < 1 else (1.0, "s")
        pm = "" if ci is None else f" ± {ci * scale:.2f}"
        return f"{value * scale:.2f}{pm} {shown}"
    if unit == "%":
        return f"{value:.1f}%" + ("" if ci is None else f" ± {ci:.1f}")
    if unit == "":
        return f"{value:.3g}" + ("" if ci is None else f" ± {ci:.3g}")
    return f"{value:.1f} {unit}" + ("" if ci is None else f" ± {ci:.1f}")


def vs(m: Means, a: str, b: str, metric: str, unit: str) -> str:
    """Two variants' means, each with its 95% CI half-width when there are several seeds."""
    def side(v: str) -> str:
        vals = values(m, v, metric)
        mean, ci = mean_ci(vals)
        return fmt(mean, unit, ci if len(vals) > 1 and not math.isnan(ci) else None)
    return f"{side(a)} vs {side(b)}"


# --------------------------------------------------------------------------- result files


def window_mean(result: Result, flow: str, t0: float, t1: float) -> float:
    """Mean goodput (Mb/s) of one flow over [t0, t1), from goodput.csv (absent bins = 0)."""
    bin_s = float(result.summary["goodput_bin_s"])
    g = result.goodput
    g = g[(g["flow"] == flow) & (g["time_s"] >= t0 - 1e-9) & (g["time_s"] < t1 - 1e-9)]
    n = max(1, round((t1 - t0) / bin_s))
    return float(g["goodput_mbps"].sum() / n)


def port(result: Result, name: str) -> dict[str, Any]:
    for p in result.summary["ports"]:
        if p["name"] == name:
            return p
    raise KeyError(name)


def fct_values(flows: pd.DataFrame) -> np.ndarray:
    """Flow completion times, a flow that never finished counted as UNFINISHED_FCT_S."""
    fct = flows["fct"].astype(float).to_numpy()
    return np.where(np.isnan(fct), UNFINISHED_FCT_S, fct)
