"""Link decomposition: each loaded link simulated alone, delays summed along paths.

The workload is the scenario's open-loop traffic drawn by the engine without a run
(`tacc._core.workload`: every flow's endpoints, size, start and the ports it crosses, ECMP as
the engine routes it). For each port that carries flows, a *link task* is a small packet-level
scenario of tacc's own engine: that port is the only place where flows meet, and only the
flows that cross it are there, each on a path of its own:

the switch the port leaves, fed by one link per link that feeds it in the fabric (at that
link's rate, so that arrivals come no faster than they can), each flow's sender behind its
feeder (a feeder that is a host's NIC is that host, shared by its flows), and at the port's
far end one host receiving every flow.

The feeders carry only the flows that cross the port, a part of what they carry in the
fabric; whatever queue they build counts as the port's.

A host's NIC port is no link task of its own: the host is the feeder of the switch port each
of its flows reaches first, and its NIC queue counts there. Alone, a host's flows meet no ECN
mark (a NIC's queue marks nothing, and a task's receivers are idle), so their windows would
grow until the host's small-queue limit holds them, a standing queue that the marks of the
switch queues downstream keep down in the fabric; and the same queue would be counted again
as the feeder of the first switch port. Contention at the NIC between flows of one host that
leave by different switch ports is what this leaves out.

A flow's ACKs do not cross the task's links back: they reach the sender outside the network
(the engine's `return_delay`, with the timing noise of the receiving host, whose NIC runs at
the port's rate), after its full path's base round trip (propagation, plus a full packet's
and an ACK's serialization per hop) less the task's data path one way, so that its base round
trip in the task is its path's. In the fabric they would cross other links' queues on their
way back, which a link's task leaves to those links' tasks anyway; here they cost one event
each instead of one a hop, and the flows can share one receiving host without their ACKs
queueing there together.

A flow's delay at a link is its completion time in the link's task minus its ideal one on the
task's path (alone, idle); its estimated completion time is its ideal one on its full path
plus the sum of its delays over its links (each flow's own measured delay, not Parsimon's
sampling from per-size-bucket distributions). Ideal times come from the engine too: per
distinct route (the ports' rates and delays, and a task's return delay), one run of flows of a
ladder of sizes, one after another, interpolated linearly between sizes.

Links whose offered load is below `Options.prune_below` of their rate are not simulated: their
delay is taken as zero.

Links are clustered (`Options.cluster_tolerance`): a link whose port has the same rate, delay
and kind (toward a host or a switch, fed by hosts or not) as a simulated one, whose offered
load is within the tolerance of that one's (relatively) and whose flow sizes are distributed
alike (the largest difference of the two sizes' cumulative distributions, on a log grid, at
most the tolerance) is not simulated; each of its flows takes the delay of one of the
simulated link's flows nearest to it in size (in the manner of Parsimon's sampling from
per-size-bucket delay distributions; a link here often carries tens of flows, too few for
buckets).

With two passes (`Options.passes`, the default) the simulated links where such a flow is held
run again, each bandwidth-bound flow's own access link slowed to the slowest rate its other links gave it in
the first (`_caps`): alone with a link a flow fills it as if nothing held it back elsewhere,
which in the fabric it does not. The second pass's delays are the ones summed.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import io
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import tacc
from tacc.results import write_atomic, write_table

METHOD = "link-decomposition"
IP_TCP_HEADERS = 40  # bytes a full data segment adds to the MSS, and the size of a bare ACK
EXACT_PACKETS = 64  # ideal times measured at every whole number of segments up to this
LADDER_STEP = 1.25  # beyond it, sizes grow by this factor
NS = 1_000_000_000
# A clustered link's flow takes the delay of one of this many flows of the simulated link
# nearest to it in size.
NEIGHBOURS = 3
CDF_POINTS = 48  # points of the log grid on which links' flow-size distributions are compared

Chain = tuple[tuple[int, int], ...]  # a path as its ports' (rate b/s, delay ns), sender first
# A path and how its ACKs come back: after a return delay (ns) outside the network (a link
# task's flows), or along the path itself where the delay is 0 (the fabric's paths).
Route = tuple[Chain, int]


class ApproxError(ValueError):
    """A scenario the approximation does not apply to (the message says why)."""


@dataclass(frozen=True)
class Options:
    engine: str = "local"  # "local" (process pool) or "ray"
    jobs: int = 1
    # Links offered less than this fraction of their rate are not simulated.
    prune_below: float = 0.05
    # Links whose workload is this alike to a simulated link's take delays from it (0: every
    # link is simulated).
    cluster_tolerance: float = 0.1
    # 2: the links are simulated again where a bandwidth-bound flow is held to the rate it got
    # at its other links (`_caps`); 1: once, every flow free to fill each link alone.
    passes: int = 2


@dataclass(frozen=True)
class Port:
    name: str
    from_host: bool
    to_host: bool
    rate_bps: int
    delay_ns: int


@dataclass(frozen=True)
class Task:
    """One run of the engine: the scenario with `sets` applied, under `seed`."""

    key: str
    scenario: str
    sets: tuple[tuple[str, str], ...]
    seed: int
    # The port of the task whose statistics stand for the link (empty for an ideal-time run).
    bottleneck: str = ""


@dataclass
class TaskResult:
    # Per flow name: (fct ns or None, bytes delivered, retransmits, fast retransmits, timeouts,
    # ECN reductions).
    flows: dict[str, tuple[int | None, int, int, int, int, int]]
    port: dict[str, Any] | None
    events: int
    conservation: dict[str, Any]
    # Its wall time in its worker: the scenario read, the run, its summary decoded.
    seconds: float


@dataclass
class Fabric:
    name: str
    ports: list[Port]
    vm_names: list[str]
    duration_ns: int
    seed: int
    mss: int


@dataclass
class Decomposition:
    """The link tasks and ideal-time runs of a workload, and what was left out."""

    tasks: list[Task] = field(default_factory=list)
    ladders: dict[Route, Task] = field(default_factory=dict)
    # Per flow index, for every port of its path that is not pruned: (port, route of the flow
    # in that port's task), the route None where the port takes its delays from its cluster's
    # simulated port.
    visits: list[list[tuple[int, Route | None]]] = field(default_factory=list)
    # Each clustered port's simulated port (a simulated port is its own).
    cluster_of: dict[int, int] = field(default_factory=dict)
    # The flows (indices) crossing each port.
    crossing: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    full_chains: list[Chain] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    # Host NIC ports, simulated as feeders of the switch ports their flows reach first.
    nics: list[str] = field(default_factory=list)
    utilization: dict[str, float] = field(default_factory=dict)
    # The first pass's link results, where a second pass replaced them.
    first_pass: dict[str, TaskResult] = field(default_factory=dict)
    # Per second-pass task: (flow, the rate it was held to, its access link's own rate).
    capped: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)


def _fabric(scenario: str, seed: int | None, sets: Sequence[tuple[str, str]]) -> Fabric:
    core = tacc._engine()
    info = core.validate(scenario, sets=list(sets))
    if info["topology"] != "fat-tree":
        raise ApproxError(f"{METHOD} needs topology.kind = \"fat-tree\", "
                          f"not {info['topology']!r}")
    plan = json.loads(core.plan(scenario, seed=seed, sets=list(sets), routes=False))
    problems = []
    if plan["flows"]:
        problems.append("[[flows]]")
    if any(app["kind"] != "traffic" for app in plan["apps"]):
        problems.append("[[incast]]")
    if plan["mechanism"] is not None:
        problems.append("a [mechanism]")
    if any(p["loss_rate"] is not None for p in plan["ports"]):
        problems.append("[[loss]]")
    if len(plan["vms"]) != len(plan["hosts"]):
        problems.append("more than one VM per host")
    switch_queues = {json.dumps(p["queue"], sort_keys=True)
                     for p in plan["ports"] if "switch" in p["from"]}
    if len(switch_queues) > 1:
        problems.append("[[queue.overrides]]")
    if problems:
        raise ApproxError(f"{METHOD} takes open-loop [[traffic]] only; the scenario has "
                          + ", ".join(problems))
    if not any(app["kind"] == "traffic" for app in plan["apps"]):
        raise ApproxError(f"{METHOD} needs open-loop [[traffic]]; the scenario has none")
    ports = [Port(p["name"], "host" in p["from"], "host" in p["to"], p["rate_bps"],
                  p["delay_ns"]) for p in plan["ports"]]
    return Fabric(plan["name"], ports, [v["name"] for v in plan["vms"]], plan["duration_ns"], plan["seed"],
                  plan["tcp"]["mss"])


def _ser_ns(nbytes: int, rate_bps: int) -> float:
    return nbytes * 8 * NS / rate_bps


@functools.cache  # a fabric's flows cross a handful of distinct paths
def _base_rtt_ns(chain: Chain, mss: int) -> float:
    """Propagation both ways plus a full data packet's and an ACK's serialization per hop."""
    return sum(2 * d + _ser_ns(mss + IP_TCP_HEADERS, r) + _ser_ns(IP_TCP_HEADERS, r)
               for r, d in chain)


def _one_way_ns(chain: Chain, mss: int) -> float:
    """Propagation plus a full data packet's serialization per hop."""
    return sum(d + _ser_ns(mss + IP_TCP_HEADERS, r) for r, d in chain)


def _task_seed(seed: int, key: str) -> int:
    """Each task's seed, from the scenario's seed and the task (a port's name, a path)."""
    digest = hashlib.sha256(f"{seed}/{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def _literal(value: str | bool | list[str]) -> str:
    """A TOML literal: a string, a boolean or a list of strings."""
    if isinstance(value, str):
        # Names: quoted as they are unless they need escapes.
        if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
            return f'"{value}"'
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return "[" + ", ".join(_literal(v) for v in value) + "]"


# A task's links and flows are written straight as TOML inline tables: a large fabric has
# thousands of tasks, and going through `_literal` for each of their fields was most of the
# time spent building them.
def _link(a: str, b: str, rate_bps: int, delay_ns: int) -> str:
    """A link between two of a task's nodes (names of its own, never quoted)."""
    return f'{{a = "{a}", b = "{b}", rate = "{rate_bps}bps", delay = "{delay_ns}ns"}}'


def _flow(name: str, src: str, dst: str, start_ns: int, nbytes: int, cc: str, ecn: bool,
          return_ns: int) -> str:
    back = f', return_delay = "{return_ns}ns"' if return_ns else ""
    return (f'{{name = {_literal(name)}, src = "{src}", dst = "{dst}", start = "{start_ns}ns", '
            f'bytes = "{nbytes}B", cc = {_literal(cc)}, ecn = {_literal(ecn)}{back}}}')


def _scenario_sets(hosts: list[str], switches: list[str], links: list[str], flows: list[str],
                   duration_ns: int | None = None) -> tuple[tuple[str, str], ...]:
    """Overrides that turn the scenario into an explicit topology with explicit flows (`_link`,
    `_flow`); its [tcp], [queue] and [nic] tables stay as they are."""
    sets = [
        ("topology", f'{{kind = "explicit", hosts = {_literal(hosts)}, '
                     f'switches = {_literal(switches)}, links = [{", ".join(links)}]}}'),
        ("traffic", "[]"),
        ("flows", f'[{", ".join(flows)}]'),
        ("output.ports", "[]"),
    ]
    if duration_ns is not None:
        sets.append(("duration", f'"{duration_ns}ns"'))
    return tuple(sets)


def _ladder_sizes(mss: int, largest: int) -> list[int]:
    sizes = [1, *(mss * n for n in range(1, EXACT_PACKETS + 1))]
    while sizes[-1] < largest:
        sizes.append(int(sizes[-1] * LADDER_STEP))
    return sizes


def _ladder_task(route: Route, scenario: str, user_sets: Sequence[tuple[str, str]],
                 fabric: Fabric, largest: int, cc: str, ecn: bool) -> Task:
    """Flows of every ladder size alone on `route`, one after another: each starts when the
    one before has surely finished (its bytes at the slowest rate twice over, 50 round trips,
    1 ms)."""
    chain, return_ns = route
    switches = [f"w{i}" for i in range(1, len(chain))]
    nodes = ["a", *switches, "b"]
    links = [_link(nodes[i], nodes[i + 1], r, d) for i, (r, d) in enumerate(chain)]
    slowest = min(r for r, _ in chain)
    rtt = _base_rtt_ns(chain, fabric.mss) if not return_ns else (
        _one_way_ns(chain, fabric.mss) + return_ns)
    flows, start = [], 0
    for size in _ladder_sizes(fabric.mss, largest):
        flows.append(_flow(f"ideal.{size}", "a", "b", start, size, cc, ecn, return_ns))
        wire = -(-size // fabric.mss) * (fabric.mss + IP_TCP_HEADERS)
        start += int(2 * _ser_ns(wire, slowest) + 50 * rtt) + 1_000_000
    key = "ideal " + " ".join(f"{r}bps/{d}ns" for r, d in chain) + (
        f" back {return_ns}ns" if return_ns else "")
    return Task(key, scenario, tuple(user_sets) + _scenario_sets(
        ["a", "b"], switches, links, flows, duration_ns=start), _task_seed(fabric.seed, key))


def _size_cdfs(workload: Sequence[dict[str, Any]], crossing: dict[int, list[int]],
               ports: Sequence[int]) -> np.ndarray:
    """Each port's distribution of flow sizes, as its cumulative distribution on a log grid
    spanning the workload's sizes (one row a port)."""
    sizes = np.array([f["bytes"] for f in workload], float)
    grid = np.geomspace(sizes.min(), sizes.max(), CDF_POINTS)
    rows = np.empty((len(ports), CDF_POINTS))
    for n, p in enumerate(ports):
        mine = np.sort(sizes[crossing[p]])
        rows[n] = np.searchsorted(mine, grid, side="right") / len(mine)
    return rows


def _cluster(ports: Sequence[Port], loaded: list[int], host_fed: set[int],
             utilization: dict[str, float], cdfs: np.ndarray, tolerance: float
             ) -> dict[int, int]:
    """Greedy clustering in port order: a port joins the closest simulated port of its kind
    (rate, delay, toward a host or not, fed by hosts or not) within `tolerance` (relative load
    and size-distribution distance), else is simulated."""
    cluster_of: dict[int, int] = {}
    # Per kind, its simulated ports (rows of `loaded`) in the order they were taken, and their
    # loads sorted with their places in that order: only those whose load is within the
    # tolerance can be within it, and a large fabric has thousands of ports of a kind.
    heads: dict[tuple[int, int, bool, bool], tuple[list[int], list[tuple[float, int]]]] = (
        defaultdict(lambda: ([], [])))
    loads = np.array([utilization[ports[p].name] for p in loaded])
    for n, p in enumerate(loaded):
        port = ports[p]
        kind, by_load = heads[(port.rate_bps, port.delay_ns, port.to_host, p in host_fed)]
        if kind and tolerance > 0:
            # |load - head| <= tolerance * head: widened a little, the exact test follows.
            lo = bisect.bisect_left(by_load, (loads[n] / (1 + tolerance) * (1 - 1e-9), -1))
            top = loads[n] / (1 - tolerance) * (1 + 1e-9) if tolerance < 1 else np.inf
            hi = bisect.bisect_right(by_load, (top, len(kind)))
            near = sorted(place for _, place in by_load[lo:hi])
            if near:
                rows = [kind[i] for i in near]
                distance = np.maximum(np.abs(loads[n] - loads[rows]) / loads[rows],
                                      np.abs(cdfs[rows] - cdfs[n]).max(axis=1))
                best = int(np.argmin(distance))
                if distance[best] <= tolerance:
                    cluster_of[p] = loaded[rows[best]]
                    continue
        bisect.insort(by_load, (float(loads[n]), len(kind)))
        kind.append(n)
        cluster_of[p] = p
    return cluster_of


def link_tasks(fabric: Fabric, workload: Sequence[dict[str, Any]], scenario: str,
               user_sets: Sequence[tuple[str, str]], prune_below: float,
               cluster_tolerance: float = 0.0) -> Decomposition:
    """The link tasks of a workload, the ideal-time runs their paths need, the pruned links
    and the clusters."""
    ports = fabric.ports
    dec = Decomposition(visits=[[] for _ in workload])
    crossing = dec.crossing
    offered: dict[int, int] = defaultdict(int)
    for i, f in enumerate(workload):
        for p in f["ports"]:
            crossing[p].append(i)
            offered[p] += f["bytes"]
    dec.full_chains = [tuple((ports[p].rate_bps, ports[p].delay_ns) for p in f["ports"])
                       for f in workload]
    loaded = []
    for p in sorted(crossing):
        port = ports[p]
        load = offered[p] * 8 / (port.rate_bps * fabric.duration_ns / NS)
        dec.utilization[port.name] = load
        if port.from_host:
            dec.nics.append(port.name)
        elif load < prune_below:
            dec.pruned.append(port.name)
        else:
            loaded.append(p)
    # Ports some of whose flows come straight from a host's NIC, whose queue their tasks hold.
    host_fed = {f["ports"][1] for f in workload}
    dec.cluster_of = _cluster(ports, loaded, host_fed, dec.utilization,
                              _size_cdfs(workload, crossing, loaded), cluster_tolerance)
    for p in loaded:
        if dec.cluster_of[p] == p:
            task, visits, _ = _port_task(p, crossing[p], fabric, workload, dec.full_chains,
                                         scenario, user_sets)
            dec.tasks.append(task)
            for i, route in visits:
                dec.visits[i].append((p, route))
        else:
            for i in crossing[p]:
                dec.visits[i].append((p, None))
    largest = max(f["bytes"] for f in workload)
    transports = {(f["cc"], f["ecn"]) for f in workload}
    if len(transports) > 1:
        raise ApproxError(f"{METHOD} takes traffic of one congestion control (and ECN "
                          f"setting); the scenario's sources differ: {sorted(transports)}")
    first = workload[0]
    routes = {(c, 0) for c in dec.full_chains} | {
        r for v in dec.visits for _, r in v if r is not None}
    for route in sorted(routes):
        dec.ladders[route] = _ladder_task(route, scenario, user_sets, fabric, largest,
                                          first["cc"], first["ecn"])
    return dec


def _port_task(p: int, flows: list[int], fabric: Fabric, workload: Sequence[dict[str, Any]],
               full_chains: Sequence[Chain], scenario: str,
               user_sets: Sequence[tuple[str, str]], caps: dict[tuple[int, int], int] | None = None,
               ) -> tuple[Task, list[tuple[int, Route]], list[tuple[int, int, int]]]:
    """Port `p`'s task; each flow's route in it (its chain sender first, as its ideal time
    is looked up); and the flows whose own access link `caps` ((flow, port) -> b/s) slowed: (flow,
    capped rate, the link's own rate)."""
    ports = fabric.ports
    port = ports[p]
    # The link's ends: switch "u", and the host that receives every flow (their ACKs go back
    # outside the network, so they meet nowhere else).
    near, far = "u", "dst"
    hosts, switches = [far], [near]
    links = [_link(near, far, port.rate_bps, port.delay_ns)]
    here = (port.rate_bps, port.delay_ns)
    feeders: dict[int, str] = {}
    entries = []
    visits: list[tuple[int, Route]] = []
    capped: list[tuple[int, int, int]] = []
    for n, i in enumerate(flows):
        f = workload[i]
        full = full_chains[i]
        at = f["ports"].index(p)
        # Flows reach the link through the links that feed it in the fabric, one per feeding
        # link, at its rate: a link's arrivals come no faster than its feeders carry them. A
        # feeder that is a host's NIC is that host, shared by its flows.
        up = f["ports"][at - 1]
        feed = ports[up]
        if up not in feeders:
            feeders[up] = f"g{len(feeders)}"
            (hosts if feed.from_host else switches).append(feeders[up])
            links.append(_link(feeders[up], near, feed.rate_bps, feed.delay_ns))
        sender_side = [(feed.rate_bps, feed.delay_ns)]
        src, own_sender = feeders[up], not feed.from_host
        if own_sender:
            src = f"s{n}"
            sender_side.insert(0, full[0])
        chain = (*sender_side, here)
        # Its ACKs come back outside the network, its base round trip its path's.
        return_ns = round(_base_rtt_ns(full, fabric.mss) - _one_way_ns(chain, fabric.mss))
        if own_sender:
            hosts.append(src)
            rate, delay = chain[0]
            cap = (caps or {}).get((i, p), rate)
            if cap < rate:
                capped.append((i, cap, rate))
                rate = cap
            links.append(_link(src, feeders[f["ports"][at - 1]], rate, delay))
        entries.append(_flow(f["name"], src, far, f["start_ns"], f["bytes"], f["cc"], f["ecn"],
                             return_ns))
        visits.append((i, (chain, return_ns)))
    task = Task(port.name, scenario, tuple(user_sets) + _scenario_sets(
        hosts, switches, links, entries), _task_seed(fabric.seed, port.name), f"{near}->{far}")
    return task, visits, capped


def run_task(task: Task) -> TaskResult:
    """One engine run (in a worker): the flows' results and the bottleneck port's counters."""
    from tacc import _core as core

    t0 = time.perf_counter()
    summary = json.loads(core.run_summary(task.scenario, seed=task.seed, sets=list(task.sets),
                                          ports=[task.bottleneck]))
    flows = {
        f["name"]: (None if f["fct"] is None else round(f["fct"] * NS), f["bytes_delivered"],
                    f["retransmits"], f["fast_retransmits"], f["timeouts"], f["ecn_reductions"])
        for f in summary["flows"]
    }
    port = next(iter(summary["ports"]), None)
    return TaskResult(flows, port, summary["events"], summary["conservation"],
                      time.perf_counter() - t0)


def run_tasks(tasks: Sequence[Task]) -> list[TaskResult]:
    """A chunk of tasks, one after another (in a worker)."""
    return [run_task(t) for t in tasks]


def _chunks(tasks: Sequence[Task], workers: int) -> list[Sequence[Task]]:
    """Tasks in chunks, about 16 a worker: a large fabric has thousands of small ones, each of
    which would otherwise be a round trip between the parent and a worker."""
    size = max(1, len(tasks) // (workers * 16))
    return [tasks[i:i + size] for i in range(0, len(tasks), size)]


def execute(tasks: Sequence[Task], options: Options,
            step: Callable[[int], None] = lambda _: None) -> dict[str, TaskResult]:
    """Runs the tasks serially, in a process pool or on Ray; results by task key."""
    if options.engine == "ray":
        return _execute_ray(tasks, step)
    if options.jobs <= 1:
        results = {}
        for t in tasks:
            results[t.key] = run_task(t)
            step(1)
        return results
    results = {}
    with ProcessPoolExecutor(max_workers=options.jobs) as pool:
        chunks = _chunks(tasks, options.jobs)
        for chunk, done in zip(chunks, pool.map(run_tasks, chunks), strict=True):
            results.update((t.key, r) for t, r in zip(chunk, done, strict=True))
            step(len(chunk))
    return results


def _execute_ray(tasks: Sequence[Task], step: Callable[[int], None]) -> dict[str, TaskResult]:
    import ray

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS") or None, log_to_driver=False)
    remote = ray.remote(run_tasks)
    workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
    refs = {remote.remote(chunk): chunk for chunk in _chunks(tasks, workers)}
    results, pending = {}, list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=len(pending), timeout=0.1)
        for ref in done:
            chunk = refs[ref]
            results.update((t.key, r) for t, r in zip(chunk, ray.get(ref), strict=True))
            step(len(chunk))
    return results


def _ideal(results: dict[str, TaskResult], task: Task) -> tuple[np.ndarray, np.ndarray]:
    """The ideal-time ladder of one path: sizes and completion times (ns)."""
    points = []
    for name, (fct, *_rest) in results[task.key].flows.items():
        if fct is None:
            raise ApproxError(f"an ideal-time run did not complete ({task.key}, {name})")
        points.append((int(name.split(".")[1]), fct))
    points.sort()
    return np.array([s for s, _ in points], float), np.array([t for _, t in points], float)


def ideal_fct_ns(ladder: tuple[np.ndarray, np.ndarray], size: int) -> float:
    """A flow's ideal completion time, interpolated in its path's ladder (linearly
    extrapolated beyond the largest size)."""
    return float(_ideal_fcts_ns(ladder, np.array([size]))[0])


def _ideal_fcts_ns(ladder: tuple[np.ndarray, np.ndarray], sizes: np.ndarray) -> np.ndarray:
    """`ideal_fct_ns` of many sizes on one path."""
    steps, fcts = ladder
    slope = (fcts[-1] - fcts[-2]) / (steps[-1] - steps[-2])
    return np.where(sizes <= steps[-1], np.interp(sizes, steps, fcts),
                    fcts[-1] + slope * (sizes - steps[-1]))


# A flow is held to its rate elsewhere only if it is bandwidth-bound: at least this many of its
# path's bandwidth-delay products long (at 1 Gb/s on a 6-hop path, about 120 KB). A shorter
# flow's time is mostly round trips, and a slower access link would lengthen every one of
# them rather than cap a rate.
BANDWIDTH_BOUND_BDPS = 10


def _caps(fabric: Fabric, workload: Sequence[dict[str, Any]], dec: Decomposition,
          results: dict[str, TaskResult], ladders: dict[Route, tuple[np.ndarray, np.ndarray]],
          ) -> dict[tuple[int, int], int]:
    """(flow, port) -> the rate (b/s) a bandwidth-bound flow is held to in the port's second
    task: the slowest of its rates at its other links in the first pass (a clustered link's
    drawn as its delay is), a rate being its bytes over their serialization at that link plus
    its delay there. Alone with a link, a flow fills it as if nothing else held it back; in
    the fabric it sends no faster than its slowest other link lets it, and the link's queue
    is the shorter for it."""
    outcomes = _outcomes(fabric, workload, dec, results, ladders)
    caps = {}
    for i, f in enumerate(workload):
        size, chain = f["bytes"], dec.full_chains[i]
        bdp = min(r for r, _ in chain) * _base_rtt_ns(chain, fabric.mss) / 8 / NS
        if size < BANDWIDTH_BOUND_BDPS * bdp:
            continue
        rates = {}
        for p, _ in dec.visits[i]:
            delay = outcomes[(i, p)][0]
            if delay is not None:
                ser = size * 8 * NS / fabric.ports[p].rate_bps
                rates[p] = size * 8 * NS / (ser + max(0.0, delay))
        for p in rates:
            others = [r for q, r in rates.items() if q != p]
            if others:
                caps[(i, p)] = int(min(others))
    return caps


def _second_pass(fabric: Fabric, workload: Sequence[dict[str, Any]], dec: Decomposition,
                 scenario: str, user_sets: Sequence[tuple[str, str]],
                 caps: dict[tuple[int, int], int]) -> list[Task]:
    """The simulated links' tasks again, each flow's own access link slowed to its cap (a
    flow fed by its host's NIC shares it with the host's other flows, and is not capped).
    A link none of whose flows is held would run its first task again, seed and all, to the
    same result: it is left out and keeps its first pass."""
    names = {port.name: p for p, port in enumerate(fabric.ports)}
    tasks = []
    for t in dec.tasks:
        p = names[t.key]
        task, _, capped = _port_task(p, dec.crossing[p], fabric, workload, dec.full_chains,
                                     scenario, user_sets, caps)
        if capped:
            tasks.append(task)
            dec.capped[t.key] = capped
    return tasks


def _uncap(result: TaskResult, workload: Sequence[dict[str, Any]],
           capped: Sequence[tuple[int, int, int]]) -> TaskResult:
    """A second-pass task's completion times less what each capped flow's slower access link
    alone adds (its bytes serialized at the cap instead of the link's rate): what is left over
    its ideal time is its delay at the link."""
    flows = dict(result.flows)
    for i, cap, rate in capped:
        name = workload[i]["name"]
        fct, *rest = flows[name]
        if fct is not None:
            slower = workload[i]["bytes"] * 8 * NS * (1 / cap - 1 / rate)
            flows[name] = (max(0, round(fct - slower)), *rest)
    return TaskResult(flows, result.port, result.events, result.conservation, result.seconds)


def run_link_decomposition(scenario: str, *, seed: int | None = None,
                           sets: Sequence[tuple[str, str]] = (), out: str | os.PathLike[str],
                           options: Options = Options(), progress: bool = False) -> Path:
    """Approximates the scenario's run by link decomposition and writes a result directory
    (summary.json marked approximate, flows.csv as a run writes it, empty time series)."""
    from tacc._progress import task_bar

    if options.passes not in (1, 2):
        raise ApproxError(f"{METHOD}: passes must be 1 or 2, got {options.passes}")
    t0 = time.perf_counter()
    core = tacc._engine()
    # Absolute: the tasks may run in processes elsewhere (a Ray worker's directory).
    scenario = str(tacc._scenario_path(scenario).resolve())
    sets = tacc._set_pairs(sets)
    fabric = _fabric(scenario, seed, sets)
    workload = core.workload(scenario, seed=seed, sets=list(sets))
    if not workload:
        raise ApproxError(f"{METHOD}: the scenario's traffic starts no flow")
    if options.engine == "ray":
        _require_ray()
    dec = link_tasks(fabric, workload, scenario, sets, options.prune_below,
                     options.cluster_tolerance)
    tasks = [*dec.ladders.values(), *dec.tasks]
    with task_bar(len(tasks) + len(dec.tasks) * (options.passes - 1), desc=METHOD,
                  stream=None if progress else _quiet()) as step:
        results = execute(tasks, options, step)
        ladders = {route: _ideal(results, task) for route, task in dec.ladders.items()}
        if options.passes == 2:
            caps = _caps(fabric, workload, dec, results, ladders)
            again = _second_pass(fabric, workload, dec, scenario, sets, caps)
            step(len(dec.tasks) - len(again))
            second = execute(again, options, step)
            for key, result in second.items():
                dec.first_pass[key] = results[key]
                results[key] = _uncap(result, workload, dec.capped[key])
    flows, delays = _estimate(fabric, workload, dec, results, ladders)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _write(out, scenario, fabric, (flows, delays), dec, results, ladders, options,
           time.perf_counter() - t0)
    return out


def _quiet() -> Any:
    """A stream that is no terminal, so that no bar is drawn."""
    return io.StringIO()


def _require_ray() -> None:
    from tacc.reproduce.runner import ray_available

    if not ray_available():
        raise ApproxError("--engine ray needs the ray package (pip install 'tacc[ray]')")


Outcome = tuple[float | None, int, list[int]]  # delay ns (None: not completed), bytes, counts


def _nearest(sizes: np.ndarray, size: int) -> np.ndarray:
    """Indices of the NEIGHBOURS sizes (sorted) nearest to `size` on a log scale."""
    i = int(np.searchsorted(sizes, size))
    lo, hi = max(0, i - NEIGHBOURS), min(len(sizes), i + NEIGHBOURS)
    around = np.arange(lo, hi)
    gap = np.abs(np.log(sizes[around]) - np.log(size))
    return np.sort(around[np.argsort(gap, kind="stable")[:NEIGHBOURS]])


def _outcomes(fabric: Fabric, workload: Sequence[dict[str, Any]], dec: Decomposition,
              results: dict[str, TaskResult],
              ladders: dict[Route, tuple[np.ndarray, np.ndarray]],
              ) -> dict[tuple[int, int], Outcome]:
    """(flow, port) -> the flow's outcome at each link of its path that is not pruned. At a
    simulated link its own; at a clustered one, that of a flow of its simulated link's of
    about its size, drawn by a hash of the two names and the seed."""
    own: dict[tuple[int, int], Outcome] = {}
    # Ideal times looked up a route at a time.
    on_route: dict[Route, list[tuple[int, int]]] = defaultdict(list)
    for i in range(len(workload)):
        for p, route in dec.visits[i]:
            if route is not None:
                on_route[route].append((i, p))
    for route, pairs in on_route.items():
        ideal = _ideal_fcts_ns(ladders[route], np.array([workload[i]["bytes"] for i, _ in pairs]))
        for (i, p), ideal_ns in zip(pairs, ideal.tolist(), strict=True):
            fct, got, *more = results[fabric.ports[p].name].flows[workload[i]["name"]]
            own[(i, p)] = (None if fct is None else fct - ideal_ns, got, more)
    by_link: dict[int, list[tuple[int, Outcome]]] = defaultdict(list)
    for i, f in enumerate(workload):
        for p, route in dec.visits[i]:
            if route is not None:
                by_link[p].append((f["bytes"], own[(i, p)]))
    by_size = {}
    for p, outcomes in by_link.items():
        outcomes.sort(key=lambda o: o[0])
        by_size[p] = (np.array([size for size, _ in outcomes], float),
                      [o for _, o in outcomes])
    every = {}
    for i, f in enumerate(workload):
        size = f["bytes"]
        for p, route in dec.visits[i]:
            if route is not None:
                every[(i, p)] = own[(i, p)]
            else:
                sizes, outcomes = by_size[dec.cluster_of[p]]
                near = _nearest(sizes, size)
                name = fabric.ports[p].name
                pick = near[_task_seed(fabric.seed, f"{f['name']}@{name}") % len(near)]
                here, got, more = outcomes[pick]
                every[(i, p)] = (here, size if here is not None else min(got, size), more)
    return every


def _estimate(fabric: Fabric, workload: Sequence[dict[str, Any]], dec: Decomposition,
              results: dict[str, TaskResult],
              ladders: dict[Route, tuple[np.ndarray, np.ndarray]],
              ) -> tuple[list[dict[str, Any]], list[tuple[str, str, float | None]]]:
    """Each flow's row: ideal time on its path plus its delays over its links (their sum may
    be negative by the noise of transmit jitter; the estimate is never below ideal); and the
    delays summed, (flow, link, seconds or None where the flow did not complete)."""
    outcomes = _outcomes(fabric, workload, dec, results, ladders)
    rows, delays = [], []
    for i, f in enumerate(workload):
        size = f["bytes"]
        ideal = ideal_fct_ns(ladders[(dec.full_chains[i], 0)], size)
        delay, done, delivered = 0.0, True, size
        counts = [0, 0, 0, 0]
        for p, _ in dec.visits[i]:
            name = fabric.ports[p].name
            here, got, more = outcomes[(i, p)]
            counts = [a + b for a, b in zip(counts, more, strict=True)]
            delivered = min(delivered, got)
            delays.append((f["name"], name, None if here is None else here / NS))
            done = done and here is not None
            delay += here or 0.0
        fct_ns = round(max(ideal, ideal + delay))
        start = f["start_ns"]
        done = done and start + fct_ns <= fabric.duration_ns
        end = start + fct_ns if done else None
        active = (end if done else fabric.duration_ns) - start
        bytes_done = size if done else delivered
        rows.append({
            "name": f["name"], "group": f["group"],
            "src": fabric.vm_names[f["src_vm"]], "dst": fabric.vm_names[f["dst_vm"]],
            "transport": "tcp", "cc": f["cc"], "ecn": f["ecn"],
            "bytes_delivered": bytes_done, "start": start / NS,
            "end": end / NS if done else None, "fct": fct_ns / NS if done else None,
            "goodput_mbps": bytes_done * 8 / (active / NS) / 1e6 if active > 0 else 0.0,
            "completed": done, "retransmits": counts[0], "fast_retransmits": counts[1],
            "timeouts": counts[2], "ecn_reductions": counts[3],
            # Beyond a run's columns: the flow's size and its ideal completion time.
            "bytes": size, "ideal_fct": ideal / NS,
        })
    return rows, delays


def _clusters(fabric: Fabric, dec: Decomposition) -> dict[str, list[str]]:
    clusters: dict[str, list[str]] = defaultdict(list)
    for p, q in sorted(dec.cluster_of.items()):
        if p != q:
            clusters[fabric.ports[q].name].append(fabric.ports[p].name)
    return dict(clusters)


FLOW_COLUMNS = ("name", "group", "src", "dst", "transport", "cc", "ecn", "bytes_delivered",
                "start", "end", "fct", "goodput_mbps", "completed", "retransmits",
                "fast_retransmits", "timeouts", "ecn_reductions", "bytes", "ideal_fct")


def _write(out: Path, scenario: str, fabric: Fabric,
           estimate: tuple[list[dict[str, Any]], list[tuple[str, str, float | None]]],
           dec: Decomposition, results: dict[str, TaskResult],
           ladders: dict[Route, tuple[np.ndarray, np.ndarray]], options: Options,
           wall: float) -> None:
    flows, delays = estimate
    link_results = [results[t.key] for t in dec.tasks]
    ports = []
    for t in dec.tasks:
        port = dict(results[t.key].port or {})
        port["name"] = t.key
        ports.append(port)
    conservation: dict[str, Any] = {k: 0 for k in ("sent", "delivered", "dropped",
                                                   "in_flight", "shim_dropped",
                                                   "vnic_dropped")}
    every = [*results.values(), *dec.first_pass.values()]
    for r in every:
        for k in conservation:
            conservation[k] += r.conservation[k]
    conservation["ok"] = all(r.conservation["ok"] for r in every)
    summary = {
        "tacc_version": tacc.__version__,
        "scenario": fabric.name,
        "scenario_file": scenario,
        "seed": fabric.seed,
        "sim_seconds": fabric.duration_ns / NS,
        "wall_seconds": wall,
        "events": sum(r.events for r in every),
        "approximate": {
            "method": METHOD,
            "link_tasks": len(dec.tasks),
            "passes": options.passes,
            # (flow, link) pairs of the second pass whose flow was held to its rate elsewhere.
            "capped_flows": sum(len(c) for c in dec.capped.values()),
            # Link tasks the second pass ran again (the others held no flow).
            "second_pass_tasks": len(dec.first_pass),
            "ideal_runs": len(dec.ladders),
            "pruned_links": dec.pruned,
            "nic_links_as_feeders": len(dec.nics),
            "cluster_tolerance": options.cluster_tolerance,
            "clustered_links": sum(1 for p, q in dec.cluster_of.items() if p != q),
            # Each simulated link that others take their delays from, with those links.
            "clusters": _clusters(fabric, dec),
            "prune_below_utilization": options.prune_below,
            "engine": options.engine,
            "jobs": options.jobs,
            "link_events": sum(r.events for r in link_results)
            + sum(r.events for r in dec.first_pass.values()),
            # The time of every run (link tasks and ideal-time runs) in its worker, summed,
            # and the longest's: on W workers the runs take at least the larger of their sum
            # over W and the longest.
            "task_seconds": sum(r.seconds for r in every),
            "longest_task_seconds": max(r.seconds for r in every),
            # Each path's ideal completion times by size (alone on the idle path; ACKs back
            # along it, or outside it after a return delay: a link task's paths).
            "ideal": [{"path": [list(hop) for hop in chain],
                       "return_delay_ns": return_ns,
                       "bytes": ladder[0].astype(int).tolist(),
                       "fct_ns": ladder[1].astype(int).tolist()}
                      for (chain, return_ns), ladder in sorted(ladders.items())],
            "note": "a run's very flows (its traffic sources' own random streams); each "
                    "link simulated alone, then again with each bandwidth-bound flow held to "
                    "its rate at its other links (passes = 2); a flow's completion time is "
                    "its ideal one plus its delays over its links; ports are the link tasks' "
                    "bottlenecks (last pass); conservation sums every task",
        },
        "flows": flows,
        "ports": ports,
        "conservation": conservation,
    }
    write_table(out / "flows.csv", FLOW_COLUMNS, ([row[c] for c in FLOW_COLUMNS]
                                                 for row in flows))
    write_table(out / "link_delays.csv", ("flow", "link", "delay"), delays)
    # No time series: each link's run has its own, and a sum of them would be no network's.
    write_table(out / "goodput.csv", ("time_s", "flow", "goodput_mbps"), [])
    write_table(out / "queues.csv", ("time_s", "port", "backlog_pkts", "backlog_bytes"), [])
    write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")

