"""tacc's BPF DCTCP (crates/tacc-agent/bpf/dctcp.bpf.c) for kernels without the dctcp module:
registered with bpftool as the congestion control "dctcp" for the length of a run, so that
the VMs' sockets select it as they would the module. Registration is global to the machine
(congestion controls are not per namespace); the run that registered it unregisters it, and
`tacc testbed --cleanup` does when a killed run could not.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import tacc

STRUCT_OPS = "tacc_dctcp"  # the struct_ops map's name in the object
GLOBALS = "dctcp.bss"  # the map of the object's globals


def problem() -> str | None:
    """Why the BPF DCTCP cannot be had here, or None."""
    try:
        engine = tacc._engine()
    except tacc.EngineUnavailableError as exc:
        return str(exc)
    obj = getattr(engine, "dctcp_object", None)
    if obj is None or not obj():
        return "tacc was built without its BPF DCTCP (no bpftool or kernel BTF at build time)"
    if shutil.which("bpftool") is None:
        return "bpftool: not found on PATH (Debian package bpftool)"
    return None


def register(workdir: Path) -> None:
    """Registers the BPF DCTCP; raises OSError with bpftool's message if the kernel refuses."""
    obj = workdir / "dctcp.bpf.o"
    obj.write_bytes(tacc._engine().dctcp_object())
    done = subprocess.run(["bpftool", "struct_ops", "register", str(obj)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise OSError(f"registering the BPF DCTCP: {done.stderr.strip() or done.stdout.strip()}")


def registered() -> bool:
    if shutil.which("bpftool") is None:
        return False
    done = subprocess.run(["bpftool", "struct_ops", "show", "name", STRUCT_OPS],
                          capture_output=True, text=True)
    return done.returncode == 0 and STRUCT_OPS in done.stdout


def repairs() -> int | None:
    """How many impossible ssthresh or cwnd values the registered BPF DCTCP found and
    repaired since it was registered (dctcp.bpf.c says why), or None if it is not."""
    done = subprocess.run(["bpftool", "-j", "map", "dump", "name", GLOBALS],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return None
    try:
        return sum(g["repairs"] for m in json.loads(done.stdout)
                   for g in m["formatted"]["value"][".bss"])
    except (ValueError, KeyError, TypeError):
        return None


def unregister() -> list[str]:
    """Unregisters it if it is registered; returns what went wrong."""
    if not registered():
        return []
    done = subprocess.run(["bpftool", "struct_ops", "unregister", "name", STRUCT_OPS],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return [f"unregistering the BPF DCTCP: {done.stderr.strip()}"]
    return []
