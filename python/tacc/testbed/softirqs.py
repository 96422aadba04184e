"""The kernel's softirq threads ahead of a run's real-time processes.

Every link of the testbed is packet work the kernel does in softirqs: a veth's transmit and
receive, htb's and bfifo's dequeue when their timer fires, a bridge's or Open vSwitch's
forwarding. Under load the kernel hands that work to its per-CPU `ksoftirqd` threads, which
run at normal priority, behind the run's real-time processes (shell.APPLICATION_PRIORITY and
up). There they waited 1.1-1.7 s a thread in a 10 s run of the static limiter
(tests/python/test_testbed_mechanisms.py, a UDP source at twice its limit), and the limiter's
htb, its queue full, went unserved for tens of milliseconds at a time: its 100 ms bins fell
to 25-38 Mb/s of a 44 Mb/s limit, in 5 of 6 runs. With the threads at shell.LINK_PRIORITY,
they waited 1-5 ms a run and every bin was within 1% of the limit (5 runs). A switch's
links come before anything a host runs, as hardware would.

The threads are raised while any run holds them (a file in /run lists the holders) and put
back at their normal priority when the last one ends; `release_orphans` puts them back after
runs that were killed."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tacc.testbed import shell

# Root's alone to write (a file in the shared temporary directory could be another user's
# link), and gone at a reboot, as the threads' raised priority is.
STATE = Path("/run/tacc-testbed-softirqs.json")


def _threads() -> list[int]:
    """The pids of the kernel's ksoftirqd threads."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                comm = (entry / "comm").read_text(encoding="ascii", errors="replace")
            except OSError:
                continue
            if comm.startswith("ksoftirqd/"):
                pids.append(int(entry.name))
    return sorted(pids)


def _me() -> str:
    """This process as a holder: its pid and start time, which a pid used again does not
    share."""
    me = _holder(os.getpid())
    assert me is not None, "/proc/self/stat unreadable"
    return me


def _holder(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    return f"{pid}:{stat.rpartition(')')[2].split()[19]}"


@contextlib.contextmanager
def _state() -> Iterator[dict[str, Any]]:
    """The holders and the raised threads (each with the nice value it had), read and
    written under a lock; holders that have exited are dropped. The file goes once it
    holds nothing."""
    while True:
        f = os.fdopen(os.open(STATE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600), "r+",
                      encoding="utf-8")
        fcntl.flock(f, fcntl.LOCK_EX)
        try:  # the file this process locked, not one another removed meanwhile
            if os.stat(STATE).st_ino == os.fstat(f.fileno()).st_ino:
                break
        except FileNotFoundError:
            pass
        f.close()
    with f:
        f.seek(0)
        try:
            state = json.loads(f.read() or "{}")
        except ValueError:
            state = {}
        state.setdefault("holders", [])
        state.setdefault("raised", {})
        state["holders"] = [h for h in state["holders"]
                            if _holder(int(h.split(":")[0])) == h]
        yield state
        if state["holders"] or state["raised"]:
            f.seek(0)
            f.truncate()
            f.write(json.dumps(state))
        else:
            STATE.unlink()


def _restore(state: dict[str, Any]) -> None:
    """The raised threads back to SCHED_OTHER at their nice value, unless something else
    has changed them since."""
    for pid, nice in state["raised"].items():
        try:
            if os.sched_getscheduler(int(pid)) == os.SCHED_FIFO and \
                    os.sched_getparam(int(pid)).sched_priority == shell.LINK_PRIORITY:
                os.sched_setscheduler(int(pid), os.SCHED_OTHER, os.sched_param(0))
                os.setpriority(os.PRIO_PROCESS, int(pid), nice)
        except OSError:  # the CPU went offline with its thread
            pass
    state["raised"] = {}


def hold() -> dict[str, Any]:
    """Raises the ksoftirqd threads under SCHED_FIFO at shell.LINK_PRIORITY for this
    process; summary.json's record of it: the threads now at that priority or above, or
    why none could be raised."""
    threads = _threads()
    refused = None
    if os.geteuid() != 0:
        refused = "not root"
    else:
        with _state() as state:
            state["holders"].append(_me())
            for pid in threads:
                try:
                    if os.sched_getscheduler(pid) != os.SCHED_OTHER:
                        continue  # real-time already (a PREEMPT_RT kernel's, or raised)
                    nice = os.getpriority(os.PRIO_PROCESS, pid)
                    os.sched_setscheduler(pid, os.SCHED_FIFO,
                                          os.sched_param(shell.LINK_PRIORITY))
                    state["raised"][str(pid)] = nice
                except OSError as exc:  # a container's cgroup
                    refused = str(exc)
    ahead = 0
    for pid in threads:
        with contextlib.suppress(OSError):
            ahead += os.sched_getscheduler(pid) in (os.SCHED_FIFO, os.SCHED_RR) and \
                os.sched_getparam(pid).sched_priority >= shell.LINK_PRIORITY
    record: dict[str, Any] = {"threads": len(threads), "ahead": ahead,
                              "priority": shell.LINK_PRIORITY}
    if refused is not None:
        record["refused"] = refused
    return record


def release() -> None:
    """This process's hold ended; the threads go back once no holder is left."""
    if os.geteuid() != 0:
        return
    with _state() as state:
        if _me() in state["holders"]:
            state["holders"].remove(_me())
        if not state["holders"]:
            _restore(state)


@contextlib.contextmanager
def ahead() -> Iterator[dict[str, Any]]:
    """The softirq threads ahead of the run's processes while the block runs (`hold`)."""
    record = hold()
    try:
        yield record
    finally:
        release()


def release_orphans() -> bool:
    """The threads put back if every run that raised them has exited; whether any were."""
    if os.geteuid() != 0:
        return False
    with _state() as state:
        if state["holders"] or not state["raised"]:
            return False
        _restore(state)
        return True
