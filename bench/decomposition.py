"""Accuracy and speed of `tacc run --approx link-decomposition` against the packet-level run.

For each fat tree size (k = 8 and 16 by default) the reference scenario
(scenarios/fattree-k8-websearch.toml with topology.k set) runs back to back: the packet-level
run, the decomposition with its default cluster tolerance with 2 workers and serially, and with
2 workers at the other tolerances of the sweep (0: every link simulated). Both sides' FCT
slowdowns (FCT over the ideal FCT alone on the idle path; the same ideal for both, from the
decomposition's ideal-time runs) are summarized as p50 and p99 per flow-size bucket.

    .venv/bin/python bench/decomposition.py [--k 8 16] [--duration T] [--loads 0.1 0.3 0.5]
        [--out FILE.json]

Both sides carry the very same flows (a traffic source draws from a random stream of its
own), so the errors are also given flow by flow: each flow's estimated FCT over its FCT in
the run. The load sweep runs the first k at each offered load, to show how the error grows
with load.

Writes the JSON and a Markdown table beside it (decomposition.md).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

import tacc
from tacc.approx import Options, ideal_fct_ns, run_link_decomposition

HERE = Path(__file__).parent
SCENARIO = HERE / "scenarios" / "fattree-k8-websearch.toml"
TOLERANCES = (0.0, Options().cluster_tolerance, 0.2)  # the sweep, the default among them
BUCKETS = [(0, 10_000, "<10KB"), (10_000, 100_000, "10-100KB"),
           (100_000, 1_000_000, "100KB-1MB"), (1_000_000, float("inf"), ">1MB")]


def _hops(k: int, src: str, dst: str) -> int:
    """Ports on a fat-tree path (hosts h0.. numbered rack by rack, pod by pod)."""
    a, b = int(src.lstrip("h")), int(dst.lstrip("h"))
    rack, pod = k // 2, k * k // 4
    return 2 if a // rack == b // rack else 4 if a // pod == b // pod else 6


def _slowdowns(flows: pd.DataFrame, ideal: dict[int, tuple[np.ndarray, np.ndarray]],
               k: int) -> pd.DataFrame:
    done = flows[flows["completed"]].copy()
    done["ideal"] = [ideal_fct_ns(ideal[_hops(k, s, d)], b) / 1e9
                     for s, d, b in zip(done["src"], done["dst"], done["bytes_delivered"],
                                        strict=True)]
    done["slowdown"] = done["fct"] / done["ideal"]
    return done


def _per_flow(full: pd.DataFrame, approx: pd.DataFrame) -> dict[str, float]:
    """Flow by flow (the decomposition's flows are the run's): quantiles of each flow's
    estimated FCT over its FCT in the run, and the share within 0.8-1.25 of it."""
    both = full.merge(approx[["name", "fct", "completed"]], on="name", suffixes=("", "_a"))
    both = both[both["completed"] & both["completed_a"]]
    ratio = both["fct_a"] / both["fct"]
    return {"flows": int(len(ratio)),
            **{f"q{q}": float(np.percentile(ratio, q)) for q in (10, 25, 50, 75, 90)},
            "within_25pct": float(ratio.between(0.8, 1.25).mean())}


def _relative(full: dict, approx: dict) -> dict[str, dict[str, float]]:
    """(approximate - packet-level) / packet-level of p50 and p99, by size bucket."""
    return {b: {q: (approx[b][q] - full[b][q]) / full[b][q] for q in ("p50", "p99")}
            for b in full}


def _buckets(done: pd.DataFrame) -> dict[str, dict[str, float]]:
    out = {}
    for lo, hi, label in BUCKETS:
        s = done[(done["bytes_delivered"] >= lo) & (done["bytes_delivered"] < hi)]["slowdown"]
        out[label] = {"flows": int(len(s)),
                      "p50": float(np.percentile(s, 50)) if len(s) else float("nan"),
                      "p99": float(np.percentile(s, 99)) if len(s) else float("nan")}
    return out


def _full_path_ideal(summary: dict) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """The ideal-time ladders of the fabric's paths by length: in a fat tree every hop of a path
    has the same rate and delay (the link tasks' paths, with a delay added, have not)."""
    return {len(i["path"]): (np.array(i["bytes"], float), np.array(i["fct_ns"], float))
            for i in summary["approximate"]["ideal"]
            if all(hop == i["path"][0] for hop in i["path"])}


def _link_class(name: str) -> str:
    """"edge->agg" for "edge3_1->agg3_0"; hosts are "host"."""
    return "->".join("host" if end.startswith("h") else end.rstrip("0123456789_")
                     for end in name.split("->"))


def _by_link(approx_dir: Path) -> tuple[dict[str, dict[str, float]], pd.DataFrame]:
    """The summed delays by link class (share of all delay, median and p99 in units of the
    flow's ideal FCT), and the flows again with the largest of their link delays in place of
    the sum: the estimate if each flow met only its worst link."""
    flows = pd.read_csv(approx_dir / "flows.csv").set_index("name")
    delays = pd.read_csv(approx_dir / "link_delays.csv")
    delays["class"] = delays["link"].map(_link_class)
    delays["relative"] = delays["delay"] / flows.loc[delays["flow"], "ideal_fct"].to_numpy()
    total = delays["delay"].clip(lower=0).sum()
    classes = {c: {"share": float(d["delay"].clip(lower=0).sum() / total),
                   "p50": float(d["relative"].median()),
                   "p99": float(d["relative"].quantile(0.99))}
               for c, d in delays.groupby("class")}
    worst = delays.groupby("flow")["delay"].max()
    done = flows[flows["completed"]].copy()
    done["fct"] = done["ideal_fct"] + worst.reindex(done.index).fillna(0).clip(lower=0)
    return classes, done.reset_index()


def _decompose(sets: list[tuple[str, str]], out: Path, tolerance: float, jobs: int,
               passes: int = Options().passes, engine: str = "local") -> float:
    """One decomposition run; its wall time."""
    t = time.perf_counter()
    run_link_decomposition(str(SCENARIO), sets=sets, out=out,
                           options=Options(engine=engine, jobs=jobs,
                                           cluster_tolerance=tolerance, passes=passes))
    return time.perf_counter() - t


def _on_ray(sets: list[tuple[str, str]], out: Path, tolerance: float) -> dict:
    """The default decomposition on a local Ray instance of 2 CPUs: the instance's start-up,
    then the run's wall time."""
    import ray

    t = time.perf_counter()
    ray.init(num_cpus=2, log_to_driver=False, include_dashboard=False)
    start = time.perf_counter() - t
    try:
        wall = _decompose(sets, out, tolerance, 2, engine="ray")
    finally:
        ray.shutdown()
    return {"start_s": start, "wall_s": wall}


def measure(k: int, work: Path, duration: str | None = None) -> dict:
    load_before = os.getloadavg()[0]
    sets = [("topology.k", str(k))] + ([("duration", duration)] if duration else [])
    full_dir, approx_dir = work / f"full-k{k}", work / f"approx-k{k}"
    t = time.perf_counter()
    tacc.run_dir(SCENARIO, sets=sets, out=full_dir)
    full_wall = time.perf_counter() - t
    tol = Options().cluster_tolerance
    walls = {jobs: _decompose(sets, approx_dir / f"jobs{jobs}", tol, jobs) for jobs in (2, 1)}
    ray = _on_ray(sets, approx_dir / "ray", tol)
    summary = json.loads((approx_dir / "jobs1" / "summary.json").read_text())
    same = all((approx_dir / "jobs1" / "flows.csv").read_bytes()
               == (approx_dir / other / "flows.csv").read_bytes() for other in ("jobs2", "ray"))
    ideal = _full_path_ideal(summary)
    full_flows = pd.read_csv(full_dir / "flows.csv")
    full = _buckets(_slowdowns(full_flows, ideal, k))

    def errors(out: Path) -> tuple[dict, dict]:
        approx = _buckets(_slowdowns(pd.read_csv(out / "flows.csv"), ideal, k))
        return approx, _relative(full, approx)

    approx, relative = errors(approx_dir / "jobs1")
    per_flow = _per_flow(full_flows, pd.read_csv(approx_dir / "jobs1" / "flows.csv"))
    sweep = []
    for t in TOLERANCES:
        out = approx_dir / "jobs2" if t == tol else approx_dir / f"tolerance{t}"
        wall = walls[2] if t == tol else _decompose(sets, out, t, 2)
        info = json.loads((out / "summary.json").read_text())["approximate"]
        sweep.append({"tolerance": t, "link_tasks": info["link_tasks"],
                      "clustered_links": info["clustered_links"], "wall_s_2_workers": wall,
                      "speedup_2_workers": full_wall / wall, "relative_error": errors(out)[1]})
    one_pass = approx_dir / "passes1"
    one_wall = _decompose(sets, one_pass, tol, 2, passes=1)
    passes = [{"passes": n, "wall_s_2_workers": wall, "speedup_2_workers": full_wall / wall,
               "relative_error": errors(out)[1],
               "per_flow_ratio": _per_flow(full_flows, pd.read_csv(out / "flows.csv"))}
              for n, out, wall in ((1, one_pass, one_wall), (2, approx_dir / "jobs2", walls[2]))]
    classes, worst = _by_link(approx_dir / "jobs1")
    worst_link = _buckets(_slowdowns(worst, ideal, k))
    info = summary["approximate"]
    return {
        "k": k, "duration": duration or "as in the scenario", "full": full, "approx": approx,
        "relative_error": relative, "per_flow_ratio": per_flow,
        "approx_worst_link_only": worst_link,
        "delay_by_link_class": classes,
        "wall_s": {"full": full_wall, "approx_serial": walls[1], "approx_2_workers": walls[2],
                   "approx_ray_2_cpus": ray["wall_s"], "ray_start": ray["start_s"]},
        "speedup": {"serial": full_wall / walls[1], "2_workers": full_wall / walls[2],
                    "ray_2_cpus": full_wall / ray["wall_s"]},
        "cluster_tolerance": tol, "tolerance_sweep": sweep, "passes": passes,
        "link_tasks": info["link_tasks"], "clustered_links": info["clustered_links"],
        "pruned_links": len(info["pruned_links"]),
        "nic_links_as_feeders": info["nic_links_as_feeders"],
        "ideal_runs": info["ideal_runs"], "second_pass_tasks": info["second_pass_tasks"],
        # Serially: the time of all runs (each as its worker spends it), of the longest, and
        # the rest (the parent's own: the workload, building the tasks, combining delays).
        "task_seconds": info["task_seconds"],
        "longest_task_seconds": info["longest_task_seconds"],
        "parent_seconds": walls[1] - info["task_seconds"],
        "events": {
            "full": json.loads((full_dir / "summary.json").read_text())["events"],
            "approx": summary["events"]},
        "same_output_serial_2_workers_and_ray": same,
        "flows": {"full": len(full_flows),
                  "approx": len(summary["flows"])},
        "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]},
    }


def measure_load(k: int, load: float, work: Path) -> dict:
    """The packet-level run and the decomposition (default tolerance, 2 workers) of the
    scenario at another offered load: how the error grows with load."""
    sets = [("topology.k", str(k)), ("traffic[0].load", str(load))]
    full_dir, approx_dir = work / f"full-k{k}-load{load}", work / f"approx-k{k}-load{load}"
    tacc.run_dir(SCENARIO, sets=sets, out=full_dir)
    _decompose(sets, approx_dir, Options().cluster_tolerance, 2)
    _decompose(sets, approx_dir / "passes1", Options().cluster_tolerance, 2, passes=1)
    ideal = _full_path_ideal(json.loads((approx_dir / "summary.json").read_text()))
    full_flows = pd.read_csv(full_dir / "flows.csv")
    approx_flows = pd.read_csv(approx_dir / "flows.csv")
    one_pass = _per_flow(full_flows, pd.read_csv(approx_dir / "passes1" / "flows.csv"))
    full = _buckets(_slowdowns(full_flows, ideal, k))
    approx = _buckets(_slowdowns(approx_flows, ideal, k))
    return {"k": k, "load": load, "full": full, "approx": approx,
            "relative_error": _relative(full, approx),
            "per_flow_ratio": _per_flow(full_flows, approx_flows),
            "per_flow_ratio_one_pass": one_pass,
            "timeouts": {"full": int(full_flows["timeouts"].sum())}}


def _error_table(caption: str, head: str, buckets: dict,
                 rows: list[tuple[str, dict[str, dict[str, float]]]]) -> list[str]:
    """A table whose rows start with their own cells (`head`'s columns) and end with the
    p50 / p99 errors of each size bucket."""
    return ["", caption, "", head + " | ".join(f"{b} p50 / p99" for b in buckets) + " |",
            "|" + "---|" * (head.count("|") - 1 + len(buckets)),
            *(start + _error_cells(errors) + " |" for start, errors in rows)]


def _error_cells(errors: dict[str, dict[str, float]]) -> str:
    """The p50 / p99 errors of each size bucket, as table cells."""
    return " | ".join(f"{e['p50']:+.0%} / {e['p99']:+.0%}" for e in errors.values())


def _per_flow_line(p: dict[str, float]) -> str:
    return (f"{p['flows']} flows complete in both; estimate over run time: "
            f"q10 {p['q10']:.2f}, q25 {p['q25']:.2f}, median {p['q50']:.2f}, q75 {p['q75']:.2f}, "
            f"q90 {p['q90']:.2f}; within 0.8-1.25 of it: {p['within_25pct']:.0%}")


def markdown_loads(sweep: list[dict]) -> str:
    buckets = list(sweep[0]["full"])
    lines = [f"### Load sweep, k = {sweep[0]['k']}, cluster tolerance "
             f"{Options().cluster_tolerance}", "",
             "Errors of the p50 / p99 slowdown by size bucket, and flow by flow:", "",
             "| load | " + " | ".join(buckets) + " | per-flow median (q25-q75) | within "
             "0.8-1.25 | one pass: median, within |", "|---|" + "---|" * (len(buckets) + 3)]
    for r in sweep:
        e, p, o = r["relative_error"], r["per_flow_ratio"], r["per_flow_ratio_one_pass"]
        lines.append(f"| {r['load']} | "
                     + _error_cells(e)
                     + f" | {p['q50']:.2f} ({p['q25']:.2f}-{p['q75']:.2f}) | "
                     f"{p['within_25pct']:.0%} | {o['q50']:.2f}, {o['within_25pct']:.0%} |")
    return "\n".join(lines + [""])


def markdown(results: list[dict]) -> str:
    lines = []
    for r in results:
        lines += [f"### k = {r['k']}, duration {r['duration']}, cluster tolerance "
                  f"{r['cluster_tolerance']}", "",
                  "| size | flows (full / approx) | p50 full | p50 approx | p50 error "
                  "| p99 full | p99 approx | p99 error |",
                  "|---|---|---|---|---|---|---|---|"]
        for b in r["full"]:
            f, a, e = r["full"][b], r["approx"][b], r["relative_error"][b]
            lines.append(f"| {b} | {f['flows']} / {a['flows']} | {f['p50']:.2f} | "
                         f"{a['p50']:.2f} | {e['p50']:+.0%} | {f['p99']:.2f} | "
                         f"{a['p99']:.2f} | {e['p99']:+.0%} |")
        lines += ["", "Flow by flow: " + _per_flow_line(r["per_flow_ratio"]) + "."]
        lines += _error_table(
            "One pass against two (2 workers): wall time, speed-up over the packet-level run, "
            "flow by flow, and the errors of p50 and p99 by size bucket:",
            "| passes | wall s | speed-up | per-flow median (q25-q75) | within 0.8-1.25 | ",
            r["full"],
            [(f"| {n['passes']} | {n['wall_s_2_workers']:.1f} | {n['speedup_2_workers']:.2f} "
              f"| {p['q50']:.2f} ({p['q25']:.2f}-{p['q75']:.2f}) | {p['within_25pct']:.0%} | ",
              n["relative_error"]) for n in r["passes"] for p in [n["per_flow_ratio"]]])
        lines += ["", "If each flow met only its worst link (the largest of its link delays "
                      "instead of their sum):", "",
                  "| size | p50 full | p50 worst link | p99 full | p99 worst link |",
                  "|---|---|---|---|---|"]
        for b in r["full"]:
            f, m = r["full"][b], r["approx_worst_link_only"][b]
            lines.append(f"| {b} | {f['p50']:.2f} | {m['p50']:.2f} | {f['p99']:.2f} | "
                         f"{m['p99']:.2f} |")
        lines += ["", "Delay by link class (share of all summed delay; a flow's delay at one "
                      "link over its ideal FCT, median and p99):", "",
                  "| link class | share | p50 | p99 |", "|---|---|---|---|"]
        for c, d in sorted(r["delay_by_link_class"].items(), key=lambda i: -i[1]["share"]):
            lines.append(f"| {c} | {d['share']:.0%} | {d['p50']:.2f} | {d['p99']:.2f} |")
        lines += _error_table(
            "Cluster tolerance (2 workers; 0: every link simulated): link tasks, wall time, "
            "speed-up over the packet-level run, and the errors of p50 and p99 by size bucket:",
            "| tolerance | tasks (clustered links) | wall s | speed-up | ", r["full"],
            [(f"| {t['tolerance']} | {t['link_tasks']} ({t['clustered_links']}) | "
              f"{t['wall_s_2_workers']:.1f} | {t['speedup_2_workers']:.2f} | ",
              t["relative_error"]) for t in r["tolerance_sweep"]])
        w, s = r["wall_s"], r["speedup"]
        lines += ["", f"Wall time: packet-level {w['full']:.1f} s, decomposition serial "
                      f"{w['approx_serial']:.1f} s (speed-up {s['serial']:.2f}), with 2 workers "
                      f"{w['approx_2_workers']:.1f} s (speed-up {s['2_workers']:.2f}), on "
                      f"Ray with 2 CPUs {w['approx_ray_2_cpus']:.1f} s (speed-up "
                      f"{s['ray_2_cpus']:.2f}; the instance's start-up, "
                      f"{w['ray_start']:.1f} s, not counted); "
                      f"{r['link_tasks']} link tasks ({r['clustered_links']} links clustered "
                      f"with them; host NICs as their feeders: {r['nic_links_as_feeders']}), "
                      f"{r['pruned_links']} links pruned, "
                      f"{r['ideal_runs']} ideal-time runs, {r['second_pass_tasks']} links "
                      f"run again in the second pass; events {r['events']['full']:,} "
                      f"(packet-level) vs {r['events']['approx']:,} (all tasks); load "
                      f"average {r['load_average_1m']['before']:.1f} before, "
                      f"{r['load_average_1m']['after']:.1f} after on {os.cpu_count()} "
                      "cores.", "",
                      f"Serially, the runs took {r['task_seconds']:.1f} s in all (the "
                      f"longest run {r['longest_task_seconds']:.2f} s) and the rest took "
                      f"{r['parent_seconds']:.1f} s (the workload, the tasks, their "
                      "combination): on W workers the decomposition takes at least "
                      f"{r['parent_seconds']:.1f} s + max({r['task_seconds']:.1f} s / W, "
                      f"{r['longest_task_seconds']:.2f} s).", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--duration", metavar="T",
                        help="simulated time instead of the scenario's, e.g. 0.2s")
    parser.add_argument("--loads", type=float, nargs="*", default=[0.1, 0.3, 0.5],
                        help="offered loads of the load sweep, at the first k (none: no sweep)")
    parser.add_argument("--out", type=Path, default=HERE / "decomposition.json")
    args = parser.parse_args()
    results: list[dict] = []
    sweep: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="tacc-decomposition-") as tmp:
        def write() -> None:
            record = {"scenario": str(SCENARIO.relative_to(HERE.parent)),
                      "cpus": os.cpu_count(), "results": results, "load_sweep": sweep}
            args.out.write_text(json.dumps(record, indent=2) + "\n")
            args.out.with_suffix(".md").write_text(
                markdown(results) + (markdown_loads(sweep) if sweep else ""))

        for load in args.loads:
            sweep.append(measure_load(args.k[0], load, Path(tmp)))
            write()
        if sweep:
            print(markdown_loads(sweep), flush=True)
        for k in args.k:
            results.append(measure(k, Path(tmp), args.duration))
            write()
            print(markdown(results[-1:]), flush=True)


if __name__ == "__main__":
    main()
