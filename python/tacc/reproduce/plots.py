"""The report's figures, as PNG and SVG: the kinds of plot the papers' modules choose from,
each made into an experiment's `plot` by the factories below."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tacc.reproduce.registry import Experiment, Plot, values
from tacc.reproduce.stats import mean_ci
from tacc.results import Result, load

Runs = dict[str, list[Path]]  # result directories by variant name


def figure(nrows: int, ncols: int, width: float = 5.0, height: float = 3.4) -> tuple[Any, Any]:
    # Agg directly, not pyplot: no display, no global figure state between experiments.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height * nrows), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def save(fig: Any, out: Path, stem: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    fig.tight_layout()
    for p in paths:
        fig.savefig(p)
    return paths


def tagged(panel_labels: Mapping[str, str], series_labels: Mapping[str, str], metric: str,
           what: str) -> Plot:
    """One panel per system: the tagged flow's goodput over time (the first seed), one line
    per competitor, labelled with `metric`'s mean over seeds."""
    def plot(exp: Experiment, runs: Runs, out: Path, scale: float) -> list[Path]:
        variants = exp.build(scale)
        panels = list(dict.fromkeys(v.panel for v in variants))
        ncols = min(2, len(panels))
        nrows = math.ceil(len(panels) / ncols)
        fig, axes = figure(nrows, ncols)
        for ax, panel in zip(axes.flat, panels, strict=False):
            for v in (v for v in variants if v.panel == panel):
                dirs = runs.get(v.name) or []
                if not dirs:
                    continue
                r = load(dirs[0])
                g = r.goodput[r.goodput["flow"] == "tagged"].sort_values("time_s")
                vals = [exp.metrics(load(d), scale)[metric] for d in dirs]
                ax.step(g["time_s"], g["goodput_mbps"], where="post",
                        label=f"{series_labels[v.series]} ({what} {np.mean(vals):.0f} Mb/s)")
            ax.set_title(panel_labels.get(panel, panel), fontsize=10)
            ax.set_xlabel("time (s)")
            ax.set_ylabel("tagged goodput (Mb/s)")
            ax.set_ylim(0, 1100)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, loc="upper left")
        for ax in list(axes.flat)[len(panels):]:
            ax.set_visible(False)
        fig.suptitle(exp.title, fontsize=11)
        return save(fig, out, exp.id)
    return plot


def victim(panel_labels: Mapping[str, str], flow: str, pair: tuple[str, str],
           window: tuple[float, float]) -> Plot:
    """One panel per variant (the first seed): a flow's goodput and the rate its sender's
    shim allows the (VM, destination) pair, with the attack's window shaded."""
    def plot(exp: Experiment, runs: Runs, out: Path, scale: float) -> list[Path]:
        variants = exp.build(scale)
        fig, axes = figure(1, len(variants))
        for ax, v in zip(axes[0], variants, strict=True):
            dirs = runs.get(v.name) or []
            if not dirs:
                ax.set_visible(False)
                continue
            r = load(dirs[0])
            g = r.goodput[r.goodput["flow"] == flow].sort_values("time_s")
            ax.step(g["time_s"], g["goodput_mbps"], where="post", label=f"{flow} goodput")
            if r.rates is not None:
                rate = r.rates[(r.rates["vm"] == pair[0]) & (r.rates["dst"] == pair[1])]
                ax.step(rate["time_s"], rate["rate_mbps"], where="post",
                        label=f"rate {pair[0]} -> {pair[1]}")
            ax.axvspan(window[0] * scale, window[1] * scale, color="red", alpha=0.1,
                       label="attack")
            ax.set_title(panel_labels.get(v.panel, v.panel), fontsize=10)
            ax.set_xlabel("time (s)")
            ax.set_ylabel("Mb/s")
            ax.set_ylim(0, 1100)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, loc="upper right")
        fig.suptitle(exp.title, fontsize=11)
        return save(fig, out, exp.id)
    return plot


def _cdf(ax: Any, data: np.ndarray, label: str) -> None:
    x = np.sort(np.asarray(data, dtype=float))
    if x.size == 0:
        return
    ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", label=label)


def cdfs(columns: Sequence[tuple[str, str]],
         data: Callable[[list[Result]], dict[str, np.ndarray]],
         labels: Mapping[str, str] | None = None, width: float = 4.0,
         height: float = 3.0) -> Plot:
    """A row of CDFs per panel, one per (key, axis label) column: `data(results of a
    variant's seeds)[key]`, one line per variant, labelled `labels[series]`."""
    def plot(exp: Experiment, runs: Runs, out: Path, scale: float) -> list[Path]:
        variants = exp.build(scale)
        panels = list(dict.fromkeys(v.panel for v in variants))
        fig, axes = figure(len(panels), len(columns), width, height)
        for row, panel in enumerate(panels):
            for v in (v for v in variants if v.panel == panel):
                dirs = runs.get(v.name) or []
                if not dirs:
                    continue
                series = data([load(d) for d in dirs])
                label = (labels or {}).get(v.series, v.series)
                for col, (key, _axis) in enumerate(columns):
                    _cdf(axes[row][col], series[key], label)
            for col, (_key, axis) in enumerate(columns):
                ax = axes[row][col]
                ax.set_xlabel(axis)
                ax.set_ylabel("CDF")
                ax.grid(alpha=0.3)
                if panel:
                    ax.set_title(panel, fontsize=9)
                ax.legend(fontsize=7, loc="lower right")
        fig.suptitle(exp.title, fontsize=11)
        return save(fig, out, exp.id)
    return plot


def _sweep_axis(ax: Any, means: Any, xs: Sequence[float], series_labels: Mapping[str, str],
                variant: Callable[[str, float], str], metric: str, mult: float,
                baseline: str | None, baseline_label: str, xscale: str) -> None:
    for series, label in series_labels.items():
        ys = [np.mean(values(means, variant(series, x), metric) or [math.nan]) * mult
              for x in xs]
        ax.plot(xs, ys, marker="o", label=label)
    if baseline is not None:
        base = np.mean(values(means, baseline, metric) or [math.nan]) * mult
        ax.axhline(base, color="grey", ls="--", label=baseline_label)
    if xscale == "symlog":  # a sweep from 0: linear below the smallest non-zero step
        step = min(x for x in xs if x > 0)
        ax.set_xscale("symlog", linthresh=step)
        ax.set_xlim(-0.3 * step, 1.3 * max(xs))
    else:
        ax.set_xscale(xscale)
    ax.set_xticks(list(xs), [f"{x:g}" for x in xs])
    ax.minorticks_off()
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def sweep(xs: Sequence[float], series_labels: Mapping[str, str],
          variant: Callable[[str, float], str], metrics: Sequence[tuple[str, str, float]],
          baseline: str | None, baseline_label: str, xlabel: str,
          xscale: str = "log") -> Plot:
    """One axis per (metric, axis label, multiplier): its mean over seeds against x for each
    series (variant(series, x) names the run), the baseline, if any, as a line."""
    def plot(exp: Experiment, runs: Runs, out: Path, scale: float) -> list[Path]:
        fig, axes = figure(1, len(metrics))
        means = exp.means(runs, scale)
        for ax, (metric, axis, mult) in zip(axes[0], metrics, strict=True):
            _sweep_axis(ax, means, xs, series_labels, variant, metric, mult, baseline,
                        baseline_label, xscale)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(axis)
        fig.suptitle(exp.title, fontsize=11)
        return save(fig, out, exp.id)
    return plot


def sweeps(panels: Sequence[tuple[str, Sequence[float], str]], series_labels: Mapping[str, str],
           variant: Callable[[str, str, float], str], metric: tuple[str, str, float],
           xscale: str = "log") -> Plot:
    """One axis per (parameter, values, axis label) swept on its own: the metric's mean over
    seeds against the parameter's value (variant(parameter, series, value) names the run)."""
    def plot(exp: Experiment, runs: Runs, out: Path, scale: float) -> list[Path]:
        fig, axes = figure(1, len(panels), width=4.0)
        means = exp.means(runs, scale)
        key, axis, mult = metric
        for ax, (param, xs, xlabel) in zip(axes[0], panels, strict=True):
            _sweep_axis(ax, means, xs, series_labels,
                        lambda series, x, p=param: variant(p, series, x), key, mult, None,
                        "", xscale)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(axis)
        fig.suptitle(exp.title, fontsize=11)
        return save(fig, out, exp.id)
    return plot


def bars(exp: Experiment, runs: Runs, out: Path, scale: float) -> list[Path]:
    """The paper's number beside tacc's (mean and 95% CI) for every throughput row and
    every FCT row, on two axes."""
    means = exp.means(runs, scale)
    rows = exp.rows()
    groups = [r for r in rows if "per flow" not in r.quantity]
    fig, axes = figure(1, 2)
    for ax, key, unit in ((axes[0][0], "throughput", "Mb/s"), (axes[0][1], "FCT", "s")):
        sel = [r for r in groups if key in r.quantity and "flow " not in r.quantity]
        if not sel:
            ax.set_visible(False)
            continue
        x = np.arange(len(sel))
        paper = [_paper_number(r.paper) for r in sel]
        ours = [mean_ci(r.value(means)) for r in sel]
        ax.bar(x - 0.2, paper, 0.4, label="paper")
        ax.bar(x + 0.2, [o[0] for o in ours], 0.4, yerr=[o[1] for o in ours], label="tacc")
        ax.set_xticks(x, [r.quantity.split(":")[0] for r in sel])
        ax.set_ylabel(f"{key} ({unit})")
        if key == "FCT":
            ax.set_yscale("log")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
    fig.suptitle(exp.title, fontsize=11)
    return save(fig, out, exp.id)


def _paper_number(text: str) -> float:
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return math.nan
