"""What a testbed run needs of the machine, checked before anything is built: root, the
tools, network namespaces, the qdiscs (htb, bfifo, clsact), the BPF filesystem, the
congestion controls the scenario's flows use, and the agent. Every missing item is
reported at once (TestbedUnavailable); what only lowers fidelity is recorded.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import tacc
from tacc.testbed import TestbedError, TestbedUnavailable, dctcp, shell
from tacc.testbed.plan import linux_cc
from tacc.testbed.topology import BPFFS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tacc.testbed.plan import Plan

TOOLS = {"ip": "iproute2", "tc": "iproute2", "nstat": "iproute2", "ethtool": "ethtool",
         "ping": "iputils-ping", "sysctl": "procps", "mount": "mount"}
AVAILABLE_CC = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
# What runs a congestion control the kernel lacks, with --keep-going: its nearest relative.
SUBSTITUTES = {"dctcp": "reno"}
WHY_MISSING = {"dctcp": "no dctcp module"}


@dataclass(frozen=True)
class Features:
    """What the machine offers a run: the kernel and the Linux congestion control each
    scenario congestion control runs as."""

    kernel: str
    cc: dict[str, str]
    notes: list[str] = field(default_factory=list)
    # The scenario's DCTCP runs as tacc's BPF DCTCP, registered for the run.
    bpf_dctcp: bool = False


def check(plan: Plan, probe_ns: str, keep_going: bool = False) -> Features:
    """Every check; raises TestbedUnavailable with one line per missing item. With
    `keep_going`, a missing congestion control runs as its nearest relative (recorded in
    `notes`) instead."""
    missing = host_problems(probe_ns)
    cc, cc_missing, notes, bpf_dctcp = _congestion_controls(plan, keep_going)
    missing += cc_missing + agent_problems()
    if missing:
        raise TestbedUnavailable(missing)
    return Features(kernel=platform.release(), cc=cc, notes=notes,
                    bpf_dctcp=bpf_dctcp)


def agent_problems() -> list[str]:
    """Every run starts a switch agent in each switch (ECN marking, port counters): its
    module, and the engine built with its eBPF programs."""
    if importlib.util.find_spec("tacc.testbed.agent") is None:
        return ["agent: the module tacc.testbed.agent (the host and switch agent) is not "
                "installed"]
    try:
        engine = tacc._engine()
    except tacc.EngineUnavailableError as exc:
        return [f"agent: {exc}"]
    available = getattr(engine, "agent_available", None)
    if available is None:
        return ["agent: the compiled engine has no agent (built before the testbed)"]
    if not available():
        return ["agent: tacc was built without its eBPF programs (clang was missing)"]
    return []


def host_problems(probe_ns: str) -> list[str]:
    """What the machine lacks whatever the scenario."""
    missing = [
        f"{tool}: not found on PATH (Debian package {package})"
        for tool, package in TOOLS.items()
        if shutil.which(tool) is None
    ]
    if os.geteuid() != 0:
        # Namespaces, qdiscs and mounts all need root: their checks would only repeat it.
        return [*missing, "not root: namespaces, qdiscs and the BPF filesystem need euid 0"]
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return missing
    try:
        missing += _probe(probe_ns)
    finally:
        subprocess.run(["ip", "netns", "del", probe_ns], capture_output=True)
    return missing + _bpffs()


def _probe(ns: str) -> list[str]:
    """Builds one port's queues (as topology does) on a veth in a throwaway namespace."""
    try:
        shell.run(["ip", "netns", "add", ns])
    except TestbedError as exc:
        return [f"network namespaces: {exc}"]
    try:
        shell.run(["ip", "-n", ns, "link", "add", "name", "tb0", "type", "veth",
                   "peer", "name", "tb1"])
    except TestbedError as exc:
        return [f"veth: {exc}"]
    steps = {
        "qdisc htb (with a size table)":
            "qdisc add dev tb0 root handle 1: stab overhead -14 htb default 2",
        "htb classes": "class add dev tb0 parent 1: classid 1:1 htb rate 10mbit quantum 1514",
        "qdisc bfifo": "qdisc add dev tb0 parent 1:1 handle 2: bfifo limit 15000",
        "qdisc clsact": "qdisc add dev tb0 clsact",
    }
    problems = []
    for what, command in steps.items():
        said = _tc_works(ns, command)
        if said is not None:
            problems.append(f"{what}: {said}")
            break  # each step builds on the one before
    return problems


def _tc_works(ns: str, command: str) -> str | None:
    """None when `tc COMMAND` succeeds in `ns`, else what it said."""
    try:
        shell.run(["tc", "-n", ns, *command.split()])
    except TestbedError as exc:
        return str(exc)
    return None


def _bpffs() -> list[str]:
    """Mounts the BPF filesystem at /sys/fs/bpf unless it is there already."""
    mounts = Path("/proc/self/mounts").read_text(encoding="utf-8").splitlines()
    if any(line.split()[1:3] == [str(BPFFS), "bpf"] for line in mounts if line.strip()):
        return []
    try:
        shell.run(["mount", "-t", "bpf", "bpf", str(BPFFS)])
    except TestbedError as exc:
        return [f"bpffs: {BPFFS} is not mounted and mounting it failed: {exc}"]
    return []


def _congestion_controls(plan: Plan, keep_going: bool
                         ) -> tuple[dict[str, str], list[str], list[str], bool]:
    """(scenario cc -> Linux cc, missing items, notes, whether the BPF DCTCP stands in for
    the module) for the scenario's TCP flows."""
    try:
        available = set(AVAILABLE_CC.read_text(encoding="utf-8").split())
    except OSError as exc:
        return {}, [f"congestion controls: cannot read {AVAILABLE_CC}: {exc.strerror}"], [], False
    users: dict[str, list[str]] = {}
    for flow in plan["flows"]:
        if flow["transport"] == "tcp":
            users.setdefault(flow["cc"], []).append(flow["name"])
    chosen, missing, notes, bpf_dctcp = {}, [], [], False
    for cc, flows in sorted(users.items()):
        linux = linux_cc(cc)
        if linux in available:
            chosen[cc] = linux
            continue
        why = WHY_MISSING.get(cc, f"the kernel offers {', '.join(sorted(available))}")
        if cc == "dctcp":
            unavailable = dctcp.problem()
            if unavailable is None:
                chosen[cc], bpf_dctcp = "dctcp", True
                notes.append("dctcp: the kernel has no dctcp module; tacc's BPF DCTCP "
                             "(struct_ops) ran instead")
                continue
            why += f", and {unavailable}"
        substitute = SUBSTITUTES.get(cc, "cubic")
        if keep_going and substitute in available:
            chosen[cc] = substitute
            notes.append(f"{cc} missing ({why}): flows {', '.join(flows)} ran {substitute}")
        else:
            hint = f"; --keep-going runs them as {substitute}" if substitute in available else ""
            missing.append(f"congestion control {cc} (flows {', '.join(flows)}): {why}{hint}")
    return chosen, missing, notes, bpf_dctcp
