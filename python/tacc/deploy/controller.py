"""`tacc controller --config fabric.toml` runs the mechanism's SDN controller as a daemon
for Open vSwitch switches that connect to it (the os-ken app of tacc.testbed.controller,
driving tacc-mech's controller), with the fabric described in the file; the hosts' agents
(`tacc agent` with a `[controller]`) connect over the control channel. `tacc switch-agent
--config fabric.toml --switch NAME` runs, beside a switch, what OpenFlow cannot give the
controller: the ECN marking at each port's threshold, and its mark and queue counters on the
switch's `stats` socket.

Exit status: 0 (stopped by SIGTERM or SIGINT), 2 a config error (one `tacc: error:
FILE:LINE: key: ...` line each), 3 the daemon could not run.
"""

from __future__ import annotations

import http.server
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any



class ControllerError(RuntimeError):
    """The controller or switch agent could not run (exit status 3)."""


def read(config: Path, *, keys: bool = True, switch: str | None = None) -> dict[str, Any]:
    """The checked fabric config (ScenarioError on a mistake); `keys=False` leaves the key
    files unread but for switch `switch`'s stats key (a switch agent needs its own alone)."""
    from tacc import _core

    text = config.read_text(encoding="utf-8")  # OSError: exit status 2, as a config error
    daemon: dict[str, Any] = json.loads(
        _core.controller_config(text, str(config), keys=keys, switch=switch))
    return daemon


def _unix_socket(stats: str | None) -> Path | None:
    """A switch's `stats` if it is a Unix socket's path (else a UDP address, or none)."""
    return Path(stats) if stats and stats.startswith("/") else None


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def _free(key: str, address: str) -> None:
    """ControllerError naming `key` if nothing can listen on its address."""
    try:
        socket.create_server(_host_port(address)).close()
    except OSError as exc:
        raise ControllerError(f"{key} = {address!r}: cannot listen there: {exc.strerror}") \
            from exc


REPORTS_SOCKET = "port-copies.sock"


def _state_dir(daemon: dict[str, Any], pid_name: str) -> tuple[Path, Path]:
    """The state directory, made if need be, and this daemon's pid file in it; refuses a
    second daemon of the same kind on it."""
    state = Path(daemon["state_dir"])
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    pid_file = state / pid_name
    try:
        os.kill(int(pid_file.read_text(encoding="utf-8")), 0)
    except (OSError, ValueError):
        pass
    else:
        raise ControllerError(f"another one runs with state directory {state} ({pid_file})")
    pid_file.write_text(f"{os.getpid()}\n", encoding="utf-8")
    return state, pid_file


def run(config: Path, *, check: bool = False) -> None:
    """Reads `config` and runs the controller until it is stopped (or only checks it)."""
    from tacc.testbed import controller as app

    daemon = read(config)
    if check:
        return
    if app.app_manager is None:
        raise ControllerError("os-ken is not installed (pip install os-ken)")
    for key in ("openflow", "agents", "metrics"):
        if daemon[key]:
            _free(key, daemon[key])
    state, pid_file = _state_dir(daemon, "controller.pid")
    plan = daemon["plan"]
    openflow_host, openflow_port = _host_port(daemon["openflow"])
    switches = daemon["switches"]
    cfg: dict[str, Any] = {
        "plan": plan,
        "start_mono_ns": time.monotonic_ns(),
        "rate_scale": 1.0,
        "time_scale": 1.0,
        "counts": str(state / "status.json"),
        "ready": str(state / "ready"),
        "reply_socket": str(state / "stats-reply.sock"),
        "listen": openflow_port,
        "switch_stats": {str(i): s["stats"] if _unix_socket(s["stats"]) else
                         {"address": s["stats"], "key": s["stats_key"]}
                         for i, s in enumerate(switches) if s["stats"]},
        "datapath_ids": {str(s["datapath_id"]): i for i, s in enumerate(switches)},
        "ofports": {p: o for s in switches for p, o in s["ofports"].items()},
        "reverse": daemon["reverse"],
        "l2": True,
        # A switch agent on this machine (its stats on a Unix socket) copies the SYNs and
        # FINs a mechanism asks for in its ports, in the switch's place.
        "reports": str(state / REPORTS_SOCKET),
        "port_copies": [i for i, s in enumerate(switches) if _unix_socket(s["stats"])],
        "remove_on_exit": [str(pid_file), str(state / "ready"), str(state / "stats-reply.sock"),
                           str(state / REPORTS_SOCKET)],
    }
    if daemon["agents"]:
        cfg["channel"] = {"listen": daemon["agents"], "keys": daemon["keys"]}
    (state / "ready").unlink(missing_ok=True)
    _logging(daemon["log_json"])
    kind = plan["mechanism"]["kind"]
    if daemon["metrics"]:
        _metrics(daemon["metrics"], state / "status.json", kind)
    logging.getLogger("tacc.controller").info(
        "started: %s, %d switches, %d hosts; OpenFlow on %s, agents on %s", kind,
        len(switches), len(plan["hosts"]), daemon["openflow"], daemon["agents"] or "none")
    app.serve(cfg, openflow_host)


def run_switch_agent(config: Path, switch: str, *, check: bool = False) -> None:
    """Runs the switch agent of switch `switch` of the fabric in `config` until stopped."""
    from tacc import _core

    daemon = read(config, keys=False, switch=switch)
    names = [s["name"] for s in daemon["switches"]]
    if switch not in names:
        raise ControllerError(f"{config}: no switch {switch!r} (switches: {', '.join(names)})")
    index = names.index(switch)
    sw = daemon["switches"][index]
    if not sw["devices"]:
        raise ControllerError(f"{config}: switch {switch!r} names no port's device: "
                              "the switch agent attaches to the ports by their interfaces")
    if check:
        return
    if os.geteuid() != 0:
        raise ControllerError("the switch agent attaches eBPF programs: run it as root")
    state, pid_file = _state_dir(daemon, f"switch-{switch}.pid")
    unix = _unix_socket(sw["stats"])
    if unix:
        unix.unlink(missing_ok=True)
    ready = state / f"switch-{switch}.ready"
    # The port counters it can sample to a file are the testbed's: a daemon's would grow
    # without end, and the controller asks for what it needs.
    agent = {"plan": daemon["plan"], "switch": index, "ports": sw["devices"],
             "start_mono_ns": time.monotonic_ns(), "sample_ns": 3600 * 10**9, "out": os.devnull,
             "ready": str(ready), "stats": sw["stats"], "stats_key": sw["stats_key"],
             "reports": str(state / REPORTS_SOCKET) if unix else None}
    # The agent runs until its process ends: a thread of its own runs it, and this one waits
    # for the signal that stops it, then takes down what it set up.
    stopping = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, stopping)
    failed: list[str] = []

    def agent_thread() -> None:
        try:
            _core.agent_run("switch", json.dumps(agent))
        except BaseException as exc:  # noqa: BLE001 - a panic too: the daemon must end
            failed.append(str(exc) or type(exc).__name__)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=agent_thread, daemon=True).start()
    signal.sigwait(stopping)
    for device in sw["devices"].values():  # the programs went with the qdisc the agent added
        subprocess.run(["tc", "qdisc", "del", "dev", device, "clsact"], capture_output=True,
                       check=False)
    for path in (pid_file, ready, *([unix] if unix else [])):
        path.unlink(missing_ok=True)
    if failed:
        raise ControllerError(f"switch agent {switch}: {failed[0]}")
    logging.getLogger("tacc.switch-agent").info("stopped")


class _JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"time": record.created, "level": record.levelname.lower(),
                           "logger": record.name, "message": record.getMessage()})


def _logging(as_json: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonLines() if as_json else
                         logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)


def prometheus(status: dict[str, Any], mechanism: str) -> str:
    """The controller's status file as Prometheus text."""
    lines = [f'tacc_controller_info{{mechanism="{mechanism}"}} 1',
             f"tacc_controller_switches_connected {len(status.get('switches_connected', []))}",
             f"tacc_controller_agents_connected {len(status.get('agents_connected', []))}",
             f"tacc_controller_agents_refused_total {status.get('agents_refused', 0)}",
             f"tacc_controller_starts_total {status.get('starts', 0)}"]
    for name, key, label in (("tacc_control_messages_total", "messages", "kind"),
                             ("tacc_control_bytes_total", "bytes", "kind"),
                             ("tacc_controller_events_total", "events", "event")):
        for k, v in sorted(status.get(key, {}).items()):
            lines.append(f'{name}{{{label}="{k}"}} {v}')
    return "\n".join(lines) + "\n"


def _metrics(address: str, status_file: Path, mechanism: str) -> None:
    """The Prometheus endpoint, from the status file the app renews twice a second, served
    by a thread of its own."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path != "/metrics":
                self.send_error(404)
                return
            try:
                status = json.loads(status_file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                status = {}
            body = prometheus(status, mechanism).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(_host_port(address), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
