"""Reproduce the papers' experiments: registry, parallel runner with a cache, figures, report.

`tacc reproduce [PAPER|FIGURE ...] [--quick] [--jobs N] [--engine local|ray] [--out DIR]`

Every experiment (one figure of a paper, or a group of panels) is a scenario file under
`scenarios/` plus a list of variants, each a list of `--set` overrides of that file. Each run's
result directory is cached under `OUT/runs/`, keyed by a hash of (scenario text, overrides,
seed, tacc version and engine build). Every tacc number in the report is computed here from the result files;
every paper number comes from the `PAPER` table below, transcribed from PAPERS.md.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import tacc
from tacc.results import Result, load

# --------------------------------------------------------------------------- paper numbers
# Transcribed from /work/shared/PAPERS.md (sections 1-4). Nothing below is a tacc result.

PAPER: dict[str, Any] = {
    # HyGenICC Figs. 2-4 (2 senders): qualitative, the share is "about 500 Mb/s".
    "hygenicc_share_2": 500.0,
    "hygenicc_static_rate": 500.0,
    # HyGenICC Fig. 3/5: converges to these shares "within about 1 s".
    "hygenicc_fig5_share": {4: 250.0, 8: 125.0},
    "hygenicc_fig5_convergence_s": 1.0,
    # SDN-GCC mean tagged goodput (Mb/s) over 30 s, vs TCP / DCTCP / UDP competitors.
    "sdngcc": {
        "1a": {"tcp": 416, "dctcp": 319, "udp": 153},
        "1b": {"tcp": 416, "dctcp": 375, "udp": 359},
        "4a": {"tcp": 406, "dctcp": 410, "udp": 410},
        "4b": {"tcp": 407, "dctcp": 407, "udp": 405},
        "5a": {"tcp": 374, "dctcp": 374, "udp": 366},
        "5b": {"tcp": 342, "dctcp": 342, "udp": 337},
        "5c": {"tcp": 347, "dctcp": 347, "udp": 336},
        "6a": {"tcp": 412, "dctcp": 412, "udp": 412},
        "6b": {"tcp": 404, "dctcp": 404, "udp": 400},
        "6c": {"tcp": 373, "dctcp": 373, "udp": 347},
    },
    "sdngcc_ideal": {4: 416, 8: 375, 16: 354, 32: 344},
    "sdngcc_static_rate": 250.0,
    # SDN-ECN (Mininet, 100 Mb/s): Cubic / ECN / RED / SDN-ECN.
    "sdnecn": {
        "topo1_throughput": {"cubic": 84.3, "ecn": 89.2, "red": 91.2, "sdn-ecn": 91.1},
        "topo2_throughput": {"cubic": 84.1, "ecn": 94.1, "red": 95.9, "sdn-ecn": 95.7},
        "topo1_fct": {"cubic": 10.64, "ecn": 0.36, "red": 0.41, "sdn-ecn": 0.34},
        "topo2_fct": {"cubic": 10.41, "ecn": 0.46, "red": 0.37, "sdn-ecn": 0.37},
        "multihop_throughput": {"cubic": 76.7, "ecn": 83.9, "red": 85.4, "sdn-ecn": 83.8},
        "multihop_fct": {"cubic": 19.46, "ecn": 1.01, "red": 1.1, "sdn-ecn": 0.64},
        "topo1_per_flow": {"cubic": (32.5, 25.8, 26.0), "sdn-ecn": (32.7, 29.7, 28.7)},
    },
}

PAPER_NAMES = {
    "hygenicc": "HyGenICC (001/003, 000 §III-V)",
    "sdn-gcc": "SDN-GCC (000 §VI-IX)",
    "sicc": "SICC (002)",
    "sdn-ecn": "SDN-ECN (004)",
}

SCALE_ENV = "TACC_REPRODUCE_SCALE"  # overrides the --quick time scale (tests use it)
UNFINISHED_FCT_S = 2.0  # the SICC scripts count a flow that never finishes as 2000 ms


class ReproduceError(ValueError):
    """Bad selection or option: reported as one line, exit status 2."""


def scenario_dir() -> Path:
    env = os.environ.get("TACC_SCENARIO_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent / "scenarios" / "papers"


# --------------------------------------------------------------------------- registry types


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
    # value(means) -> tacc's number; means[(variant, metric)] = list over seeds
    value: Callable[[dict[tuple[str, str], list[float]]], list[float]]
    # holds(mean of value, means) -> True / False / None (no judgement)
    holds: Callable[[float, dict[tuple[str, str], list[float]]], bool | None]
    cause: str = ""  # likely cause if it does not hold
    text: Callable[[dict[tuple[str, str], list[float]]], str] | None = None


@dataclass
class Experiment:
    id: str
    paper: str
    title: str
    scenario: str
    build: Callable[[float], list[Variant]]  # time scale -> variants
    metrics: Callable[[Result, float], dict[str, float]]
    rows: Callable[[], list[Row]]
    plot: Callable[[Experiment, dict[str, list[Path]], Path, float], list[Path]]
    seeds: int = 3
    quick_seeds: int = 2
    quick_scale: float = 0.2
    notes: str = ""

    @property
    def scenario_path(self) -> Path:
        return scenario_dir() / self.scenario


# --------------------------------------------------------------------------- helpers


def _t(seconds: float) -> str:
    """A TOML time literal for --set."""
    return f'"{round(seconds * 1e6)}us"'


def _q(text: str) -> str:
    return json.dumps(text)


def _inline(**kv: Any) -> str:
    parts = []
    for k, v in kv.items():
        if isinstance(v, bool):
            parts.append(f"{k}={'true' if v else 'false'}")
        elif isinstance(v, (int, float)):
            parts.append(f"{k}={v}")
        else:
            parts.append(f"{k}={_q(str(v))}")
    return "{" + ",".join(parts) + "}"


def _one(means: dict[tuple[str, str], list[float]], variant: str, metric: str) -> list[float]:
    return means.get((variant, metric), [])


def _mean(means: dict[tuple[str, str], list[float]], variant: str, metric: str) -> float:
    """Mean over seeds of one variant's metric (NaN when absent)."""
    return mean_ci(_one(means, variant, metric))[0]


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval (Student t; 0 for one value)."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if x.size == 0:
        return math.nan, math.nan
    if x.size == 1:
        return float(x[0]), 0.0
    return float(x.mean()), float(t95(x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))


# Two-sided 95% Student t quantiles by degrees of freedom (statistical constants).
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 15: 2.131, 20: 2.086, 30: 2.042}


def t95(df: float) -> float:
    """The two-sided 95% t quantile at `df` degrees of freedom, or the next larger one the
    table holds (between its entries, and beyond 30, the interval errs on the wide side)."""
    return _T95[max(k for k in _T95 if k <= max(df, 1))]


def within_spread(a: Sequence[float], b: Sequence[float]) -> bool | None:
    """Whether the means of two samples over seeds differ by less than Welch's t-test can
    tell from seed-to-seed variation (95%, two-sided); None with fewer than two of either."""
    x, y = (np.asarray([v for v in s if not math.isnan(v)], dtype=float) for s in (a, b))
    if x.size < 2 or y.size < 2:
        return None
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    if vx + vy == 0:
        return False
    df = (vx + vy) ** 2 / (vx ** 2 / (x.size - 1) + vy ** 2 / (y.size - 1))
    return bool(abs(x.mean() - y.mean()) < t95(df) * math.sqrt(vx + vy))


def _fmt(value: float, unit: str, ci: float | None = None) -> str:
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


def _window_mean(result: Result, flow: str, t0: float, t1: float) -> float:
    """Mean goodput (Mb/s) of one flow over [t0, t1), from goodput.csv (absent bins = 0)."""
    bin_s = float(result.summary["goodput_bin_s"])
    g = result.goodput
    g = g[(g["flow"] == flow) & (g["time_s"] >= t0 - 1e-9) & (g["time_s"] < t1 - 1e-9)]
    n = max(1, round((t1 - t0) / bin_s))
    return float(g["goodput_mbps"].sum() / n)


def _port(result: Result, name: str) -> dict[str, Any]:
    for p in result.summary["ports"]:
        if p["name"] == name:
            return p
    raise KeyError(name)


# --------------------------------------------------------------------------- tagged-flow figures

COMPETITORS = ("tcp", "dctcp", "udp")
COMPETITOR_LABEL = {"tcp": "vs TCP", "dctcp": "vs DCTCP", "udp": "vs UDP"}


def _competitor(kind: str, count: int, stop: float) -> str:
    common = {"name": "competitor", "count": count, "src": "s{i+1}", "dst": "r0"}
    if kind == "udp":
        return _inline(**common, transport="udp", rate="1Gbps", stop=f"{round(stop * 1e6)}us")
    return _inline(**common, cc="newreno" if kind == "tcp" else "dctcp",
                   stop=f"{round(stop * 1e6)}us")


def _tagged_variants(
    scale: float, duration: float, start: float, stop: float, senders: int,
    systems: Sequence[tuple[str, list[tuple[str, str]]]],
    competitors: Sequence[str] = COMPETITORS,
) -> list[Variant]:
    out = []
    for panel, system_sets in systems:
        for comp in competitors:
            sets = [
                ("duration", _t(duration * scale)),
                ("flows[0].start", _t(start * scale)),
                ("topology.senders", str(senders)),
                ("flows[1]", _competitor(comp, senders - 1, stop * scale)),
                *system_sets,
            ]
            out.append(Variant(f"{panel}/{comp}", tuple(sets), panel=panel, series=comp))
    return out


# RED's marking threshold K in the HyGenICC and SDN-GCC dumbbells (their scenario files).
RED_K_PKTS = 20


def _tagged_metrics(start: float, stop: float, duration: float, senders: int):
    def metrics(result: Result, scale: float) -> dict[str, float]:
        t_start, t_stop, t_end = start * scale, stop * scale, duration * scale
        tagged = result.flows.set_index("name").loc["tagged"]
        share = 1000.0 / senders
        overlap = _window_mean(result, "tagged", t_start, t_stop)
        alone = _window_mean(result, "tagged", t_stop, t_end)
        mean_run = float(tagged["bytes_delivered"]) * 8 / t_end / 1e6
        # convergence: start of the first bin from which every bin until the competitors
        # stop (the last one excepted) stays within 25% of the share
        g = result.goodput
        g = g[(g["flow"] == "tagged") & (g["time_s"] >= t_start - 1e-9)
              & (g["time_s"] < t_stop - 1e-9)].sort_values("time_s")
        ok = (abs(g["goodput_mbps"].to_numpy()[:-1] - share) <= 0.25 * share)
        conv = math.nan
        for k in range(len(ok)):
            if ok[k:].all():
                conv = float(g["time_s"].iloc[k] - t_start)
                break
        port = _port(result, "sw0->r0")
        comp = result.flows[result.flows["group"] == "competitor"]
        q = result.queues
        q = q[(q["port"] == "sw0->r0") & (q["time_s"] >= t_start) & (q["time_s"] < t_stop)]
        return {
            "above_k": 100 * float((q["backlog_pkts"] >= RED_K_PKTS).mean()),
            "overlap": overlap, "alone": alone, "mean_run": mean_run,
            "convergence_s": conv, "utilization": 100 * float(port["utilization"]),
            "competitor_mean": float(comp["goodput_mbps"].mean()),
            "drops": float(port["dropped"]),
        }
    return metrics


def _close(tol: float, ref: float) -> Callable[[float, Any], bool]:
    return lambda v, _m: abs(v - ref) <= tol


# HyGenICC Figs. 2-4 --------------------------------------------------------------------------

HYG_SYSTEMS = [
    ("a", [("tcp.ecn", "false")]),
    ("b", [("tcp.ecn", "true")]),
    ("c", [("mechanism", _inline(kind="static-rate", rate="500Mbps", on_shortage="queue"))]),
    ("d", [("mechanism", _inline(kind="hygenicc", on_shortage="queue"))]),
]
HYG_PANEL = {
    "a": "(a) no rate limit, no ECN", "b": "(b) no rate limit, TCP with ECN",
    "c": "(c) static 500 Mb/s per VM", "d": "(d) HyGenICC",
}
HYG_CAUSE = (
    "ns-2 vs tacc modelling: tacc's hosts have NIC transmit jitter and vNIC/NIC queues; "
    "every TCP flow, the competitors included, is window-limited to 20 segments (ns-2 "
    "window_) in every variant"
)


def _hyg24_rows() -> list[Row]:
    share = PAPER["hygenicc_share_2"]
    rows: list[Row] = []
    for c in COMPETITORS:
        rows.append(Row(
            f"(d) HyGenICC: tagged goodput 5-10 s {COMPETITOR_LABEL[c]}", f"about {share:g}",
            share, "Mb/s", lambda m, c=c: _one(m, f"d/{c}", "overlap"),
            _close(0.2 * share, share), HYG_CAUSE))
        rows.append(Row(
            f"(d) HyGenICC: link utilization {COMPETITOR_LABEL[c]}", "link stays full", 100.0,
            "%", lambda m, c=c: _one(m, f"d/{c}", "utilization"),
            lambda v, _m: v >= 90.0, HYG_CAUSE))
    for c in ("dctcp", "udp"):
        rows.append(Row(
            f"(a) no limit: tagged goodput 5-10 s {COMPETITOR_LABEL[c]}", "almost nothing",
            share, "Mb/s", lambda m, c=c: _one(m, f"a/{c}", "overlap"),
            lambda v, _m: v < 0.2 * share,
            "every flow, the competitor included, is limited to 20 segments (ns-2's window_, "
            "see the scenario header): one DCTCP flow with 20 segments in flight cannot hold "
            "the queue at K, so the non-ECT tagged flow, dropped only at K or above, keeps "
            "much of its share (next row); against line-rate UDP it starves"))
    rows.append(Row(
        "(a) no limit vs DCTCP: time with the queue at K or above, 5-10 s (tacc only)", "-",
        None, "%", lambda m: _one(m, "a/dctcp", "above_k"), lambda v, _m: None))
    rows.append(Row(
        "(b) ECN: tagged goodput 5-10 s vs TCP", "reaches its share", share, "Mb/s",
        lambda m: _one(m, "b/tcp", "overlap"), _close(0.2 * share, share), HYG_CAUSE))
    for c in ("dctcp", "udp"):
        rows.append(Row(
            f"(b) ECN: tagged goodput 5-10 s {COMPETITOR_LABEL[c]}", "below its share", share,
            "Mb/s", lambda m, c=c: _one(m, f"b/{c}", "overlap"),
            lambda v, _m: v < 0.8 * share, HYG_CAUSE))
    for c in COMPETITORS:
        rows.append(Row(
            f"(c) static: tagged goodput alone 10-15 s {COMPETITOR_LABEL[c]}",
            f"{PAPER['hygenicc_static_rate']:g} (not work-conserving)", 1000.0, "Mb/s",
            lambda m, c=c: _one(m, f"c/{c}", "alone"),
            _close(0.1 * PAPER["hygenicc_static_rate"], PAPER["hygenicc_static_rate"]),
            HYG_CAUSE))
    return rows


# HyGenICC Fig. 5 ------------------------------------------------------------------------------

def _hyg5_build(scale: float) -> list[Variant]:
    out = []
    for n in (4, 8):
        out += _tagged_variants(
            scale, 15, 5, 10, n,
            [(f"n{n}", [("mechanism", _inline(kind="hygenicc", on_shortage="queue"))])])
    return out


def _hyg5_metrics(result: Result, scale: float) -> dict[str, float]:
    n = len(result.flows)
    return _tagged_metrics(5, 10, 15, n)(result, scale)


def _hyg5_rows() -> list[Row]:
    rows = []
    for n, share in PAPER["hygenicc_fig5_share"].items():
        for c in COMPETITORS:
            rows.append(Row(
                f"{n} senders: tagged goodput 5-10 s {COMPETITOR_LABEL[c]}", f"{share:g}",
                share, "Mb/s", lambda m, n=n, c=c: _one(m, f"n{n}/{c}", "overlap"),
                _close(0.2 * share, share), HYG_CAUSE))
        rows.append(Row(
            f"{n} senders: time to reach 80% of the share vs UDP",
            f"within about {PAPER['hygenicc_fig5_convergence_s']:g} s", None, "s",
            lambda m, n=n: _one(m, f"n{n}/udp", "convergence_s"),
            lambda v, _m: v <= 1.0, HYG_CAUSE))
    return rows


# SDN-GCC Figs. 1, 4, 5, 6 and static ---------------------------------------------------------

SDNGCC_CAUSE = (
    "ns-2 vs tacc: 20-segment windows and queueing limiters (see the scenario header); "
    "tacc's controller latency and NIC jitter; the paper leaves the shim's constants open: "
    "tacc uses scale(C) = C/100 every 500 us and a grace period Tc of two controller "
    "intervals. The shim clears CE before delivery (clear_ce, 000 section VIII-C); without it "
    "the DCTCP competitors cut their own windows on the marks and are cut again by the "
    "controller, and the tagged flow gets more than its share. Against line-rate UDP every "
    "sender's rate saws between cuts and C/100 climbs; a slow controller (Ti 10-50 ms) lets "
    "the climb overflow the 100-packet buffer before it cuts, the tagged flow loses whole "
    "windows and waits out 200 ms timeouts that the UDP competitors do not have"
)


def _gcc(interval: str) -> list[tuple[str, str]]:
    # clear_ce: the shim hides the marks from the VMs (000 section VIII-C); the paper's
    # identical TCP and DCTCP columns show its DCTCP competitors never saw them.
    return [("mechanism", _inline(kind="sdn-gcc", interval=interval, on_shortage="queue", clear_ce=True))]


SDNGCC_FIGS: dict[str, tuple[int, list[tuple[str, list[tuple[str, str]]]]]] = {
    "sdn-gcc-fig1": (4, [("1a", [("tcp.ecn", "false")]), ("1b", [("tcp.ecn", "true")])]),
    "sdn-gcc-fig4": (4, [
        ("4a", [("mechanism", _inline(kind="hygenicc", on_shortage="queue"))]),
        ("4b", _gcc("5ms"))]),
    "sdn-gcc-fig5": (0, [("5a", _gcc("5ms")), ("5b", _gcc("5ms")), ("5c", _gcc("5ms"))]),
    "sdn-gcc-fig6": (4, [("6a", _gcc("1ms")), ("6b", _gcc("10ms")), ("6c", _gcc("50ms"))]),
}
FIG5_SENDERS = {"5a": 8, "5b": 16, "5c": 32}
SDNGCC_PANEL = {
    "1a": "1a: RED, TCP without ECN", "1b": "1b: RED, TCP with ECN",
    "4a": "4a: HyGenICC (timer 500 us)", "4b": "4b: SDN-GCC (Ti 5 ms)",
    "5a": "5a: SDN-GCC, 8 senders", "5b": "5b: SDN-GCC, 16 senders",
    "5c": "5c: SDN-GCC, 32 senders", "6a": "6a: SDN-GCC, Ti 1 ms",
    "6b": "6b: SDN-GCC, Ti 10 ms", "6c": "6c: SDN-GCC, Ti 50 ms",
    "static": "static 250 Mb/s per VM",
}


def _sdngcc_build(fig: str) -> Callable[[float], list[Variant]]:
    senders, systems = SDNGCC_FIGS[fig]

    def build(scale: float) -> list[Variant]:
        out = []
        for panel, sets in systems:
            n = senders or FIG5_SENDERS[panel]
            out += _tagged_variants(scale, 30, 10, 20, n, [(panel, sets)])
        return out
    return build


def _sdngcc_metrics(result: Result, scale: float) -> dict[str, float]:
    return _tagged_metrics(10, 20, 30, len(result.flows))(result, scale)


def _sdngcc_rows(fig: str) -> Callable[[], list[Row]]:
    senders, systems = SDNGCC_FIGS[fig]

    def rows() -> list[Row]:
        out = []
        for panel, _ in systems:
            n = senders or FIG5_SENDERS[panel]
            ideal = PAPER["sdngcc_ideal"][n]
            for c in COMPETITORS:
                paper = PAPER["sdngcc"][panel][c]
                out.append(Row(
                    f"{SDNGCC_PANEL[panel]}: mean tagged goodput {COMPETITOR_LABEL[c]}",
                    f"{paper:g}", float(ideal), "Mb/s",
                    lambda m, p=panel, c=c: _one(m, f"{p}/{c}", "mean_run"),
                    # agreement: within 10% of the paper's number
                    lambda v, _m, paper=paper: abs(v - paper) <= 0.1 * paper,
                    SDNGCC_CAUSE))
            if fig == "sdn-gcc-fig1":
                out += _starvation_rows(panel, n)
        return out
    return rows


def _starvation_rows(panel: str, senders: int) -> list[Row]:
    """Fig. 1's claims: the tagged flow's order TCP > DCTCP > UDP and starvation while shared."""
    share = 1000.0 / senders
    order = " > ".join(COMPETITOR_LABEL[c].removeprefix("vs ") for c in COMPETITORS)
    paper_order = " > ".join(f"{PAPER['sdngcc'][panel][c]:g}" for c in COMPETITORS)
    rows = [Row(
        f"{SDNGCC_PANEL[panel]}: order of the tagged goodput by competitor ({order})",
        paper_order, None, "Mb/s",
        lambda m: _one(m, f"{panel}/tcp", "mean_run"),
        lambda _v, m: all(
            _mean(m, f"{panel}/{a}", "mean_run") > _mean(m, f"{panel}/{b}", "mean_run")
            for a, b in zip(COMPETITORS, COMPETITORS[1:])),
        SDNGCC_CAUSE,
        text=lambda m: " > ".join(f"{_mean(m, f'{panel}/{c}', 'mean_run'):.0f}"
                                  for c in COMPETITORS))]
    if panel == "1a":
        for c in COMPETITORS[1:]:
            rows.append(Row(
                f"{SDNGCC_PANEL[panel]}: tagged goodput while shared (10-20 s) "
                f"{COMPETITOR_LABEL[c]}", "starves", share, "Mb/s",
                lambda m, c=c: _one(m, f"{panel}/{c}", "overlap"),
                lambda v, _m: v < 0.5 * share, SDNGCC_CAUSE))
    return rows


def _static_build(scale: float) -> list[Variant]:
    sets = [("mechanism", _inline(kind="static-rate", rate="250Mbps", on_shortage="queue"))]
    return _tagged_variants(scale, 30, 10, 20, 4, [("static", sets)])


def _static_rows() -> list[Row]:
    rate = PAPER["sdngcc_static_rate"]
    out = []
    for c in COMPETITORS:
        out.append(Row(
            f"static 250 Mb/s: tagged goodput 10-20 s {COMPETITOR_LABEL[c]}", "exact share",
            250.0, "Mb/s", lambda m, c=c: _one(m, f"static/{c}", "overlap"),
            _close(0.1 * rate, rate), SDNGCC_CAUSE))
        out.append(Row(
            f"static 250 Mb/s: tagged goodput alone 20-30 s {COMPETITOR_LABEL[c]}",
            f"{rate:g} (not work-conserving)", 1000.0, "Mb/s",
            lambda m, c=c: _one(m, f"static/{c}", "alone"),
            _close(0.1 * rate, rate), SDNGCC_CAUSE))
    return out


# SDN-GCC testbed (Fig. 8) ---------------------------------------------------------------------

def _fig8_build(scale: float) -> list[Variant]:
    base = [("duration", _t(20 * scale))]
    for k in range(3):
        base += [(f"incast[{k}].start", _t(10 * scale)),
                 (f"incast[{k}].interval", _t(0.1 * max(scale, 0.2)))]
    # The testbed ran the authors' prototype (000 section IX; PAPERS.md section 6): marks
    # polled every 1 ms, each source gets its destination's share of them, 5 Mb/s cut per mark.
    prototype = [("mechanism", _inline(kind="sdn-gcc", interval="1ms", split="per-destination",
                                       cut_per_mark="5Mbps", on_shortage="queue",
                                       clear_ce=True))]
    return [Variant(name, tuple(base + sets), panel=name, series=label)
            for name, label, sets in (("red-ecn", "RED-ECN", []),
                                      ("sdn-gcc", "SDN-GCC", _gcc("5ms")),
                                      ("sdn-gcc-prototype", "SDN-GCC prototype", prototype))]


def _fct_values(flows: pd.DataFrame) -> np.ndarray:
    fct = flows["fct"].astype(float).to_numpy()
    return np.where(np.isnan(fct), UNFINISHED_FCT_S, fct)


def _fig8_metrics(result: Result, scale: float) -> dict[str, float]:
    f = result.flows
    tcp = f[f["group"].str.startswith("tcp_")]["goodput_mbps"]
    udp = f[f["group"].str.startswith("udp_")]["goodput_mbps"]
    web = _fct_values(f[f["group"].str.startswith("web_")])
    return {
        "tcp_mean": float(tcp.mean()), "udp_mean": float(udp.mean()),
        "web_mean_fct": float(web.mean()), "web_std_fct": float(web.std()),
        "web_p99_fct": float(np.percentile(web, 99)),
        "web_unfinished": float(f[f["group"].str.startswith("web_")]["fct"].isna().sum()),
        "tcp_share": float(tcp.sum() / (tcp.sum() + udp.sum())) * 100,
        "tcp_timeouts": float(f[f["group"].str.startswith("tcp_")]["timeouts"].mean()),
        "utilization": 100 * float(_port(result, "agg0->tor3")["utilization"]),
    }


FIG8_SYSTEMS = {"sdn-gcc": "SDN-GCC", "sdn-gcc-prototype": "SDN-GCC prototype"}


def _fig8_rows() -> list[Row]:
    fair = 1000.0 / 42
    cause = ("the shim marks every packet ECT, so RED no longer drops the UDP packets at K. "
             "With the paper's algorithm each of the 42 limiters climbs by C/100 per 500 us "
             "once its grace period ends, together far faster than the 5 ms controller cuts: "
             "the 100-packet buffer overflows every cycle and the TCP elephants take the drops "
             "and sit in timeouts (timeout row) while UDP does not care. The prototype (1 ms "
             "polls, each source charged its destination's share of the marks, 5 Mb/s per "
             "mark) cuts hard enough to keep TCP above UDP but leaves the bottleneck "
             "under-used (utilization row), so neither reaches the fair share. The testbed's "
             "own details (iperf UDP rate, web server model) are not in the paper; see the "
             "scenario header")
    rows = [Row("RED-ECN: mean TCP elephant goodput", "TCP starves next to UDP", fair, "Mb/s",
                lambda m: _one(m, "red-ecn", "tcp_mean"), lambda v, _m: v < 0.5 * fair,
                cause)]
    for v, label in FIG8_SYSTEMS.items():
        rows += [
            Row(f"{label}: mean TCP elephant goodput", "TCP gets its share", fair, "Mb/s",
                lambda m, v=v: _one(m, v, "tcp_mean"), lambda x, _m: x >= 0.75 * fair, cause),
            Row(f"{label}: mean UDP elephant goodput", "UDP held to its share", fair, "Mb/s",
                lambda m, v=v: _one(m, v, "udp_mean"), lambda x, _m: x <= 1.25 * fair, cause),
            Row(f"{label}: web response time mean vs RED-ECN", "smaller", None, "s",
                lambda m, v=v: _one(m, v, "web_mean_fct"),
                lambda x, m: x < _mean(m, "red-ecn", "web_mean_fct"), cause,
                text=lambda m, v=v: _vs(m, v, "red-ecn", "web_mean_fct", "s")),
            Row(f"{label}: web response time std vs RED-ECN", "more uniform", None, "s",
                lambda m, v=v: _one(m, v, "web_std_fct"),
                lambda x, m: x < _mean(m, "red-ecn", "web_std_fct"), cause,
                text=lambda m, v=v: _vs(m, v, "red-ecn", "web_std_fct", "s")),
            Row(f"{label}: RTO timeouts per TCP elephant vs RED-ECN (tacc only)", "-", None,
                "", lambda m, v=v: _one(m, v, "tcp_timeouts"), lambda x, _m: None,
                text=lambda m, v=v: _vs(m, v, "red-ecn", "tcp_timeouts", "")),
            Row(f"{label}: bottleneck utilization (tacc only)", "-", 100.0, "%",
                lambda m, v=v: _one(m, v, "utilization"), lambda x, _m: None),
        ]
    return rows


def _vs(m: dict[tuple[str, str], list[float]], a: str, b: str, metric: str, unit: str) -> str:
    """Two variants' means, each with its 95% CI half-width when there are several seeds."""
    def side(v: str) -> str:
        values = _one(m, v, metric)
        mean, ci = mean_ci(values)
        return _fmt(mean, unit, ci if len(values) > 1 and not math.isnan(ci) else None)
    return f"{side(a)} vs {side(b)}"


# --------------------------------------------------------------------------- SICC

SICC_SYSTEMS: list[tuple[str, list[tuple[str, str]]]] = [
    ("tcp", []),
    ("sicc", [("mechanism", _inline(kind="sicc", initial_window=2.0, evaluate_on_syn=True))]),
    ("rwndq", [("mechanism", _inline(kind="rwndq"))]),
    ("dctcp", [("tcp.cc", '"dctcp"'), ("queue", _inline(kind="red-ecn", limit="83pkt",
                                                          k="15pkt"))]),
]
SICC_LABEL = {"tcp": "TCP-RED/ECN", "sicc": "SICC", "rwndq": "RWNDQ", "dctcp": "DCTCP"}
RATIOS = {"1:3": (20, 60), "1:1": (40, 40), "3:1": (60, 20)}
SICC_CAUSE = (
    "the settings follow the authors' ns-2 scripts: the TCP-RED/ECN baseline is ns-2's RED "
    "at its automatic thresholds, which never mark in an 83-packet buffer (a drop-tail "
    "baseline), SICC and RWNDQ run on drop-tail queues, DCTCP marks at K = 15. A mouse that "
    "SICC clamps to a one-segment window has no later segment to raise duplicate ACKs, so "
    "each of its losses is repaired only by the 200 ms timeout, and 80 one-segment windows "
    "plus the standing queue still overflow the buffer when the mice's data arrives (rows "
    "below); DCTCP keeps the queue near K = 15 and leaves the mice room. SICC reacts to SYN "
    "copies (evaluate_on_syn), see the scenario header; mice that never finish count as 2 s "
    "as in the authors' scripts"
)


def _sicc_time_sets(scale: float, n_incast: int = 1) -> list[tuple[str, str]]:
    # the last epoch starts at 3.92 s x scale: keep at least 0.5 s after it so that shortened
    # runs do not count mice cut off by the end of the run as unfinished (2 s)
    sets = [("duration", _t(max(5 * scale, 3.92 * scale + 0.5)))]
    for k in range(n_incast):
        sets.append((f"incast[{k}].interval", _t(0.98 * scale)))
    return sets


def _sicc_dumbbell_build(scale: float) -> list[Variant]:
    out = []
    for ratio, (el, mice) in RATIOS.items():
        base = _sicc_time_sets(scale) + [
            ("flows[0].count", str(el)), ("incast[0].count", str(mice)),
            ("incast[0].workers", _q(f"s{{i+{el}}}")),
        ]
        for system, sets in SICC_SYSTEMS:
            out.append(Variant(f"{ratio}/{system}", tuple(base + sets), panel=ratio,
                               series=system))
    return out


def _sicc_tree_build(n_incast: int) -> Callable[[float], list[Variant]]:
    def build(scale: float) -> list[Variant]:
        base = _sicc_time_sets(scale, n_incast)
        return [Variant(system, tuple(base + sets), panel="tree", series=system)
                for system, sets in SICC_SYSTEMS]
    return build


def _mice_frames(result: Result) -> tuple[pd.DataFrame, pd.DataFrame]:
    f = result.flows
    mice = f[f["group"].str.startswith("mice")].copy()
    mice["fct_s"] = _fct_values(mice)
    mice["worker"] = mice["name"].str.rsplit(".", n=1).str[0]
    elephants = f[f["group"].str.startswith("elephant")]
    return mice, elephants


def sicc_per_mouse(result: Result) -> pd.DataFrame:
    """Per mouse (worker): AFCT over its epochs, p99 and std of its FCTs, retransmissions."""
    mice, _ = _mice_frames(result)
    g = mice.groupby("worker")
    return pd.DataFrame({
        "afct": g["fct_s"].mean(),
        "p99": g["fct_s"].quantile(0.99),
        "std": g["fct_s"].std(ddof=0),
        "drops": g["retransmits"].sum(),
    })


def _sicc_metrics(result: Result, scale: float) -> dict[str, float]:
    mice, elephants = _mice_frames(result)
    per = sicc_per_mouse(result)
    return {
        "mice_afct": float(per["afct"].mean()),
        "mice_p99": float(np.percentile(mice["fct_s"], 99)),
        "mice_std": float(mice["fct_s"].std(ddof=0)),
        "mice_retransmits": float(mice["retransmits"].sum()),
        "mice_rto_hit": float((mice["fct_s"] >= 0.2).sum()),
        "mice_unfinished": float(mice["fct"].isna().sum()),
        "elephant_goodput": float(elephants["goodput_mbps"].mean()),
        "elephant_total": float(elephants["goodput_mbps"].sum()),
        "bottleneck_overflow_drops": float(
            max(p["dropped_overflow"] for p in result.summary["ports"])),
    }


@dataclass(frozen=True)
class _Less:
    """The claim "variant a's metric is below factor x variant b's", judged on the means over
    seeds; `spread` says whether the two differ by less than the seeds' variation."""

    a: str
    b: str
    metric: str
    factor: float = 1.0

    def __call__(self, _v: float, m: dict[tuple[str, str], list[float]]) -> bool:
        return _mean(m, self.a, self.metric) < self.factor * _mean(m, self.b, self.metric)

    def spread(self, m: dict[tuple[str, str], list[float]]) -> bool | None:
        return within_spread(_one(m, self.a, self.metric),
                             [self.factor * v for v in _one(m, self.b, self.metric)])


def _sicc_claims(prefix: str, ratios: Iterable[str]) -> list[Row]:
    rows = []
    for ratio in ratios:
        p = f"{ratio}/" if ratio else ""
        tag = f"{ratio} " if ratio else ""
        for other in ("tcp", "dctcp"):
            for metric, what in (("mice_afct", "mice AFCT"), ("mice_p99", "mice p99 FCT")):
                rows.append(Row(
                    f"{prefix}{tag}{what}: SICC < {SICC_LABEL[other]}", "SICC better", None,
                    "s", lambda m, p=p, metric=metric: _one(m, f"{p}sicc", metric),
                    _Less(f"{p}sicc", f"{p}{other}", metric), SICC_CAUSE,
                    text=lambda m, p=p, o=other, metric=metric: _vs(
                        m, f"{p}sicc", f"{p}{o}", metric, "s")))
        rows.append(Row(
            f"{prefix}{tag}mice AFCT: RWNDQ <= SICC", "SICC slightly worse than RWNDQ", None, "s",
            lambda m, p=p: _one(m, f"{p}rwndq", "mice_afct"),
            _Less(f"{p}rwndq", f"{p}sicc", "mice_afct", 1.0 + 1e-9), SICC_CAUSE,
            text=lambda m, p=p: _vs(m, f"{p}rwndq", f"{p}sicc", "mice_afct", "s")))
        rows.append(Row(
            f"{prefix}{tag}elephant goodput: SICC >= 90% of TCP-RED/ECN", "elephants unharmed",
            None, "Mb/s", lambda m, p=p: _one(m, f"{p}sicc", "elephant_goodput"),
            lambda v, m, p=p: v >= 0.9 * float(np.mean(_one(m, f"{p}tcp", "elephant_goodput"))),
            SICC_CAUSE,
            text=lambda m, p=p: _vs(m, f"{p}sicc", f"{p}tcp", "elephant_goodput", "Mb/s")))
    return rows


# What explains the mice's FCTs: counts summed over all mice (or the bottleneck port) of a run.
SICC_EVIDENCE = {
    "bottleneck_overflow_drops": "bottleneck overflow drops",
    "mice_retransmits": "mice retransmissions",
    "mice_rto_hit": "mice that waited out an RTO (FCT >= RTOmin 200 ms)",
    "mice_unfinished": "mice unfinished at the end",
}


def _sicc_dumbbell_rows() -> list[Row]:
    rows = _sicc_claims("", RATIOS)
    systems = [s for s, _ in SICC_SYSTEMS]
    names = " / ".join(SICC_LABEL[s] for s in systems)
    for ratio in RATIOS:
        for metric, what in SICC_EVIDENCE.items():
            rows.append(Row(
                f"{ratio} {what} (tacc only; {names})", "-", None, "",
                lambda m, r=ratio, k=metric: _one(m, f"{r}/sicc", k), lambda v, _m: None,
                text=lambda m, r=ratio, k=metric: " / ".join(
                    f"{_mean(m, f'{r}/{s}', k):.0f}" for s in systems)))
    rows.append(Row(
        "3:1 mice AFCT: DCTCP worst of the four", "DCTCP worst at 3:1", None, "s",
        lambda m: _one(m, "3:1/dctcp", "mice_afct"),
        lambda v, m: all(v >= float(np.mean(_one(m, f"3:1/{s}", "mice_afct")))
                         for s, _ in SICC_SYSTEMS),
        SICC_CAUSE))
    return rows


def _sicc_tree_rows() -> list[Row]:
    rows = []
    for system in ("sicc", "rwndq"):
        rows.append(Row(
            f"mice AFCT: {SICC_LABEL[system]} < DCTCP", f"{SICC_LABEL[system]} beats DCTCP",
            None, "s", lambda m, s=system: _one(m, s, "mice_afct"),
            _Less(system, "dctcp", "mice_afct"),
            SICC_CAUSE + "; the paper's host pairs and flow counts are not given",
            text=lambda m, s=system: _vs(m, s, "dctcp", "mice_afct", "s")))
    rows.append(Row(
        "elephant goodput: SICC >= 90% of TCP-RED/ECN", "elephants unharmed", None, "Mb/s",
        lambda m: _one(m, "sicc", "elephant_goodput"),
        lambda v, m: v >= 0.9 * float(np.mean(_one(m, "tcp", "elephant_goodput"))), SICC_CAUSE,
        text=lambda m: _vs(m, "sicc", "tcp", "elephant_goodput", "Mb/s")))
    return rows


# T sweep: T = 1 .. 100 RTTs of 100 us.
SWEEP_RTTS = (1, 2, 10, 20, 25, 30, 50, 100)
SWEEP_SERIES = {"syn": True, "poll": False}
SWEEP_LABEL = {"syn": "SICC (ON test on SYN copies too)", "poll": "SICC (poll every T only)"}


def _sweep_build(scale: float) -> list[Variant]:
    el, mice = RATIOS["1:1"]
    base = _sicc_time_sets(scale) + [
        ("flows[0].count", str(el)), ("incast[0].count", str(mice)),
        ("incast[0].workers", _q(f"s{{i+{el}}}")),
    ]
    out = [Variant("tcp", tuple(base), panel="sweep", series="tcp")]
    for series, on_syn in SWEEP_SERIES.items():
        for n in SWEEP_RTTS:
            mech = _inline(kind="sicc", initial_window=2.0, evaluate_on_syn=on_syn,
                           interval=f"{n * 100}us")
            out.append(Variant(f"{series}/T{n}", tuple(base + [("mechanism", mech)]),
                               panel=str(n), series=series))
    return out


def _sweep_rows() -> list[Row]:
    rows = []
    for series in SWEEP_SERIES:
        for n in SWEEP_RTTS:
            if n > 25:
                continue
            rows.append(Row(
                f"{SWEEP_LABEL[series]}, T = {n} RTT: mice AFCT < TCP-RED/ECN",
                "good up to about 25 RTTs", None, "s",
                lambda m, s=series, n=n: _one(m, f"{s}/T{n}", "mice_afct"),
                _Less(f"{series}/T{n}", "tcp", "mice_afct"), SICC_CAUSE,
                text=lambda m, s=series, n=n: _vs(m, f"{s}/T{n}", "tcp", "mice_afct", "s")))
        rows.append(Row(
            f"{SWEEP_LABEL[series]}: elephant goodput at every T >= 90% of TCP-RED/ECN",
            "elephant goodput unaffected", None, "Mb/s",
            lambda m, s=series: [min(np.mean(_one(m, f"{s}/T{n}", "elephant_goodput"))
                                     for n in SWEEP_RTTS)],
            lambda v, m: v >= 0.9 * float(np.mean(_one(m, "tcp", "elephant_goodput"))),
            SICC_CAUSE))
    return rows


# --------------------------------------------------------------------------- SDN-ECN

ECN_SYSTEMS: list[tuple[str, list[tuple[str, str]]]] = [
    ("cubic", [("tcp.ecn", "false")]),
    ("ecn", [("queue", _inline(kind="red-ecn", limit="1000pkt", k="20pkt"))]),
    # RED marks ECT packets (the hosts are ECN-capable; Linux `tc red ecn`). The dropping
    # form (ecn=false) stalls every flow in RTO backoff in tacc at these thresholds.
    ("red", [("queue", '{kind="red",limit="1000pkt",min_th="20pkt",max_th="60pkt",'
                       'max_p=0.1,ecn=true}')]),
    ("sdn-ecn", [("mechanism", _inline(kind="sdn-ecn"))]),
]
ECN_LABEL = {"cubic": "Cubic", "ecn": "ECN", "red": "RED", "sdn-ecn": "SDN-ECN"}
ECN_CAUSE = (
    "Mininet/Linux vs tacc: link delays and buffers are not in the paper (1 ms, 1000 packets "
    "here), Linux TSO/pacing and the exact RED/ECN settings of 'ECN' and 'RED' are unknown"
)


# The paper's bufferbloat taken further: 3000-packet drop-tail queues (360 ms at 100 Mb/s).
# SDN-ECN once with the paper's 2 s probes and once probing every 100 ms with 50 ms rules.
BLOAT_QUEUE = (("queue.limit", '"3000pkt"'),)
BLOAT_SYSTEMS: list[tuple[str, list[tuple[str, str]]]] = [
    ("cubic", [("tcp.ecn", "false")]),
    ("sdn-ecn", [("mechanism", _inline(kind="sdn-ecn"))]),
    ("sdn-ecn-100ms", [("mechanism", _inline(kind="sdn-ecn", interval="100ms",
                                             rule_timeout="50ms"))]),
]
BLOAT_LABEL = {"cubic": "Cubic", "sdn-ecn": "SDN-ECN (2 s probes)",
               "sdn-ecn-100ms": "SDN-ECN (100 ms probes)"}


def _ecn_build(fct: str | None, systems: list[tuple[str, list[tuple[str, str]]]] = ECN_SYSTEMS,
               extra: tuple[tuple[str, str], ...] = ()) -> Callable[[float], list[Variant]]:
    def build(scale: float) -> list[Variant]:
        base = [("duration", _t(30 * scale)), *extra]
        if fct in ("star", "dumbbell"):
            dst = "r0" if fct == "star" else "r{i}"
            bulk = _inline(name="bulk", count=2, src="s{i}", dst=dst)
            inter = _inline(name="interactive", src="s2", dst="r0" if fct == "star" else "r2",
                            start=f"{round(5e6 * scale)}us", bytes="2MB")
            base.append(("flows", f"[{bulk},{inter}]"))
        elif fct == "multihop":
            for k in (4, 5):
                base.append((f"flows[{k}].start", _t(5 * scale)))
        return [Variant(s, tuple(base + sets), panel=s, series=s) for s, sets in systems]
    return build


def _ecn_metrics(result: Result, scale: float) -> dict[str, float]:
    f = result.flows
    bulk = f[~f["group"].str.startswith("interactive")].sort_values("name")
    inter = f[f["group"].str.startswith("interactive")]
    out = {"total": float(bulk["goodput_mbps"].sum()),
           "rules": float(result.summary.get("control", {}).get("rules_installed", 0))}
    for i, v in enumerate(bulk["goodput_mbps"]):
        out[f"flow{i}"] = float(v)
    if len(inter):
        end = float(result.summary["sim_seconds"])
        fct = inter["fct"].astype(float).to_numpy()
        start = inter["start"].astype(float).to_numpy()
        out["fct"] = float(np.where(np.isnan(fct), end - start, fct).mean())
        out["fct_unfinished"] = float(np.isnan(fct).sum())
    return out


def _ecn_rows(key_tp: str | None, key_fct: str | None, ideal_fct: float | None,
              per_flow: bool = False) -> Callable[[], list[Row]]:
    def rows() -> list[Row]:
        out = []
        if key_tp:
            for s, _ in ECN_SYSTEMS:
                p = PAPER["sdnecn"][key_tp][s]
                out.append(Row(
                    f"{ECN_LABEL[s]}: total throughput", f"{p:g}", 100.0, "Mb/s",
                    lambda m, s=s: _one(m, s, "total"),
                    lambda v, _m, p=p: abs(v - p) <= 0.1 * p, ECN_CAUSE))
        if per_flow:
            for s, flows in PAPER["sdnecn"]["topo1_per_flow"].items():
                for i, p in enumerate(flows):
                    out.append(Row(
                        f"{ECN_LABEL[s]}: throughput of flow {i + 1}", f"{p:g}", 100.0 / 3,
                        "Mb/s", lambda m, s=s, i=i: _one(m, s, f"flow{i}"),
                        lambda v, _m, p=p: abs(v - p) <= 0.15 * p, ECN_CAUSE))
        out.append(Row(
            "SDN-ECN: CC flow rules installed (tacc only)", "-", None, "",
            lambda m: _one(m, "sdn-ecn", "rules"), lambda v, _m: None))
        if key_fct:
            for s, _ in ECN_SYSTEMS:
                p = PAPER["sdnecn"][key_fct][s]
                out.append(Row(
                    f"{ECN_LABEL[s]}: 2 MB interactive FCT", f"{p:g} s", ideal_fct, "s",
                    lambda m, s=s: _one(m, s, "fct"),
                    # same magnitude: within a factor of 2
                    lambda v, _m, p=p: 0.5 * p <= v <= 2.0 * p, ECN_CAUSE))
        return out
    return rows


# 2 MB at a third of 100 Mb/s (two bulk flows and the interactive one share the bottleneck)
_FCT_FAIR_3 = 2e6 * 8 / (100e6 / 3)


def _bloat_rows() -> list[Row]:
    paper = PAPER["sdnecn"]["topo1_fct"]
    paper_gain = paper["cubic"] / paper["sdn-ecn"]
    cause = ("with the paper's 2 s probes and 1 s rules the bulk flows are marked at most half "
             "of the time and the standing queue refills between the rules, so the 2 MB flow "
             "spends most of its life behind it; probing every 100 ms keeps the bulk flows' "
             "windows cut. " + ECN_CAUSE)

    out = [Row(f"{BLOAT_LABEL[s]}: 2 MB interactive FCT",
               f"{paper['sdn-ecn' if s.startswith('sdn-ecn') else s]:g} s", _FCT_FAIR_3, "s",
               lambda m, s=s: _one(m, s, "fct"), lambda v, _m: None)
           for s, _ in BLOAT_SYSTEMS]
    for s in ("sdn-ecn", "sdn-ecn-100ms"):
        out.append(Row(
            f"{BLOAT_LABEL[s]}: FCT gain over deep-buffer Cubic (Cubic FCT / SDN-ECN FCT)",
            f"{paper_gain:.0f}x ({paper['cubic']:g} s / {paper['sdn-ecn']:g} s)", None, "",
            lambda m, s=s: [_mean(m, "cubic", "fct") / _mean(m, s, "fct")],
            lambda v, _m: v >= 10.0, cause,
            text=lambda m, s=s: f"{_mean(m, 'cubic', 'fct') / _mean(m, s, 'fct'):.1f}x"))
        out.append(Row(
            f"{BLOAT_LABEL[s]}: CC flow rules installed (tacc only)", "-", None, "",
            lambda m, s=s: _one(m, s, "rules"), lambda v, _m: None))
    return out


# --------------------------------------------------------------------------- plots


def _figure(nrows: int, ncols: int, width: float = 5.0, height: float = 3.4):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height * nrows), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _save(fig: Any, out: Path, stem: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    fig.tight_layout()
    for p in paths:
        fig.savefig(p)
    return paths


def _panel_labels(exp: Experiment) -> dict[str, str]:
    return {**HYG_PANEL, **SDNGCC_PANEL, "n4": "HyGenICC, 4 senders",
            "n8": "HyGenICC, 8 senders"}


def _plot_tagged(exp: Experiment, runs: dict[str, list[Path]], out: Path,
                 scale: float) -> list[Path]:
    variants = exp.build(scale)
    panels = list(dict.fromkeys(v.panel for v in variants))
    ncols = min(2, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = _figure(nrows, ncols)
    labels = _panel_labels(exp)
    metric = "mean_run" if exp.paper == "sdn-gcc" else "overlap"
    what = "mean over the run" if metric == "mean_run" else "mean while sharing"
    for ax, panel in zip(axes.flat, panels, strict=False):
        for v in (v for v in variants if v.panel == panel):
            dirs = runs.get(v.name) or []
            if not dirs:
                continue
            r = load(dirs[0])
            g = r.goodput[r.goodput["flow"] == "tagged"].sort_values("time_s")
            vals = [exp.metrics(load(d), scale)[metric] for d in dirs]
            ax.step(g["time_s"], g["goodput_mbps"], where="post",
                    label=f"{COMPETITOR_LABEL[v.series]} ({what} {np.mean(vals):.0f} Mb/s)")
        ax.set_title(labels.get(panel, panel), fontsize=10)
        ax.set_xlabel("time (s)")
        ax.set_ylabel("tagged goodput (Mb/s)")
        ax.set_ylim(0, 1100)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(exp.title, fontsize=11)
    return _save(fig, out, exp.id)


def _cdf(ax: Any, values: np.ndarray, label: str) -> None:
    x = np.sort(np.asarray(values, dtype=float))
    if x.size == 0:
        return
    ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", label=label)


def _plot_sicc(exp: Experiment, runs: dict[str, list[Path]], out: Path,
               scale: float) -> list[Path]:
    variants = exp.build(scale)
    panels = list(dict.fromkeys(v.panel for v in variants))
    cols = [("afct", "mice AFCT (ms)", 1e3), ("p99", "per-mouse p99 FCT (ms)", 1e3),
            ("drops", "mice retransmissions", 1.0), ("goodput", "elephant goodput (Mb/s)", 1.0)]
    fig, axes = _figure(len(panels), len(cols), width=4.0, height=3.0)
    for row, panel in enumerate(panels):
        for v in (v for v in variants if v.panel == panel):
            dirs = runs.get(v.name) or []
            if not dirs:
                continue
            frames = [load(d) for d in dirs]
            per = pd.concat([sicc_per_mouse(r) for r in frames])
            eleph = pd.concat([_mice_frames(r)[1]["goodput_mbps"] for r in frames])
            data = {"afct": per["afct"], "p99": per["p99"], "drops": per["drops"],
                    "goodput": eleph}
            for col, (key, _label, mult) in enumerate(cols):
                _cdf(axes[row][col], data[key].to_numpy() * mult, SICC_LABEL[v.series])
        for col, (_key, label, _m) in enumerate(cols):
            ax = axes[row][col]
            ax.set_xlabel(label)
            ax.set_ylabel("CDF")
            ax.grid(alpha=0.3)
            ax.set_title(f"{panel}" if panel != "tree" else exp.title, fontsize=9)
            ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(exp.title, fontsize=11)
    return _save(fig, out, exp.id)


def _plot_sweep(exp: Experiment, runs: dict[str, list[Path]], out: Path,
                scale: float) -> list[Path]:
    fig, axes = _figure(1, 2)
    means = _collect(exp, runs, scale)
    for series in SWEEP_SERIES:
        afct = [np.mean(_one(means, f"{series}/T{n}", "mice_afct") or [math.nan]) * 1e3
                for n in SWEEP_RTTS]
        good = [np.mean(_one(means, f"{series}/T{n}", "elephant_goodput") or [math.nan])
                for n in SWEEP_RTTS]
        axes[0][0].plot(SWEEP_RTTS, afct, marker="o", label=SWEEP_LABEL[series])
        axes[0][1].plot(SWEEP_RTTS, good, marker="o", label=SWEEP_LABEL[series])
    base_afct = np.mean(_one(means, "tcp", "mice_afct") or [math.nan]) * 1e3
    base_good = np.mean(_one(means, "tcp", "elephant_goodput") or [math.nan])
    axes[0][0].axhline(base_afct, color="grey", ls="--", label="TCP-RED/ECN")
    axes[0][1].axhline(base_good, color="grey", ls="--", label="TCP-RED/ECN")
    for ax, label in ((axes[0][0], "mice AFCT (ms)"), (axes[0][1], "elephant goodput (Mb/s)")):
        ax.set_xscale("log")
        ax.set_xlabel("T (RTTs of 100 us)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(exp.title, fontsize=11)
    return _save(fig, out, exp.id)


def _plot_bars(exp: Experiment, runs: dict[str, list[Path]], out: Path,
               scale: float) -> list[Path]:
    means = _collect(exp, runs, scale)
    rows = exp.rows()
    groups = [r for r in rows if "per flow" not in r.quantity]
    fig, axes = _figure(1, 2)
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
    return _save(fig, out, exp.id)


def _plot_fig8(exp: Experiment, runs: dict[str, list[Path]], out: Path,
               scale: float) -> list[Path]:
    fig, axes = _figure(1, 3, width=4.2)
    for v in exp.build(scale):
        frames = [load(d) for d in runs.get(v.name) or []]
        if not frames:
            continue
        f = pd.concat([r.flows for r in frames])
        _cdf(axes[0][0], f[f["group"].str.startswith("tcp_")]["goodput_mbps"], v.series)
        _cdf(axes[0][1], f[f["group"].str.startswith("udp_")]["goodput_mbps"], v.series)
        _cdf(axes[0][2], _fct_values(f[f["group"].str.startswith("web_")]) * 1e3, v.series)
    for ax, label in zip(axes[0], ("TCP elephant goodput (Mb/s)", "UDP elephant goodput (Mb/s)",
                                   "web response time (ms)"), strict=True):
        ax.set_xlabel(label)
        ax.set_ylabel("CDF")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(exp.title, fontsize=11)
    return _save(fig, out, exp.id)


def _paper_number(text: str) -> float:
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return math.nan


# --------------------------------------------------------------------------- the registry

EXPERIMENTS: list[Experiment] = [
    Experiment(
        "hygenicc-fig2-4", "hygenicc",
        "HyGenICC Figs. 2-4: tagged TCP (5-15 s) vs 1 competitor (0-10 s), 1 Gb/s",
        "hygenicc_fig2-5.toml",
        lambda s: _tagged_variants(s, 15, 5, 10, 2, HYG_SYSTEMS),
        _tagged_metrics(5, 10, 15, 2), _hyg24_rows, _plot_tagged,
        notes="Systems (a)-(d) x competitor TCP / DCTCP / UDP. " + HYG_CAUSE + ".",
    ),
    Experiment(
        "hygenicc-fig5", "hygenicc",
        "HyGenICC Fig. 5: 4 and 8 senders, tagged TCP (5-15 s)", "hygenicc_fig2-5.toml",
        _hyg5_build, _hyg5_metrics, _hyg5_rows, _plot_tagged,
    ),
    *[
        Experiment(
            fig, "sdn-gcc",
            f"SDN-GCC Fig. {fig[-1]}: tagged TCP (10-30 s) vs competitors (0-20 s), 1 Gb/s",
            "sdngcc_fig1-6.toml", _sdngcc_build(fig), _sdngcc_metrics, _sdngcc_rows(fig),
            _plot_tagged, notes=SDNGCC_CAUSE + ".",
        )
        for fig in SDNGCC_FIGS
    ],
    Experiment(
        "sdn-gcc-static", "sdn-gcc", "SDN-GCC: static 250 Mb/s per-VM limit",
        "sdngcc_fig1-6.toml", _static_build, _sdngcc_metrics, _static_rows, _plot_tagged,
    ),
    Experiment(
        "sdn-gcc-fig8", "sdn-gcc",
        "SDN-GCC Fig. 8 (testbed): 4 racks x 7 servers, 42 elephants + 126 web requests",
        "sdngcc_fig8_testbed.toml", _fig8_build, _fig8_metrics, _fig8_rows, _plot_fig8,
        seeds=2,
    ),
    Experiment(
        "sicc-dumbbell", "sicc",
        "SICC dumbbell: 80 flows, elephants:mice 1:3 / 1:1 / 3:1", "sicc_dumbbell.toml",
        _sicc_dumbbell_build, _sicc_metrics, _sicc_dumbbell_rows, _plot_sicc,
        notes=SICC_CAUSE + ".",
    ),
    Experiment(
        "sicc-tree144", "sicc", "SICC tree: 3 ToR x 48 servers (144)", "sicc_tree144.toml",
        _sicc_tree_build(3), _sicc_metrics, _sicc_tree_rows, _plot_sicc, seeds=5,
    ),
    Experiment(
        "sicc-tree288", "sicc", "SICC tree: 6 ToR x 48 servers (288)", "sicc_tree288.toml",
        _sicc_tree_build(6), _sicc_metrics, _sicc_tree_rows, _plot_sicc, seeds=3,
    ),
    Experiment(
        "sicc-sweep", "sicc", "SICC sensitivity to T (1-100 RTTs), dumbbell 1:1",
        "sicc_dumbbell.toml", _sweep_build, _sicc_metrics, _sweep_rows, _plot_sweep,
        seeds=2,
        notes="With the ON test on SYN copies the poll interval only matters for the OFF "
              "decision; the poll-only series shows the interval's effect on its own.",
    ),
    Experiment(
        "sdn-ecn-topo1", "sdn-ecn", "SDN-ECN Topology 1 (star S1-S3 -> R1): throughput",
        "sdnecn_topo1.toml", _ecn_build(None), _ecn_metrics,
        _ecn_rows("topo1_throughput", None, None, per_flow=True), _plot_bars,
        quick_scale=1.0, notes=ECN_CAUSE + ".",
    ),
    Experiment(
        "sdn-ecn-topo1-fct", "sdn-ecn", "SDN-ECN Topology 1: 2 MB interactive FCT",
        "sdnecn_topo1.toml", _ecn_build("star"), _ecn_metrics,
        _ecn_rows(None, "topo1_fct", _FCT_FAIR_3), _plot_bars, quick_scale=1.0,
    ),
    Experiment(
        "sdn-ecn-bufferbloat", "sdn-ecn",
        "SDN-ECN Topology 1, 3000-packet buffers: 2 MB interactive FCT vs deep-buffer Cubic",
        "sdnecn_topo1.toml", _ecn_build("star", BLOAT_SYSTEMS, BLOAT_QUEUE), _ecn_metrics,
        _bloat_rows, _plot_bars, quick_scale=1.0,
        notes="Not a figure of the paper: the paper's 10 s Cubic FCT needs a deeper standing "
              "queue than tacc's Cubic keeps in 1000 packets (topo1-fct above), so the "
              "FCT gain is measured here behind 3000-packet drop-tail queues.",
    ),
    Experiment(
        "sdn-ecn-topo2", "sdn-ecn", "SDN-ECN Topology 2 (dumbbell, 3 pairs): throughput",
        "sdnecn_topo2.toml", _ecn_build(None), _ecn_metrics,
        _ecn_rows("topo2_throughput", None, None), _plot_bars, quick_scale=1.0,
    ),
    Experiment(
        "sdn-ecn-topo2-fct", "sdn-ecn", "SDN-ECN Topology 2: 2 MB interactive FCT",
        "sdnecn_topo2.toml", _ecn_build("dumbbell"), _ecn_metrics,
        _ecn_rows(None, "topo2_fct", _FCT_FAIR_3), _plot_bars, quick_scale=1.0,
    ),
    Experiment(
        "sdn-ecn-multihop", "sdn-ecn",
        "SDN-ECN 7-switch multi-hop (topology defined here): throughput and 2 MB FCT",
        "sdnecn_multihop.toml", _ecn_build("multihop"), _ecn_metrics,
        _ecn_rows("multihop_throughput", "multihop_fct", None), _plot_bars, quick_scale=1.0,
        notes="The paper's figure of this topology is lost; sdnecn_multihop.toml defines one "
              "from the prose (see its header).",
    ),
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


# --------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Task:
    experiment: str
    variant: str
    scenario: str
    sets: tuple[tuple[str, str], ...]
    seed: int
    out: str


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


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)


def plan(experiments: Sequence[Experiment], out: Path, quick: bool) -> tuple[
        list[Task], dict[str, dict[str, list[Path]]], dict[str, float]]:
    """All runs (cached or not) and, per experiment, the result dirs of each variant."""
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
        n_seeds = exp.quick_seeds if quick else exp.seeds
        dirs[exp.id] = {}
        for v in exp.build(scale):
            for seed in range(1, n_seeds + 1):
                key = cache_key(exp.scenario_path, v.sets, seed, version)
                d = out / "runs" / exp.id / f"{_slug(v.name)}-s{seed}-{key}"
                dirs[exp.id].setdefault(v.name, []).append(d)
                tasks.append(Task(exp.id, v.name, str(exp.scenario_path), v.sets, seed, str(d)))
    return tasks, dirs, scales


def run_task(task: Task) -> str:
    """One simulation (in a worker process); a no-op when its summary.json exists."""
    if (Path(task.out) / "summary.json").is_file():
        return task.out
    import tacc._core as core

    tmp = Path(task.out + ".partial")
    core.run(task.scenario, seed=task.seed, sets=list(task.sets), out=str(tmp))
    if Path(task.out).exists():
        import shutil

        shutil.rmtree(task.out)
    tmp.rename(task.out)
    return task.out


class Progress:
    def __init__(self, total: int, stream: Any = None) -> None:
        self.total, self.done, self.start = total, 0, time.monotonic()
        self.stream = stream or sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.last = 0.0

    def step(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if not self.tty and self.done < self.total and now - self.last < 5:
            return
        self.last = now
        elapsed = now - self.start
        left = elapsed / self.done * (self.total - self.done) if self.done else math.nan
        line = (f"reproduce: {self.done}/{self.total} runs, {_hms(elapsed)} elapsed, "
                f"~{_hms(left)} left")
        end = "\r" if self.tty and self.done < self.total else "\n"
        print(line.ljust(60), end=end, file=self.stream, flush=True)


def _hms(seconds: float) -> str:
    if math.isnan(seconds):
        return "?"
    s = int(round(seconds))
    return f"{s // 60}:{s % 60:02d}"


def execute(tasks: Sequence[Task], jobs: int, engine: str = "local") -> int:
    """Run the tasks not in the cache; returns how many were run."""
    todo = [t for t in tasks if not (Path(t.out) / "summary.json").is_file()]
    progress = Progress(len(tasks))
    if len(todo) < len(tasks):
        progress.step(len(tasks) - len(todo))
    if not todo:
        return 0
    if engine == "ray":
        _execute_ray(todo, progress)
    elif jobs <= 1:
        for t in todo:
            run_task(t)
            progress.step()
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            pending = {pool.submit(run_task, t) for t in todo}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    f.result()
                    progress.step()
    return len(todo)


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _execute_ray(todo: Sequence[Task], progress: Progress) -> None:
    import ray

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS") or None, log_to_driver=False)
    remote = ray.remote(run_task)
    pending = [remote.remote(t) for t in todo]
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        ray.get(done)
        progress.step(len(done))


# --------------------------------------------------------------------------- evaluation


def _collect(exp: Experiment, runs: dict[str, list[Path]],
             scale: float) -> dict[tuple[str, str], list[float]]:
    means: dict[tuple[str, str], list[float]] = {}
    for variant, dirs in runs.items():
        for d in dirs:
            if not (d / "summary.json").is_file():
                continue
            for k, v in exp.metrics(load(d), scale).items():
                means.setdefault((variant, k), []).append(v)
    return means


@dataclass
class RowResult:
    experiment: str
    paper_name: str
    quantity: str
    paper: str
    ideal: str
    tacc: str
    holds: bool | None
    cause: str
    # the verdict compares two means that differ by less than the seeds' variation
    spread: bool = False


@dataclass
class ExperimentResult:
    exp: Experiment
    rows: list[RowResult] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    runs: int = 0
    seeds: int = 0
    scale: float = 1.0
    wall: float = 0.0


def evaluate(exp: Experiment, runs: dict[str, list[Path]], out: Path,
             scale: float) -> ExperimentResult:
    means = _collect(exp, runs, scale)
    res = ExperimentResult(exp, scale=scale)
    res.runs = sum(len(d) for d in runs.values())
    res.seeds = max((len(d) for d in runs.values()), default=0)
    res.wall = sum(float(json.loads((d / "summary.json").read_text())["wall_seconds"])
                   for ds in runs.values() for d in ds if (d / "summary.json").is_file())
    for row in exp.rows():
        values = row.value(means)
        m, ci = mean_ci(values)
        if row.text is not None:
            shown = row.text(means)
        else:
            has_ci = bool(ci) and not math.isnan(ci) and len(values) > 1
            shown = _fmt(m, row.unit, ci if has_ci else None)
        holds = None if math.isnan(m) else row.holds(m, means)
        spread = isinstance(row.holds, _Less) and holds is not None and bool(
            row.holds.spread(means))
        res.rows.append(RowResult(
            exp.id, exp.paper, row.quantity, row.paper,
            "-" if row.ideal is None else _fmt(row.ideal, row.unit), shown,
            None if holds is None else bool(holds),
            row.cause if holds is False else "", spread))
    res.figures = exp.plot(exp, runs, out / "figures", scale)
    return res


# --------------------------------------------------------------------------- report


def _verdict(r: RowResult) -> str:
    v = {True: "yes", False: "no", None: "-"}[r.holds]
    return f"{v}, within seed spread" if r.spread else v


def write_report(results: Sequence[ExperimentResult], out: Path, *, quick: bool,
                 wall: float, command: str) -> tuple[Path, Path]:
    rows = [r for e in results for r in e.rows]
    held = sum(1 for r in rows if r.holds)
    judged = sum(1 for r in rows if r.holds is not None)
    spread = sum(1 for r in rows if r.spread)
    md = ["# tacc reproduction report", ""]
    md.append(f"Command: `{command}`. Mode: {'quick (shortened runs, fewer seeds)' if quick else 'full'}; "
              f"tacc {engine_version()}; {sum(e.runs for e in results)} runs, "
              f"wall time {_hms(wall)} (simulation time in runs "
              f"{_hms(sum(e.wall for e in results))}). ")
    md.append("")
    md.append(f"**{held} of {judged} judged claims hold.** Paper numbers come from the "
              "table `PAPER` in `python/tacc/reproduce.py` (transcribed from PAPERS.md); "
              "every tacc number is computed from the result files under `runs/`. "
              "With several seeds tacc shows mean ± 95% CI half-width, and a comparison of "
              "two variants whose means differ by less than Welch's t-test (95%) can tell "
              f"from seed-to-seed variation is marked \"within seed spread\" ({spread} "
              "here): its verdict could flip with other seeds.")
    md.append("")
    md.append("Settings that matter (see each scenario's header): rate-limiter experiments "
              "(HyGenICC, SDN-GCC, static) use `tcp.rcv_buf = 29200B` (20 segments, ns-2's "
              "default window_) and `on_shortage = \"queue\"`: with Linux-size windows and "
              "drop-on-shortage, TCP (which never sees the hidden marks) overflows the "
              "100-packet buffer in slow start and stalls in RTO backoff. SICC runs use "
              "`ecn_syn`, `rto_init = 300us` and `evaluate_on_syn` (the 1 ms poll alone "
              "reacts too late at RTT 100 us).")
    md.append("")
    if quick:
        md.append("Quick mode: 1/5 of the simulated time (the SDN-ECN runs keep their full "
                  "length) and fewer seeds, so start-up transients weigh about 5 times more "
                  "than in the papers' runs; treat these numbers as indicative and run "
                  "without --quick for the comparison.")
        md.append("")
    md.append("## Headline table")
    md.append("")
    header = "| figure | quantity | paper | ideal | tacc | holds |"
    md += [header, "|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r.experiment} | {r.quantity} | {r.paper} | {r.ideal} | {r.tacc} | "
                  f"{_verdict(r)} |")
    md.append("")
    for e in results:
        md.append(f"## {e.exp.id}: {e.exp.title}")
        md.append("")
        md.append(f"Paper: {PAPER_NAMES[e.exp.paper]}. Scenario: `scenarios/{e.exp.scenario}`; "
                  f"{e.runs} runs, {e.seeds} seed(s), time scale {e.scale:g}.")
        if e.exp.notes:
            md.append("")
            md.append(e.exp.notes)
        md.append("")
        for f in e.figures:
            if f.suffix == ".png":
                md.append(f"![{e.exp.id}]({f.relative_to(out).as_posix()})")
        md.append("")
        md += ["| quantity | paper | ideal | tacc | holds |", "|---|---|---|---|---|"]
        for r in e.rows:
            md.append(f"| {r.quantity} | {r.paper} | {r.ideal} | {r.tacc} | "
                      f"{_verdict(r)} |")
        causes = list(dict.fromkeys(r.cause for r in e.rows if r.cause))
        if causes:
            md.append("")
            md.append("Where tacc disagrees, the likely cause: " + " / ".join(causes) + ".")
        md.append("")
    out.mkdir(parents=True, exist_ok=True)
    md_path = out / "REPORT.md"
    md_path.write_text("\n".join(md) + "\n", encoding="utf-8")
    html_path = out / "report.html"
    html_path.write_text(_markdown_to_html(md), encoding="utf-8")
    return md_path, html_path


def _inline_md(text: str) -> str:
    out = html.escape(text)
    parts = out.split("`")
    out = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
    parts = out.split("**")
    return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))


def _markdown_to_html(lines: Sequence[str]) -> str:
    """The small markdown subset write_report emits: headings, tables, images, paragraphs."""
    body: list[str] = []
    table: list[str] = []

    def flush() -> None:
        if not table:
            return
        rows = [[c.strip() for c in t.strip().strip("|").split("|")] for t in table]
        body.append("<table>")
        body.append("<tr>" + "".join(f"<th>{_inline_md(c)}</th>" for c in rows[0]) + "</tr>")
        for r in rows[2:]:
            cls = {"yes": "ok", "no": "bad"}.get(r[-1].split(",")[0], "")
            body.append(f'<tr class="{cls}">' + "".join(f"<td>{_inline_md(c)}</td>" for c in r)
                        + "</tr>")
        body.append("</table>")
        table.clear()

    for line in lines:
        if line.startswith("|"):
            table.append(line)
            continue
        flush()
        if line.startswith("## "):
            body.append(f"<h2>{_inline_md(line[3:])}</h2>")
        elif line.startswith("# "):
            body.append(f"<h1>{_inline_md(line[2:])}</h1>")
        elif line.startswith("!["):
            alt, src = line[2:].split("](", 1)
            body.append(f'<p><img src="{html.escape(src.rstrip(")"))}" alt="{html.escape(alt)}" '
                        'style="max-width:100%"></p>')
        elif line.strip():
            body.append(f"<p>{_inline_md(line)}</p>")
    flush()
    style = ("body{font-family:sans-serif;max-width:1200px;margin:auto}"
             "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
             "padding:2px 6px}tr.ok td:last-child{background:#dfd}"
             "tr.bad td:last-child{background:#fdd}")
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>tacc reproduction"
            f"</title><style>{style}</style></head><body>\n" + "\n".join(body)
            + "\n</body></html>\n")


def embed_images(html_text: str, root: Path) -> str:
    """report.html with images inlined as base64 (for mailing a single file)."""
    def repl(src: str) -> str:
        data = base64.b64encode((root / src).read_bytes()).decode()
        return f"data:image/png;base64,{data}"
    import re

    return re.sub(r'src="([^"]+\.png)"', lambda m: f'src="{repl(m.group(1))}"', html_text)


# --------------------------------------------------------------------------- entry point


def reproduce(names: Sequence[str] = (), *, quick: bool = False, jobs: int = 1,
              engine: str = "local", out: Path = Path("out/reproduce"),
              command: str = "tacc reproduce") -> tuple[Path, list[ExperimentResult]]:
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
    tasks, dirs, scales = plan(experiments, out, quick)
    execute(tasks, jobs, engine)
    results = [evaluate(e, dirs[e.id], out, scales[e.id]) for e in experiments]
    md, _html = write_report(results, out, quick=quick, wall=time.monotonic() - start,
                             command=command)
    return md, results


def registry_table() -> str:
    """One line per experiment: id, paper, scenario, variants, seeds."""
    lines = []
    for e in EXPERIMENTS:
        n = len(e.build(1.0))
        lines.append(f"{e.id:18} {e.paper:9} {e.scenario:26} {n:3} variants x {e.seeds} seeds"
                     f" ({len(e.rows())} report rows)")
    return "\n".join(lines)
