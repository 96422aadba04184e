"""Synthetic result directories in the engine's output format, written with the result writer
the testbed uses (tacc.results.write_table)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tacc.results import write_table

FLOW_FIELDS = [
    "name", "group", "src", "dst", "transport", "cc", "ecn", "bytes_delivered",
    "start", "end", "fct", "goodput_mbps", "completed", "retransmits", "timeouts",
]
BIN_S = 0.001
BINS = 10

PORTS = [
    {"name": "sw0->r0", "rate_bps": 1_000_000_000, "enqueued": 9000, "dropped": 3,
     "marked": 5, "max_backlog_pkts": 40, "mean_backlog_pkts": 12.5, "utilization": 0.93},
    {"name": "sw0->s0", "rate_bps": 1_000_000_000, "enqueued": 300, "dropped": 0,
     "marked": 0, "max_backlog_pkts": 2, "mean_backlog_pkts": 0.1, "utilization": 0.02},
    {"name": "idle->port", "rate_bps": 1_000_000_000, "enqueued": 0, "dropped": 0,
     "marked": 0, "max_backlog_pkts": 0, "mean_backlog_pkts": 0.0, "utilization": 0.0},
]


def _flow(i: int, n_flows: int) -> dict[str, Any]:
    """Even flows are "bulk" TCP; odd are "mice" UDP; the last never finishes."""
    finished = i < n_flows - 1
    start = i * 1e-4
    fct = 0.005 + i * 1e-4 if finished else None
    return {
        "name": f"f{i}", "group": "bulk" if i % 2 == 0 else "mice",
        "src": f"s{i}", "dst": "r0",
        "transport": "tcp" if i % 2 == 0 else "udp",
        "cc": "dctcp" if i % 2 == 0 else None, "ecn": i % 2 == 0,
        "bytes_delivered": 125_000 * (i + 1), "start": start,
        "end": start + fct if finished else None, "fct": fct,
        "goodput_mbps": 100.0 + i, "completed": finished,
        "retransmits": i, "timeouts": 0,
    }


def write_result_dir(
    root: Path, n_flows: int = 3, with_rates: bool = False, with_samples: bool = True
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    flows = [_flow(i, n_flows) for i in range(n_flows)]
    summary = {
        "tacc_version": "0.1.0", "scenario": "synthetic", "scenario_file": "synthetic.toml",
        "seed": 42, "sim_seconds": BIN_S * BINS, "wall_seconds": 0.5, "events": 123_456,
        "goodput_bin_s": BIN_S, "queue_sample_s": BIN_S,
        "flows": flows, "ports": PORTS,
        "conservation": {"sent": 1010, "delivered": 1000, "dropped": 3, "in_flight": 7, "ok": True},
    }
    (root / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    write_table(root / "flows.csv", FLOW_FIELDS, [[f[k] for k in FLOW_FIELDS] for f in flows])
    times = [round(b * BIN_S, 6) for b in range(BINS)] if with_samples else []
    write_table(root / "goodput.csv", ["time_s", "flow", "goodput_mbps"],
               [[t, f["name"], f["goodput_mbps"]] for t in times for f in flows])
    write_table(root / "queues.csv", ["time_s", "port", "backlog_pkts", "backlog_bytes"],
               [[t, p["name"], b % 7, (b % 7) * 1500]
                for b, t in enumerate(times) for p in PORTS])
    if with_rates:
        write_table(root / "rates.csv", ["time_s", "vm", "rate_mbps"],
                   [[t, vm, 500.0] for t in times for vm in ("vm0", "vm1")])
    return root


@pytest.fixture
def write_result() -> Callable[..., Path]:
    """write_result(root, n_flows=3, ...) -> root, for code that picks its own directory."""
    return write_result_dir


@pytest.fixture
def make_result_dir(tmp_path: Path) -> Callable[..., Path]:
    """make_result_dir(n_flows=3, with_rates=False, with_samples=True) -> a new result dir."""
    made = 0

    def make(**kwargs: Any) -> Path:
        nonlocal made
        made += 1
        return write_result_dir(tmp_path / f"result{made}", **kwargs)

    return make


@pytest.fixture
def result_dir(make_result_dir: Callable[..., Path]) -> Path:
    return make_result_dir()


SKIP_ENGINE_ENV = "TACC_SKIP_ENGINE"


def tacc_root() -> str:
    """The folder this tacc is imported from (site-packages or the source tree's python/)."""
    import tacc

    return str(Path(tacc.__file__).resolve().parents[1])


def child_env() -> dict[str, str]:
    """The environment of a child Python, which must import this same tacc."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [tacc_root(), env.get("PYTHONPATH")]))
    return env


def run_python(code: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`code` run by a fresh interpreter that imports this same tacc; its output kept."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=child_env(), cwd=cwd, timeout=300)


@pytest.fixture
def pythonpath_without_ray(tmp_path: Path) -> str:
    """A PYTHONPATH under which a child `tacc` cannot import ray, as on a machine without it
    (`make setup` installs it): a package of that name that raises ImportError, ahead of
    tacc's own tree."""
    shadow = tmp_path / "no-ray"
    (shadow / "ray").mkdir(parents=True)
    (shadow / "ray" / "__init__.py").write_text("raise ImportError('no ray')\n")
    return os.pathsep.join([str(shadow), tacc_root()])


@pytest.fixture
def engine() -> None:
    """Tests that run the compiled engine: failed when tacc._core cannot be imported, so
    that a missing or broken build never passes as a skip; skipped instead only when the
    developer asks with TACC_SKIP_ENGINE=1. (TACC_REQUIRE_ENGINE=1, which `make test` sets,
    fails them whatever TACC_SKIP_ENGINE says.)"""
    try:
        import tacc._core  # noqa: F401
        return
    except ImportError as exc:
        problem = f"the compiled engine tacc._core cannot be imported ({exc})"
    # Outside the except clause: the report is this one line, not the import's traceback.
    if os.environ.get(SKIP_ENGINE_ENV) == "1" and os.environ.get("TACC_REQUIRE_ENGINE") != "1":
        pytest.skip(f"{SKIP_ENGINE_ENV}=1: {problem}")
    pytest.fail(f"{problem}; build it with `make setup`, or set {SKIP_ENGINE_ENV}=1 to skip "
                "the tests that need it", pytrace=False)


@pytest.fixture
def testbed_machine(engine: None) -> None:
    """Root, the tools, namespaces, the qdiscs and bpffs, or a skip that says which are
    missing (a failure with TACC_REQUIRE_TESTBED=1); and the engine, which builds the plans."""
    import secrets

    from tacc.testbed import features
    from tacc.testbed.topology import Names

    problems = features.host_problems(Names(secrets.token_hex(2)).probe)
    if problems:
        reason = "testbed unavailable: " + "; ".join(problems)
        if os.environ.get("TACC_REQUIRE_TESTBED") == "1":
            pytest.fail(reason)
        pytest.skip(reason)


def _require(missing: list[str]) -> None:
    """A skip naming what is missing (a failure with TACC_REQUIRE_TESTBED=1), if anything is."""
    if missing:
        if os.environ.get("TACC_REQUIRE_TESTBED") == "1":
            pytest.fail("; ".join(missing))
        pytest.skip("; ".join(missing))


def _os_ken_missing() -> list[str]:
    try:
        import os_ken  # noqa: F401
    except ImportError:
        return ["os-ken: not installed (pip install os-ken)"]
    return []


@pytest.fixture
def controller_machine(testbed_machine: None) -> None:
    """The testbed and os-ken, which runs a mechanism's controller (beside Linux switches
    too: SICC's), or a skip that says which is missing."""
    _require(_os_ken_missing())


@pytest.fixture
def ovs_machine(testbed_machine: None, engine: None) -> None:
    """The testbed, Open vSwitch and os-ken, or a skip that says which are missing (a
    failure with TACC_REQUIRE_TESTBED=1)."""
    from tacc.testbed import ovs

    _require(ovs.missing() + _os_ken_missing())
