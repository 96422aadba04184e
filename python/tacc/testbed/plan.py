"""The scenario's built world as the engine gives it (`tacc._core.plan`: JSON), the checks
that it has what the testbed reads, and what the testbed derives from it alone: the rate
scale, each VM's ECN setting, and what will not be emulated.

The plan is the single source of the topology, routes, queues and flows: the testbed never
reads the scenario file itself, so a testbed run and a simulation of the same file cannot
disagree on what was asked.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from os import PathLike

from tacc.summary import format_rate

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at start-up
if TYPE_CHECKING:
    from typing import Any

    Plan = dict[str, Any]

# A queue limit given in packets holds that many full packets: 1500 B each, as htb and bfifo
# count them on a veth (their IP bytes), and as the switch agent sizes K and the buffer.
PACKET_BYTES = 1500
DEFAULT_RATE_CAP_BPS = 100_000_000


class PlanError(ValueError):
    """The plan lacks a field the testbed reads, or asks what the testbed cannot build."""


def load_plan(scenario: str | PathLike[str], sets: Sequence[tuple[str, str]] = ()) -> Plan:
    """The engine's plan of a scenario file (or "default") with `--set` overrides applied."""
    import json

    import tacc

    path = tacc._scenario_file(scenario)
    engine = tacc._engine()
    if not hasattr(engine, "plan"):
        raise tacc.EngineUnavailableError(
            "the compiled engine has no plan() (built before the testbed); rebuild it with "
            "`maturin develop --release`"
        )
    plan = json.loads(engine.plan(path, sets=tacc._set_pairs(sets)))
    check_plan(plan)
    return plan


# The fields read here and by the agents' configs, by table; one error line for each absent.
_FIELDS: dict[str, tuple[str, ...]] = {
    "": ("name", "seed", "duration_ns", "hosts", "vms", "switches", "ports", "routes",
         "flows", "apps", "tcp", "output", "mechanism"),
    "hosts": ("name", "nic_port"),
    "vms": ("name", "host", "address"),
    "switches": ("name",),
    "ports": ("name", "from", "to", "rate_bps", "delay_ns", "queue", "loss_rate"),
    "routes": ("switch", "vm", "ports"),
    "flows": ("name", "group", "src_vm", "dst_vm", "start_ns", "stop_ns", "bytes",
              "transport", "cc", "ecn", "rate_bps", "packet_bytes", "src_port", "dst_port"),
    "apps": ("kind", "name"),
}
# The Linux TCP features a plan may have off: (scenario key, plan field).
_LINUX_TCP = (("rack", "rack"), ("tlp", "tlp"), ("dsack", "dsack"), ("quickack", "quickack"),
              ("rto_formula", "rto_linux"), ("hystart", "hystart"),
              ("cubic_clamp", "cubic_clamp"), ("minshall", "minshall"),
              ("half_window", "half_window"), ("timestamps", "timestamps"))
_TABLES = {
    "tcp": ("mss", "init_cwnd", "rto_min_ns", "rcv_buf_bytes", "sack", "delack_count", "prr",
            "rack", "tlp", "dsack", "quickack", "rto_linux", "hystart", "cubic_clamp",
            "minshall", "half_window", "timestamps"),
    "output": ("goodput_bin_ns", "queue_sample_ns", "ports", "pcap", "pcap_dropped"),
}


def check_plan(plan: Plan) -> None:
    """Raises PlanError listing every field the testbed needs and the plan lacks, and every
    shape it cannot build (a host with more than one link, two flows with one 5-tuple)."""
    problems = _missing_fields(plan)
    if not problems:
        problems = _unbuildable(plan)
    if problems:
        raise PlanError("\n".join(f"plan: {p}" for p in problems))


def _missing_fields(plan: Plan) -> list[str]:
    if not isinstance(plan, dict):
        return ["expected a JSON object"]
    problems = [f"missing {key}" for key in _FIELDS[""] if key not in plan]
    for table, keys in _FIELDS.items():
        for i, item in enumerate(plan.get(table, []) if table else []):
            problems += [f"{table}[{i}]: missing {key}" for key in keys if key not in item]
    for table, keys in _TABLES.items():
        problems += [f"{table}: missing {key}" for key in keys if key not in plan.get(table, {})]
    for i, port in enumerate(plan.get("ports", [])):
        queue = port.get("queue", {})
        if queue.get("limit_bytes") is None and queue.get("limit_packets") is None:
            problems.append(f"ports[{i}].queue: neither limit_bytes nor limit_packets")
    return problems


def _unbuildable(plan: Plan) -> list[str]:
    problems = []
    uplinks: dict[int, list[str]] = {}
    for port in plan["ports"]:
        if "host" in port["from"]:
            uplinks.setdefault(port["from"]["host"], []).append(port["name"])
    for h, names in sorted(uplinks.items()):
        if len(names) > 1:
            problems.append(f"host {plan['hosts'][h]['name']} has {len(names)} links "
                            f"({', '.join(names)}); the testbed gives a host one uplink")
    mechanism = plan["mechanism"] or {}
    if mechanism.get("kind") == "sicc" and mechanism.get("mode") == "switch":
        problems.append("SICC's in-switch mode (mode = \"switch\") is not on the testbed: its "
                        "switch agent reads the queues on ticks, not at every packet")
    # A receiver tells flows apart by the sender's address and port.
    senders: dict[tuple[str, int, int, int, int], str] = {}
    for flow in plan["flows"]:
        key = (flow["transport"], flow["src_vm"], flow["src_port"], flow["dst_vm"],
               flow["dst_port"])
        if key in senders:
            problems.append(f"flows {senders[key]} and {flow['name']} are one "
                            f"{flow['transport']} flow: same VMs and ports")
        senders.setdefault(key, flow["name"])
        if flow.get("forge") or flow.get("spoof_src") is not None:
            problems.append(f"flow {flow['name']} forges signals or spoofs its source "
                            "(forge, spoof), which the testbed's sockets cannot send")
    return problems


def port_pairs(plan: Plan) -> list[tuple[int, int]]:
    """The links as (port, reverse port): each link is one veth pair, each direction a port."""
    open_ports: dict[tuple[str, str], list[int]] = {}
    pairs = []
    for i, port in enumerate(plan["ports"]):
        here, there = _node_key(port["from"]), _node_key(port["to"])
        waiting = open_ports.get((there, here))
        if waiting:
            pairs.append((waiting.pop(0), i))
        else:
            open_ports.setdefault((here, there), []).append(i)
    unpaired = [plan["ports"][i]["name"] for rest in open_ports.values() for i in rest]
    if unpaired:
        raise PlanError(f"plan: ports without a reverse direction: {', '.join(unpaired)}")
    return pairs


def _node_key(node: dict[str, int]) -> str:
    ((kind, index),) = node.items()
    return f"{kind}{index}"


def buffer_bytes(port: dict[str, Any]) -> int:
    queue = port["queue"]
    if queue.get("limit_bytes") is not None:
        return int(queue["limit_bytes"])
    return int(queue["limit_packets"]) * PACKET_BYTES


def path_ports(plan: Plan, src_vm: int, dst_vm: int) -> list[int]:
    """The plan ports a packet from VM `src_vm` to VM `dst_vm` leaves by (each switch's
    first route port: an ECMP choice is not known here)."""
    hosts = plan["hosts"]
    src, dst = plan["vms"][src_vm]["host"], plan["vms"][dst_vm]["host"]
    if src == dst:
        return []
    routes = {(r["switch"], r["vm"]): r["ports"] for r in plan["routes"]}
    ports = [hosts[src]["nic_port"]]
    while "switch" in (node := plan["ports"][ports[-1]]["to"]):
        if len(ports) > len(plan["ports"]):
            raise ValueError(f"the routes from VM {src_vm} to VM {dst_vm} loop")
        ports.append(routes[(node["switch"], dst_vm)][0])
    return ports


def unloaded_rtt_ns(plan: Plan, src_vm: int, dst_vm: int, ip_bytes: int) -> float:
    """The scenario's round trip of an `ip_bytes` packet and its answer of the same size
    through empty queues: each port's serialization and delay, there and back."""
    ports = path_ports(plan, src_vm, dst_vm) + path_ports(plan, dst_vm, src_vm)
    return sum(plan["ports"][p]["delay_ns"] + ip_bytes * 8e9 / plan["ports"][p]["rate_bps"]
               for p in ports)


def rate_scale(plan: Plan, cap_bps: float) -> float:
    """The factor every rate is multiplied by so that the fastest link runs at `cap_bps`:
    the machine forwards about 1 Gb/s in all through veths without offloads."""
    fastest = max((p["rate_bps"] for p in plan["ports"]), default=0)
    return min(1.0, cap_bps / fastest) if fastest else 1.0


def time_dilation(plan: Plan, scale: float) -> float:
    """How many times slower than the scenario the run goes: 1 / scale for a plan with
    applications at a rate scale under 1, 1 otherwise. An incast's epochs and an open-loop
    load are set in the scenario's time; at a tenth of the rates the same flows would offer
    ten times the load, so such a run goes ten times slower, its flows' sizes the same: every
    flow then spans as many packets, and an application loads the port as much, as in the
    scenario. Scenarios without applications keep their time (their flows are bulk, and
    their tests and docs measure them so)."""
    return 1.0 / scale if plan["apps"] and scale < 1.0 else 1.0


def dilated(plan: Plan, factor: float) -> Plan:
    """The plan with its times `factor` times longer: the run's duration, the flows' starts
    and stops, the applications' epochs and jitter, the sampling intervals and the TCP
    minimum RTO the routes carry. Not the links' delays: the delay lines dilate those by the
    rate scale themselves. Incast flows appended by apps.expand are flows like any other."""
    if factor == 1.0:
        return plan

    def times(item: dict[str, Any], *keys: str) -> dict[str, Any]:
        return {**item, **{k: round(item[k] * factor) for k in keys if item.get(k) is not None}}

    apps = [({**a, "incast": times(a["incast"], "start_ns", "interval_ns", "jitter_ns")}
             if a.get("incast") is not None else a) for a in plan["apps"]]
    return {
        **plan,
        "duration_ns": round(plan["duration_ns"] * factor),
        "flows": [times(f, "start_ns", "stop_ns") for f in plan["flows"]],
        "apps": apps,
        "output": times(plan["output"], "goodput_bin_ns", "queue_sample_ns"),
        "tcp": times(plan["tcp"], "rto_min_ns"),
    }


def scale_message(plan: Plan, scale: float) -> str | None:
    """'rates scaled down x10: the 1Gbps links run at 100Mbps', or None when not scaled."""
    if scale >= 1.0:
        return None
    rates = sorted({p["rate_bps"] for p in plan["ports"]}, reverse=True)
    runs = ", ".join(
        f"the {format_rate(r)} links run at {format_rate(r * scale)}" for r in rates
    )
    return f"rates scaled down x{1 / scale:.4g}: {runs}"


def vm_tcp_ecn(plan: Plan) -> tuple[dict[int, int], list[str]]:
    """Each VM's net.ipv4.tcp_ecn from the TCP flows it sends: 1 (ask for ECN) when they ask,
    else 2 (do not ask, but accept a peer's request: a VM that receives an ECN flow must
    answer it). DCTCP always asks, as in the engine. One setting per VM: flows of one VM
    that disagree are listed."""
    asks: dict[int, dict[bool, list[str]]] = {}
    for flow in plan["flows"]:
        if flow["transport"] == "tcp":
            ecn = bool(flow["ecn"]) or flow["cc"] == "dctcp"
            asks.setdefault(flow["src_vm"], {}).setdefault(ecn, []).append(flow["name"])
    settings = {vm: 1 if True in by else 2 for vm, by in asks.items()}
    disagreements = [
        f"VM {plan['vms'][vm]['name']}: flows {', '.join(by[True])} ask ECN and "
        f"{', '.join(by[False])} do not; one tcp_ecn per VM: all ask it"
        for vm, by in sorted(asks.items())
        if len(by) == 2
    ]
    return settings, disagreements


def linux_cc(cc: str) -> str:
    """The kernel's name of a congestion control ("newreno" is Linux's "reno")."""
    return {"newreno": "reno"}.get(cc, cc)


def plan_notes(plan: Plan, link_delays: bool, departed: Collection[str] = ()) -> list[str]:
    """What the plan asks and the testbed does not emulate (recorded with the result);
    `link_delays`: the run emulates the links' delays; `departed`: the departures' key
    patterns (tacc.testbed.departures) already listed, whose notes would say it twice."""
    notes = []
    delays = sorted({p["delay_ns"] for p in plan["ports"] if p["delay_ns"]})
    if delays and not link_delays:
        shown = ", ".join(f"{d / 1e3:g}us" for d in delays)
        notes.append(f"link delays ({shown}): not emulated (--link-delays emulates them); "
                     "the base RTT is the veths' own")
    lossy = [p["name"] for p in plan["ports"] if p["loss_rate"]]
    if lossy and "loss[]" not in departed:
        notes.append(f"random loss on links ({', '.join(lossy)}): not emulated (the testbed "
                     "does not use netem)")
    red = [p["name"] for p in plan["ports"] if p["queue"]["kind"] not in ("droptail", "red-ecn")]
    if red and not {"queue.kind", "queue.overrides[].kind"} & set(departed):
        notes.append(f"RED queues run as drop-tail at their limit: {', '.join(red)}")
    linux_acks = plan["tcp"]["delack_count"] == 2 and plan["tcp"]["quickack"]
    if not linux_acks and not {"tcp.delayed_ack", "tcp.delack_timeout"} & set(departed):
        notes.append(f"delayed ACKs are Linux's own (quick-ack, then delayed), not "
                     f"delack_count={plan['tcp']['delack_count']}")
    if not plan["tcp"]["prr"] and "tcp.prr" not in departed:
        notes.append("window reductions are Linux's proportional rate reduction (RFC 6937), "
                     "not RFC 6675's recovery (tcp.prr=false)")
    classic = [f"tcp.{key}={'rfc6298' if key == 'rto_formula' else 'false'}"
               for key, field in _LINUX_TCP if not plan["tcp"][field]
               and f"tcp.{key}" not in departed]
    if classic and "tcp.profile" not in departed:
        notes.append("loss detection, probes, ACKs, RTO, slow start and short segments are "
                     "Linux's own (RACK-TLP, D-SACK, quick-ACK, its RTO, HyStart, Cubic's clamp, "
                     f"Minshall's rule, half-window segments), not the scenario's ({', '.join(classic)}; "
                     "tcp.profile=\"linux\" simulates Linux's)")
    notes.append("VM vNIC queues: a VM's veth has none; its host's NIC queue is the first")
    notes.append("per-flow fast retransmits and ECN window reductions: Linux's tcp_info has no "
                 "such counts")
    return notes


_UNITS = {"bps": 1.0, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9}
_TIMES = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_rate(text: str) -> float:
    """A rate in the scenario files' notation ("100Mbps") in bits/s."""
    return _parse(text, _UNITS, "a rate such as 100Mbps")


def parse_seconds(text: str) -> float:
    """A time in the scenario files' notation ("10s", "500ms") in seconds."""
    return _parse(text, _TIMES, "a time such as 10s or 500ms")


def _parse(text: str, units: dict[str, float], expected: str) -> float:
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z]+)\s*", text)
    if not match or match.group(2).lower() not in units:
        raise ValueError(f"expected {expected}, got {text!r}")
    value = float(match.group(1)) * units[match.group(2).lower()]
    if value <= 0:
        raise ValueError(f"expected {expected} greater than zero, got {text!r}")
    return value
