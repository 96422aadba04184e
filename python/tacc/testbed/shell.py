"""Running the commands that build and read the testbed (ip, tc, sysctl, ethtool, nstat,
ping): each failure is a TestbedError naming the command and what it printed."""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tacc.testbed import TestbedError, TestbedUnavailable


def run(argv: Sequence[str], *, input: str | None = None, timeout: float = 60,
        env: dict[str, str] | None = None, priority: int | None = None) -> str:
    """Runs a command (under SCHED_FIFO at `priority`, as `realtime` sets it, and so are
    the processes it starts) and returns its output; raises TestbedError when it fails,
    naming the failing line of a `-batch -` input (ip and tc say only its number)."""
    try:
        proc = subprocess.run(list(argv), input=input, capture_output=True, text=True,
                              timeout=timeout, env=env,
                              preexec_fn=None if priority is None
                              else functools.partial(realtime, priority))
    except FileNotFoundError as exc:
        raise TestbedUnavailable([f"{argv[0]}: not found on PATH"]) from exc
    except subprocess.TimeoutExpired as exc:
        raise TestbedError(f"{shlex.join(argv)}: no answer in {timeout:g}s") from exc
    if proc.returncode != 0:
        said = " ".join(proc.stderr.split()) or f"exit status {proc.returncode}"
        line = re.search(r"-:(\d+)", proc.stderr)
        if line and input is not None:
            lines = input.splitlines()
            number = int(line.group(1))
            if 0 < number <= len(lines):
                said += f" (line {number}: {lines[number - 1]})"
        raise TestbedError(f"{shlex.join(argv)}: {said}")
    if priority is not None:  # what `realtime` said in the child, which stderr captured
        for line in proc.stderr.splitlines():
            if line.startswith("real-time policy refused"):
                print(f"tacc: warning: {line}", file=sys.stderr)
    return proc.stdout


def in_ns(ns: str, *argv: str) -> list[str]:
    """A command line run inside network namespace `ns`."""
    return ["ip", "netns", "exec", ns, *argv]


def batch(tool: str, ns: str | None, lines: Sequence[str]) -> None:
    """`ip` or `tc` commands run in one process inside `ns` (or the initial namespace):
    one process per namespace rather than one per command."""
    if lines:
        where = ["-n", ns] if ns else []
        run([tool, *where, "-batch", "-"], input="\n".join(lines) + "\n")


def sysctl(ns: str, settings: dict[str, object]) -> None:
    """Kernel settings of one namespace, all in one process."""
    if settings:
        run(in_ns(ns, "sysctl", "-q", "-w", *(f"{k}={v}" for k, v in settings.items())))


# Real-time priorities (SCHED_FIFO) of the run's processes. They sleep between packets and
# requests, so they take the CPU only when they have something to do, and are then woken on
# time: the VMs' applications (1) before anything else of the host's, the switch agents,
# Open vSwitch's forwarding daemons and the controller (2) before the applications, as the
# switches they stand for would be. At normal priority, next to five real-time traffic
# processes and the softirqs they raise, the controller's polls of the switch agents went
# unanswered for 50-200 ms at a time (SDN-GCC's Ti is 5 ms), and Open vSwitch forwarded in
# bursts: static limits of 90% of a port in total (two-bottleneck file) left the port 78%
# used, its queue at 3.5-3.6 packets on average and 258-488 packets dropped, where Linux switches
# (and Open vSwitch at 2) kept it 82.5% used with no queue and no drop. The host agents whose
# shims poll their datapath (HyGenICC, SDN-GCC) keep normal priority: at 2, four of them left
# the traffic under 1% of its rate. Those whose shims only wait for the controller (SICC)
# take 2 themselves: at normal priority SICC's clamps came 5-10 ms after the controller
# sent them.
APPLICATION_PRIORITY = 1
MECHANISM_PRIORITY = 2
# The thread that reads the CPU's idle share each second of the traffic, before everything it
# measures: beside real-time sources that left no core idle (SDN-GCC's four racks, 42
# elephants), a run recorded no CPU sample and did not say it was saturated. It alone: the
# run's readings of the port counters (a `tc` process each) at this priority preempted Open
# vSwitch's forwarding, and a full queue read 20 packets short.
MEASUREMENT_PRIORITY = 3
FALLBACK_NICE = -10


def sleep_until(when_ns: int) -> None:
    """Sleeps until `when_ns` on the monotonic clock (at once if it has passed)."""
    time.sleep(max(0.0, (when_ns - time.monotonic_ns()) / 1e9))


def realtime(priority: int) -> None:
    """This process (and the threads it starts later; called in a thread, that thread alone)
    under SCHED_FIFO at `priority`, or at nice -10 where the kernel refuses it (a
    container's cgroup), or as it is where that is refused too; said on stderr. Safe in a
    child between fork and exec (a preexec_fn): it writes with os.write, takes no lock."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        return
    except OSError as exc:
        said = f"real-time policy refused ({exc}); "
    try:
        os.setpriority(os.PRIO_PROCESS, 0, FALLBACK_NICE)
        said += f"running at nice {FALLBACK_NICE}"
    except OSError as exc:
        said += f"nice {FALLBACK_NICE} refused too ({exc}); running as before"
    os.write(2, (said + "\n").encode())


def wait_exited(pids: Sequence[int], timeout_s: float) -> list[int]:
    """Waits until the processes have exited (gone, or a zombie: its resources released) or
    `timeout_s` has passed; returns those still running."""
    deadline = time.monotonic() + timeout_s
    while True:
        running = [pid for pid in pids if _running(pid)]
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.01)


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"
