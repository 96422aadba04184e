"""Cross-validation of tacc against ns-3 over a matrix of dumbbell scenarios.

    .venv/bin/python bench/ns3/matrix.py [--seeds 3] [--only NAME ...] [--jobs 2] [--table-only]

Every matrix point is derived from bench/scenarios/dumbbell-4-newreno.toml with `tacc run --set`
overrides and run in bench/ns3/build/dumbbell with the matching command-line parameters
(bench/ns3/build.sh builds it; bench/ns3/install.sh installs ns-3.37). Both simulators' numbers
are compared on four metrics, each with a tolerance (TOLERANCES below, docs/ns3-matrix.md says
why): per-flow goodput, marks per packet at the bottleneck, retransmissions, and the bottleneck
queue-length distribution (1 ms samples after the warm-up). Every point runs with seeds 1..N on
both sides (tacc --seed, ns-3 --seed = RngRun); a metric agrees at a point when it agrees on a
majority of the seeds. Writes bench/ns3/matrix.json and bench/ns3/matrix.md (the side-by-side
table of seed 1, the verdicts with their ranges over the seeds, the diagnostic variants).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BASE = ROOT / "bench" / "scenarios" / "dumbbell-4-newreno.toml"
NS3 = HERE / "build" / "dumbbell"
TACC = Path(sys.executable).with_name("tacc")
WARMUP = 0.5  # s: queue samples and nothing else start here (goodput is over the whole run, tacc's definition)

# Base point: 1 Gb/s, RTT 100 us (access links d, bottleneck 2d: RTT = 8d), 100-packet buffer,
# RED-ECN at K = 20, 4 flows. Each other point changes one or two dimensions.
BASEPT = dict(rate=1e9, rtt_us=100.0, buffer=100, k=20, ecn=True, ccs=["newreno"] * 4, duration=2.0)


def pt(name: str, **kw) -> dict:
    return dict(BASEPT, **kw, name=name)


MATRIX = [
    pt("base-newreno"),
    pt("base-dctcp", ccs=["dctcp"] * 4),
    pt("base-cubic", ccs=["cubic"] * 4),
    pt("rtt-20us", rtt_us=20.0),
    pt("rtt-1ms", rtt_us=1000.0),
    pt("buf-20-k10", buffer=20, k=10),
    pt("buf-1000-droptail-cubic", buffer=1000, ecn=False, ccs=["cubic"] * 4),
    pt("rate-100M", rate=1e8),
    pt("rate-10G-dctcp", rate=1e10, ccs=["dctcp"] * 4, duration=1.0),
    pt("flows-2", ccs=["newreno"] * 2),
    pt("flows-16-dctcp", ccs=["dctcp"] * 16),
    pt("flows-64", ccs=["newreno"] * 64),
    pt("mix-newreno-dctcp", ccs=["newreno"] * 2 + ["dctcp"] * 2),
    pt("mix-cubic-newreno", ccs=["cubic"] * 2 + ["newreno"] * 2),
    pt("corner-10G-20us-64-dctcp", rate=1e10, rtt_us=20.0, ccs=["dctcp"] * 64, duration=1.0),
    pt("corner-100M-1ms-buf20-droptail", rate=1e8, rtt_us=1000.0, buffer=20, ecn=False, ccs=["newreno"] * 8),
]

# Diagnostic variants: a matrix point rerun with one model detail changed on one side, to test
# an explanation of a disagreement (not part of the verdict count). (point, label, extra tacc
# --set overrides, extra ns-3 arguments)
CLASSIC = "--ns3::TcpL4Protocol::RecoveryType=ns3::TcpClassicRecovery"
BINS_TACC = "output.goodput_bin=1ms"  # per-flow delivery per 1 ms = per RTT at rtt-1ms: the window
BINS_NS3 = "--bin-us=1000"
PRR_TACC = "tcp.prr=true"  # RFC 6937, ns-3's and Linux's default recovery
TRACE_BINS = 60  # bins of flow 0's window trace shown from 1 s on
DIAGNOSTICS = [
    ("base-newreno", "tacc without NIC jitter", ["nic.jitter=0us"], []),
    ("base-newreno", "ns-3 classic recovery (no PRR)", [], [CLASSIC]),
    ("base-newreno", "tacc with PRR (as ns-3)", [PRR_TACC], []),
    ("flows-2", "ns-3 classic recovery (no PRR)", [], [CLASSIC]),
    ("rate-100M", "tacc without NIC jitter", ["nic.jitter=0us"], []),
    ("rate-100M", "ns-3 classic recovery (no PRR)", [], [CLASSIC]),
    ("rate-100M", "tacc with PRR (as ns-3)", [PRR_TACC], []),
    ("rtt-20us", "tacc without NIC jitter", ["nic.jitter=0us"], []),
    ("rtt-20us", "ns-3 classic recovery (no PRR)", [], [CLASSIC]),
    ("rtt-20us", "ns-3 all flows start at 0", [], ["--start-jitter=0"]),
    ("rtt-20us", "ns-3 delayed ACKs (DelAckCount 2)", [], ["--ns3::TcpSocket::DelAckCount=2"]),
    ("rtt-1ms", "tacc, window per RTT", [BINS_TACC], []),
    ("rtt-1ms", "ns-3, window per RTT", [], [BINS_NS3]),
    ("rtt-1ms", "ns-3 classic recovery, window per RTT", [], [CLASSIC, BINS_NS3]),
    ("rtt-1ms", "tacc growing only when cwnd-limited", ["tcp.cwnd_validation=true"], []),
    ("rtt-1ms", "tacc with PRR (as ns-3), window per RTT", [PRR_TACC, BINS_TACC], []),
    ("buf-20-k10", "tacc without NIC jitter", ["nic.jitter=0us"], []),
    ("buf-20-k10", "tacc with ECT retransmissions (as ns-3)", ["tcp.ecn_retransmit=true"], []),
    ("buf-20-k10", "ns-3 classic recovery (no PRR)", [], [CLASSIC]),
    ("buf-20-k10", "tacc with PRR (as ns-3)", [PRR_TACC], []),
    ("buf-1000-droptail-cubic", "ns-3 without HyStart", [], ["--ns3::TcpCubic::HyStart=false"]),
    ("buf-1000-droptail-cubic", "ns-3 without HyStart, classic recovery", [],
     ["--ns3::TcpCubic::HyStart=false", CLASSIC]),
    ("buf-1000-droptail-cubic", "tacc with PRR (as ns-3)", [PRR_TACC], []),
    ("flows-16-dctcp", "tacc without NIC jitter", ["nic.jitter=0us"], []),
    ("flows-16-dctcp", "ns-3 classic recovery (no PRR)", [], [CLASSIC]),
    ("flows-16-dctcp", "tacc with PRR (as ns-3)", [PRR_TACC], []),
    ("flows-64", "tacc with ECT retransmissions (as ns-3)", ["tcp.ecn_retransmit=true"], []),
    ("mix-newreno-dctcp", "ns-3 classic recovery (no PRR)", [], [CLASSIC]),
    ("corner-100M-1ms-buf20-droptail", "tacc without NIC jitter", ["nic.jitter=0us"], []),
    ("corner-100M-1ms-buf20-droptail", "ns-3 classic recovery (no PRR)", [], [CLASSIC]),
]

# Tolerances (docs/ns3-matrix.md explains the choice).
TOL = {
    # total goodput: |tacc - ns3| / capacity
    "total_goodput_frac": 0.03,
    # per flow: max over flows |tacc_i - ns3_i| / (capacity / n), and |Jain_tacc - Jain_ns3|
    "per_flow_frac": 0.15,
    "jain_abs": 0.05,
    # marks per enqueued packet: ratio within this factor (or both below 0.001)
    "marks_factor": 1.5,
    "marks_floor": 0.001,
    # retransmissions (sum over flows): the same order of magnitude (ratio <= 10, or both <= 10)
    "retx_factor": 10.0,
    "retx_floor": 10,
    # queue: mean and p90 within max(3 packets, 20% of K) with RED-ECN, max(3, 10% of the buffer)
    # with drop-tail
    "queue_abs_min": 3.0,
    "queue_frac_k": 0.2,
    "queue_frac_buf": 0.1,
}


def rate_str(r: float) -> str:
    return f"{r / 1e9:g}Gbps" if r >= 1e9 else f"{r / 1e6:g}Mbps"


def groups(ccs: list[str]) -> list[tuple[str, int, int]]:
    """Runs of equal controls: (cc, first index, count)."""
    out: list[tuple[str, int, int]] = []
    for i, c in enumerate(ccs):
        if out and out[-1][0] == c:
            out[-1] = (c, out[-1][1], out[-1][2] + 1)
        else:
            out.append((c, i, 1))
    return out


def tacc_sets(p: dict) -> list[str]:
    n = len(p["ccs"])
    d = p["rtt_us"] / 8.0
    q = (f'queue={{kind="red-ecn",limit="{p["buffer"]}pkt",k="{p["k"]}pkt"}}' if p["ecn"]
         else f'queue={{kind="droptail",limit="{p["buffer"]}pkt"}}')
    flows = ",".join(
        f'{{name="{c}{j}",count={cnt},src="s{{i+{first}}}",dst="r{{i+{first}}}",cc="{c}"}}'
        for j, (c, first, cnt) in enumerate(groups(p["ccs"])))
    sets = [f"duration={p['duration']}s", f"topology.senders={n}", f"topology.receivers={n}",
            f"topology.link_rate={rate_str(p['rate'])}", f"topology.link_delay={d:g}us",
            f"topology.bottleneck_delay={2 * d:g}us", q, f"tcp.ecn={'true' if p['ecn'] else 'false'}",
            f"tcp.cc={p['ccs'][0]}", f"flows=[{flows}]"]
    return sets


def ns3_args(p: dict) -> list[str]:
    d = p["rtt_us"] / 8.0
    pkt_us = 1500 * 8 / p["rate"] * 1e6  # flows start in [0, one packet time]: tacc's default NIC jitter span
    return [f"--flows={len(p['ccs'])}", f"--cc={','.join(p['ccs'])}", f"--time={p['duration']}",
            f"--warmup={WARMUP}", f"--rate={rate_str(p['rate'])}", f"--delay-us={d:g}",
            f"--bneck-delay-us={2 * d:g}", f"--buffer={p['buffer']}", f"--k={p['k']}",
            f"--ecn={1 if p['ecn'] else 0}", f"--start-jitter={pkt_us:g}", "--stats=1"]


def pctl(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def qstats(samples: list[float]) -> dict:
    return {"mean": sum(samples) / len(samples) if samples else float("nan"), "p10": pctl(samples, 0.1),
            "p50": pctl(samples, 0.5), "p90": pctl(samples, 0.9), "p99": pctl(samples, 0.99),
            "max": max(samples) if samples else float("nan"), "samples": len(samples)}


def jain(x: list[float]) -> float:
    s, s2 = sum(x), sum(v * v for v in x)
    return s * s / (len(x) * s2) if s2 > 0 else 0.0


def sawtooth(flows: list[list[float]], block: int = 30) -> dict:
    """The window's sawtooth from per-flow packets delivered per RTT-long bin (after the warm-up):
    the median over flows and 30-bin blocks (longer than one cycle) of the lowest and highest
    3-bin moving median, so a one-bin pause or burst (PRR holds back, then catches up) does not
    count as a trough or a peak."""
    lo, hi = [], []
    for f in flows:
        ma = [sorted(f[i - 1:i + 2])[1] for i in range(1, len(f) - 1)]
        for b in range(0, len(ma) - block + 1, block):
            lo.append(min(ma[b:b + block]))
            hi.append(max(ma[b:b + block]))
    return {"trough": statistics.median(lo), "peak": statistics.median(hi)} if lo else {}


def sawtooth_util(lo: float, hi: float, bdp: float) -> float:
    """Link utilization of an aggregate window rising linearly from lo to hi packets over a
    bandwidth-delay product of bdp packets (the link is busy while the window covers the pipe)."""
    if hi <= lo:
        return min(1.0, lo / bdp)
    if lo >= bdp:
        return 1.0
    top = min(hi, bdp)
    return ((top - lo) * (top + lo) / 2 / bdp + max(0.0, hi - bdp)) / (hi - lo)


def run_tacc(p: dict, extra: list[str] | None = None, seed: int = 1) -> dict:
    with tempfile.TemporaryDirectory() as out:
        cmd = [str(TACC), "run", str(BASE), "--out", out, "--no-plot", "--quiet", "--seed", str(seed)]
        for s in tacc_sets(p) + (extra or []):
            cmd += ["--set", s]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        summ = json.loads((Path(out) / "summary.json").read_text())
        port = next(x for x in summ["ports"] if x["name"] == "swL->swR")
        qs = []
        for line in (Path(out) / "queues.csv").read_text().splitlines()[1:]:
            t, name, pk, _ = line.split(",")
            if name == "swL->swR" and float(t) >= WARMUP:
                qs.append(float(pk))
        saw = {}
        if BINS_TACC in (extra or []):
            bins: dict[str, list[float]] = {}
            for line in (Path(out) / "goodput.csv").read_text().splitlines()[1:]:
                t, f, g = line.split(",")
                if float(t) >= WARMUP:
                    bins.setdefault(f, []).append(float(g) * 1e6 * 1e-3 / 8 / 1460)  # packets per ms
            saw = sawtooth(list(bins.values()))
            first = next(iter(bins.values()))
            saw["trace_from_1s"] = [round(x, 1) for x in first[int((1.0 - WARMUP) * 1000):][:TRACE_BINS]]
    fl = summ["flows"]
    return {"goodput_mbps": [f["goodput_mbps"] for f in fl], "retransmits": [f["retransmits"] for f in fl],
            "timeouts": sum(f["timeouts"] for f in fl), "fast_retransmits": sum(f["fast_retransmits"] for f in fl),
            "ecn_reductions": [f["ecn_reductions"] for f in fl],
            "marked": port["marked"], "enqueued": port["enqueued"], "dropped": port["dropped"],
            "dropped_aqm": port["dropped_aqm"], "dropped_overflow": port["dropped_overflow"],
            "utilization": port["utilization"], "queue": qstats(qs), "wall_s": summ["wall_seconds"],
            "sawtooth": saw, "seed": seed, "sets": tacc_sets(p) + (extra or [])}


def run_ns3(p: dict, extra: list[str] | None = None, seed: int = 1) -> dict:
    with tempfile.TemporaryDirectory() as out:
        f = Path(out) / "r.json"
        subprocess.run([str(NS3), *ns3_args(p), f"--seed={seed}", *(extra or []), f"--out={f}"], check=True,
                       capture_output=True, text=True)
        r = json.loads(f.read_text())
    qs = [float(n) for t, n in r["queue_samples"] if t >= WARMUP]
    b = r["bottleneck"]
    return {"goodput_mbps": r["goodput_mbps"], "retransmits": [int(x) for x in r["retransmits"]],
            "timeouts": int(sum(r["timeouts"])),
            "marked": b["marked"], "enqueued": b["enqueued"], "dropped": b["dropped"],
            "utilization": b["utilization"], "queue": qstats(qs), "wall_s": r["wall_seconds"],
            "fast_retransmits": int(sum(r["recoveries"])), "at_recovery": r["at_recovery"],
            "ecn_reductions": [int(x) for x in r["ecn_reductions"]], "marks_per_flow": [int(x) for x in r["marks_per_flow"]],
            "retx_at_bottleneck": r["retx_at_bottleneck"],
            "sawtooth": dict(sawtooth([[x / 1460 for x in f[int(WARMUP * 1000):]] for f in r["rx_bins"]]),
                             trace_from_1s=[round(x / 1460, 1) for x in r["rx_bins"][0][1000:1000 + TRACE_BINS]])
            if BINS_NS3 in (extra or []) else {},
            "seed": seed, "args": ns3_args(p) + [f"--seed={seed}"] + (extra or [])}


def ratio_ok(a: float, b: float, factor: float, floor: float) -> bool:
    if a <= floor and b <= floor:
        return True
    if min(a, b) <= 0:
        return False
    return max(a, b) / min(a, b) <= factor


def verdicts(p: dict, t: dict, n: dict) -> dict:
    cap = p["rate"] / 1e6 * 1460 / 1500  # Mb/s of goodput a fully used bottleneck carries
    N = len(p["ccs"])
    # Flows running the same control are interchangeable (which of them wins is chance): compare
    # the sorted goodputs within each group of equal controls.
    tg, ng = [], []
    for _, first, cnt in groups(p["ccs"]):
        tg += sorted(t["goodput_mbps"][first:first + cnt])
        ng += sorted(n["goodput_mbps"][first:first + cnt])
    d_total = abs(sum(tg) - sum(ng)) / cap
    d_flow = max(abs(a - b) for a, b in zip(tg, ng)) / (cap / N)
    d_jain = abs(jain(tg) - jain(ng))
    mt = t["marked"] / max(1, t["enqueued"])
    mn = n["marked"] / max(1, n["enqueued"])
    rt, rn = sum(t["retransmits"]), sum(n["retransmits"])
    qtol = max(TOL["queue_abs_min"], TOL["queue_frac_k"] * p["k"] if p["ecn"] else TOL["queue_frac_buf"] * p["buffer"])
    dq_mean = abs(t["queue"]["mean"] - n["queue"]["mean"])
    dq_p90 = abs(t["queue"]["p90"] - n["queue"]["p90"])
    return {
        "goodput": {"ok": d_total <= TOL["total_goodput_frac"] and d_flow <= TOL["per_flow_frac"] and d_jain <= TOL["jain_abs"],
                    "total_diff_frac_of_capacity": d_total, "max_flow_diff_frac_of_fair_share": d_flow,
                    "jain_tacc": jain(tg), "jain_ns3": jain(ng)},
        "marks": {"ok": ratio_ok(mt, mn, TOL["marks_factor"], TOL["marks_floor"]), "tacc": mt, "ns3": mn},
        "retransmits": {"ok": ratio_ok(rt, rn, TOL["retx_factor"], TOL["retx_floor"]), "tacc": rt, "ns3": rn},
        "queue": {"ok": dq_mean <= qtol and dq_p90 <= qtol, "tolerance_pkts": qtol, "mean_diff": dq_mean, "p90_diff": dq_p90},
    }


def describe(p: dict) -> str:
    gs = "+".join(f"{c} {cnt}" if len(groups(p["ccs"])) > 1 else c for c, _, cnt in groups(p["ccs"]))
    q = f"RED-ECN K={p['k']}" if p["ecn"] else "drop-tail"
    return f"{rate_str(p['rate'])}, RTT {p['rtt_us']:g} us, {p['buffer']} pkt {q}, {len(p['ccs'])} flows {gs}, {p['duration']:g} s"


def fmt_flows(g: list[float]) -> str:
    if len(g) <= 4:
        return " / ".join(f"{x:.1f}" for x in g)
    return f"min {min(g):.1f}, max {max(g):.1f}, {sum(1 for x in g if x < 0.01)} at 0"


METRICS = ("goodput", "marks", "retransmits", "queue")


def combine(runs: list[dict]) -> dict:
    """A point's verdict per metric over its seeds: agree when a majority of the seeds agree."""
    out = {}
    for m in METRICS:
        k = sum(r["verdict"][m]["ok"] for r in runs)
        out[m] = {"ok": 2 * k > len(runs), "agree_seeds": k, "seeds": len(runs)}
    return out


def rng(xs: list[float], fmt: str) -> str:
    lo, hi = min(xs), max(xs)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{format(lo, fmt)}-{format(hi, fmt)}"


def side_row(name: str, sim: str, s: dict) -> str:
    q = s["queue"]
    return (f"| {name} | {sim} | {sum(s['goodput_mbps']):.1f} | {fmt_flows(s['goodput_mbps'])} | {jain(s['goodput_mbps']):.4f} | "
            f"{s['utilization']:.2%} | {s['marked'] / max(1, s['enqueued']):.4f} | {sum(s['retransmits'])} ({s['timeouts']}) | "
            f"{s['dropped']} | {q['mean']:.1f} / {q['p50']:.0f} / {q['p90']:.0f} / {q['p99']:.0f} |")


def table(rows: list[dict]) -> str:
    yes = lambda v: f"agree {v['agree_seeds']}/{v['seeds']}" if v["ok"] else f"**DIFFER** {v['agree_seeds']}/{v['seeds']}"
    out = ["Seed 1 of each simulator:", "",
           "| point | sim | goodput sum Mb/s | per-flow Mb/s | Jain | util | marks/pkt | retx (timeouts) | drops | queue mean / p50 / p90 / p99 pkts |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        r1 = r["runs"][0]
        out.append(side_row(r["name"], "tacc", r1["tacc"]))
        out.append(side_row("", "ns-3", r1["ns3"]))
    n = len(rows[0]["runs"]) if rows else 0
    out += ["", f"Ranges over seeds 1-{n} (min-max):", "",
            "| point | sim | goodput sum Mb/s | Jain | util | marks/pkt | retx (timeouts) | queue mean / p90 pkts |",
            "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for sim, label in (("tacc", "tacc"), ("ns3", "ns-3")):
            ss = [x[sim] for x in r["runs"]]
            out.append(f"| {r['name'] if sim == 'tacc' else ''} | {label} | {rng([sum(s['goodput_mbps']) for s in ss], '.1f')} | "
                       f"{rng([jain(s['goodput_mbps']) for s in ss], '.4f')} | {rng([100 * s['utilization'] for s in ss], '.2f')}% | "
                       f"{rng([s['marked'] / max(1, s['enqueued']) for s in ss], '.4f')} | {rng([sum(s['retransmits']) for s in ss], 'd')} "
                       f"({rng([s['timeouts'] for s in ss], 'd')}) | {rng([s['queue']['mean'] for s in ss], '.1f')} / "
                       f"{rng([s['queue']['p90'] for s in ss], '.0f')} |")
    out += ["", f"Verdicts (agreeing seeds / seeds; the figures in brackets range over the seeds):", "",
            "| point | scenario | goodput | marks/pkt | retransmissions | queue |", "|---|---|---|---|---|---|"]
    for r in rows:
        v = r["verdict"]
        vs = [x["verdict"] for x in r["runs"]]
        g = [x["goodput"] for x in vs]
        out.append(f"| {r['name']} | {describe(r['point'])} | {yes(v['goodput'])} (sum {rng([100 * x['total_diff_frac_of_capacity'] for x in g], '.1f')}%, "
                   f"flow {rng([100 * x['max_flow_diff_frac_of_fair_share'] for x in g], '.0f')}%, "
                   f"Jain {rng([x['jain_tacc'] - x['jain_ns3'] for x in g], '+.3f')}) | "
                   f"{yes(v['marks'])} ({rng([x['marks']['tacc'] for x in vs], '.3f')} vs {rng([x['marks']['ns3'] for x in vs], '.3f')}) | "
                   f"{yes(v['retransmits'])} | "
                   f"{yes(v['queue'])} (mean {rng([x['queue']['mean_diff'] for x in vs], '.1f')}, p90 {rng([x['queue']['p90_diff'] for x in vs], '.0f')}, "
                   f"tol {vs[0]['queue']['tolerance_pkts']:.0f}) |")
    n_ok = sum(v["ok"] for r in rows for v in r["verdict"].values())
    n_seed_ok = sum(x["verdict"][m]["ok"] for r in rows for x in r["runs"] for m in METRICS)
    n_seed = sum(len(r["runs"]) for r in rows) * len(METRICS)
    out += ["", f"{n_ok} of {4 * len(rows)} metric verdicts agree (majority of {n} seeds); "
            f"{sum(all(v['ok'] for v in r['verdict'].values()) for r in rows)} of {len(rows)} points agree on all four. "
            f"Per seed: {n_seed_ok} of {n_seed} verdicts agree."]
    return "\n".join(out) + "\n"


def details(rows: list[dict]) -> str:
    """Losses and reactions at seed 1, for the points that lose packets or whose reaction is analysed."""
    out = ["| point | sim | drops (at K, not ECT) | retx | fast recoveries | timeouts | retx reaching the bottleneck as ECT / not-ECT | at recovery: FlightSize → ssthresh, segments | ECN reductions per flow | marks per flow |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t, n = r["runs"][0]["tacc"], r["runs"][0]["ns3"]
        if t["dropped"] == 0 and n["dropped"] == 0 and r["name"] not in ("rtt-20us", "mix-newreno-dctcp"):
            continue
        per = lambda x: "-" if not any(x) else " / ".join(str(v) for v in x) if len(x) <= 8 else f"{min(x)}-{max(x)}"
        out.append(f"| {r['name']} | tacc | {t['dropped']} ({t.get('dropped_aqm', 0)}) | {sum(t['retransmits'])} | {t['fast_retransmits']} | {t['timeouts']} | "
                   f"not ECT (RFC 3168) | FlightSize/2 (by code) | {per(t['ecn_reductions'])} | not reported |")
        b, a = n["retx_at_bottleneck"], n["at_recovery"]
        rec = f"{a['mean_flight_segments']:.1f} → {a['mean_ssthresh_segments']:.1f}" if a["samples"] else "-"
        out.append(f"| | ns-3 | {n['dropped']} | {sum(n['retransmits'])} | {n['fast_retransmits']} | {n['timeouts']} | "
                   f"{b['ect_enqueued'] + b['ect_dropped']} ({b['ect_dropped']} dropped) / {b['not_ect_enqueued'] + b['not_ect_dropped']} "
                   f"({b['not_ect_dropped']} dropped) | {rec} | {per(n['ecn_reductions'])} | {per(n['marks_per_flow'])} |")
    return "\n".join(out) + "\n"


def diag_table(diags: list[dict], rows: dict) -> str:
    out = ["| point | variant | sim | goodput sum Mb/s | per-flow Mb/s | Jain | util | marks/pkt | retx (timeouts) | drops | queue mean / p90 | window per RTT trough / peak, pkts (a synchronous sawtooth between them would use) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    seen = set()
    for d in diags:
        base = rows.get(d["name"])
        lines = []
        if d["name"] not in seen and base:
            seen.add(d["name"])
            lines += [("as in the matrix", "tacc", base["runs"][0]["tacc"]), ("as in the matrix", "ns-3", base["runs"][0]["ns3"])]
        lines.append((d["label"], d["side"], d["result"]))
        for label, sim, s in lines:
            saw = s.get("sawtooth") or {}
            w = ""
            if saw:
                p = base["point"]
                n = len(s["goodput_mbps"])
                bdp = p["rate"] * p["rtt_us"] * 1e-6 / (1500 * 8)
                w = f"{saw['trough']:.1f} / {saw['peak']:.1f} ({sawtooth_util(n * saw['trough'], n * saw['peak'], bdp):.0%})"
            out.append(f"| {d['name']} | {label} | {sim} | {sum(s['goodput_mbps']):.1f} | {fmt_flows(s['goodput_mbps'])} | "
                       f"{jain(s['goodput_mbps']):.4f} | {s['utilization']:.2%} | {s['marked'] / max(1, s['enqueued']):.4f} | "
                       f"{sum(s['retransmits'])} ({s['timeouts']}) | {s['dropped']} | {s['queue']['mean']:.1f} / {s['queue']['p90']:.0f} | {w} |")
    traces = [(d["name"], d["label"], d["result"]["sawtooth"]["trace_from_1s"]) for d in diags
              if (d["result"].get("sawtooth") or {}).get("trace_from_1s")]
    if traces:
        out += ["", "Packets of flow 0 delivered per 1 ms bin (one RTT at rtt-1ms) from 1 s on:", ""]
        out += [f"- {name}, {label}: {' '.join(f'{x:.0f}' for x in tr)}" for name, label, tr in traces]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="run every point with seeds 1..N on both sides (default 3)")
    ap.add_argument("--only", nargs="*", help="run only these points (the others are kept from matrix.json)")
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (default 2)")
    ap.add_argument("--no-diagnostics", action="store_true", help="skip the diagnostic variants")
    ap.add_argument("--table-only", action="store_true", help="rewrite matrix.md from matrix.json")
    ap.add_argument("--keep-ns3", action="store_true",
                    help="rerun tacc only; keep each ns-3 result from matrix.json whose arguments are the same "
                         "(ns-3 is deterministic for given arguments; for a new tacc engine)")
    a = ap.parse_args()
    jpath, mpath = HERE / "matrix.json", HERE / "matrix.md"
    prev = json.loads(jpath.read_text()) if jpath.exists() else {}
    old = {r["name"]: r for r in prev.get("points", []) if "runs" in r}
    diags = prev.get("diagnostics", [])
    if not a.table_only:
        subprocess.run(["bash", str(HERE / "build.sh")], check=True)
        todo = [(p, seed) for p in MATRIX if not a.only or p["name"] in a.only for seed in range(1, a.seeds + 1)]

        kept = {(r["name"], x["seed"]): x["ns3"] for r in old.values() for x in r["runs"]} if a.keep_ns3 else {}
        kept_diag = {(d["name"], d["label"]): d for d in diags if d["side"] == "ns-3"} if a.keep_ns3 else {}

        def ns3_for(p: dict, seed: int, extra: list[str] | None = None, prev: dict | None = None) -> dict:
            want = ns3_args(p) + [f"--seed={seed}"] + (extra or [])
            fresh_enough = prev is not None and prev.get("args") == want and (
                BINS_NS3 not in (extra or []) or "trace_from_1s" in prev.get("sawtooth", {}))
            return prev if fresh_enough else run_ns3(p, extra, seed=seed)

        def one(job: tuple) -> tuple:
            p, seed = job
            t, n = run_tacc(p, seed=seed), ns3_for(p, seed, prev=kept.get((p["name"], seed)))
            print(f"{p['name']} seed {seed}: tacc {t['wall_s']:.2f} s, ns-3 {n['wall_s']:.1f} s", flush=True)
            return p, {"seed": seed, "tacc": t, "ns3": n, "verdict": verdicts(p, t, n)}

        runs: dict[str, list] = {}
        with ThreadPoolExecutor(a.jobs) as ex:
            for p, run in ex.map(one, todo):
                runs.setdefault(p["name"], []).append(run)
        for p in MATRIX:
            if p["name"] in runs:
                old[p["name"]] = {"name": p["name"], "point": p, "runs": sorted(runs[p["name"]], key=lambda r: r["seed"])}

        if not a.no_diagnostics:
            pts = {p["name"]: p for p in MATRIX}

            def diag(d: tuple) -> dict:
                name, label, tset, nargs = d
                prev_d = kept_diag.get((name, label))
                res = run_tacc(pts[name], tset) if tset else ns3_for(pts[name], 1, nargs, prev_d and prev_d["result"])
                print(f"diagnostic {name} / {label} done", flush=True)
                return {"name": name, "label": label, "side": "tacc" if tset else "ns-3", "seed": 1, "result": res}

            done = {(d["name"], d["label"]): d for d in diags}
            with ThreadPoolExecutor(a.jobs) as ex:
                for d in ex.map(diag, [d for d in DIAGNOSTICS if not a.only or d[0] in a.only]):
                    done[(d["name"], d["label"])] = d
            order = [(d[0], d[1]) for d in DIAGNOSTICS]
            diags = [done[k] for k in order if k in done]
    rows = [old[p["name"]] for p in MATRIX if p["name"] in old]
    for r in rows:  # verdicts follow the current tolerances
        for run in r["runs"]:
            run["verdict"] = verdicts(r["point"], run["tacc"], run["ns3"])
        r["verdict"] = combine(r["runs"])
    core = next((ROOT / "python" / "tacc").glob("_core*.so"), None)
    engine = prev.get("engine", {}) if a.table_only else {
        "tacc_core_sha256": hashlib.sha256(core.read_bytes()).hexdigest()[:16] if core else None,
        "git_head": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()}
    jpath.write_text(json.dumps({"base_scenario": str(BASE.relative_to(ROOT)), "warmup_s": WARMUP, "engine": engine,
                                 "tolerances": TOL, "rule": "a metric agrees at a point when it agrees on a majority of the seeds",
                                 "points": rows, "diagnostics": diags}, indent=1) + "\n")
    text = (table(rows) + "\nLosses and reactions (seed 1):\n\n" + details(rows)
            + "\nDiagnostic variants (seed 1; one model detail changed on one side):\n\n" + diag_table(diags, old))
    mpath.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
