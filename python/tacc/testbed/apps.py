"""The scenario's applications as testbed flows: `[[traffic]]` sources as the very flows the
engine draws (`tacc._core.workload`: names, endpoints, sizes and start times), and
`[[incast]]` partition-aggregate as one flow per worker and epoch whose start the aggregator
triggers at run time (tacc.testbed.traffic: a request over a control connection to each
worker, which answers after its jitter on a new connection).

The plan's flow list is extended with them before the run (`expand`), each worker's flow
marked with its app, worker and epoch; after the run, `settle` keeps the incast flows whose
epoch came, at the start their worker drew, as the engine lists only the flows it started.
"""

from __future__ import annotations

from collections.abc import Sequence
from os import PathLike

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from tacc.testbed.collect import Measured
    from tacc.testbed.plan import Plan

# Worker w of incast app a listens for its aggregator's requests here.
INCAST_CONTROL_PORT = 4000


def workload(scenario: str | PathLike[str], sets: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """The scenario's `[[traffic]]` flows as the engine draws them for its seed."""
    import tacc

    return tacc._engine().workload(tacc._scenario_file(scenario), sets=tacc._set_pairs(sets))


def expand(plan: Plan, workload: list[dict[str, Any]]) -> Plan:
    """The plan with its applications' flows appended, in the scenario's time (a run at a
    rate scale under 1 then dilates the whole plan: plan.time_dilation)."""
    if not plan["apps"]:
        return plan
    import tacc

    engine = tacc._engine()

    def flow(name: str, group: str, src: int, dst: int, start_ns: int, size: int, cc: str,
             ecn: bool, ports: tuple[int, int]) -> dict[str, Any]:
        return {"name": name, "group": group, "src_vm": src, "dst_vm": dst,
                "start_ns": start_ns, "stop_ns": None, "bytes": size, "transport": "tcp",
                "cc": cc, "ecn": ecn, "rate_bps": None, "packet_bytes": None,
                "src_port": ports[0], "dst_port": ports[1], "forge": None, "spoof_src": None}

    # Open-loop flows take the ports the engine's workload gives them, and so its ECMP paths
    # (a run of the engine gives a VM's incast flows ports as their epochs start, between
    # its open-loop ones: on a VM with both, the run's later open-loop ports differ).
    flows = list(plan["flows"]) + [
        flow(w["name"], w["group"], w["src_vm"], w["dst_vm"], w["start_ns"], w["bytes"],
             w["cc"], w["ecn"], (w["src_port"], w["dst_port"])) for w in workload]
    # Here each incast flow takes the next port above all its VM's others, wrapping round
    # as the engine's allocator does.
    next_port: dict[int, int] = {}
    for f in flows:
        next_port[f["src_vm"]] = max(next_port.get(f["src_vm"], engine.FIRST_PORT),
                                     f["src_port"] + 1)

    def incast_ports(src: int) -> tuple[int, int]:
        port = next_port.get(src, engine.FIRST_PORT)
        next_port[src] = engine.FIRST_PORT if port == 0xFFFF else port + 1
        return port, engine.TCP_DPORT

    for a, app in enumerate(plan["apps"]):
        inc = app.get("incast")
        if inc is None:
            continue
        for epoch in range(inc["epochs"]):
            # The earliest an epoch can start; its flows' real starts come from the run.
            earliest = inc["start_ns"] + epoch * (inc["interval_ns"] or 0)
            for w, vm in enumerate(inc["workers"]):
                f = flow(f"{app['name']}.{w}.{epoch}", app["name"], vm, inc["aggregator"],
                         earliest, inc["bytes"], inc["cc"], inc["ecn"], incast_ports(vm))
                f["incast"] = {"app": a, "worker": w, "epoch": epoch}
                flows.append(f)
    return dict(plan, flows=flows)


def settle(plan: Plan, m: Measured) -> Plan:
    """The plan's flows as the run started them: an incast flow at the start its worker
    drew, or dropped if its epoch never came; the records renumbered to match."""
    sent = {int(flow): rec for records in m.traffic.values()
            for flow, rec in records.get("sent", {}).items()}
    kept: list[dict[str, Any]] = []
    renumber: dict[int, int] = {}
    for i, f in enumerate(plan["flows"]):
        if "incast" in f:
            start = sent.get(i, {}).get("start_ns")
            if start is None:
                continue
            f = dict(f, start_ns=start)
        renumber[i] = len(kept)
        kept.append(f)
    for records in m.traffic.values():
        for side in ("sent", "received"):
            if side in records:
                records[side] = {str(renumber[int(k)]): v for k, v in records[side].items()
                                 if int(k) in renumber}
    return dict(plan, flows=kept)


def incast_specs(plan: Plan, duration_ns: int) -> tuple[dict[int, list[dict[str, Any]]],
                                                        dict[int, list[dict[str, Any]]]]:
    """Per VM, its aggregators' and its workers' parts of the plan's incast apps (the
    traffic spec's `aggregators` and `workers`); flows are the plan's flow numbers."""
    aggregators: dict[int, list[dict[str, Any]]] = {}
    workers: dict[int, list[dict[str, Any]]] = {}
    by_app: dict[int, dict[tuple[int, int], int]] = {}
    for i, f in enumerate(plan["flows"]):
        if "incast" in f:
            by_app.setdefault(f["incast"]["app"], {})[
                (f["incast"]["epoch"], f["incast"]["worker"])] = i
    for a, flows in sorted(by_app.items()):
        inc = plan["apps"][a]["incast"]
        if inc["start_ns"] >= duration_ns:
            continue
        port = INCAST_CONTROL_PORT + a
        aggregators.setdefault(inc["aggregator"], []).append({
            "app": a, "start_ns": inc["start_ns"], "interval_ns": inc["interval_ns"],
            "port": port,
            "workers": [plan["vms"][vm]["address"] for vm in inc["workers"]],
            "flows": [[flows[(e, w)] for w in range(len(inc["workers"]))]
                      for e in range(inc["epochs"])],
        })
        for w, vm in enumerate(inc["workers"]):
            workers.setdefault(vm, []).append({
                "app": a, "worker": w, "port": port, "jitter_ns": inc["jitter_ns"],
                "flows": [flows[(e, w)] for e in range(inc["epochs"])],
            })
    return aggregators, workers
