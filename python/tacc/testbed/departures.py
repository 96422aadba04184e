"""Scenario keys the testbed does not honour, key by key.

`tacc testbed` refuses a scenario file that sets one (one `tacc: error: FILE:LINE: KEY:
REASON` line each, exit status 2), unless `--approximate`, which runs it anyway and lists
each departure in summary.json's `testbed.not_emulated`. Only keys the file (or a `--set`)
writes are judged: what a scenario leaves at its default and Linux does its own way (its
delayed ACKs, PRR) is recorded in `not_emulated` by `plan.plan_notes` without refusing,
as are departures that change only the result files (`output_only`).

Left to the checks on the plan (plan.check_plan, plan_notes, vm_tcp_ecn): what depends on
the built world rather than on keys, such as TCP flows of one VM that disagree on ECN.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tacc.testbed.plan import parse_seconds

Given = Mapping[str, object]


@dataclass(frozen=True)
class Departure:
    """A key (or a table) the testbed does not honour, for all values or some."""

    pattern: str  # dotted path, "[]" for any index; a table's path covers every key in it
    test: Callable[[object], bool] | None  # on the key's value; None: any value departs
    reason: str
    when: Callable[[Given], bool] | None = None  # on every key of the file (cross-key cases)
    output_only: bool = False  # only the result files differ, not what the network does


# ----------------------------------------------------------------------------- values

_SIZES = {"B": 1, "KB": 1e3, "kB": 1e3, "MB": 1e6, "GB": 1e9,
          "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
_SIZE = re.compile(r"\s*([0-9.]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*")


def _ns(value: object) -> float | None:
    """A time ("25us") in ns, or None if the value is not one."""
    try:
        return parse_seconds(value) * 1e9 if isinstance(value, str) else None
    except ValueError:
        return None


def _bytes(value: object) -> float | None:
    """A size ("1460B", "64KB") in bytes, or None if the value is not one."""
    m = _SIZE.fullmatch(value) if isinstance(value, str) else None
    if m is None or m.group(2) not in _SIZES:
        return None
    try:
        return float(m.group(1)) * _SIZES[m.group(2)]
    except ValueError:
        return None


def _is(expected: object) -> Callable[[object], bool]:
    return lambda v: v == expected


def _time_not(ns: float) -> Callable[[object], bool]:
    return lambda v: (t := _ns(v)) is not None and t != ns


# ------------------------------------------------------------------------- cross-key

_FLOW_KEY = re.compile(r"flows\[(\d+)\]\.(\w+)")


def _tcp_flows(given: Given) -> list[tuple[str, bool]]:
    """(congestion control, ECN) of each TCP flow listed, as the engine resolves them."""
    flows: dict[str, dict[str, object]] = {}
    for key, value in given.items():
        if m := _FLOW_KEY.fullmatch(key):
            flows.setdefault(m.group(1), {})[m.group(2)] = value
    out = []
    for f in flows.values():
        if f.get("transport", "tcp") != "tcp":
            continue
        cc = str(f.get("cc", given.get("tcp.cc", "newreno")))
        out.append((cc, cc == "dctcp" or bool(f.get("ecn", given.get("tcp.ecn", False)))))
    return out


def _plain_ecn_flows(given: Given) -> bool:
    """Some TCP flow uses ECN without DCTCP (DCTCP's SYNs and retransmissions are ECT on
    Linux and in the engine alike)."""
    return any(ecn and cc != "dctcp" for cc, ecn in _tcp_flows(given))


def _dctcp_flows(given: Given) -> bool:
    return any(cc == "dctcp" for cc, _ in _tcp_flows(given))


def _red_used(given: Given) -> bool:
    return any(v == "red" for k, v in given.items()
               if k == "queue.kind" or re.fullmatch(r"queue\.overrides\[\d+\]\.kind", k))


# ----------------------------------------------------------------------------- table

_RED = "classic RED runs as drop-tail on the testbed; its parameters are not used"

DEPARTURES: list[Departure] = [
    # [queue]
    Departure("queue.kind", _is("red"), "classic RED runs as drop-tail at the queue's limit"),
    Departure("queue.overrides[].kind", _is("red"),
              "classic RED runs as drop-tail at the queue's limit"),
    *(Departure(f"queue.{k}", None, _RED, when=_red_used)
      for k in ("min_th", "max_th", "max_p", "weight", "ecn")),
    # [nic]
    Departure("nic.jitter", None, "no transmit jitter is added on the testbed (the hosts' "
              "timing noise is the kernel's own)"),
    # [tcp]
    Departure("tcp.mss", lambda v: (b := _bytes(v)) is not None and b > 1460,
              "the veths' MTU is 1500 B: Linux's MSS is at most 1460 B"),
    Departure("tcp.rto_min", lambda v: (t := _ns(v)) is not None and (t < 1e6 or t % 1e6 != 0),
              "Linux takes rto_min in whole milliseconds, at least 1ms"),
    Departure("tcp.rto_init", _time_not(1e9), "Linux's initial RTO is 1s, not set"),
    Departure("tcp.delayed_ack", _is(False), "Linux delays ACKs its own way (quick-ack, then "
              "every second full segment), it does not ACK every segment"),
    Departure("tcp.delack_timeout", None, "Linux's delayed-ACK timer is its own (40-200 ms, "
              "adaptive), not set", when=lambda g: g.get("tcp.delayed_ack") is True),
    Departure("tcp.ecn_syn", _is(True), "Linux sends SYNs Not-ECT (but for DCTCP)",
              when=_plain_ecn_flows),
    Departure("tcp.ecn_retransmit", _is(True),
              "Linux sends retransmissions Not-ECT (but for DCTCP)", when=_plain_ecn_flows),
    Departure("tcp.cwnd_validation", _is(False), "Linux always grows the window only while "
              "it is cwnd-limited"),
    Departure("tcp.prr", _is(False), "Linux always uses proportional rate reduction "
              "(RFC 6937)"),
    Departure("tcp.profile", _is("classic"), "Linux's TCP is Linux's: RACK-TLP, D-SACK, "
              "quick-ACK, its RTO, HyStart, Minshall's rule and half-window segments, not the "
              "classic profile's"),
    Departure("tcp.rack", _is(False), "Linux always detects losses with RACK (RFC 8985)"),
    Departure("tcp.tlp", _is(False), "Linux always sends tail loss probes (RFC 8985)"),
    Departure("tcp.dsack", _is(False), "Linux receivers always send D-SACKs (RFC 2883)"),
    Departure("tcp.quickack", _is(False), "Linux ACKs a connection's first segments at once "
              "(quick-ACK)"),
    Departure("tcp.rto_formula", _is("rfc6298"), "Linux computes its RTO its own way "
              "(SRTT + max(4 RTTVAR, rto_min))"),
    Departure("tcp.hystart", _is(False), "Linux's Cubic ends slow start by HyStart",
              when=lambda g: any(cc == "cubic" for cc, _ in _tcp_flows(g))),
    Departure("tcp.cubic_clamp", _is(False), "Linux's Cubic grows by at least a segment per "
              "20 acknowledged before its first loss",
              when=lambda g: any(cc == "cubic" for cc, _ in _tcp_flows(g))),
    Departure("tcp.minshall", _is(False), "Linux sends a segment cut short by the window "
              "unless a short one is unacknowledged (Nagle with Minshall's rule)"),
    Departure("tcp.half_window", _is(False), "Linux bounds a segment to half the largest "
              "window the peer has advertised"),
    Departure("tcp.timestamps", _is(False), "Linux's connections carry timestamps and take "
              "an RTT from every ACK's"),
    Departure("tcp.dupthresh", lambda v: v != 3, "Linux's duplicate-ACK threshold is 3 "
              "(tcp_reordering), with RACK's time-based loss detection, not set"),
    Departure("tcp.dctcp_g", lambda v: isinstance(v, (int, float)) and abs(v - 1 / 16) > 1e-12,
              "Linux's DCTCP (module and tacc's BPF one) has g = 1/16", when=_dctcp_flows),
    Departure("tcp.small_queue", _time_not(1e6), "Linux's TCP small queues are its own "
              "(about 1 ms of the pacing rate), and a VM's veth has no queue"),
    # [[flows]]
    Departure("flows[].packet_size", lambda v: (b := _bytes(v)) is not None and b > 1500,
              "datagrams above the veths' 1500 B MTU leave as IP fragments"),
    Departure("flows[].on", None, "on/off sources are not emulated: the source sends at its "
              "rate throughout"),
    Departure("flows[].off", None, "on/off sources are not emulated: the source sends at its "
              "rate throughout"),
    Departure("flows[].reply_size", None, "request/reply is not emulated: no replies are sent"),
    Departure("flows[].drop_segments", lambda v: bool(v),
              "scripted segment drops are not emulated"),
    Departure("flows[].return_delay", None,
              "the ACK shortcut is not emulated: ACKs cross the network"),
    Departure("flows[].forge", None, "the testbed's sockets cannot forge a shim's signals"),
    Departure("flows[].spoof", None, "the testbed's sockets cannot spoof their source"),
    # Whole tables
    Departure("rules[]", None, "scenario flow-table rules are not installed on the testbed"),
    Departure("loss[]", None, "random loss on links is not emulated (no netem)"),
    # [output]
    Departure("output.queue_sample", lambda v: (t := _ns(v)) is not None and t < 1e8,
              "queues.csv is sampled every 100ms at most often", output_only=True),
    Departure("output.pcap_dropped", lambda v: v is True, "a testbed capture holds what a "
              "port sent: the packets its queue dropped are not in it", output_only=True),
    # [mechanism]
    Departure("mechanism.keying", _is("path"), "the host datapath keys rates by destination: "
              "per-path notifications are ignored and rates never cut"),
    Departure("mechanism.mode", _is("switch"), "SICC's in-switch mode is not on the testbed"),
]


# -------------------------------------------------------------------------- matching

_STEP = re.compile(r"\[\d*\]|[^.\[\]]+")


def _steps(path: str) -> list[str]:
    return _STEP.findall(path)


def _joined(steps: Iterable[str]) -> str:
    out = ""
    for s in steps:
        out += s if s.startswith("[") or not out else "." + s
    return out


def _prefix(key: str, pattern: str) -> str | None:
    """The part of `key` that `pattern` names (all of it, or the table holding it), or None."""
    ks, ps = _steps(key), _steps(pattern)
    if len(ks) < len(ps):
        return None
    for k, p in zip(ks, ps):
        if k != p and not (p == "[]" and k.startswith("[")):
            return None
    return _joined(ks[: len(ps)])


def departures(given: list[tuple[str, object, str]]) -> list[tuple[str, Departure]]:
    """(where, "KEY: REASON") of every key of `given` (key, value, where it is set) that the
    testbed does not honour, in the order given, with the entry that matched; a table the
    testbed ignores as a whole gives one message per element."""
    values = {key: value for key, value, _ in given}
    out: list[tuple[str, Departure]] = []
    seen: set[tuple[int, str]] = set()
    for key, value, where in given:
        for i, d in enumerate(DEPARTURES):
            named = _prefix(key, d.pattern)
            if named is None or (i, named) in seen:
                continue
            if named == key and d.test is not None and not d.test(value):
                continue
            if d.when is not None and not d.when(values):
                continue
            seen.add((i, named))
            out.append((f"{where}: {named}: {d.reason}", d))
    return out


def flatten(table: Mapping[str, object], path: str = "") -> list[tuple[str, object, int | None]]:
    """A parsed scenario's keys as `given` (no lines): tables and lists of tables are
    opened, lists of values are one key."""
    out: list[tuple[str, object, int | None]] = []
    for key, value in table.items():
        here = f"{path}.{key}" if path else key
        if isinstance(value, Mapping):
            out += flatten(value, here)
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            for i, item in enumerate(value):
                out += flatten(item, f"{here}[{i}]")
        else:
            out.append((here, value, None))
    return out


def scenario_departures(scenario: Path, sets: Sequence[tuple[str, str]] = ()
                        ) -> list[tuple[str, Departure]]:
    """The departures of a scenario file with its `--set` overrides (each replaces the value
    at its key, as the engine applies it): where each is set ("FILE:LINE" or "--set KEY")
    and why, in the file's order, then the overrides'."""
    import tomllib

    import tacc

    text = scenario.read_text(encoding="utf-8")
    locate = getattr(tacc._engine(), "locate", None)
    keys: dict[str, tuple[object, str]] = {}
    for key, value, _ in flatten(tomllib.loads(text)):
        line = locate(text, key) if locate is not None else None
        keys[key] = (value, f"{scenario}:{line if line is not None else '?'}")
    for key, raw in sets:
        for old in [k for k in keys if k == key or k.startswith((key + ".", key + "["))]:
            del keys[old]
        try:
            value: object = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw  # a bare string, as the engine reads it
        opened = flatten(value, key) if isinstance(value, Mapping) else [(key, value, None)]
        for k, v, _ in opened:
            keys[k] = (v, f"--set {key}")
    return departures([(k, v, where) for k, (v, where) in keys.items()])
