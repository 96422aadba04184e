"""SDN-GCC (paper 000, sections VI-IX): Figs. 1, 4, 5 and 6, the tagged TCP flow against
TCP, DCTCP and UDP competitors under RED, HyGenICC and SDN-GCC; a static per-VM limit; and
Fig. 8, the 4-rack testbed with elephants and web requests; and how the results depend on the
controller's latency and on the constants the paper leaves to tacc."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from tacc.reproduce import plots
from tacc.reproduce.registry import (
    CONTROL_LATENCIES_MS,
    Experiment,
    Setting,
    Row,
    Variant,
    duration,
    fct_values,
    inline,
    mean_of,
    mechanism_setting,
    near,
    port,
    time_lit,
    values,
    vs,
)
from tacc.reproduce.tagged import (
    COMPETITOR_LABEL,
    COMPETITORS,
    RATE_LIMITER_SETTINGS,
    Constant,
    constant_systems,
    constants_note,
    constants_plot,
    tagged_metrics,
    tagged_variants,
)
from tacc.results import Result

# Transcribed from PAPERS.md (section 2). Nothing here is a tacc result.
PAPER: dict[str, Any] = {
    # Mean tagged goodput (Mb/s) over 30 s, vs TCP / DCTCP / UDP competitors.
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
}

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


SDNGCC_SETTINGS: tuple[Setting, ...] = (*RATE_LIMITER_SETTINGS, mechanism_setting(
    "clear_ce", ("sdn-gcc",), "false", "true (the shim hides the marks from the VMs, "
    "000 section VIII-C)", "false (Algorithm 3 leaves them; footnote 4 lets ECN-capable "
    "tenants see the marks)",
    "The paper's identical TCP and DCTCP columns show its DCTCP competitors never saw the "
    "marks; seen, they cut their windows and are cut again by the controller."))


def _gcc(interval: str, **extra: Any) -> list[tuple[str, str]]:
    # clear_ce: the shim hides the marks from the VMs (000 section VIII-C); the paper's
    # identical TCP and DCTCP columns show its DCTCP competitors never saw them.
    return [("mechanism", inline(kind="sdn-gcc", interval=interval, on_shortage="queue",
                                 clear_ce=True, **extra))]


SDNGCC_FIGS: dict[str, tuple[int, list[tuple[str, list[tuple[str, str]]]]]] = {
    "sdn-gcc-fig1": (4, [("1a", [("tcp.ecn", "false")]), ("1b", [("tcp.ecn", "true")])]),
    "sdn-gcc-fig4": (4, [
        ("4a", [("mechanism", inline(kind="hygenicc", on_shortage="queue"))]),
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
            out += tagged_variants(scale, 30, 10, 20, n, [(panel, sets)])
        return out
    return build


def _sdngcc_metrics(result: Result, scale: float) -> dict[str, float]:
    return tagged_metrics(10, 20, 30, len(result.flows))(result, scale)


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
                    lambda m, p=panel, c=c: values(m, f"{p}/{c}", "mean_run"),
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
        lambda m: values(m, f"{panel}/tcp", "mean_run"),
        lambda _v, m: all(
            mean_of(m, f"{panel}/{a}", "mean_run") > mean_of(m, f"{panel}/{b}", "mean_run")
            for a, b in zip(COMPETITORS, COMPETITORS[1:])),
        SDNGCC_CAUSE,
        text=lambda m: " > ".join(f"{mean_of(m, f'{panel}/{c}', 'mean_run'):.0f}"
                                  for c in COMPETITORS))]
    if panel == "1a":
        for c in COMPETITORS[1:]:
            rows.append(Row(
                f"{SDNGCC_PANEL[panel]}: tagged goodput while shared (10-20 s) "
                f"{COMPETITOR_LABEL[c]}", "starves", share, "Mb/s",
                lambda m, c=c: values(m, f"{panel}/{c}", "overlap"),
                lambda v, _m: v < 0.5 * share, SDNGCC_CAUSE))
    return rows


def _static_build(scale: float) -> list[Variant]:
    sets = [("mechanism", inline(kind="static-rate", rate="250Mbps", on_shortage="queue"))]
    return tagged_variants(scale, 30, 10, 20, 4, [("static", sets)])


def _static_rows() -> list[Row]:
    rate = PAPER["sdngcc_static_rate"]
    out = []
    for c in COMPETITORS:
        out.append(Row(
            f"static 250 Mb/s: tagged goodput 10-20 s {COMPETITOR_LABEL[c]}", "exact share",
            250.0, "Mb/s", lambda m, c=c: values(m, f"static/{c}", "overlap"),
            near(0.1 * rate, rate), SDNGCC_CAUSE))
        out.append(Row(
            f"static 250 Mb/s: tagged goodput alone 20-30 s {COMPETITOR_LABEL[c]}",
            f"{rate:g} (not work-conserving)", 1000.0, "Mb/s",
            lambda m, c=c: values(m, f"static/{c}", "alone"),
            near(0.1 * rate, rate), SDNGCC_CAUSE))
    return out


# SDN-GCC testbed (Fig. 8) ---------------------------------------------------------------------

def _fig8_build(scale: float) -> list[Variant]:
    base = [("duration", time_lit(20 * scale))]
    for k in range(3):
        base += [(f"incast[{k}].start", time_lit(10 * scale)),
                 (f"incast[{k}].interval", time_lit(0.1 * max(scale, 0.2)))]
    # The testbed ran the authors' prototype (000 section IX; PAPERS.md section 6): marks
    # polled every 1 ms, each source gets its destination's share of them, 5 Mb/s cut per mark.
    prototype = [("mechanism", inline(kind="sdn-gcc", interval="1ms", split="per-destination",
                                      cut_per_mark="5Mbps", on_shortage="queue",
                                      clear_ce=True))]
    # One panel: the plot draws the three systems' distributions together.
    return [Variant(name, tuple(base + sets), series=label)
            for name, label, sets in (("red-ecn", "RED-ECN", []),
                                      ("sdn-gcc", "SDN-GCC", _gcc("5ms")),
                                      ("sdn-gcc-prototype", "SDN-GCC prototype", prototype))]


def _fig8_metrics(result: Result, scale: float) -> dict[str, float]:
    f = result.flows
    tcp = f[f["group"].str.startswith("tcp_")]["goodput_mbps"]
    udp = f[f["group"].str.startswith("udp_")]["goodput_mbps"]
    web = fct_values(f[f["group"].str.startswith("web_")])
    return {
        "tcp_mean": float(tcp.mean()), "udp_mean": float(udp.mean()),
        "web_mean_fct": float(web.mean()), "web_std_fct": float(web.std()),
        "web_p99_fct": float(np.percentile(web, 99)),
        "web_unfinished": float(f[f["group"].str.startswith("web_")]["fct"].isna().sum()),
        "tcp_share": float(tcp.sum() / (tcp.sum() + udp.sum())) * 100,
        "tcp_timeouts": float(f[f["group"].str.startswith("tcp_")]["timeouts"].mean()),
        "utilization": 100 * float(port(result, "agg0->tor3")["utilization"]),
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
                lambda m: values(m, "red-ecn", "tcp_mean"), lambda v, _m: v < 0.5 * fair,
                cause)]
    for v, label in FIG8_SYSTEMS.items():
        rows += [
            Row(f"{label}: mean TCP elephant goodput", "TCP gets its share", fair, "Mb/s",
                lambda m, v=v: values(m, v, "tcp_mean"), lambda x, _m: x >= 0.75 * fair, cause),
            Row(f"{label}: mean UDP elephant goodput", "UDP held to its share", fair, "Mb/s",
                lambda m, v=v: values(m, v, "udp_mean"), lambda x, _m: x <= 1.25 * fair, cause),
            Row(f"{label}: web response time mean vs RED-ECN", "smaller", None, "s",
                lambda m, v=v: values(m, v, "web_mean_fct"),
                lambda x, m: x < mean_of(m, "red-ecn", "web_mean_fct"), cause,
                text=lambda m, v=v: vs(m, v, "red-ecn", "web_mean_fct", "s")),
            Row(f"{label}: web response time std vs RED-ECN", "more uniform", None, "s",
                lambda m, v=v: values(m, v, "web_std_fct"),
                lambda x, m: x < mean_of(m, "red-ecn", "web_std_fct"), cause,
                text=lambda m, v=v: vs(m, v, "red-ecn", "web_std_fct", "s")),
            Row(f"{label}: RTO timeouts per TCP elephant vs RED-ECN (tacc only)", "-", None,
                "", lambda m, v=v: values(m, v, "tcp_timeouts"), lambda x, _m: None,
                text=lambda m, v=v: vs(m, v, "red-ecn", "tcp_timeouts", "")),
            Row(f"{label}: bottleneck utilization (tacc only)", "-", 100.0, "%",
                lambda m, v=v: values(m, v, "utilization"), lambda x, _m: None),
        ]
    return rows


def _fig8_cdfs(frames: list[Result]) -> dict[str, np.ndarray]:
    f = pd.concat([r.flows for r in frames])
    return {
        "tcp": f[f["group"].str.startswith("tcp_")]["goodput_mbps"].to_numpy(),
        "udp": f[f["group"].str.startswith("udp_")]["goodput_mbps"].to_numpy(),
        "web": fct_values(f[f["group"].str.startswith("web_")]) * 1e3,
    }


# Sensitivity: the controller's latency and tacc's constants (Fig. 4b's setting, Ti 5 ms) -----

SWEPT_AGAINST = ("tcp", "udp")
CONSTANTS = (
    Constant("scale", (0.0025, 0.005, 0.01, 0.02, 0.04), 0.01, "fraction of C",
             "scale(C), the increase per shim tick and the cut per unit of mark rate"),
    Constant("congestion_grace", (5.0, 10.0, 20.0, 40.0), 10.0, "ms",
             "Tc, how long without notification before a rate climbs again (2 Ti)"),
    Constant("rate_unit", (0.25, 0.5, 1.0, 2.0, 5.0), 1.0, "ms",
             "the mark rate's time unit (a larger one cuts more per mark)"),
    Constant("update_interval", (0.25, 0.5, 1.0, 2.0), 0.5, "ms",
             "the shim's timer, how often a rate climbs"),
)


def _latency_build(scale: float) -> list[Variant]:
    return tagged_variants(scale, 30, 10, 20, 4,
                           [(f"{ms:g}ms", _gcc("5ms", latency=duration(ms)))
                            for ms in CONTROL_LATENCIES_MS], competitors=SWEPT_AGAINST)


def _constants_build(scale: float) -> list[Variant]:
    return tagged_variants(scale, 30, 10, 20, 4,
                           constant_systems(CONSTANTS, lambda **kv: _gcc("5ms", **kv)),
                           competitors=SWEPT_AGAINST)


def _swept_row(label: str, variant: str, c: str) -> Row:
    """A swept setting's mean tagged goodput, judged as Fig. 4b's: within 10% of the paper."""
    paper = PAPER["sdngcc"]["4b"][c]
    return Row(f"{label}: mean tagged goodput {COMPETITOR_LABEL[c]}",
               f"{paper:g} (Fig. 4b)", float(PAPER["sdngcc_ideal"][4]), "Mb/s",
               lambda m: values(m, f"{variant}/{c}", "mean_run"),
               lambda v, _m: abs(v - paper) <= 0.1 * paper, SDNGCC_CAUSE)


def _latency_rows() -> list[Row]:
    return [_swept_row(f"SDN-GCC, controller latency {ms:g} ms", f"{ms:g}ms", c)
            for ms in CONTROL_LATENCIES_MS for c in SWEPT_AGAINST]


def _constants_rows() -> list[Row]:
    return [_swept_row(f"SDN-GCC, {c.label(x)}", c.variant(x), comp)
            for c in CONSTANTS for x in c.values for comp in SWEPT_AGAINST]


_plot = plots.tagged(SDNGCC_PANEL, COMPETITOR_LABEL, "mean_run", "mean over the run")

EXPERIMENTS: list[Experiment] = [
    *[
        Experiment(
            fig, "sdn-gcc",
            f"SDN-GCC Fig. {fig[-1]}: tagged TCP (10-30 s) vs competitors (0-20 s), 1 Gb/s",
            "sdngcc_fig1-6.toml", _sdngcc_build(fig), _sdngcc_metrics, _sdngcc_rows(fig),
            _plot, notes=SDNGCC_CAUSE + ".", published=SDNGCC_SETTINGS,
        )
        for fig in SDNGCC_FIGS
    ],
    Experiment(
        "sdn-gcc-static", "sdn-gcc", "SDN-GCC: static 250 Mb/s per-VM limit",
        "sdngcc_fig1-6.toml", _static_build, _sdngcc_metrics, _static_rows, _plot,
        published=RATE_LIMITER_SETTINGS,
    ),
    Experiment(
        "sdn-gcc-fig8", "sdn-gcc",
        "SDN-GCC Fig. 8 (testbed): 4 racks x 7 servers, 42 elephants + 126 web requests",
        "sdngcc_fig8_testbed.toml", _fig8_build, _fig8_metrics, _fig8_rows,
        plots.cdfs([("tcp", "TCP elephant goodput (Mb/s)"),
                    ("udp", "UDP elephant goodput (Mb/s)"),
                    ("web", "web response time (ms)")], _fig8_cdfs, width=4.2, height=3.4),
        seeds=2, published=SDNGCC_SETTINGS,
    ),
    Experiment(
        "sdn-gcc-latency", "sdn-gcc",
        "SDN-GCC (Ti 5 ms) against the controller's one-way latency, Fig. 4b's dumbbell",
        "sdngcc_fig1-6.toml", _latency_build, _sdngcc_metrics, _latency_rows,
        plots.sweep(CONTROL_LATENCIES_MS, {c: COMPETITOR_LABEL[c] for c in SWEPT_AGAINST},
                    lambda series, ms: f"{ms:g}ms/{series}",
                    [("mean_run", "mean tagged goodput (Mb/s)", 1.0),
                     ("overlap", "tagged goodput while shared (Mb/s)", 1.0)],
                    baseline=None, baseline_label="", xlabel="controller latency, one way (ms)",
                    xscale="symlog"),
        seeds=2,
        notes="The paper gives no controller latency; tacc's default is 0. Every message "
              "(stats request, reply, notification) takes the latency one way. " + SDNGCC_CAUSE
              + ".",
        published=None,
    ),
    Experiment(
        "sdn-gcc-constants", "sdn-gcc",
        "SDN-GCC's constants left open by the paper, one at a time, Fig. 4b's dumbbell",
        "sdngcc_fig1-6.toml", _constants_build, _sdngcc_metrics, _constants_rows,
        constants_plot(CONSTANTS, SWEPT_AGAINST, ("mean_run", "mean tagged goodput (Mb/s)", 1.0)),
        seeds=2, notes=constants_note(CONSTANTS) + " Ti = 5 ms.", published=None,
    ),
]
