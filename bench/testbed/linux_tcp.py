"""The simulator's Linux TCP (`tcp.profile = "linux"`) beside Linux itself on the testbed.

Runs each case of CASES in the simulator (SEEDS seeds) and on the testbed (`tacc testbed
--repeat N`, root; with --link-delays, the testbed's links delay packets as the scenario's
do), all with `tcp.profile = "linux"`, and writes bench/testbed/linux-tcp.json
and linux-tcp.md: per case the median over runs of each run's short-flow FCT median and p99
and of each long flow's share of the bottleneck, simulator against testbed, with the
tolerances the simulator is held to (FCTs within 20%, shares within 0.05).

    sudo .venv/bin/python bench/testbed/linux_tcp.py [--runs 3] [--seeds 3] [--link-delays]
        [CASE ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tacc.testbed import repeat
from tacc.testbed.compare import bottleneck_of

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "tests" / "python" / "data"
TACC = Path(sys.executable).parent / "tacc"
LINUX = ("tcp.profile", '"linux"')
FCT_TOLERANCE = 0.20
SHARE_TOLERANCE = 0.05


@dataclass(frozen=True)
class Case:
    name: str
    file: str
    sets: tuple[tuple[str, str], ...]
    short: str  # the group prefix of the flows whose FCTs are judged ("" for none)
    long: str  # the group prefix of the flows whose shares are judged
    switches: str = "auto"


# The testbed's own rate, as the other cases: both runs see the same link, and the
# mechanism's clock needs no dilation.
NATIVE = (("topology.link_rate", '"100Mbps"'), ("flows[0].rate", '"100Mbps"'))
HYGENICC = ("mechanism", '{kind="hygenicc"}')
SICC = ('{kind="sicc",interval="10ms",initial_window=2.0,evaluate_on_syn=true,'
        'incast_duration="30ms"}')
CASES = [
    Case("incast", "incast-over-elephants.toml", (), "mice", "elephant"),
    Case("incast-sicc", "incast-over-elephants.toml", (("mechanism", SICC),), "mice",
         "elephant"),
    Case("short-next-to-bulk", "short-next-to-bulk.toml", (), "short", "bulk", "ovs"),
    Case("short-next-to-bulk-sdn-ecn", "short-next-to-bulk.toml",
         (("mechanism", '{kind="sdn-ecn",interval="500ms",rule_timeout="1s"}'),), "short",
         "bulk"),
    Case("tagged-vs-udp", "tagged-vs-udp.toml", NATIVE, "", "tagged"),
    Case("tagged-vs-udp-hygenicc", "tagged-vs-udp.toml", (*NATIVE, HYGENICC), "", "tagged"),
    # At its own 1 Gb/s, run x0.1 by the testbed: docs/testbed.md says what that changes.
    Case("tagged-vs-udp-hygenicc-1g", "tagged-vs-udp.toml", (HYGENICC,), "", "tagged"),
]


def sets_args(sets: Sequence[tuple[str, str]]) -> list[str]:
    return [a for k, v in sets for a in ("--set", f"{k}={v}")]


def run_sim(case: Case, seed: int, out: Path) -> Path:
    d = out / f"{case.name}-sim-{seed}"
    subprocess.run([str(TACC), "run", str(DATA / case.file), "--out", str(d), "--seed",
                    str(seed), "--no-plot", "--quiet", *sets_args((LINUX, *case.sets))],
                   check=True)
    return d


def run_testbed(case: Case, runs: int, out: Path, delays: bool) -> list[Path]:
    d = out / f"{case.name}-testbed"
    subprocess.run([str(TACC), "testbed", str(DATA / case.file), "--out", str(d), "--repeat",
                    str(runs), "--switches", case.switches, "--no-plot", "--quiet",
                    *(["--link-delays"] if delays else []), *sets_args((LINUX, *case.sets))],
                   check=True)
    return repeat.run_dirs(d)


def metrics(d: Path, case: Case) -> dict[str, float]:
    """One run's short-flow FCT median and p99 (ms) and each long flow's share."""
    summary = json.loads((d / "summary.json").read_text())
    runs = repeat.read_runs([d])
    port = bottleneck_of(runs)
    out: dict[str, float] = {}
    fcts = [f["fct"] * 1e3 for f in summary["flows"]
            if case.short and f["group"].startswith(case.short) and f["completed"]]
    if fcts:
        out["fct_median_ms"] = float(np.median(fcts))
        out["fct_p99_ms"] = float(np.percentile(fcts, 99))
    for f in summary["flows"]:
        if f["group"].startswith(case.long):
            share = repeat.quantity_of(runs[0], f, "share", port)
            if share is not None:
                out[f"share {f['name']}"] = share
    return out


def compare(case: Case, sim: list[dict[str, float]], tb: list[dict[str, float]]) -> list[dict]:
    rows = []
    for key in sim[0]:
        s = statistics.median(m[key] for m in sim if key in m)
        t_all = [m[key] for m in tb if key in m]
        if not t_all:
            continue
        t = statistics.median(t_all)
        if key.startswith("share"):
            ok = abs(s - t) <= SHARE_TOLERANCE
        else:
            ok = abs(s - t) <= FCT_TOLERANCE * t
        rows.append({"case": case.name, "quantity": key, "simulator": s, "testbed": t,
                     "testbed_min": min(t_all), "testbed_max": max(t_all), "within": ok})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="testbed runs per case")
    ap.add_argument("--seeds", type=int, default=3, help="simulator seeds per case")
    ap.add_argument("--out", type=Path, default=Path("out/linux-tcp"))
    ap.add_argument("--link-delays", action="store_true", help="emulate the links' delays")
    ap.add_argument("cases", nargs="*", help="case names (default: all)")
    args = ap.parse_args()
    chosen = [c for c in CASES if not args.cases or c.name in args.cases]
    rows = []
    for case in chosen:
        sim = [metrics(run_sim(case, s, args.out), case) for s in range(1, args.seeds + 1)]
        tb = [metrics(d, case) for d in run_testbed(case, args.runs, args.out, args.link_delays)]
        rows += compare(case, sim, tb)
        for r in rows[-len(sim[0]):]:
            print(f"{r['case']:<28} {r['quantity']:<22} sim {r['simulator']:8.3f} testbed "
                  f"{r['testbed']:8.3f} ({r['testbed_min']:.3f}-{r['testbed_max']:.3f}) "
                  f"{'ok' if r['within'] else 'OUTSIDE'}", flush=True)
    doc = {"runs": args.runs, "seeds": args.seeds, "link_delays": args.link_delays,
           "fct_tolerance": FCT_TOLERANCE, "share_tolerance": SHARE_TOLERANCE, "rows": rows}
    name = "-".join(["linux-tcp", *(["delays"] if args.link_delays else []), *args.cases])
    (HERE / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    md = ["| case | quantity | simulator | testbed median (min-max) | within |",
          "|---|---|--:|--:|---|"]
    md += [f"| {r['case']} | {r['quantity']} | {r['simulator']:.3f} | {r['testbed']:.3f} "
           f"({r['testbed_min']:.3f}-{r['testbed_max']:.3f}) | {'yes' if r['within'] else 'no'} |"
           for r in rows]
    (HERE / f"{name}.md").write_text("\n".join(md) + "\n")
    print(f"wrote {HERE / name}.json and .md")


if __name__ == "__main__":
    main()
