"""Benchmark runner: wall time (median of N runs), events per second, simulated seconds per
wall second and peak RSS for each scenario in bench/scenarios, each run in a fresh process.

    .venv/bin/python bench/run.py [--runs N] [--with-ns3] [SCENARIO.toml ...]

Prints a table and writes bench/results.json. Figures are machine-dependent: compare ratios
measured in the same run, not absolute numbers across machines. --with-ns3 also installs the
Debian ns-3 packages (apt), builds bench/ns3/dumbbell.cc, runs the dumbbell scenarios in ns-3
once each and prints a side-by-side comparison (see bench/ns3/README.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = """
import json, resource, sys, time, tacc._core as core
t0 = time.perf_counter()
out = core.run(sys.argv[1], out=sys.argv[2])
wall = time.perf_counter() - t0
s = json.load(open(out + '/summary.json'))
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
port = next((p for p in s["ports"] if p["name"] == "swL->swR"), None)
port = port and {k: port[k] for k in ("marked", "dropped", "utilization")}
print(json.dumps({"wall": wall, "engine_wall": s["wall_seconds"], "events": s["events"], "sim": s["sim_seconds"], "rss_kb": rss,
                  "goodput": [f["goodput_mbps"] for f in s["flows"]], "bottleneck": port}))
"""


def measure(scenario: Path, runs: int) -> dict:
    samples = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as out:
            res = subprocess.run([sys.executable, "-c", CHILD, str(scenario), out], capture_output=True, text=True, check=True)
            samples.append(json.loads(res.stdout))
    wall = statistics.median(s["wall"] for s in samples)
    engine = statistics.median(s["engine_wall"] for s in samples)
    events = samples[0]["events"]
    return {
        "scenario": scenario.stem,
        "runs": runs,
        "wall_s": wall,
        "engine_wall_s": engine,
        "python_overhead": (wall - engine) / wall,
        "events": events,
        "events_per_s": events / engine,
        "sim_s_per_wall_s": samples[0]["sim"] / engine,
        "peak_rss_mb": max(s["rss_kb"] for s in samples) / 1024,
        "sim_s": samples[0]["sim"],
        "goodput_mbps": samples[0]["goodput"],
        "bottleneck": samples[0]["bottleneck"],
    }


NS3 = HERE / "ns3"
# tacc scenario stem -> (flows, cc) of bench/ns3/dumbbell.cc
NS3_CASES = {"dumbbell-4-newreno": (4, "newreno"), "dumbbell-4-dctcp": (4, "dctcp"), "dumbbell-64-newreno": (64, "newreno")}


def _jain(x: list[float]) -> float:
    return sum(x) ** 2 / (len(x) * sum(v * v for v in x)) if x and any(x) else 0.0


def run_ns3(rows: list[dict]) -> None:
    """Installs ns-3 (apt) and builds the ns-3 dumbbell, runs each known scenario once in ns-3,
    attaches the result to its row as "ns3" and prints tacc and ns-3 side by side."""
    subprocess.run(["bash", str(NS3 / "install.sh")], check=True)
    subprocess.run(["bash", str(NS3 / "build.sh")], check=True)
    print(f"\n{'scenario':<24} {'sim':<5} {'wall s':>8} {'events':>12} {'mean Mb/s':>10} {'Jain':>7} {'marks':>9} {'drops':>7} {'util':>7}")
    for r in rows:
        case = NS3_CASES.get(r["scenario"])
        if case is None:
            print(f"{r['scenario']:<24} no ns-3 twin, skipped")
            continue
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "ns3.json"
            t0 = time.perf_counter()
            subprocess.run([str(NS3 / "build" / "dumbbell"), f"--flows={case[0]}", f"--cc={case[1]}", f"--time={r['sim_s']}", f"--out={out}"], check=True)
            wall = time.perf_counter() - t0
            n = json.loads(out.read_text())
        n["process_wall_s"] = wall
        r["ns3"] = n
        t_gp, n_gp = r["goodput_mbps"], n["goodput_mbps"]
        t_mean, n_mean = statistics.mean(t_gp), statistics.mean(n_gp)
        tb, nb = r["bottleneck"] or {}, n["bottleneck"]
        for name, w, ev, mean, jain, b in (("tacc", r["wall_s"], r["events"], t_mean, _jain(t_gp), tb), ("ns-3", wall, n["events"], n_mean, n["jain"], nb)):
            print(f"{r['scenario'] if name == 'tacc' else '':<24} {name:<5} {w:>8.2f} {ev:>12,} {mean:>10.2f} {jain:>7.4f} {b.get('marked', 0):>9,} {b.get('dropped', 0):>7,} {b.get('utilization', 0):>7.2%}")
        diff = (n_mean - t_mean) / t_mean if t_mean else float("inf")
        flag = "  GOODPUT DIFFERS BY MORE THAN 5% (see bench/ns3/README.md)" if abs(diff) > 0.05 else ""
        print(f"{'':<24} ns-3 / tacc: wall x{wall / r['wall_s']:.1f}, mean goodput {diff:+.2%}{flag}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--with-ns3", action="store_true", help="also run the scenarios in ns-3 (installs it with apt) and compare")
    ap.add_argument("scenarios", nargs="*", type=Path)
    args = ap.parse_args()
    scenarios = args.scenarios or sorted((HERE / "scenarios").glob("*.toml"))
    rows = [measure(s, args.runs) for s in scenarios]
    print(f"{'scenario':<24} {'wall s':>8} {'events':>12} {'events/s':>12} {'sim s/wall s':>12} {'RSS MB':>8} {'py ovh':>7}")
    for r in rows:
        print(f"{r['scenario']:<24} {r['wall_s']:>8.3f} {r['events']:>12,} {r['events_per_s']:>12,.0f} {r['sim_s_per_wall_s']:>12.2f} {r['peak_rss_mb']:>8.1f} {r['python_overhead']:>6.1%}")
    if args.with_ns3:
        run_ns3(rows)
    (HERE / "results.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
