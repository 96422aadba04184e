"""What the testbed's host shim costs (root; the testbed's requirements).

One TCP NewReno flow s0 -> r0 on the dumbbell (bench/testbed/one-flow.toml), on the
testbed at each rate cap, `--runs` times each way:
  plain   no mechanism: no host programs (the switch agent's port programs run in both)
  shim    static limits far above the link (10 Gb/s nominal): every host program runs on every
          packet (scrub on the VM port; count, ECT, class lookup on the NIC's egress; counts
          and clamp lookups on its ingress) and the limiter never binds
and reports the flow's goodput (median), the ratio shim/plain, and the kernel's own run-time
statistics of each program (kernel.bpf_stats_enabled: run time / runs = ns per packet).

    sudo .venv/bin/python bench/testbed/overhead.py [--runs 3] [--caps 100Mbps 1Gbps]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tacc.summary import read_summary
from tacc.testbed import run
from tacc.testbed.plan import parse_rate

SCENARIO = Path(__file__).parent / "one-flow.toml"
SHIM = ("mechanism", '{kind="static-rate",rate="10Gbps",on_shortage="queue"}')
PROGRAMS = ("vm_ingress", "uplink_egress", "uplink_ingress", "port_egress", "port_ingress")


def bpf_run_times() -> dict[str, tuple[int, int]]:
    """(run time ns, runs) per program name, summed over the loaded instances."""
    progs = json.loads(subprocess.run(["bpftool", "prog", "show", "-j"], check=True,
                                      capture_output=True, text=True).stdout)
    totals: dict[str, tuple[int, int]] = {}
    for p in progs:
        if p.get("name") in PROGRAMS:
            ns, n = totals.get(p["name"], (0, 0))
            totals[p["name"]] = (ns + p.get("run_time_ns", 0), n + p.get("run_cnt", 0))
    return totals


def one(cap_bps: float, sets: list[tuple[str, str]]) -> tuple[float, dict[str, float]]:
    stats: dict[str, float] = {}

    def sample(_names: object, _workdir: Path, t0: int) -> None:
        # The counters of this run's programs just before the traffic ends.
        time.sleep(max(0.0, (t0 - time.monotonic_ns()) / 1e9 + 9.5))
        for name, (ns, n) in bpf_run_times().items():
            if n:
                stats[name] = ns / n

    with tempfile.TemporaryDirectory() as tmp:
        out = run.run_testbed(SCENARIO, sets, run.Options(
            out=Path(tmp) / "out", quiet=True, rate_cap_bps=cap_bps, during=sample))
        summary = read_summary(out)
        flow = summary["flows"][0]
        return flow["goodput_mbps"], stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--caps", nargs="+", default=["100Mbps", "1Gbps"])
    args = parser.parse_args()
    subprocess.run(["sysctl", "-qw", "kernel.bpf_stats_enabled=1"], check=True)
    try:
        print(f"{'cap':>8}  {'plain Mb/s':>10}  {'shim Mb/s':>9}  {'shim/plain':>10}  "
              "ns per packet (median over runs)")
        for cap in args.caps:
            cap_bps = parse_rate(cap)
            plain, shim, costs = [], [], {}
            for _ in range(args.runs):  # interleaved, so that drift hits both alike
                plain.append(one(cap_bps, [])[0])
                g, stats = one(cap_bps, [SHIM])
                shim.append(g)
                for name, ns in stats.items():
                    costs.setdefault(name, []).append(ns)
            p, s = statistics.median(plain), statistics.median(shim)
            per_packet = ", ".join(f"{k} {statistics.median(v):.0f}"
                                   for k, v in sorted(costs.items()))
            print(f"{cap:>8}  {p:>10.1f}  {s:>9.1f}  {s / p:>10.3f}  {per_packet}")
    finally:
        subprocess.run(["sysctl", "-qw", "kernel.bpf_stats_enabled=0"], check=False)


if __name__ == "__main__":
    main()
