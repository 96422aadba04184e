"""`tacc agent --config host.toml` runs the host agent as a daemon on a hypervisor (the
agent itself is Rust: crates/tacc-agent/src/daemon.rs); `tacc agent status` prints what a
running agent has attached and in force, from the status file it rewrites every second.

Exit status: 0 (the agent stopped on SIGTERM, SIGINT or SIGHUP, or status found it running),
2 a config error (one `tacc: error: FILE:LINE: key: ...` line each), 3 the agent failed while
running, or status found no agent running.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

DEFAULT_STATE_DIR = Path("/run/tacc-agent")


class AgentError(RuntimeError):
    """The agent could not run, or no agent runs (exit status 3)."""


def run(config: Path, *, check: bool = False) -> None:
    """Reads `config` and runs the agent until it is stopped (or only checks the config)."""
    from tacc import _core

    text = config.read_text(encoding="utf-8")
    if not check and os.geteuid() != 0:
        raise AgentError("the agent attaches eBPF programs and qdiscs: run it as root")
    try:
        _core.agent_daemon(text, str(config), check=check)
    except OSError as exc:  # a config error is a ScenarioError (a ValueError): exit status 2
        raise AgentError(f"agent: {exc}") from exc


def read_status(state_dir: Path) -> dict[str, Any]:
    """The running agent's status; AgentError if none runs with `state_dir`."""
    pid_file, status_file = state_dir / "agent.pid", state_dir / "status.json"
    try:
        pid = int(pid_file.read_text(encoding="utf-8").strip())
        os.kill(pid, 0)
        status: dict[str, Any] = json.loads(status_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AgentError(f"no tacc agent runs with state directory {state_dir}") from exc
    return status


def format_status(s: dict[str, Any]) -> str:
    lines = [f"tacc agent {s['name']} (pid {s['pid']}, up {s['uptime_s']:.0f} s): "
             f"{s['mechanism']} on {s['uplink']} at {s['uplink_rate_mbps']:g} Mb/s",
             f"programs on: {s['uplink']} (uplink), " + (", ".join(s["ports"]) or "no VM port")]
    vms = s["vms"]
    lines.append(f"VMs ({len(vms)}):" if vms else "VMs: none known yet (a VM's address is "
                 "learned when it sends)")
    width = max((len(v["name"]) for v in vms), default=0)
    for v in vms:
        how = "learned" if v["learned"] else "given"
        lines.append(f"  {v['name']:<{width}}  {v['port']:<15} {v['address']:<15} {how}")
    rates = s["rates"]
    if rates:
        lines.append(f"rates in force ({len(rates)}):")
        for vm, dst, mbps in rates:
            lines.append(f"  {vm} -> {dst}: {mbps:.1f} Mb/s")
    controller = {"up": "up", "down": "down: the last rates are kept (fail-static)",
                  "open": "down for longer than fail_static: limits lifted (fail-open)"}
    if s["controller"] != "none":
        lines.append(f"controller: {controller[s['controller']]}")
    if s["resumed"]:
        lines.append("maps: taken over from an agent that stopped without SIGTERM")
    lines.append("capabilities kept: " + ", ".join(s["capabilities"]))
    counters = {k: v for k, v in s["counters"].items() if v}
    if counters:
        lines.append("counters: " + ", ".join(f"{k} {v:g}" for k, v in counters.items()))
    return "\n".join(lines)


def state_dir_of(config: Path) -> Path:
    """The state directory a host config gives (the default if it gives none)."""
    import tomllib

    try:
        value = tomllib.loads(config.read_text(encoding="utf-8")).get("state_dir")
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise AgentError(f"{config}: {exc}") from exc
    return Path(value) if isinstance(value, str) else DEFAULT_STATE_DIR
