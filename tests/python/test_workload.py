"""`tacc._core.workload`: the open-loop flows a scenario's `[[traffic]]` draws, with the ports
each crosses, as the engine draws and routes them (the testbed's open-loop flows are these).

Tests taking the `engine` fixture need the compiled `tacc._core`."""

from __future__ import annotations

import json
from pathlib import Path

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

