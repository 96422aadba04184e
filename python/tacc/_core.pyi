"""Typed stub of the compiled engine (Rust, built by maturin from crates/tacc-py)."""

from collections.abc import Callable
from typing import Any, TypedDict

FIRST_PORT: int
"""A VM's first source port; a run allocates them per VM upward from here."""
TCP_DPORT: int
"""Every TCP flow's sink port."""
PCAP_SNAPLEN: int
"""Bytes kept of each captured packet (its headers with their options)."""

class ScenarioError(ValueError):
    """Bad scenario input; the message has one line per error, e.g.
    ``scenarios/x.toml:12: flows[1].rate: expected a rate such as "1Gbps", got "fast"``."""

class _ScenarioInfo(TypedDict):
    name: str
    duration_s: float
    hosts: int
    switches: int
    links: int
    flows: int
    topology: str

def run(
    path: str,
    *,
    seed: int | None = None,
    sets: list[tuple[str, str]] = ...,
    out: str,
    progress: Callable[[int, int], object] | None = None,
    threads: int | None = None,
    partitions: int | None = None,
) -> str:
    """Load the scenario at `path`, apply `sets` overrides (dotted key, TOML literal
    or bare string), run it and write the result directory `out`; returns `out`.

    `progress(now_ns, end_ns)` is called every 2^20 events (a partitioned run: every 1% of
    the simulated time) and once at the end, with the simulated time reached and the run's
    end. The first exception it raises stops the calls and is raised when the run is over
    (the run itself goes on to the end). `threads` (default: the machine's cores) run the
    scenario's partitions, at most `partitions` of them (default: 2 on a fabric of 1,024
    hosts or more); the threads never change what is written."""

def keys(name: str | None = None) -> list[dict[str, Any]]:
    """The documented scenario tables `name` picks ("tcp", "tcp.rto_min", "mechanism.sicc"),
    every table when None: dicts of table, tag, array, doc and keys (key, unit, default, range,
    doc)."""

def validate(path: str, *, sets: list[tuple[str, str]] = ...) -> _ScenarioInfo:
    """Check the scenario as `run` would, without running it."""

def plan(
    path: str,
    *,
    seed: int | None = None,
    sets: list[tuple[str, str]] = ...,
) -> str:
    """The scenario's built world as JSON (`tacc_mech::plan::Plan`): what `tacc testbed`
    builds from namespaces and veths, and what its agents build the mechanism from."""

class _WorkloadFlow(TypedDict):
    name: str
    group: str
    src_vm: int
    dst_vm: int
    bytes: int
    start_ns: int
    cc: str
    ecn: bool
    src_port: int
    dst_port: int
    ports: list[int]

def workload(
    path: str, *, seed: int | None = None, sets: list[tuple[str, str]] = ...
) -> list[_WorkloadFlow]:
    """The scenario's open-loop (`[[traffic]]`) flows in start order, drawn without running it:
    endpoints (indices of the plan's `vms`), size, start and the ports (indices of the plan's
    `ports`) the data packets cross, source NIC first, routed as the engine routes them (ECMP
    included). Each source draws from its own random stream, as in a run: these are the flows a
    run of the scenario with the same seed carries."""

def agent_run(role: str, config: str) -> None:
    """Run a testbed agent ("host" or "switch") with its JSON configuration until the
    process is killed; OSError if it cannot start."""

def controller_config(text: str, file: str, *, keys: bool = True,
                      switch: str | None = None) -> str:
    """`tacc controller --config`: the fabric config `text` checked (ScenarioError, one line
    per mistake, naming `file`), as the JSON the controller daemon runs with: the fabric's
    plan, its listening addresses, the hosts' keys (hex; `keys=False` leaves the key files
    unread but for switch `switch`'s stats key), the switches' datapath ids, OpenFlow port
    numbers and stats sockets (`stats`, with `stats_key` over UDP)."""

def agent_available() -> bool:
    """True if this build carries the testbed's eBPF programs (clang was there)."""

def dctcp_object() -> bytes:
    """The BPF DCTCP (struct_ops "dctcp") as an object file for bpftool; empty if this build
    could not compile it (no bpftool or kernel BTF at build time)."""

def version() -> str: ...

class Controller:
    """The controller side of a plan's mechanism (`tacc_mech::controller::Controller`): the
    mechanism's controller app and the switch hooks that select packet-ins, built from the
    plan's JSON as the simulator builds them. Every message in and out is the JSON of a
    `tacc_mech::control` type (`ControlMessage`, `FlowMod`, `StatsReply`)."""

    def __init__(self, plan: str) -> None: ...
    def has_app(self) -> bool:
        """False when the plan's mechanism has no controller app."""
    def has_hook(self, switch: int) -> bool:
        """True if the mechanism has a hook in `switch`: show it every flow's first packet."""
    def initial_rules(self, switch: int, port_copies: bool = False) -> list[str]:
        """The `FlowMod`s `switch` gets when it connects (SICC's SYN/FIN copy rules); with
        `port_copies`, less the copy rules that match TCP flags only, whose copies the
        switch agent's port programs make and report instead."""
    @property
    def latency_ns(self) -> int:
        """The scenario's one-way control latency (`latency` of the mechanism table)."""
    def packet_in(
        self, now_ns: int, switch: int, in_port: int, out_port: int | None, packet: bytes
    ) -> list[str]:
        """A packet from `switch` (from its IPv4 header on): a table miss (`out_port` None;
        the switch's hook decides whether the app hears of it) or a copy rule's copy
        (`out_port` where it is forwarded). Returns the `ControlMessage`s to send; ValueError
        if `packet` is not an IPv4 packet."""
    def stats_reply(self, now_ns: int, reply: str) -> list[str]: ...
    def timer(self, now_ns: int) -> list[str]:
        """The app's timer (statistics requests, expiries); call it at `poll_at`."""
    def poll_at(self) -> int | None: ...
    def route_port(
        self, switch: int, src: int, dst: int, protocol: int, sport: int, dport: int
    ) -> int | None:
        """The plan port `switch` sends this 5-tuple out of: among a route's equal ports,
        the one the engine's ECMP hash picks; None without a route."""

def capture_files(ports: list[str]) -> list[str]:
    """The capture file of each port named, as the engine names them: `sw0->r0` gives
    `sw0-to-r0.pcapng` (a name taken already gets a number)."""

def pcap_to_pcapng(src: str, dst: str, port: str) -> tuple[int, bool]:
    """Rewrites tcpdump's pcap file `src` as `dst` in the engine's capture format (pcapng,
    the interface named `port`); returns the number of packets and whether `src` ended
    inside a record (the packets before it kept). OSError or ValueError if it cannot."""
