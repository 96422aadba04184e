"""HyGenICC (papers 001/003 and 000 sections III-V): Figs. 2-4, one tagged TCP flow against
one competitor under four systems, and Fig. 5, 4 and 8 senders under HyGenICC; and tacc's own
experiment, a VM forging HyGenICC's signals with and without the shims' protection."""

from __future__ import annotations

from typing import Any

from tacc.reproduce import plots
from tacc.reproduce.registry import (
    Experiment,
    Row,
    Variant,
    inline,
    near,
    time_lit,
    values,
    window_mean,
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

# Transcribed from PAPERS.md (section 1). Nothing here is a tacc result.
PAPER: dict[str, Any] = {
    # Figs. 2-4 (2 senders): qualitative, the share is "about 500 Mb/s".
    "hygenicc_share_2": 500.0,
    "hygenicc_static_rate": 500.0,
    # Fig. 3/5: converges to these shares "within about 1 s".
    "hygenicc_fig5_share": {4: 250.0, 8: 125.0},
    "hygenicc_fig5_convergence_s": 1.0,
}

# HyGenICC Figs. 2-4 --------------------------------------------------------------------------

HYG_SYSTEMS = [
    ("a", [("tcp.ecn", "false")]),
    ("b", [("tcp.ecn", "true")]),
    ("c", [("mechanism", inline(kind="static-rate", rate="500Mbps", on_shortage="queue"))]),
    ("d", [("mechanism", inline(kind="hygenicc", on_shortage="queue"))]),
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
            share, "Mb/s", lambda m, c=c: values(m, f"d/{c}", "overlap"),
            near(0.2 * share, share), HYG_CAUSE))
        rows.append(Row(
            f"(d) HyGenICC: link utilization {COMPETITOR_LABEL[c]}", "link stays full", 100.0,
            "%", lambda m, c=c: values(m, f"d/{c}", "utilization"),
            lambda v, _m: v >= 90.0, HYG_CAUSE))
    for c in ("dctcp", "udp"):
        rows.append(Row(
            f"(a) no limit: tagged goodput 5-10 s {COMPETITOR_LABEL[c]}", "almost nothing",
            share, "Mb/s", lambda m, c=c: values(m, f"a/{c}", "overlap"),
            lambda v, _m: v < 0.2 * share,
            "every flow, the competitor included, is limited to 20 segments (ns-2's window_, "
            "see the scenario header): one DCTCP flow with 20 segments in flight cannot hold "
            "the queue at K, so the non-ECT tagged flow, dropped only at K or above, keeps "
            "much of its share (next row); against line-rate UDP it starves"))
    rows.append(Row(
        "(a) no limit vs DCTCP: time with the queue at K or above, 5-10 s (tacc only)", "-",
        None, "%", lambda m: values(m, "a/dctcp", "above_k"), lambda v, _m: None))
    rows.append(Row(
        "(b) ECN: tagged goodput 5-10 s vs TCP", "reaches its share", share, "Mb/s",
        lambda m: values(m, "b/tcp", "overlap"), near(0.2 * share, share), HYG_CAUSE))
    for c in ("dctcp", "udp"):
        rows.append(Row(
            f"(b) ECN: tagged goodput 5-10 s {COMPETITOR_LABEL[c]}", "below its share", share,
            "Mb/s", lambda m, c=c: values(m, f"b/{c}", "overlap"),
            lambda v, _m: v < 0.8 * share, HYG_CAUSE))
    for c in COMPETITORS:
        rows.append(Row(
            f"(c) static: tagged goodput alone 10-15 s {COMPETITOR_LABEL[c]}",
            f"{PAPER['hygenicc_static_rate']:g} (not work-conserving)", 1000.0, "Mb/s",
            lambda m, c=c: values(m, f"c/{c}", "alone"),
            near(0.1 * PAPER["hygenicc_static_rate"], PAPER["hygenicc_static_rate"]),
            HYG_CAUSE))
    return rows


# HyGenICC Fig. 5 ------------------------------------------------------------------------------

def _hyg5_build(scale: float) -> list[Variant]:
    out = []
    for n in (4, 8):
        out += tagged_variants(
            scale, 15, 5, 10, n,
            [(f"n{n}", [("mechanism", inline(kind="hygenicc", on_shortage="queue"))])])
    return out


def _hyg5_metrics(result: Result, scale: float) -> dict[str, float]:
    n = len(result.flows)
    return tagged_metrics(5, 10, 15, n)(result, scale)


def _hyg5_rows() -> list[Row]:
    rows = []
    for n, share in PAPER["hygenicc_fig5_share"].items():
        for c in COMPETITORS:
            rows.append(Row(
                f"{n} senders: tagged goodput 5-10 s {COMPETITOR_LABEL[c]}", f"{share:g}",
                share, "Mb/s", lambda m, n=n, c=c: values(m, f"n{n}/{c}", "overlap"),
                near(0.2 * share, share), HYG_CAUSE))
        rows.append(Row(
            f"{n} senders: time to settle within 25% of the share vs UDP",
            f"within about {PAPER['hygenicc_fig5_convergence_s']:g} s", None, "s",
            lambda m, n=n: values(m, f"n{n}/udp", "convergence_s"),
            lambda v, _m: v <= 1.0, HYG_CAUSE))
    return rows


# The constants the paper leaves to tacc, each changed alone (Figs. 2-4's setting (d)) -------

CONSTANTS = (
    Constant("congestion_timeout", (0.5, 1.0, 2.0, 5.0, 10.0), 1.0, "ms",
             "how long without feedback before a pair increases fast again (2 Tu)"),
    Constant("min_rate_fraction", (0.001, 0.005, 0.01, 0.05, 0.1), 0.01, "of the share",
             "R_min (SDN-GCC's 1%)"),
)
SWEPT_AGAINST = ("tcp", "udp")


def _constants_build(scale: float) -> list[Variant]:
    return tagged_variants(
        scale, 15, 5, 10, 2,
        constant_systems(CONSTANTS, lambda **kv: [
            ("mechanism", inline(kind="hygenicc", on_shortage="queue", **kv))]),
        competitors=SWEPT_AGAINST)


def _constants_rows() -> list[Row]:
    share = PAPER["hygenicc_share_2"]
    return [Row(f"HyGenICC, {c.label(x)}: tagged goodput 5-10 s {COMPETITOR_LABEL[comp]}",
                f"about {share:g}", share, "Mb/s",
                lambda m, v=f"{c.variant(x)}/{comp}": values(m, v, "overlap"),
                near(0.2 * share, share), HYG_CAUSE)
            for c in CONSTANTS for x in c.values for comp in SWEPT_AGAINST]


# Forged signals (papers/hygenicc_attack.toml) ---------------------------------------------------

ATTACK = (2.0, 4.0)  # the forging VM's window, s
ATTACK_END = 6.0
ATTACK_PANEL = {"protected": "shims scrub the VMs' packets (default)",
                "unprotected": "no protection (scrub = false)"}
ATTACK_KINDS = ("forged-feedback", "forged-ipr")
FORGED_RATE, FORGED_BITS = 10e6, 64 * 8  # each forging flow's rate and packet size


def _attack_build(scale: float) -> list[Variant]:
    times = [("duration", time_lit(ATTACK_END * scale))]
    for i in (2, 3):
        times += [(f"flows[{i}].start", time_lit(ATTACK[0] * scale)),
                  (f"flows[{i}].stop", time_lit(ATTACK[1] * scale))]
    return [Variant(name, (*times, ("mechanism.scrub", scrub)), panel=name)
            for name, scrub in (("protected", "true"), ("unprotected", "false"))]


def _attack_metrics(result: Result, scale: float) -> dict[str, float]:
    (a, b), end = ATTACK, ATTACK_END
    rates = result.rates
    if rates is None:
        raise ValueError("a HyGenICC run without rates.csv")
    # From 100 ms into the attack (unscaled): the cuts take a few timer periods.
    t0, t1 = a * scale + 0.1, b * scale
    during = rates[(rates["vm"] == "s0") & (rates["dst"] == "r0")
                   & (rates["time_s"] >= t0 - 1e-9) & (rates["time_s"] < t1 - 1e-9)]
    counters = result.summary["mechanism"]["counters"]
    return {
        "before": window_mean(result, "tagged", (a - 1) * scale, a * scale),
        "during": window_mean(result, "tagged", t0, t1),
        # TCP back from R_min may wait out a timeout (RTOmin 200 ms) at any time scale
        "after": window_mean(result, "tagged", b * scale + 0.5, end * scale),
        "rate_during": float(during["rate_mbps"].mean()),
        "scrubbed": counters["scrubbed_feedback"] + counters["scrubbed_ipr"],
        "forged": len(ATTACK_KINDS) * FORGED_RATE * (b - a) * scale / FORGED_BITS,
    }


def _attack_rows() -> list[Row]:
    def ratio(variant: str, metric: str, of: str = "before"):  # noqa: ANN202 (a Row's value)
        return lambda m: [x / max(y, 1e-9) for x, y in zip(
            values(m, variant, metric), values(m, variant, of), strict=True)]
    cause = ("a forged mark reaching the victim's shim cuts its rate by C/1000; about 20 a "
             "timer period against a slow increase of C/1000 hold it at R_min (10 Mb/s)")
    return [
        Row("protected: victim goodput during the attack / before it (tacc only)", "-", 1.0,
            "", ratio("protected", "during"), lambda v, _m: v >= 0.9,
            "the forged packets reached the victim's shim"),
        Row("protected: victim's rate towards r0 during the attack (tacc only)", "-", None,
            "Mb/s", lambda m: values(m, "protected", "rate_during"), lambda v, _m: None),
        Row("protected: forged packets scrubbed at the attacker's shim / sent (tacc only)",
            "-", 1.0, "", ratio("protected", "scrubbed", "forged"), lambda v, _m: v >= 0.98,
            "the attacker's shim let forged signals through"),
        Row("unprotected: victim goodput during the attack / before it (tacc only)", "-",
            None, "", ratio("unprotected", "during"), lambda v, _m: v < 0.1, cause),
        Row("unprotected: victim's rate towards r0 during the attack (tacc only)", "-", 10.0,
            "Mb/s", lambda m: values(m, "unprotected", "rate_during"),
            lambda v, _m: None),
        Row("unprotected: victim goodput after the attack / before it (tacc only)", "-", 1.0,
            "", ratio("unprotected", "after"), lambda v, _m: v >= 0.9,
            "fast increase (C/100 a timer period) should restore the share within 25 ms"),
    ]


PANELS = {**HYG_PANEL, "n4": "HyGenICC, 4 senders", "n8": "HyGenICC, 8 senders"}
_plot = plots.tagged(PANELS, COMPETITOR_LABEL, "overlap", "mean while sharing")

EXPERIMENTS: list[Experiment] = [
    Experiment(
        "hygenicc-fig2-4", "hygenicc",
        "HyGenICC Figs. 2-4: tagged TCP (5-15 s) vs 1 competitor (0-10 s), 1 Gb/s",
        "hygenicc_fig2-5.toml",
        lambda s: tagged_variants(s, 15, 5, 10, 2, HYG_SYSTEMS),
        tagged_metrics(5, 10, 15, 2), _hyg24_rows, _plot,
        notes="Systems (a)-(d) x competitor TCP / DCTCP / UDP. " + HYG_CAUSE + ".",
        published=RATE_LIMITER_SETTINGS,
    ),
    Experiment(
        "hygenicc-fig5", "hygenicc",
        "HyGenICC Fig. 5: 4 and 8 senders, tagged TCP (5-15 s)", "hygenicc_fig2-5.toml",
        _hyg5_build, _hyg5_metrics, _hyg5_rows, _plot, published=RATE_LIMITER_SETTINGS,
    ),
    Experiment(
        "hygenicc-constants", "hygenicc",
        "HyGenICC's constants left open by the paper, one at a time, Figs. 2-4's dumbbell",
        "hygenicc_fig2-5.toml", _constants_build, tagged_metrics(5, 10, 15, 2),
        _constants_rows,
        constants_plot(CONSTANTS, SWEPT_AGAINST, ("overlap", "tagged goodput 5-10 s (Mb/s)",
                                                  1.0)),
        seeds=2, notes=constants_note(CONSTANTS), published=None,
    ),
    Experiment(
        "hygenicc-attack", "hygenicc",
        "A VM forging HyGenICC's feedback and IPR bits at a victim (2-4 s), 1 Gb/s",
        "hygenicc_attack.toml", _attack_build, _attack_metrics, _attack_rows,
        plots.victim(ATTACK_PANEL, "tagged", ("s0", "r0"), ATTACK), quick_scale=0.5,
        notes="Not in the papers, which assume VMs cannot send the shims' signals: a third "
              "tenant's VM sends the tagged flow's sender feedback packets and IPR bits with "
              "the receiver's address, 10 Mb/s of 64-byte packets of each. The shims drop or "
              "clear them at the attacker's own host unless `mechanism.scrub = false`.",
        published=None,
    ),
]
