"""Benchmark runner: wall time (median of N runs), events per second, simulated seconds per
wall second and peak RSS for each scenario in bench/scenarios, each run in a fresh process.

    .venv/bin/python bench/run.py [--runs N] [--with-htsim] [--with-ns3 [--ns3-runs M]] [SCENARIO.toml ...]
    .venv/bin/python bench/run.py --scaling [--runs N]
    .venv/bin/python bench/run.py --memory [--memory-duration 60s]
    .venv/bin/python bench/run.py --threads [--runs N] [--with-k32]
    .venv/bin/python bench/run.py --all [--runs N]

Beside the engine's figures, each scenario is also run N times as a user types it,
`tacc run SCENARIO --no-plot --quiet` (the tacc command beside this Python), timed from
outside as a whole process: "CLI s" is that wall time, "CLI ovh s" what it adds to the
engine's own time in the same runs (summary.json's wall_seconds): interpreter start-up,
imports, loading the scenario and writing the results.

Prints a table and writes bench/results.json (with the machine: CPUs, model, load average).
Figures are machine-dependent: compare ratios measured in the same run, not absolute numbers
across machines.

--with-htsim builds htsim and bench/htsim/dumbbell.cpp (bench/htsim/build.sh; HTSIM_SRC names
local sources) and --with-ns3 installs the Debian ns-3 packages (apt) and builds
bench/ns3/dumbbell.cc. The three dumbbell scenarios are then also run in those simulators, each
as a whole process: htsim N times (twice: with tacc's host timing noise, the same model, and
without it, as htsim's own examples run, against tacc also run without it: nic.jitter = 0),
ns-3 --ns3-runs times (default 1). Every round runs the engine alone and `tacc run` once as the
scenario is (and once more without the noise, with --with-htsim) and each reference once,
interleaved. It prints the outputs side by side and the time ratios tacc /
reference (medians): whole process (wall and CPU time) and the engine alone (the extension call
against the reference's own event loop). See bench/htsim/README.md and bench/ns3/README.md.

--scaling runs a series instead of the suite: dumbbell-4-newreno.toml with 4, 16, 64 and 256
flows (senders, receivers and flows[0].count overridden with --set), and
fattree-k8-websearch.toml at k = 4, 6, 8 and 16, and at k = 8 with half the load (25%, to tell
the cost of load from that of size); it prints wall time, events, events/s and peak RSS, writes
bench/scaling.json and plots bench/scaling.png.

--threads times the partitioned engine: a k = 16 fat tree for 1 s unsplit, in its default 2
partitions on 1 thread and on 2 (the last two write the same files), the same fabric for 0.2 s
in 2 to 16 partitions on 2 threads, and the dumbbells (never split) on 1 thread and on the
default; every variant of a case runs once per round, the rounds repeated --runs times.
--with-k32 adds k = 32 for 1 s, unsplit and in its default partitions, once each. Writes
bench/threads.json.

--all runs, in one invocation, everything the speed goals are judged by: the suite with htsim
and ns-3, then --mechanisms and --scaling; each part writes its own files as it does alone.

--memory runs dumbbell-4-newreno.toml for 60 s simulated (--memory-duration) and samples the
child's resident set (VmRSS in /proc/PID/status) every 0.5 s of wall time; it prints the
first, last and largest sample, writes bench/memory.json and plots bench/memory.png.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent

# argv: scenario, out dir, optional JSON list of [key, value] --set overrides
CHILD = """
import json, resource, sys, time, tacc._core as core
sets = [tuple(kv) for kv in json.loads(sys.argv[3])] if len(sys.argv) > 3 else []
opts = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
t0 = time.perf_counter()
out = core.run(sys.argv[1], sets=sets, out=sys.argv[2], **opts)
wall = time.perf_counter() - t0
s = json.load(open(out + '/summary.json'))
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
port = next((p for p in s["ports"] if p["name"] == "swL->swR"), None)
port = port and {k: port[k] for k in ("marked", "dropped", "utilization")}
print(json.dumps({"wall": wall, "engine_wall": s["wall_seconds"], "events": s["events"], "sim": s["sim_seconds"], "rss_kb": rss,
                  "goodput": [f["goodput_mbps"] for f in s["flows"]], "bottleneck": port,
                  "flows": len(s["flows"]), "completed": sum(bool(f["completed"]) for f in s["flows"]),
                  "conservation_ok": s["conservation"]["ok"], "partitions": s["partitions"]}))
"""


def child_cmd(scenario: Path, out: str, sets: list[tuple[str, str]] | None = None,
              opts: dict | None = None) -> list[str]:
    return [sys.executable, "-c", CHILD, str(scenario), out, json.dumps(sets or []),
            json.dumps(opts or {})]


def engine_sample(scenario: Path, sets: list[tuple[str, str]] | None = None,
                  opts: dict | None = None) -> dict:
    """One run of the engine alone, in a fresh interpreter that imports only the extension;
    `opts` are tacc._core.run's threads and partitions."""
    with tempfile.TemporaryDirectory() as out:
        res = subprocess.run(child_cmd(scenario, out, sets, opts), capture_output=True, text=True,
                             check=True)
        return json.loads(res.stdout)


def engine_row(scenario: Path, samples: list[dict], sets: list[tuple[str, str]] | None = None, label: str | None = None) -> dict:
    wall = statistics.median(s["wall"] for s in samples)
    engine = statistics.median(s["engine_wall"] for s in samples)
    events = samples[0]["events"]
    return {
        "scenario": label or scenario.stem,
        "sets": sets or [],
        "runs": len(samples),
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
        "flows": samples[0]["flows"],
        "completed": samples[0]["completed"],
        "conservation_ok": all(s["conservation_ok"] for s in samples),
    }


def measure(scenario: Path, runs: int, sets: list[tuple[str, str]] | None = None, label: str | None = None) -> dict:
    return engine_row(scenario, [engine_sample(scenario, sets) for _ in range(runs)], sets, label)


def timed(cmd: list[str]) -> tuple[float, float]:
    """Runs cmd to completion; its wall time from outside and the CPU time (user + system) it
    and its children used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def tacc_cli() -> Path:
    tacc = Path(sys.executable).with_name("tacc")
    if not tacc.is_file():
        sys.exit(f"bench/run.py: no tacc command beside {sys.executable} (run make setup)")
    return tacc


def cli_sample(scenario: Path, sets: list[tuple[str, str]] | None = None) -> dict:
    """One whole-process run of `tacc run SCENARIO --no-plot --quiet [--set KEY=VALUE ...]`: its
    wall and CPU time and what it adds to the engine's wall_seconds of the same run."""
    overrides = [arg for key, value in sets or [] for arg in ("--set", f"{key}={value}")]
    with tempfile.TemporaryDirectory() as out:
        wall, cpu = timed([str(tacc_cli()), "run", str(scenario), "--no-plot", "--quiet", "--out", out, *overrides])
        engine = json.loads((Path(out) / "summary.json").read_text())["wall_seconds"]
    return {"wall": wall, "cpu": cpu, "engine_wall": engine}


def cli_row(samples: list[dict]) -> dict:
    return {
        "cli_wall_s": statistics.median(s["wall"] for s in samples),
        "cli_cpu_s": statistics.median(s["cpu"] for s in samples),
        "cli_overhead_s": statistics.median(s["wall"] - s["engine_wall"] for s in samples),
        "cli_engine_wall_s": statistics.median(s["engine_wall"] for s in samples),
    }


# Other simulators running the dumbbell scenarios (--with-ns3, --with-htsim). Each is a program
# of ours, built by its own scripts, taking --flows, --cc, --time and --out and writing JSON with
# "wall_seconds" (its event loop alone), "events", "goodput_mbps", "jain" and "bottleneck".
NS3 = HERE / "ns3"
HTSIM = HERE / "htsim"
# tacc scenario stem -> (flows, cc) of the other simulators' dumbbell programs
TWIN_CASES = {"dumbbell-4-newreno": (4, "newreno"), "dumbbell-4-dctcp": (4, "dctcp"), "dumbbell-64-newreno": (64, "newreno")}


@dataclass
class Reference:
    key: str  # key in results.json
    name: str  # as printed
    setup: list[Path]  # scripts run once (bash) before the first run: install, build
    binary: Path
    runs: int  # process runs per scenario
    args: list[str] = field(default_factory=list)
    # tacc's scenario keys for the same model as `args` (none: the scenario as it is); tacc is
    # then run with them too, printed as `tacc_name`, and timed against this reference under them
    tacc_sets: list[tuple[str, str]] = field(default_factory=list)
    tacc_name: str = "tacc"

    def cmd(self, case: tuple[int, str], sim_s: float, out: Path) -> list[str]:
        return [str(self.binary), f"--flows={case[0]}", f"--cc={case[1]}", f"--time={sim_s}", f"--out={out}", *self.args]

    def sample(self, case: tuple[int, str], sim_s: float) -> dict:
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "out.json"
            wall, cpu = timed(self.cmd(case, sim_s, out))
            res = json.loads(out.read_text())
        return res | {"process_wall_s": wall, "process_cpu_s": cpu}


def reference_row(samples: list[dict]) -> dict:
    """A reference's medians over its runs, plus the first run's outputs (deterministic)."""
    first = samples[0]
    return first | {
        "runs": len(samples),
        "process_wall_s": statistics.median(s["process_wall_s"] for s in samples),
        "process_cpu_s": statistics.median(s["process_cpu_s"] for s in samples),
        "wall_seconds": statistics.median(s["wall_seconds"] for s in samples),
        "process_wall_samples": [s["process_wall_s"] for s in samples],
        "wall_seconds_samples": [s["wall_seconds"] for s in samples],
    }


def ratios(r: dict, ref: dict) -> dict:
    """tacc's time over the reference's, both medians of runs made in the same invocation:
    whole process (`tacc run` against the reference's program, wall and CPU) and the engine alone
    (the extension call against the reference's event loop)."""
    return {
        "process": r["cli_wall_s"] / ref["process_wall_s"],
        "process_cpu": r["cli_cpu_s"] / ref["process_cpu_s"],
        "engine": r["engine_wall_s"] / ref["wall_seconds"],
    }


def measure_suite(scenario: Path, runs: int, refs: list[Reference]) -> dict:
    """The engine alone, `tacc run` (as the scenario is, and under each reference's `tacc_sets`)
    and each reference simulator (if the scenario has a twin), interleaved: round i runs each
    once, so a change in the machine's load falls on all of them. A reference with `tacc_sets`
    gets the tacc runs under them as its "tacc" entry, and its ratios are taken against those."""
    case = TWIN_CASES.get(scenario.stem)
    refs = refs if case else []
    variants = list(dict.fromkeys([(), *(tuple(ref.tacc_sets) for ref in refs)]))
    engine: dict[tuple, list[dict]] = {v: [] for v in variants}
    cli: dict[tuple, list[dict]] = {v: [] for v in variants}
    other: dict[str, list[dict]] = {ref.key: [] for ref in refs}
    for i in range(runs):
        for v in variants:
            engine[v].append(engine_sample(scenario, list(v)))
            cli[v].append(cli_sample(scenario, list(v)))
        for ref in refs:
            if i < ref.runs:
                other[ref.key].append(ref.sample(case, engine[()][0]["sim"]))
    for ref in refs:  # references with more runs than tacc
        while len(other[ref.key]) < ref.runs:
            other[ref.key].append(ref.sample(case, engine[()][0]["sim"]))
    rows = {v: engine_row(scenario, engine[v], list(v)) | cli_row(cli[v]) for v in variants}
    row = rows[()]
    row["conservation_ok"] = all(r["conservation_ok"] for r in rows.values())
    for ref in refs:
        row[ref.key] = reference_row(other[ref.key])
        twin = rows[tuple(ref.tacc_sets)]
        if ref.tacc_sets:
            row[ref.key]["tacc"] = twin
        row.setdefault("ratios", {})[ref.key] = ratios(twin, row[ref.key])
    return row


def _jain(x: list[float]) -> float:
    return sum(x) ** 2 / (len(x) * sum(v * v for v in x)) if x and any(x) else 0.0


def _tacc_outputs(t: dict, name: str) -> tuple:
    """A tacc row's line of the side-by-side table: name, process wall s, events, mean goodput,
    Jain, bottleneck counters."""
    gp = t["goodput_mbps"]
    return (name, t["cli_wall_s"], t["events"], statistics.mean(gp), _jain(gp), t["bottleneck"] or {})


def print_references(rows: list[dict], refs: list[Reference]) -> None:
    """tacc and every reference side by side: outputs (mean goodput, fairness, bottleneck), then
    the time ratios tacc / reference."""
    if not refs:
        return
    print(f"\n{'scenario':<24} {'sim':<12} {'wall s':>8} {'events':>12} {'mean Mb/s':>10} {'Jain':>7} {'marks':>9} {'drops':>7} {'util':>7}")
    for r in rows:
        if not any(ref.key in r for ref in refs):
            print(f"{r['scenario']:<24} no twin in the other simulators, skipped")
            continue
        sims = [_tacc_outputs(r, "tacc")]
        for ref in refs:
            n = r[ref.key]
            if "tacc" in n:
                sims.append(_tacc_outputs(n["tacc"], ref.tacc_name))
            sims.append((ref.name, n["process_wall_s"], n["events"], statistics.mean(n["goodput_mbps"]), n["jain"], n["bottleneck"]))
        for i, (name, w, ev, mean, jain, b) in enumerate(sims):
            print(f"{r['scenario'] if i == 0 else '':<24} {name:<12} {w:>8.3f} {ev:>12,} {mean:>10.2f} {jain:>7.4f} {b.get('marked', 0):>9,} {b.get('dropped', 0):>7,} {b.get('utilization', 0):>7.2%}")
        for ref in refs:
            t_mean = statistics.mean(r[ref.key].get("tacc", r)["goodput_mbps"])
            n_mean = statistics.mean(r[ref.key]["goodput_mbps"])
            diff = (n_mean - t_mean) / t_mean if t_mean else float("inf")
            flag = f"  GOODPUT DIFFERS BY MORE THAN 5% (see bench/{ref.setup[-1].parent.name}/README.md)" if abs(diff) > 0.05 else ""
            print(f"{'':<24} {ref.name} mean goodput vs tacc {diff:+.2%}{flag}")
    print("\n(wall s: whole process; tacc's is `tacc run SCENARIO --no-plot --quiet`)")
    print(f"\ntime ratios tacc / reference (medians of runs made in this invocation; < 1: tacc faster)")
    print(f"{'scenario':<24} {'reference':<12} {'runs':>4} {'process':>9} {'(ref x)':>8} {'cpu':>7} {'engine':>8} {'(ref x)':>8}")
    for r in rows:
        for ref in refs:
            if ref.key not in r:
                continue
            q = r["ratios"][ref.key]
            print(f"{r['scenario']:<24} {ref.name:<12} {r[ref.key]['runs']:>4} {q['process']:>9.3f} {1 / q['process']:>7.1f}x {q['process_cpu']:>7.3f} {q['engine']:>8.3f} {1 / q['engine']:>7.1f}x")


def machine() -> dict:
    """The machine the figures come from: CPUs, model, load (it may be shared)."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")), "unknown")
    nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    return {"nproc": int(nproc) if nproc.isdigit() else os.cpu_count(), "cpu_model": model, "loadavg_start": os.getloadavg()}


PAPERS = HERE.parent / "python" / "tacc" / "scenarios" / "papers"
# Each mechanism on a paper's scenario as shipped, against the same scenario without it.
MECHANISMS = [
    ("hygenicc", "hygenicc_fig2-5.toml", '{kind="hygenicc",on_shortage="queue"}'),
    ("sdn-gcc", "sdngcc_fig1-6.toml", '{kind="sdn-gcc",interval="5ms",on_shortage="queue",clear_ce=true}'),
    ("sicc", "sicc_dumbbell.toml", '{kind="sicc",initial_window=2.0,evaluate_on_syn=true}'),
    ("sicc (switch)", "sicc_dumbbell.toml", '{kind="sicc",mode="switch"}'),
    ("rwndq", "sicc_dumbbell.toml", '{kind="rwndq"}'),
    ("sdn-ecn", "sdnecn_topo1.toml", '{kind="sdn-ecn"}'),
]


def paired(path: Path, on: list[tuple[str, str]], off: list[tuple[str, str]], runs: int,
           name: str, off_name: str) -> tuple[dict, dict]:
    """Rows of the same scenario under two sets of overrides, the runs of the two interleaved
    so that a change in the machine's load hits both."""
    samples: dict[str, list[dict]] = {"on": [], "off": []}
    for _ in range(runs):
        samples["on"].append(engine_sample(path, on))
        samples["off"].append(engine_sample(path, off))
    return (engine_row(path, samples["on"], on, name),
            engine_row(path, samples["off"], off, off_name))


def run_mechanisms(runs: int) -> None:
    """Events per second with each mechanism against the same scenario without it."""
    rows = []
    print(f"{'mechanism':<14} {'scenario':<22} {'events/s with':>14} {'without':>14} {'ratio':>6} {'events with/without':>20}")
    for name, file, mech in MECHANISMS:
        path = PAPERS / file
        with_it, without = paired(path, [("mechanism", mech)], [("mechanism", '{kind="none"}')],
                                  runs, name, f"{name} (none)")
        row = {"mechanism": name, "scenario": file, "with": with_it, "without": without,
               "events_per_s_ratio": with_it["events_per_s"] / without["events_per_s"]}
        rows.append(row)
        print(f"{name:<14} {file:<22} {with_it['events_per_s']:>14,.0f} {without['events_per_s']:>14,.0f} "
              f"{row['events_per_s_ratio']:>6.2f} {with_it['events'] / without['events']:>20.2f}", flush=True)
    (HERE / "mechanisms.json").write_text(json.dumps({"machine": machine(), "runs": runs, "rows": rows}, indent=2) + "\n")
    print(f"wrote {HERE / 'mechanisms.json'}")


def run_profiles(runs: int, scenarios: list[Path]) -> None:
    """Events per second of each suite scenario with `tcp.profile = "linux"` against the
    classic profile, paired."""
    rows = []
    print(f"{'scenario':<24} {'events/s linux':>15} {'classic':>14} {'ratio':>6} {'events linux/classic':>21}")
    for path in scenarios:
        linux, classic = paired(path, [("tcp.profile", '"linux"')], [("tcp.profile", '"classic"')],
                                runs, f"{path.stem} (linux)", f"{path.stem} (classic)")
        row = {"scenario": path.stem, "linux": linux, "classic": classic,
               "events_per_s_ratio": linux["events_per_s"] / classic["events_per_s"]}
        rows.append(row)
        print(f"{path.stem:<24} {linux['events_per_s']:>15,.0f} {classic['events_per_s']:>14,.0f} "
              f"{row['events_per_s_ratio']:>6.2f} {linux['events'] / classic['events']:>21.2f}", flush=True)
    (HERE / "profiles.json").write_text(json.dumps({"machine": machine(), "runs": runs, "rows": rows}, indent=2) + "\n")
    print(f"wrote {HERE / 'profiles.json'}")


SCALING_DUMBBELL = [4, 16, 64, 256]
SCALING_FATTREE = [4, 6, 8, 16]
# (k, load) points off the 50% series: the same fabric at another load.
SCALING_FATTREE_LOAD = [(8, 0.25)]


def run_scaling(runs: int) -> None:
    """The scaling series: dumbbell NewReno+ECN by number of flows, fat-tree web search by k."""
    rows = []
    print(HEADER)
    base = HERE / "scenarios" / "dumbbell-4-newreno.toml"
    for n in SCALING_DUMBBELL:
        sets = [("topology.senders", str(n)), ("topology.receivers", str(n)), ("flows[0].count", str(n))]
        r = measure(base, runs, sets, f"dumbbell-newreno-{n}")
        r.update(family="dumbbell", size=n, size_label=f"{n} flows")
        rows.append(r)
        print_row(r)
    ft = HERE / "scenarios" / "fattree-k8-websearch.toml"
    for k in SCALING_FATTREE:
        r = measure(ft, runs, [("topology.k", str(k))], f"fattree-k{k}-websearch")
        r.update(family="fat-tree", size=k**3 // 4, size_label=f"k={k}, {k**3 // 4} hosts")
        rows.append(r)
        print_row(r)
    for k, load in SCALING_FATTREE_LOAD:
        sets = [("topology.k", str(k)), ("traffic[0].load", str(load))]
        r = measure(ft, runs, sets, f"fattree-k{k}-websearch-load{load:g}")
        r.update(family="fat-tree-load", size=k**3 // 4, size_label=f"k={k}, {load:.0%} load")
        rows.append(r)
        print_row(r)
    print()
    print(f"{'series':<26} {'size':<18} {'wall s':>8} {'events':>13} {'events/s':>12} {'RSS MB':>8} {'done/flows':>12} {'cons':>5}")
    for r in rows:
        print(f"{r['scenario']:<26} {r['size_label']:<18} {r['wall_s']:>8.3f} {r['events']:>13,} {r['events_per_s']:>12,.0f} {r['peak_rss_mb']:>8.1f} {r['completed']:>5}/{r['flows']:<6} {'ok' if r['conservation_ok'] else 'BAD':>5}")
    for r in rows:
        r.pop("goodput_mbps", None)  # thousands of flows for the fat trees; not needed here
    (HERE / "scaling.json").write_text(json.dumps(rows, indent=2) + "\n")
    plot_scaling(rows, HERE / "scaling.png")
    print(f"wrote {HERE / 'scaling.json'} and {HERE / 'scaling.png'}")


# (label, scenario, --set overrides, [(label, threads, partitions), ...]): each case's
# variants run interleaved, round by round, so that the machine's load hits all alike.
THREADS_CASES = [
    ("fattree-k16-1s", "fattree-k8-websearch.toml", [("topology.k", "16")],
     [("1 partition", 1, 1), ("default, 1 thread", 1, None), ("default, 2 threads", 2, None)]),
    ("fattree-k16-0.2s", "fattree-k8-websearch.toml", [("topology.k", "16"), ("duration", '"0.2s"')],
     [("1 partition", 1, 1)] + [(f"{p} partitions, 2 threads", 2, p) for p in (2, 4, 8, 16)]),
    ("dumbbell-4-newreno", "dumbbell-4-newreno.toml", [], [("1 thread", 1, None), ("default", None, None)]),
    ("dumbbell-64-newreno", "dumbbell-64-newreno.toml", [], [("1 thread", 1, None), ("default", None, None)]),
]
# Too long to repeat: once each.
THREADS_ONCE = [
    ("fattree-k32-1s", "fattree-k8-websearch.toml", [("topology.k", "32")],
     [("1 partition", 1, 1), ("default, 2 threads", 2, None)]),
]


def run_threads(runs: int, with_k32: bool) -> None:
    """Wall time, events per second and peak memory by threads and partitions, the variants
    of a case paired round by round; writes bench/threads.json."""
    rows = []
    cases = [(c, runs) for c in THREADS_CASES] + [(c, 1) for c in THREADS_ONCE if with_k32]
    print(f"{'case':<20} {'variant':<26} {'wall s':>8} {'events/s':>12} {'RSS MB':>8} {'parts':>5} {'windows':>10} {'ev/window':>9} {'vs first':>8}")
    for (label, file, sets, variants), n in cases:
        samples: dict[str, list[dict]] = {v[0]: [] for v in variants}
        for _ in range(n):
            for name, threads, partitions in variants:
                opts = {"threads": threads, "partitions": partitions}
                samples[name].append(engine_sample(HERE / "scenarios" / file, sets, opts))
        first = None
        for name, threads, partitions in variants:
            r = engine_row(HERE / "scenarios" / file, samples[name], sets, f"{label} {name}")
            parts = samples[name][0]["partitions"]
            r.update(case=label, variant=name, threads=threads, partitions_asked=partitions,
                     partitions=parts, engine_walls=[s["engine_wall"] for s in samples[name]])
            r.pop("goodput_mbps", None)
            first = first or r
            ratio = first["engine_wall_s"] / r["engine_wall_s"]
            r["speedup_vs_first"] = ratio
            rows.append(r)
            print(f"{label:<20} {name:<26} {r['engine_wall_s']:>8.2f} {r['events_per_s']:>12,.0f} "
                  f"{r['peak_rss_mb']:>8.1f} {parts['count']:>5} {parts.get('windows', 0):>10,} "
                  f"{parts.get('events_per_window', 0):>9.0f} {ratio:>7.2f}x", flush=True)
    (HERE / "threads.json").write_text(json.dumps({"machine": machine(), "runs": runs, "rows": rows}, indent=2) + "\n")
    print(f"wrote {HERE / 'threads.json'}")


def plot_scaling(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fams = [("dumbbell", "flows (dumbbell NewReno+ECN, 10 s simulated)"), ("fat-tree", "hosts (fat tree, web search 50%, 1 s simulated)")]
    cols = [("wall_s", "wall time (s)"), ("events_per_s", "events per second (M)"), ("peak_rss_mb", "peak RSS (MB)")]
    fig, axes = plt.subplots(len(fams), len(cols), figsize=(13, 7), squeeze=False)
    for i, (fam, xlabel) in enumerate(fams):
        fr = [r for r in rows if r["family"] == fam]
        x = [r["size"] for r in fr]
        for j, (key, ylabel) in enumerate(cols):
            ax = axes[i][j]
            y = [r[key] / 1e6 if key == "events_per_s" else r[key] for r in fr]
            ax.plot(x, y, "o-")
            for xv, yv in zip(x, y):
                ax.annotate(f"{yv:.3g}", (xv, yv), textcoords="offset points", xytext=(4, 4), fontsize=8)
            if fam == "dumbbell":
                ax.set_xscale("log", base=2)
            ax.set_xticks(x)
            ax.set_xticklabels([str(v) for v in x])
            ax.set_xlabel(xlabel, fontsize=9)
            ax.set_ylabel(ylabel)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
    fig.suptitle("tacc scaling (median of runs, one process per run)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _vmrss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def run_memory(duration: str, period: float = 0.5) -> None:
    """Runs the 4-flow NewReno dumbbell for `duration` simulated in a child and samples its
    VmRSS every `period` seconds of wall time, to show whether memory stays flat."""
    base = HERE / "scenarios" / "dumbbell-4-newreno.toml"
    sets = [("duration", duration)]
    samples: list[tuple[float, int]] = []
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(child_cmd(base, out, sets), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # the first sample at `period`, after the interpreter has loaded the extension
        while proc.poll() is None:
            time.sleep(period - (time.perf_counter() - t0) % period)
            rss = _vmrss_kb(proc.pid)
            if rss is not None and proc.poll() is None:
                samples.append((time.perf_counter() - t0, rss))
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            sys.exit(f"memory run failed:\n{stderr}")
        res = json.loads(stdout)
    if not samples:
        sys.exit("the run ended before the first RSS sample")
    mb = [kb / 1024 for _, kb in samples]
    summary = {
        "scenario": f"dumbbell-4-newreno, {duration} simulated",
        "period_s": period,
        "samples": [{"t": t, "rss_mb": kb / 1024} for t, kb in samples],
        "first_mb": mb[0],
        "last_mb": mb[-1],
        "max_mb": max(mb),
        "min_mb": min(mb),
        "ru_maxrss_mb": res["rss_kb"] / 1024,
        "wall_s": res["wall"],
        "events": res["events"],
        "sim_s": res["sim"],
        "conservation_ok": res["conservation_ok"],
    }
    print(f"{summary['scenario']}: {res['events']:,} events in {res['wall']:.2f} s wall, {len(samples)} RSS samples every {period} s")
    print(f"VmRSS first {mb[0]:.1f} MB (at {samples[0][0]:.2f} s), last {mb[-1]:.1f} MB (at {samples[-1][0]:.2f} s), "
          f"min {min(mb):.1f} MB, max {max(mb):.1f} MB; child's ru_maxrss {summary['ru_maxrss_mb']:.1f} MB")
    span = samples[-1][0] - samples[0][0]
    if span > 0:
        # simulated seconds covered between the first and last sample, at the run's mean speed
        sim_span = span * res["sim"] / res["wall"]
        summary["growth_kb_per_sim_s"] = (mb[-1] - mb[0]) * 1024 / sim_span
        print(f"growth first -> last: {mb[-1] - mb[0]:+.1f} MB, about {summary['growth_kb_per_sim_s']:.1f} KB per simulated second")
    (HERE / "memory.json").write_text(json.dumps(summary, indent=2) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([t for t, _ in samples], mb, "o-")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("VmRSS (MB)")
    ax.grid(alpha=0.3)
    ax.set_title(f"{summary['scenario']}: RSS every {period} s of wall time\n"
                 f"first {mb[0]:.1f} MB, last {mb[-1]:.1f} MB, max {max(mb):.1f} MB", fontsize=10)
    fig.tight_layout()
    fig.savefig(HERE / "memory.png", dpi=110)
    plt.close(fig)
    print(f"wrote {HERE / 'memory.json'} and {HERE / 'memory.png'}")


HEADER = f"{'scenario':<24} {'wall s':>8} {'events':>12} {'events/s':>12} {'sim s/wall s':>12} {'RSS MB':>8} {'py ovh':>7}"
CLI_HEADER = f" {'CLI s':>8} {'CLI ovh s':>9}"


def print_row(r: dict) -> None:
    cli = f" {r['cli_wall_s']:>8.3f} {r['cli_overhead_s']:>9.3f}" if "cli_wall_s" in r else ""
    print(f"{r['scenario']:<24} {r['wall_s']:>8.3f} {r['events']:>12,} {r['events_per_s']:>12,.0f} {r['sim_s_per_wall_s']:>12.2f} {r['peak_rss_mb']:>8.1f} {r['python_overhead']:>6.1%}{cli}", flush=True)


# The synchronization model's runs: (label, --set overrides, [(partitions, threads), ...]),
# each case's variants interleaved round by round. Partitions 1 is the unsplit engine.
SYNC_CASES = [
    ("fattree-k16-0.2s", [("topology.k", "16"), ("duration", '"0.2s"')],
     [(1, 1)] + [(n, p) for n in (2, 4, 8, 16) for p in (1, 2)]),
    ("fattree-k32-0.05s", [("topology.k", "32"), ("duration", '"0.05s"')],
     [(1, 1)] + [(n, p) for n in (2, 4, 8, 16, 32) for p in (1, 2)]),
]
# k = 32 for 1 s as measured in its default 2 partitions on 2 threads (bench/README.md,
# "Threads"): the events the prediction scales the 0.05 s runs' to, and the engine's wall
# time (summary.json's wall_seconds) that checks it, by the build the model is fitted to.
K32_1S_EVENTS = 3.38e9
K32_1S_MEASURED = {"partitions": 2, "threads": 2, "wall_s": 213.4}
PREDICT_CORES = (2, 16, 32, 64)


def critical(parts: dict, cores: int, what: str = "events") -> int:
    """The run's events (or mail) on the critical path on `cores` cores (summary.json's
    partitions.critical_events; past the partitions' count, that count's)."""
    known = {c["cores"]: c[what] for c in parts["critical_events"]}
    return known[max(c for c in known if c <= cores)]


def sync_terms(parts: dict, threads: int, events: int) -> list[float]:
    """The model's terms for one run: 1 (fixed); the events and the mail taken on the
    critical path; a thread's partitions after its first in each window (each finds its
    state gone from the cache: a k = 32 copy is tens of MB); the windows of a split run
    (their bookkeeping: the outboxes, the mail's sets); the windows where threads wait for
    each other."""
    n = parts["count"]
    if n == 1:
        return [1.0, float(events), 0.0, 0.0, 0.0, 0.0]
    w = parts["windows"]
    return [1.0, float(critical(parts, threads)), float(critical(parts, threads, "mail")),
            float(w * (-(-n // threads) - 1)), float(w), float(w if threads > 1 else 0)]


SYNC_NAMES = ["fixed_s", "event_ns", "mail_ns", "switch_ns", "window_ns", "barrier_ns"]


def run_sync_model(runs: int) -> None:
    """The synchronization cost of the partitioned engine fitted to runs on this machine,
    and what it predicts for k = 32 for 1 s on more cores; writes bench/sync_model.json."""
    import numpy as np

    scenario = HERE / "scenarios" / "fattree-k8-websearch.toml"
    out: dict = {"machine": machine(), "runs": runs, "cases": []}
    for label, sets, variants in SYNC_CASES:
        samples: dict[tuple[int, int], list[dict]] = {v: [] for v in variants}
        for _ in range(runs):
            for n, p in variants:
                samples[(n, p)].append(engine_sample(scenario, sets, {"threads": p, "partitions": n}))
        rows = []
        for (n, p), ss in samples.items():
            parts = ss[0]["partitions"]
            rows.append({"partitions": parts["count"], "threads": p, "events": ss[0]["events"],
                         "windows": parts.get("windows", 0),
                         "critical_events": parts.get("critical_events"),
                         "engine_wall_s": statistics.median(s["engine_wall"] for s in ss),
                         "barrier_wall_s": statistics.median(
                             s["partitions"].get("barrier_wall_seconds") or 0.0 for s in ss),
                         "peak_rss_mb": max(s["rss_kb"] for s in ss) / 1024})
        a = np.array([sync_terms(_parts(r), r["threads"], r["events"]) for r in rows])
        y = np.array([r["engine_wall_s"] for r in rows])
        # Non-negative least squares by elimination: a coefficient fitted below 0 is dropped.
        keep = list(range(a.shape[1]))
        while True:
            coef, *_ = np.linalg.lstsq(a[:, keep], y, rcond=None)
            if (coef >= 0).all():
                break
            keep.pop(int(np.argmin(coef)))
        full = np.zeros(a.shape[1])
        full[keep] = coef
        for r, terms in zip(rows, a):
            r["model_s"] = float(terms @ full)
        fit = {name: float(v) * (1e9 if name.endswith("_ns") else 1.0)
               for name, v in zip(SYNC_NAMES, full)}
        print(f"{label}: " + ", ".join(f"{k} {v:.4g}" for k, v in fit.items()))
        print(f"  {'parts':>5} {'threads':>7} {'wall s':>8} {'model s':>8} {'barrier s':>9} "
              f"{'windows':>9} {'critical ev':>12} {'critical mail':>13} {'RSS MB':>7}")
        for r in rows:
            split = r["partitions"] > 1
            crit = critical(_parts(r), r["threads"]) if split else r["events"]
            mail = critical(_parts(r), r["threads"], "mail") if split else 0
            print(f"  {r['partitions']:>5} {r['threads']:>7} {r['engine_wall_s']:>8.2f} "
                  f"{r['model_s']:>8.2f} {r['barrier_wall_s']:>9.3f} {r['windows']:>9,} "
                  f"{crit:>12,} {mail:>13,} {r['peak_rss_mb']:>7.0f}")
        out["cases"].append({"case": label, "sets": sets, "fit": fit, "rows": rows})
    k32 = out["cases"][-1]
    out["prediction"] = predict_k32_1s(k32)
    check = out["prediction"]["check"]
    print(f"k = 32 for 1 s in {K32_1S_MEASURED['partitions']} partitions on "
          f"{K32_1S_MEASURED['threads']} threads: predicted {check['predicted_s']:.1f} s, "
          f"measured {check['measured_s']:.1f} s: the critical path's work x{check['work_factor']:.2f}")
    for p in out["prediction"]["cores"]:
        print(f"k = 32 for 1 s on {p['cores']} cores: {p['calibrated_tree_s']:.1f} s with a "
              f"wait that grows as log2 of the threads, {p['calibrated_central_s']:.1f} s with "
              f"one that grows as the threads (the engine's), calibrated "
              f"({p['wall_tree_s']:.1f} and {p['wall_central_s']:.1f} s as fitted; "
              f"{p['work_s']:.1f} s of work on the critical path as fitted, {p['windows_s']:.1f} "
              f"s of windows, {p['barrier_tree_s']:.1f} or {p['barrier_central_s']:.1f} s of "
              f"waits)")
    (HERE / "sync_model.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {HERE / 'sync_model.json'}")


def _parts(r: dict) -> dict:
    return {"count": r["partitions"], "windows": r["windows"],
            "critical_events": r["critical_events"]}


def project(fit: dict, row: dict, threads: int, scale: float, windows: float) -> dict:
    """The model's terms for `row`'s partitions on `threads` threads, its events and mail
    scaled by `scale` and run over `windows` windows."""
    import math

    parts = _parts(row)
    work_s = (critical(parts, threads) * fit["event_ns"]
              + critical(parts, threads, "mail") * fit["mail_ns"]) * scale / 1e9
    switches = -(-row["partitions"] // threads) - 1
    return {"threads": threads, "work_s": work_s,
            "windows_s": windows * (switches * fit["switch_ns"] + fit["window_ns"]) / 1e9,
            "barrier_central_s": windows * fit["barrier_ns"] * threads / 2 / 1e9,
            "barrier_tree_s": windows * fit["barrier_ns"] * math.log2(threads) / 1e9}


def predict_k32_1s(case: dict) -> dict:
    """k = 32 for 1 s in its 32 pods, from the 0.05 s runs: the events and mail scaled to
    the 1 s run's events, the windows to its time, each term at its fitted cost. The first
    50 ms are not the whole second (the events come 2.7 times as fast over the second: more
    flows open), so the prediction is checked against the 1 s run measured
    (K32_1S_MEASURED), and the work on the critical path calibrated by their ratio. The
    wait's cost is fitted where 2 threads meet; with more it grows in proportion to the
    threads where each reads every other's count of windows finished (the engine's, the
    loads issued at once; a central barrier's atomic adds on one line grow so too), and in
    proportion to log2 of them for a tree or dissemination barrier (the engine's before its
    windows of half a lookahead). Past 32 cores there is no 33rd pod to run."""
    fit = case["fit"]
    biggest = max(case["rows"], key=lambda r: r["partitions"])
    scale = K32_1S_EVENTS / biggest["events"]
    windows = biggest["windows"] * (1.0 / 0.05)
    m = K32_1S_MEASURED
    at = next(r for r in case["rows"] if r["partitions"] == m["partitions"])
    check = project(fit, at, m["threads"], K32_1S_EVENTS / at["events"], windows)
    rest = fit["fixed_s"] + check["windows_s"] + check["barrier_central_s"]
    factor = (m["wall_s"] - rest) / check["work_s"]
    check.update(measured_s=m["wall_s"], predicted_s=rest + check["work_s"], work_factor=factor)
    cores = []
    for c in PREDICT_CORES:
        t = project(fit, biggest, min(c, biggest["partitions"]), scale, windows)
        rest = fit["fixed_s"] + t["windows_s"]
        t.update(cores=c,
                 wall_central_s=rest + t["work_s"] + t["barrier_central_s"],
                 wall_tree_s=rest + t["work_s"] + t["barrier_tree_s"],
                 calibrated_central_s=rest + factor * t["work_s"] + t["barrier_central_s"],
                 calibrated_tree_s=rest + factor * t["work_s"] + t["barrier_tree_s"])
        cores.append(t)
    return {"partitions": biggest["partitions"], "events": K32_1S_EVENTS, "windows": windows,
            "check": check, "cores": cores}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--with-ns3", action="store_true", help="also run the dumbbell scenarios in ns-3 (installs it with apt) and compare")
    ap.add_argument("--ns3-runs", type=int, default=1, help="ns-3 runs per scenario (default 1: each takes 20-60 s)")
    ap.add_argument("--with-htsim", action="store_true", help="also run the dumbbell scenarios in htsim (builds it, see bench/htsim/README.md) and compare")
    ap.add_argument("--scaling", action="store_true", help="run the scaling series instead of the suite; writes bench/scaling.png")
    ap.add_argument("--memory", action="store_true", help="sample RSS during a long dumbbell run instead of the suite; writes bench/memory.png")
    ap.add_argument("--memory-duration", default="60s", help="simulated time of the --memory run (default 60s)")
    ap.add_argument("--mechanisms", action="store_true", help="events per second with each mechanism against the same paper scenario without it, instead of the suite; writes bench/mechanisms.json")
    ap.add_argument("--profiles", action="store_true", help="events per second of the suite's scenarios with tcp.profile = \"linux\" against the classic profile, instead of the suite; writes bench/profiles.json")
    ap.add_argument("--threads", action="store_true", help="wall time by threads and partitions on the fat trees and the dumbbells, paired, instead of the suite; writes bench/threads.json")
    ap.add_argument("--sync-model", action="store_true", help="fit the partitioned engine's synchronization cost to runs of k = 16 and k = 32 in 1-32 partitions on 1 and 2 threads, and predict k = 32 for 1 s on 16, 32 and 64 cores; writes bench/sync_model.json")
    ap.add_argument("--with-k32", action="store_true", help="with --threads, also run k = 32 for 1 s once each way (about 15 minutes)")
    ap.add_argument("--all", action="store_true", help="every figure the speed goals are judged by, in one run: the suite with htsim and ns-3, then --mechanisms and --scaling")
    ap.add_argument("scenarios", nargs="*", type=Path)
    args = ap.parse_args()
    if args.all:
        args.with_htsim = args.with_ns3 = True
    elif args.scaling or args.memory or args.mechanisms or args.profiles or args.threads or args.sync_model:
        if args.threads:
            run_threads(args.runs, args.with_k32)
        if args.sync_model:
            run_sync_model(args.runs)
        if args.profiles:
            run_profiles(args.runs, args.scenarios or sorted((HERE / "scenarios").glob("*.toml")))
        if args.scaling:
            run_scaling(args.runs)
        if args.memory:
            run_memory(args.memory_duration)
        if args.mechanisms:
            run_mechanisms(args.runs)
        return
    refs = []
    if args.with_htsim:
        build = HTSIM / "build.sh"
        refs.append(Reference("htsim", "htsim", [build], HTSIM / "build" / "dumbbell", args.runs))
        refs.append(Reference("htsim_no_jitter", "htsim j=0", [build], HTSIM / "build" / "dumbbell", args.runs,
                              ["--nic-jitter-us=0"], [("nic.jitter", '"0s"')], "tacc j=0"))
    if args.with_ns3:
        refs.append(Reference("ns3", "ns-3", [NS3 / "install.sh", NS3 / "build.sh"], NS3 / "build" / "dumbbell", args.ns3_runs))
    for script in dict.fromkeys(script for ref in refs for script in ref.setup):
        if subprocess.run(["bash", str(script)]).returncode != 0:
            sys.exit(f"bench/run.py: {script.relative_to(HERE.parent)} failed (its message is above)")
    mach = machine()
    print(f"machine: {mach['nproc']} CPUs ({mach['cpu_model']}), load average {' '.join(f'{x:.2f}' for x in mach['loadavg_start'])} at the start", flush=True)
    scenarios = args.scenarios or sorted((HERE / "scenarios").glob("*.toml"))
    rows = []
    print(HEADER + CLI_HEADER)
    for s in scenarios:
        rows.append(measure_suite(s, args.runs, refs))
        print_row(rows[-1])
    for r in rows:
        if not r["conservation_ok"]:
            print(f"{r['scenario']}: PACKET CONSERVATION FAILED")
    print_references(rows, refs)
    mach["loadavg_end"] = os.getloadavg()
    print(f"load average {' '.join(f'{x:.2f}' for x in mach['loadavg_end'])} at the end")
    (HERE / "results.json").write_text(json.dumps({"machine": mach, "runs": args.runs, "scenarios": rows}, indent=2) + "\n")
    if args.all:
        run_mechanisms(args.runs)
        run_profiles(args.runs, scenarios)
        run_scaling(args.runs)

if __name__ == "__main__":
    main()
