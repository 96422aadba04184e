"""`tacc run --approx link-decomposition`: the workload's paths, the link tasks, the two
engines and the accuracy against the packet-level run on a k = 4 fat tree.

Tests taking the `engine` fixture need the compiled `tacc._core`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tacc
from tacc.approx import Options, link_tasks, run_link_decomposition
from tacc.approx.decomposition import _base_rtt_ns, _fabric, _one_way_ns

from test_cli import assert_one_line_error, tacc_cli

K4 = """\
name = "k4"
duration = "{duration}"
[topology]
kind = "fat-tree"
k = 4
link_rate = "1Gbps"
link_delay = "1us"
[queue]
kind = "red-ecn"
limit = "100pkt"
k = "20pkt"
[tcp]
cc = "dctcp"
ecn = true
[[traffic]]
name = "web"
cdf = "websearch"
load = {load}
"""


def _scenario(tmp_path: Path, duration: str = "1s", load: float = 0.5) -> Path:
    path = tmp_path / "k4.toml"
    path.write_text(K4.format(duration=duration, load=load))
    return path


def _node(end: dict) -> tuple[str, int]:
    (kind, index), = end.items()
    return kind, index


def test_workload_paths_are_the_engines_routes(engine: None, tmp_path: Path) -> None:
    from tacc import _core as core

    path = str(_scenario(tmp_path))
    plan = json.loads(core.plan(path))
    flows = core.workload(path)
    ports, vms = plan["ports"], plan["vms"]
    routes = {(r["switch"], r["vm"]): set(r["ports"]) for r in plan["routes"]}
    assert len(flows) > 300
    assert [f["start_ns"] for f in flows] == sorted(f["start_ns"] for f in flows)
    lengths, cores = set(), set()
    for f in flows:
        src_host, dst_host = vms[f["src_vm"]]["host"], vms[f["dst_vm"]]["host"]
        hops = f["ports"]
        assert hops[0] == plan["hosts"][src_host]["nic_port"]
        assert _node(ports[hops[-1]]["to"]) == ("host", dst_host)
        for a, b in zip(hops, hops[1:], strict=False):
            kind, switch = _node(ports[a]["to"])
            assert kind == "switch" and _node(ports[b]["from"]) == ("switch", switch)
            # The engine's forwarding table offers this port towards the destination.
            assert b in routes[(switch, f["dst_vm"])]
        # k = 4: 2 hosts a rack, 4 a pod; 2, 4 or 6 ports by where the two hosts are.
        same_rack, same_pod = src_host // 2 == dst_host // 2, src_host // 4 == dst_host // 4
        assert len(hops) == (2 if same_rack else 4 if same_pod else 6)
        lengths.add(len(hops))
        if len(hops) == 6:
            cores.add(plan["switches"][_node(ports[hops[2]]["to"])[1]]["name"])
    assert lengths == {2, 4, 6}
    # ECMP spreads the flows between pods over all 4 core switches.
    assert cores == {"core0", "core1", "core2", "core3"}
    # The same seed draws the same flows; another seed others.
    assert core.workload(path) == flows
    assert core.workload(path, seed=2) != flows


def test_each_link_task_holds_the_flows_crossing_it_at_their_round_trip(
        engine: None, tmp_path: Path) -> None:
    from tacc import _core as core

    path = str(_scenario(tmp_path))
    fabric = _fabric(path, None, [])
    flows = core.workload(path)
    dec = link_tasks(fabric, flows, path, [], prune_below=0.0)
    crossing = {p.name: {f["name"] for f in flows if i in f["ports"]}
                for i, p in enumerate(fabric.ports)}
    # Every loaded switch port is a task (k = 4: 80 of the 96 ports); the 16 host NICs are
    # the feeders of the switch ports their flows reach first.
    switch_ports = {p.name for p in fabric.ports if not p.from_host}
    assert len(dec.tasks) == sum(1 for n, names in crossing.items()
                                 if names and n in switch_ports) == 80
    assert sorted(dec.nics) == sorted(n for n, names in crossing.items()
                                      if names and n not in switch_ports)
    for task in dec.tasks:
        sets = dict(task.sets)
        assert sets["traffic"] == "[]" and "explicit" in sets["topology"]
        in_task = {name for name in crossing[task.key] if f'name = "{name}"' in sets["flows"]}
        assert in_task == crossing[task.key]
        assert sets["flows"].count("name = ") == len(in_task)
        assert sets["flows"].count("return_delay = ") == len(in_task)
    for i, f in enumerate(flows):
        assert sorted(p for p, _ in dec.visits[i]) == sorted(f["ports"][1:])
        for _, (chain, return_ns) in dec.visits[i]:
            # Every flow keeps its path's base round trip in every task (to the nanosecond, by
            # rounding): its data path there one way, and its ACKs outside the network.
            assert return_ns > 0
            assert abs(_one_way_ns(chain, fabric.mss) + return_ns
                       - _base_rtt_ns(dec.full_chains[i], fabric.mss)) <= 1
    # Task seeds differ by link and follow the scenario's seed.
    assert len({t.seed for t in dec.tasks}) == len(dec.tasks)


def test_light_links_are_pruned(engine: None, tmp_path: Path) -> None:
    from tacc import _core as core

    path = str(_scenario(tmp_path, load=0.05))
    fabric = _fabric(path, None, [])
    flows = core.workload(path)
    dec = link_tasks(fabric, flows, path, [], prune_below=0.05)
    assert dec.pruned and dec.tasks
    assert all(dec.utilization[name] < 0.05 for name in dec.pruned)
    assert all(dec.utilization[t.key] >= 0.05 for t in dec.tasks)


def test_clustered_links_take_delays_from_a_simulated_link_alike(
        engine: None, tmp_path: Path) -> None:
    from tacc import _core as core

    path = str(_scenario(tmp_path))
    fabric = _fabric(path, None, [])
    flows = core.workload(path)
    dec = link_tasks(fabric, flows, path, [], prune_below=0.0, cluster_tolerance=0.2)
    simulated = {p for p, q in dec.cluster_of.items() if p == q}
    clustered = {p: q for p, q in dec.cluster_of.items() if p != q}
    assert clustered and len(dec.tasks) == len(simulated) == 80 - len(clustered)
    host_fed = {f["ports"][1] for f in flows}
    for p, q in clustered.items():
        a, b = fabric.ports[p], fabric.ports[q]
        assert q in simulated
        assert ((a.rate_bps, a.delay_ns, a.to_host, p in host_fed)
                == (b.rate_bps, b.delay_ns, b.to_host, q in host_fed))
        ratio = dec.utilization[a.name] / dec.utilization[b.name]
        assert 0.8 <= ratio <= 1.2
    for i, f in enumerate(flows):
        for p, route in dec.visits[i]:
            assert (route is None) == (p in clustered)

    # In a run, a clustered link's flow takes the delay of one of the 3 flows of its simulated
    # link nearest to it in size.
    out = run_link_decomposition(path, out=tmp_path / "out",
                                 options=Options(jobs=2, cluster_tolerance=0.2))
    summary = json.loads((out / "summary.json").read_text())["approximate"]
    members = {m: rep for rep, ms in summary["clusters"].items() for m in ms}
    assert len(members) == summary["clustered_links"] == len(clustered)
    sizes = pd.read_csv(out / "flows.csv").set_index("name")["bytes"]
    delays = pd.read_csv(out / "link_delays.csv")
    delays["bytes"] = sizes.loc[delays["flow"]].to_numpy()
    by_link = {link: d.sort_values("bytes", kind="stable") for link, d in delays.groupby("link")}
    checked = 0
    for row in delays[delays["link"].isin(members)].dropna().itertuples():
        rep = by_link[members[row.link]]
        gap = (np.log(rep["bytes"]) - np.log(row.bytes)).abs()
        near = rep.loc[gap.sort_values(kind="stable").index[:3]]
        assert np.isclose(near["delay"], row.delay, rtol=0, atol=1e-12).any()
        checked += 1
    assert checked > 100


def _slowdown_p50(flows: pd.DataFrame, ideal: dict[int, tuple[np.ndarray, np.ndarray]]
                  ) -> float:
    from tacc.approx import ideal_fct_ns

    done = flows[flows["completed"]]
    hops = [2 if int(s[1:]) // 2 == int(d[1:]) // 2 else 4 if int(s[1:]) // 4 == int(d[1:]) // 4
            else 6 for s, d in zip(done["src"], done["dst"], strict=True)]
    slowdown = done["fct"].to_numpy() / np.array(
        [ideal_fct_ns(ideal[h], b) / 1e9 for h, b in zip(hops, done["bytes_delivered"],
                                                         strict=True)])
    return float(np.median(slowdown))


def test_local_and_ray_agree_and_estimate_the_packet_level_run(
        engine: None, tmp_path: Path) -> None:
    import ray  # installed by `make setup`: its absence fails the test

    path = _scenario(tmp_path)
    local = run_link_decomposition(str(path), out=tmp_path / "local",
                                   options=Options(engine="local", jobs=2))
    ray.init(num_cpus=2, log_to_driver=False, include_dashboard=False)
    try:
        remote = run_link_decomposition(str(path), out=tmp_path / "ray",
                                        options=Options(engine="ray"))
    finally:
        ray.shutdown()
    for name in ("flows.csv", "link_delays.csv"):
        assert (local / name).read_bytes() == (remote / name).read_bytes()
    summary = json.loads((local / "summary.json").read_text())
    assert summary["approximate"]["method"] == "link-decomposition"
    assert summary["approximate"]["link_tasks"] + summary["approximate"]["clustered_links"] == 80
    approx = tacc.load(local).flows
    assert len(approx) > 300 and approx["completed"].mean() > 0.9
    done = approx[approx["completed"]]
    assert (done["fct"] >= done["ideal_fct"] - 1e-9).all()  # to the nanosecond

    # The fabric's paths (every hop alike, ACKs back along them), not the link tasks'.
    ideal = {len(i["path"]): (np.array(i["bytes"], float), np.array(i["fct_ns"], float))
             for i in summary["approximate"]["ideal"]
             if i["return_delay_ns"] == 0 and all(hop == i["path"][0] for hop in i["path"])}
    assert sorted(ideal) == [2, 4, 6]
    run = tacc.load(tacc.run_dir(path, out=tmp_path / "full")).flows
    # The decomposition's flows are the run's very flows, not another draw of its traffic.
    ran = run[["name", "src", "dst"]].assign(bytes=run["bytes_delivered"])[run["completed"]]
    drawn = approx.set_index("name").loc[ran["name"], ["src", "dst", "bytes"]]
    assert (drawn.to_numpy() == ran[["src", "dst", "bytes"]].to_numpy()).all()
    assert len(approx) == len(run)
    assert summary["approximate"]["passes"] == 2 and summary["approximate"]["capped_flows"] > 0
    # Queueing is real on both sides at half load.
    assert _slowdown_p50(run, ideal) > 2 and _slowdown_p50(approx, ideal) > 2


def test_flows_held_to_their_rates_elsewhere_bring_the_estimate_to_the_run(
        engine: None, tmp_path: Path) -> None:
    path = _scenario(tmp_path)
    run = tacc.load(tacc.run_dir(path, out=tmp_path / "full")).flows
    once, twice = (run_link_decomposition(str(path), out=tmp_path / f"passes{n}",
                                          options=Options(jobs=2, passes=n)) for n in (1, 2))
    # One pass: each link's delay is measured as if the flow had no other bottleneck. Alone
    # with the link, a flow's window answers only that link's marks and fills its queue,
    # while in the fabric a flow held back at one link sends less into the others. So every
    # link's delay is too large: the largest alone already about the run's time, and their
    # sum well above it (docs/approx.md).
    first = tacc.load(once).flows
    delays = pd.read_csv(once / "link_delays.csv").groupby("flow")["delay"].max()
    worst = first.assign(fct=first["ideal_fct"] + delays.reindex(first["name"])
                         .fillna(0).clip(lower=0).to_numpy())
    ratio_once = _per_flow_ratio(run, first).median()
    assert 0.9 < _per_flow_ratio(run, worst).median() < ratio_once  # measured 0.98
    assert ratio_once > 1.3, ratio_once  # measured 1.51
    # Two passes: each long flow held, at each link, to the rate its other links gave it in
    # the first: the per-flow median within 10% of the run (measured 1.04), and at least
    # twice as close in log terms.
    ratio_twice = _per_flow_ratio(run, tacc.load(twice).flows).median()
    assert 0.9 <= ratio_twice <= 1.1, ratio_twice
    assert abs(np.log(ratio_twice)) < 0.5 * abs(np.log(ratio_once)), (ratio_once, ratio_twice)


def test_second_pass_runs_again_only_links_that_hold_a_flow(engine: None, tmp_path: Path
                                                            ) -> None:
    from tacc import _core as core
    from tacc.approx.decomposition import _caps, _ideal, _port_task, _second_pass, execute

    path = str(_scenario(tmp_path))
    fabric = _fabric(path, None, [])
    flows = core.workload(path)
    dec = link_tasks(fabric, flows, path, [], prune_below=0.05)
    results = execute([*dec.ladders.values(), *dec.tasks], Options(jobs=2))
    ladders = {route: _ideal(results, task) for route, task in dec.ladders.items()}
    caps = _caps(fabric, flows, dec, results, ladders)
    again = {t.key for t in _second_pass(fabric, flows, dec, path, [], caps)}
    # Some links hold a flow and run again; a ToR's uplinks, whose flows all come straight
    # from host NICs, hold none (a host's flows share its NIC and are not held), and others
    # may hold none either.
    uplinks = {t.key for t in dec.tasks if t.key.startswith("edge")
               and not fabric.ports[[q.name for q in fabric.ports].index(t.key)].to_host}
    assert again and uplinks and not again & uplinks
    assert set(dec.capped) == again and all(dec.capped.values())
    # A link left out would have run its first task again: same flows, seed and result.
    names = [q.name for q in fabric.ports]
    for key in sorted({t.key for t in dec.tasks} - again)[:3]:
        p = names.index(key)
        task, _, capped = _port_task(p, dec.crossing[p], fabric, flows, dec.full_chains, path,
                                     [], caps)
        assert not capped
        assert execute([task], Options(jobs=1))[key].flows == results[key].flows


def test_plan_without_routes_is_the_plan_less_its_routes(engine: None, tmp_path: Path) -> None:
    from tacc import _core as core

    path = str(_scenario(tmp_path))
    full, lean = (json.loads(core.plan(path, routes=r)) for r in (True, False))
    assert full["routes"] and lean["routes"] == []
    assert {**full, "routes": []} == lean


def test_run_summary_is_the_summary_a_run_writes(engine: None, tmp_path: Path) -> None:
    from tacc import _core as core

    path = str(_scenario(tmp_path, duration="50ms"))
    written = json.loads((Path(core.run(path, out=str(tmp_path / "run"))) / "summary.json")
                         .read_text())
    kept = [written["ports"][0]["name"]]
    summary = json.loads(core.run_summary(path, ports=kept))
    assert summary["flows"] == written["flows"] and summary["events"] == written["events"]
    assert summary["ports"] == written["ports"][:1]
    assert summary["conservation"] == written["conservation"]


def _per_flow_ratio(run: pd.DataFrame, approx: pd.DataFrame) -> pd.Series:
    """Each flow's estimated FCT over its FCT in the run (flows complete in both)."""
    both = run.merge(approx[["name", "fct", "completed"]], on="name", suffixes=("", "_approx"))
    both = both[both["completed"] & both["completed_approx"]]
    return both["fct_approx"] / both["fct"]


def test_at_light_load_each_flows_estimate_is_its_run_time(engine: None, tmp_path: Path
                                                           ) -> None:
    # At 10% load queues are short and rare, in the fabric as in the link tasks: a flow's
    # estimate is then its ideal time on its path plus next to nothing, as its run time is.
    # What this checks is the bookkeeping: ideal times, round trips matched to the path's,
    # delays measured and summed per flow.
    path = _scenario(tmp_path, load=0.1)
    approx = tacc.load(run_link_decomposition(str(path), out=tmp_path / "approx",
                                              options=Options(jobs=2))).flows
    run = tacc.load(tacc.run_dir(path, out=tmp_path / "full")).flows
    ratio = _per_flow_ratio(run, approx)
    assert len(ratio) > 100
    assert 0.9 <= ratio.median() <= 1.1, ratio.describe()
    assert ratio.between(0.8, 1.25).mean() > 0.5, ratio.describe()


def test_cli_writes_an_approximate_result(engine: None, tmp_path: Path) -> None:
    path = _scenario(tmp_path, duration="100ms")
    proc = tacc_cli("run", str(path), "--approx", "link-decomposition", "--jobs", "2",
                    "--out", str(tmp_path / "out"), "--no-plot")
    assert proc.returncode == 0, proc.stderr
    assert "link tasks" not in proc.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["approximate"]["link_tasks"] > 0
    assert "scenario k4" in proc.stdout


@pytest.mark.parametrize("text, message", [
    (K4.replace('kind = "fat-tree"\nk = 4', 'kind = "star"\nsenders = 2\nreceivers = 2'),
     'needs topology.kind = "fat-tree"'),
    (K4 + '[[flows]]\nname = "x"\nsrc = "h0"\ndst = "h1"\nbytes = "1MB"\n',
     "takes open-loop [[traffic]] only; the scenario has [[flows]]"),
])
def test_cli_rejects_what_it_cannot_approximate(engine: None, tmp_path: Path, text: str,
                                                message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text.format(duration="100ms", load=0.5))
    proc = tacc_cli("run", str(path), "--approx", "link-decomposition", "--no-plot")
    assert_one_line_error(proc)
    assert message in proc.stderr


def test_cli_engine_and_jobs_need_approx(engine: None, tmp_path: Path) -> None:
    proc = tacc_cli("run", str(_scenario(tmp_path)), "--jobs", "2", "--no-plot")
    assert_one_line_error(proc)
    assert "only with --approx" in proc.stderr


def test_cli_without_ray_says_so(engine: None, tmp_path: Path,
                                 pythonpath_without_ray: str) -> None:
    path = _scenario(tmp_path, duration="100ms")
    env = dict(os.environ)
    env["PYTHONPATH"] = pythonpath_without_ray
    proc = subprocess.run([sys.executable, "-m", "tacc", "run", str(path), "--approx",
                           "link-decomposition", "--engine", "ray", "--no-plot"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert_one_line_error(proc)
    assert "needs the ray package" in proc.stderr


def test_cluster_tolerance_is_checked(engine: None, tmp_path: Path) -> None:
    path = _scenario(tmp_path, duration="100ms")
    for bad in ("-0.1", "1.5", "nan"):
        proc = tacc_cli("run", str(path), "--approx", "link-decomposition",
                        "--cluster-tolerance", bad, "--out", str(tmp_path / "out"))
        assert_one_line_error(proc)
        assert "--cluster-tolerance" in proc.stderr
    proc = tacc_cli("run", str(path), "--cluster-tolerance", "0.1", "--out", str(tmp_path / "o"))
    assert_one_line_error(proc)
    assert "apply only with --approx" in proc.stderr
