"""The tagged-flow dumbbell shared by HyGenICC (Figs. 2-5) and SDN-GCC (Figs. 1, 4-6): one
tagged TCP flow against competitors of one kind (TCP, DCTCP or UDP) through a 1 Gb/s
bottleneck, with the system under test given as `--set` overrides."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tacc.reproduce import plots
from tacc.reproduce.registry import (
    Plot,
    Setting,
    Variant,
    duration,
    inline,
    mechanism_setting,
    port,
    scenario_setting,
    time_lit,
    window_mean,
)
from tacc.results import Result

COMPETITORS = ("tcp", "dctcp", "udp")
COMPETITOR_LABEL = {"tcp": "vs TCP", "dctcp": "vs DCTCP", "udp": "vs UDP"}


# Where the rate-limiter experiments (HyGenICC, SDN-GCC, static limits) depart from the papers.
LIMITERS = ("static-rate", "hygenicc", "sdn-gcc")
RATE_LIMITER_SETTINGS: tuple[Setting, ...] = (
    mechanism_setting(
        "on_shortage", LIMITERS, '"drop"', "queue (the excess waits in the vNIC)",
        "drop (the paper's limiter; it names queueing as the better option)",
        "A window-limited TCP whose packets the limiter drops waits out 200 ms timeouts "
        "when a whole window goes."),
    scenario_setting(
        "tcp.rcv_buf", '"2000000B"', "29200 B, 20 segments (ns-2's default window_, which "
        "the authors' scripts never change)",
        "no window given: tacc's default 2 MB, Linux-size",
        "With Linux-size windows a TCP flow that never sees the hidden marks overflows the "
        "100-packet buffer in slow start and stalls in RTO backoff."),
)


def competitor(kind: str, count: int, stop: float) -> str:
    common = {"name": "competitor", "count": count, "src": "s{i+1}", "dst": "r0"}
    if kind == "udp":
        return inline(**common, transport="udp", rate="1Gbps", stop=f"{round(stop * 1e6)}us")
    return inline(**common, cc="newreno" if kind == "tcp" else "dctcp",
                  stop=f"{round(stop * 1e6)}us")


def tagged_variants(
    scale: float, duration: float, start: float, stop: float, senders: int,
    systems: Sequence[tuple[str, list[tuple[str, str]]]],
    competitors: Sequence[str] = COMPETITORS,
) -> list[Variant]:
    out = []
    for panel, system_sets in systems:
        for comp in competitors:
            sets = [
                ("duration", time_lit(duration * scale)),
                ("flows[0].start", time_lit(start * scale)),
                ("topology.senders", str(senders)),
                ("flows[1]", competitor(comp, senders - 1, stop * scale)),
                *system_sets,
            ]
            out.append(Variant(f"{panel}/{comp}", tuple(sets), panel=panel, series=comp))
    return out


# RED's marking threshold K in the HyGenICC and SDN-GCC dumbbells (their scenario files).
RED_K_PKTS = 20


def tagged_metrics(
    start: float, stop: float, duration: float, senders: int
) -> Callable[[Result, float], dict[str, float]]:
    """The tagged flow's metrics with the competitors running over [start, stop) and the
    run ending at `duration`, all scaled by the run's time scale."""
    def metrics(result: Result, scale: float) -> dict[str, float]:
        t_start, t_stop, t_end = start * scale, stop * scale, duration * scale
        tagged = result.flows.set_index("name").loc["tagged"]
        share = 1000.0 / senders
        overlap = window_mean(result, "tagged", t_start, t_stop)
        alone = window_mean(result, "tagged", t_stop, t_end)
        mean_run = float(tagged["bytes_delivered"]) * 8 / t_end / 1e6
        # convergence: start of the first bin from which every bin until the competitors
        # stop (the last one excepted) stays within 25% of the share
        g = result.goodput
        g = g[(g["flow"] == "tagged") & (g["time_s"] >= t_start - 1e-9)
              & (g["time_s"] < t_stop - 1e-9)].sort_values("time_s")
        ok = (abs(g["goodput_mbps"].to_numpy()[:-1] - share) <= 0.25 * share)
        conv = math.inf  # never settled
        for k in range(len(ok)):
            if ok[k:].all():
                conv = float(g["time_s"].iloc[k] - t_start)
                break
        bottleneck = port(result, "sw0->r0")
        comp = result.flows[result.flows["group"] == "competitor"]
        q = result.queues
        q = q[(q["port"] == "sw0->r0") & (q["time_s"] >= t_start) & (q["time_s"] < t_stop)]
        return {
            "above_k": 100 * float((q["backlog_pkts"] >= RED_K_PKTS).mean()),
            "overlap": overlap, "alone": alone, "mean_run": mean_run,
            "convergence_s": conv, "utilization": 100 * float(bottleneck["utilization"]),
            "competitor_mean": float(comp["goodput_mbps"].mean()),
            "drops": float(bottleneck["dropped"]),
        }
    return metrics


@dataclass(frozen=True)
class Constant:
    """A mechanism constant the paper leaves to tacc, the values its sweep tries and tacc's."""

    key: str  # the [mechanism] key
    values: tuple[float, ...]
    default: float
    unit: str  # "ms" (given to the key as a duration) or what a plain number means
    role: str

    def variant(self, x: float) -> str:
        return f"{self.key}={x:g}"

    def label(self, x: float) -> str:
        unit = " ms" if self.unit == "ms" else ""
        return f"{self.key} = {x:g}{unit}" + (" (tacc's)" if x == self.default else "")

    def setting(self, x: float) -> dict[str, Any]:
        return {self.key: duration(x) if self.unit == "ms" else x}


def constant_systems(constants: Sequence[Constant],
                     mechanism: Callable[..., list[tuple[str, str]]]
                     ) -> list[tuple[str, list[tuple[str, str]]]]:
    """Each constant at each of its values, the others at tacc's: `mechanism(**setting)`."""
    return [(c.variant(x), mechanism(**c.setting(x))) for c in constants for x in c.values]


def constants_plot(constants: Sequence[Constant], competitors: Sequence[str],
                   metric: tuple[str, str, float]) -> Plot:
    return plots.sweeps([(c.key, c.values, f"{c.key} ({c.unit})") for c in constants],
                        {c: COMPETITOR_LABEL[c] for c in competitors},
                        lambda key, series, x: f"{key}={x:g}/{series}", metric)


def constants_note(constants: Sequence[Constant]) -> str:
    return "Each constant changed alone from tacc's value: " + "; ".join(
        f"`{c.key}`, {c.role} (tacc: {c.default:g} {c.unit})" for c in constants) + "."
