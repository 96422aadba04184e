"""Benchmark runner: wall time (median of N runs), events per second, simulated seconds per
wall second and peak RSS for each scenario in bench/scenarios, each run in a fresh process.

    .venv/bin/python bench/run.py [--runs N] [SCENARIO.toml ...]

Prints a table and writes bench/results.json. Figures are machine-dependent: compare ratios
measured in the same run, not absolute numbers across machines.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = """
import json, resource, sys, time, tacc._core as core
t0 = time.perf_counter()
out = core.run(sys.argv[1], out=sys.argv[2])
wall = time.perf_counter() - t0
s = json.load(open(out + '/summary.json'))
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"wall": wall, "engine_wall": s["wall_seconds"], "events": s["events"], "sim": s["sim_seconds"], "rss_kb": rss}))
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
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("scenarios", nargs="*", type=Path)
    args = ap.parse_args()
    scenarios = args.scenarios or sorted((HERE / "scenarios").glob("*.toml"))
    rows = [measure(s, args.runs) for s in scenarios]
    print(f"{'scenario':<24} {'wall s':>8} {'events':>12} {'events/s':>12} {'sim s/wall s':>12} {'RSS MB':>8} {'py ovh':>7}")
    for r in rows:
        print(f"{r['scenario']:<24} {r['wall_s']:>8.3f} {r['events']:>12,} {r['events_per_s']:>12,.0f} {r['sim_s_per_wall_s']:>12.2f} {r['peak_rss_mb']:>8.1f} {r['python_overhead']:>6.1%}")
    (HERE / "results.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
