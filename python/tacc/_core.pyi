"""Typed stub of the compiled engine (Rust, built by maturin from crates/tacc-py)."""

from collections.abc import Callable
from typing import TypedDict

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

def run(
    path: str,
    *,
    seed: int | None = None,
    sets: list[tuple[str, str]] = ...,
    out: str,
    progress: Callable[[int, int], object] | None = None,
) -> str:
    """Load the scenario at `path`, apply `sets` overrides (dotted key, TOML literal
    or bare string), run it and write the result directory `out`; returns `out`.

    `progress(now_ns, end_ns)` is called every 2^20 events and once at the end, with the
    simulated time reached and the run's end. The first exception it raises stops the
    calls and is raised when the run is over (the run itself goes on to the end)."""

def validate(path: str, *, sets: list[tuple[str, str]] = ...) -> _ScenarioInfo:
    """Check the scenario as `run` would, without running it."""

def plan(path: str, *, seed: int | None = None, sets: list[tuple[str, str]] = ...) -> str:
    """The scenario's built world as JSON (`tacc_mech::plan::Plan`): what `tacc testbed`
    builds from namespaces and veths, and what its agents build the mechanism from."""

def agent_run(role: str, config: str) -> None:
    """Run a testbed agent ("host" or "switch") with its JSON configuration until the
    process is killed; OSError if it cannot start."""

def agent_available() -> bool:
    """True if this build carries the testbed's eBPF programs (clang was there)."""

def dctcp_object() -> bytes:
    """The BPF DCTCP (struct_ops "dctcp") as an object file for bpftool; empty if this build
    could not compile it (no bpftool or kernel BTF at build time)."""

def version() -> str: ...
