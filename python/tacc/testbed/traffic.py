"""One VM's traffic: `python -m tacc.testbed.traffic SPEC.json`, run inside the VM's
namespace. Sinks (a TCP listening socket or a UDP socket per receiving port; flows may
share one, as the engine's UDP flows share port 9, and the sender's address and port tell
them apart: every source binds its flow's) count received bytes per goodput bin and the
time a sized flow completes; sources send the VM's flows with the kernel's own TCP and UDP.

The process opens its sinks, says so (the `ready` file), and waits for the `go` file (a
process with an incast aggregator first waits for the `listening` file, which says that every
worker listens, reaches its workers and says so, the `connected` file):
{"start_mono_ns", "end_mono_ns"} on CLOCK_MONOTONIC, which every namespace shares. The
orchestrator writes it once every VM's process is ready, however long they took to start
on a busy machine, so that every flow starts on one clock. Times in the spec are relative
to that start. The process writes its records to `out` when the run ends or on SIGTERM,
and exits.

Spec: {"vm", "address", "seed", "bin_ns", "rcv_buf_bytes", "out", "ready", "go",
"listening", "connected", "connect_s",
"sinks": [{"flow", "transport", "port", "src", "src_port", "bytes"}], "sources": [{"flow",
"transport", "dst",
"dst_port", "src_port", "start_ns", "stop_ns", "bytes", "cc", "ecn", "rate_bps",
"packet_bytes"}], "triggered": [sources that start when an aggregator asks], "aggregators":
[{"app", "start_ns", "interval_ns", "port", "workers": [address], "flows": [[flow per
worker] per epoch]}], "workers": [{"app", "worker", "port", "jitter_ns", "flows": [flow per
epoch]}]} (rates already scaled).

Partition-aggregate (tacc.testbed.apps): each worker listens on its app's control port; the
aggregator connects to every worker before time zero and, at each epoch, sends the epoch's
number on a line to each. A worker then waits an exponential delay of mean `jitter_ns` (its
own seeded stream) and sends its answer, the epoch's flow, on a new connection. The next
epoch starts at its interval, or without one when every answer of the last is in.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import selectors
import signal
import socket
import struct
import sys
import threading
import time
from pathlib import Path


TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)  # root may exceed net.core.rmem_max
UDP_RCVBUF = 4 << 20  # a sink must not be where UDP packets are lost
# Linux's SO_TIMESTAMPNS (asm-generic/socket.h; Python's socket module lacks it): each
# datagram comes with its arrival time (CLOCK_REALTIME, a struct timespec), so a UDP sink
# counts it in the bin it arrived in, not the one it was read in. Read late (the CPU taken
# by a controller's start-up), a sink put 113-122 Mb/s of a 100 Mb/s link in one 100 ms bin.
SO_TIMESTAMPNS = 35
TIMESPEC = struct.Struct("qq")
UDP_BATCH = 64
IP_UDP_HEADERS = 28  # a UDP flow's packet_bytes is the IP packet's size, as in the engine
SEND_CHUNK = 1 << 16
RECV_CHUNK = 1 << 18
POLL_S = 0.05  # how soon a blocked thread sees the end of the run
PRECONNECT_NS = 100_000_000  # handshakes of flows starting at zero: within the 0.2 s lead-in
GO_POLL_S = 0.005
# An aggregator reaches every worker within this long (the spec's connect_s, which the
# orchestrator gives this value and waits READY_TIMEOUT_S beyond), or its process fails.
# SICC's dumbbell, 60 workers behind a busy Open vSwitch, took more than 6 s.
CONNECT_S = 30.0
CONNECT_TRY_S = 1.0  # one attempt's wait, the kernel's first SYN retransmission
LAUNCH_LEAD_NS = PRECONNECT_NS + 50_000_000  # a source's thread starts this long before it
MAX_LAG_NS = 2_000_000  # a late UDP source catches up on at most this much missed sending
# The VMs' applications are woken on time, before anything else of the host's but the
# mechanism (run.Children.start gives them real-time priority): a sender woken late sends a
# burst that a limiter's small bucket drops, and a receiver read late closes its window with
# the limiter's queue idle. With two busy loops beside a run, a BPF limiter passed a UDP
# source 8-9% under its rate in every 100 ms bin, at nice 0 and at nice -10 alike.
# A UDP source sends at most this many packets a wake-up and then sleeps at least this long:
# one the CPU cannot keep up with (a high --rate-cap) falls behind its rate instead of holding
# a core from the rest of the host at real-time priority. 16 packets cover a wake-up 1.9 ms
# late at the default cap's 100 Mb/s.
MAX_BATCH = 16
MIN_SLEEP_S = 50e-6
ECT0 = 0x02
# struct tcp_info offsets (linux/tcp.h): tcpi_total_retrans (u32), tcpi_total_rto (u16,
# Linux 6.7 and later).
TCPI_TOTAL_RETRANS = 100
TCPI_TOTAL_RTO = 240


class Traffic:
    """The VM's sinks and sources; records are filled as they go, read when they stop."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.t0 = self.end = 0  # set by `go`
        self.stopping = threading.Event()
        self.received: dict[int, dict[str, Any]] = {
            s["flow"]: {"bytes": 0, "bins": {}, "done_ns": None, "size": s["bytes"]}
            for s in spec["sinks"]
        }
        self.sent: dict[int, dict[str, Any]] = {
            s["flow"]: {"bytes": 0, "start_ns": None, "began_ns": None, "connected_ns": None,
                        "retransmits": None, "timeouts": None, "send_errors": 0, "error": None}
            for s in spec["sources"] + spec["triggered"]
        }
        self.triggered = {s["flow"]: s for s in spec["triggered"]}
        self.answered = threading.Condition()  # notified when a sized flow is all in
        self.controls: dict[int, socket.socket] = {}  # incast app -> its control listener
        self.connections: dict[int, list[socket.socket]] = {}  # incast app -> to its workers
        self.threads: list[threading.Thread] = []
        self.errors: list[str] = []  # the incast apps' own failures
        self.selector = selectors.DefaultSelector()
        # (transport, port) -> (sender address, sender port) -> flow
        self.flows_at: dict[tuple[str, int], dict[tuple[str, int], int]] = {}
        # TCP port -> the congestion control its listener runs: DCTCP's receiver echoes each
        # CE mark (not RFC 3168's ECE-until-CWR), and a listener of another congestion
        # control refuses ECN to a DCTCP sender, whose SYN is ECT.
        self.listener_cc: dict[int, str] = {}
        for s in spec["sinks"]:
            peers = self.flows_at.setdefault((s["transport"], s["port"]), {})
            peers[(s["src"], s["src_port"])] = s["flow"]
            if s["transport"] == "tcp" and s.get("cc") == "dctcp":
                self.listener_cc[s["port"]] = "dctcp"

    def open_sinks(self) -> None:
        """Binds every sink before any source anywhere starts (the ready file says so)."""
        for transport, port in self.flows_at:
            if transport == "tcp":
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                # Before listen: accepted sockets inherit it, and the window scale offered
                # in the handshake follows from it. The kernel doubles it for its overhead.
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, self.spec["rcv_buf_bytes"])
                if port in self.listener_cc:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION,
                                    self.listener_cc[port].encode())
                sock.bind(("0.0.0.0", port))
                sock.listen(64)
            else:
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, UDP_RCVBUF)
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                sock.bind(("0.0.0.0", port))
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ, (transport, port, None, sock))
        for part in self.spec["workers"]:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.spec["address"], part["port"]))
            sock.listen(1)
            sock.settimeout(POLL_S)
            self.controls[part["app"]] = sock

    def start(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self.threads.append(thread)

    def launch(self) -> None:
        """Starts the sources' threads in start order, each shortly before its start: a
        workload of thousands of flows never holds thousands of sleeping threads."""
        for src in sorted(self.spec["sources"], key=lambda s: s["start_ns"]):
            if not self._wait_until(self.t0 + src["start_ns"] - LAUNCH_LEAD_NS):
                return
            self.start(self.source, src)

    def connect_aggregators(self) -> bool:
        """Each aggregator's control connection to every worker, once every worker listens
        (the `listening` file) and before time zero: a first epoch at time zero then finds
        every worker reached, however long the first packets of a connection take through
        the switches (Open vSwitch copies a SYN to the controller, and 60 workers reached
        one after another took longer than the lead-in to time zero). Raises OSError naming
        the first worker not reached within the spec's connect_s: an app silently unrun
        would be worse. False if the run is stopped first."""
        limit = self.spec["connect_s"]
        deadline = time.monotonic_ns() + round(limit * 1e9)
        for part in self.spec["aggregators"]:
            conns = self.connections[part["app"]] = []
            for address in part["workers"]:
                while True:
                    try:
                        # A SYN whose first packets cross a busy switch's slow path can
                        # take longer than POLL_S: waiting less would never see its answer.
                        conn = socket.create_connection((address, part["port"]),
                                                        timeout=CONNECT_TRY_S)
                        # An epoch's request leaves at once: under Nagle it waited for the
                        # last one's ACK, which the workers delay and which queues behind
                        # the answers at the aggregator's port (measured: an epoch 60 ms
                        # late at a 30 ms interval).
                        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        conns.append(conn)
                        break
                    except OSError as exc:
                        if time.monotonic_ns() >= deadline:
                            raise OSError(f"incast aggregator of app {part['app']}: worker "
                                          f"{address} unreachable after {limit:g}s: "
                                          f"{exc}") from exc
                        if self.stopping.wait(POLL_S):
                            return False
        return True

    def aggregate(self, part: dict[str, Any]) -> None:
        """An incast app's aggregator: the epochs' requests on its control connections."""
        conns = self.connections[part["app"]]
        try:
            for epoch, flows in enumerate(part["flows"]):
                if part["interval_ns"] is not None or epoch == 0:
                    at = self.t0 + part["start_ns"] + epoch * (part["interval_ns"] or 0)
                    if not self._wait_until(at):
                        return
                elif not self._answered(part["flows"][epoch - 1]):
                    return
                if time.monotonic_ns() >= self.end:
                    return
                for conn in conns:
                    conn.sendall(f"{epoch}\n".encode())
        except OSError as exc:
            if not self.stopping.is_set() and time.monotonic_ns() < self.end:
                self.errors.append(f"incast aggregator of app {part['app']}: "
                                   f"{type(exc).__name__}: {exc}")
        finally:
            for conn in conns:
                conn.close()

    def _answered(self, flows: list[int]) -> bool:
        """Waits until every flow of `flows` is in; False if the run stops first."""
        with self.answered:
            while not all(self.received[f]["done_ns"] is not None for f in flows):
                if self.stopping.is_set() or time.monotonic_ns() >= self.end:
                    return False
                self.answered.wait(POLL_S)
        return True

    def work(self, part: dict[str, Any]) -> None:
        """An incast worker: each request starts the epoch's flow after the jitter."""
        listener = self.controls[part["app"]]
        jitter = random.Random(self.spec["seed"] * 1_000_003 + part["app"] * 10_007
                               + part["worker"])
        conn = None
        while conn is None:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                if self.stopping.is_set():
                    return
        with conn:
            conn.settimeout(POLL_S)
            pending = b""
            while not self.stopping.is_set():
                try:
                    data = conn.recv(64)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                pending += data
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    mean = part["jitter_ns"]
                    delay = round(jitter.expovariate(1 / mean)) if mean > 0 else 0
                    src = self.triggered[part["flows"][int(line)]]
                    self.start(self.source,
                               dict(src, start_ns=time.monotonic_ns() - self.t0 + delay))

    def sink_loop(self) -> None:
        """Accepts connections and reads every sink; a connection's flow is known when it is
        accepted, a datagram's from its sender. Anything from an unknown sender is ignored."""
        buf = bytearray(RECV_CHUNK)
        ancillary = socket.CMSG_SPACE(TIMESPEC.size)
        realtime_offset = time.clock_gettime_ns(time.CLOCK_REALTIME) - time.monotonic_ns()
        while not self.stopping.is_set():
            for key, _ in self.selector.select(timeout=POLL_S):
                transport, port, flow, sock = key.data
                peers = self.flows_at[(transport, port)]
                if transport == "tcp" and flow is None:  # the listening socket
                    conn, peer = sock.accept()
                    if peer not in peers:
                        conn.close()
                        continue
                    conn.setblocking(False)
                    # Closed with a reset whenever this process ends: a graceful close's FIN
                    # to a namespace already gone would leave an orphan socket retrying for
                    # minutes, holding its congestion control (the run's BPF DCTCP) loaded.
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.selector.register(conn, selectors.EVENT_READ,
                                           (transport, port, peers[peer], conn))
                    continue
                if transport == "udp":
                    self._drain_udp(sock, peers, buf, ancillary, realtime_offset)
                    continue
                try:
                    n = sock.recv_into(buf)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:  # reset by the source at its stop time
                    n = 0
                if n == 0:
                    self.selector.unregister(sock)
                    sock.close()
                elif flow is not None:
                    self._count(flow, n, time.monotonic_ns())

    def _drain_udp(self, sock: socket.socket, peers: dict[Any, int], buf: bytearray,
                   ancillary: int, realtime_offset: int) -> None:
        """Reads what a UDP sink holds, up to UDP_BATCH datagrams: one wake-up of the
        selector per datagram took more of the CPU than the reads."""
        for _ in range(UDP_BATCH):
            try:
                n, anc, _, peer = sock.recvmsg_into([buf], ancillary)
            except OSError:  # drained (BlockingIOError), or an ICMP error queued on it
                return
            flow = peers.get(peer)
            if flow is not None:
                at = arrival_ns(anc, realtime_offset)
                self._count(flow, n, time.monotonic_ns() if at is None else at)

    def _count(self, flow: int, n: int, now: int) -> None:
        if now >= self.end:
            return
        rec = self.received[flow]
        rec["bytes"] += n
        b = max(0, now - self.t0) // self.spec["bin_ns"]
        rec["bins"][b] = rec["bins"].get(b, 0) + n
        if rec["size"] is not None and rec["done_ns"] is None and rec["bytes"] >= rec["size"]:
            rec["done_ns"] = now - self.t0
            with self.answered:
                self.answered.notify_all()

    def source(self, src: dict[str, Any]) -> None:
        rec = self.sent[src["flow"]]
        rec["start_ns"] = src["start_ns"]
        # TCP flows that start at time zero shake hands in the lead-in: the simulator starts
        # them in the same nanosecond, where these processes start some milliseconds apart,
        # and a SYN (Not-ECT) that meets a queue the others built past K is dropped, again
        # and again with the RTO backing off.
        early = PRECONNECT_NS if src["transport"] == "tcp" and src["start_ns"] == 0 else 0
        try:
            if self._wait_until(self.t0 + src["start_ns"] - early):
                if src["transport"] == "tcp":
                    self._tcp(src, rec)
                else:
                    self._udp(src, rec)
        except OSError as exc:
            # At the end every process closes its sockets at once: a peer's reset then is
            # the end of the run, not a failure.
            if not self.stopping.is_set() and time.monotonic_ns() < self.end:
                rec["error"] = f"{type(exc).__name__}: {exc}"

    def _stop_at(self, src: dict[str, Any]) -> int:
        stop = src["stop_ns"]
        return self.end if stop is None else min(self.end, self.t0 + stop)

    def _wait_until(self, when_ns: int) -> bool:
        """Sleeps until `when_ns` unless the run stops first; True when it is time."""
        return not self.stopping.wait(max(0.0, (when_ns - time.monotonic_ns()) / 1e9))

    def _tcp(self, src: dict[str, Any], rec: dict[str, Any]) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Before connect: the handshake already belongs to the chosen congestion control.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, src["cc"].encode())
        # The scenario's receive buffer at both ends, as in the simulator: both offer one
        # window scale (SICC's controller reads it from the initiator's SYN and clamps the
        # other end's windows with it).
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, self.spec["rcv_buf_bytes"])
        sock.bind((self.spec["address"], src["src_port"]))
        stop_at = self._stop_at(src)
        sock.settimeout(max(POLL_S, (stop_at - time.monotonic_ns()) / 1e9))
        try:
            rec["began_ns"] = time.monotonic_ns() - self.t0
            sock.connect((src["dst"], src["dst_port"]))
            rec["connected_ns"] = time.monotonic_ns() - self.t0
            if not self._wait_until(self.t0 + src["start_ns"]):
                return
            sock.settimeout(POLL_S)
            left = src["bytes"] if src["bytes"] is not None else float("inf")
            chunk = memoryview(bytearray(SEND_CHUNK))
            while left > 0 and not self.stopping.is_set() and time.monotonic_ns() < stop_at:
                try:
                    n = sock.send(chunk[: int(min(SEND_CHUNK, left))])
                except TimeoutError:
                    continue
                rec["bytes"] += n
                left -= n
            if left == 0:
                # Sent in full: its last bytes may still be on their way (or lost and
                # retransmitted) until the sink has them all and closes (with a reset).
                sock.shutdown(socket.SHUT_WR)
                while not self.stopping.is_set() and time.monotonic_ns() < self.end:
                    try:
                        if not sock.recv(1):
                            break
                    except TimeoutError:
                        continue
                    except ConnectionResetError:
                        break
        finally:
            if rec["connected_ns"] is not None:
                with contextlib.suppress(OSError):
                    _tcp_counts(sock, rec)
            # A reset, not a FIN: a flow that stops sends nothing more, as in the engine
            # (a graceful close would deliver what is still in the send buffer).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()

    def _udp(self, src: dict[str, Any], rec: dict[str, Any]) -> None:
        """Constant bit rate on an absolute schedule: each packet leaves one gap after the
        one before, on the clock rather than after a sleep, and the packets due are sent at
        once when the thread wakes late (up to MAX_BATCH), so the mean rate holds whatever
        the sleep granularity. Gaps vary uniformly by +/-10% (mean exact), as the engine's do:
        strictly periodic sources phase-lock at a shared drop-tail queue, and one of them
        would win every free slot."""
        jitter = random.Random(self.spec["seed"] * 1_000_003 + src["flow"])
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.bind((self.spec["address"], src["src_port"]))
            if src["ecn"]:
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, ECT0)
            sock.connect((src["dst"], src["dst_port"]))
            payload = bytes(src["packet_bytes"] - IP_UDP_HEADERS)
            gap = src["packet_bytes"] * 8 * 1e9 / src["rate_bps"]
            # What the source offered in each bin: a source woken more than MAX_LAG_NS late
            # sends less than its rate, and what it left, a competing flow may take.
            bins = rec["bins"] = {}
            stop_at, due = self._stop_at(src), float(time.monotonic_ns())
            while not self.stopping.is_set():
                now = time.monotonic_ns()
                if now >= stop_at:
                    break
                due = max(due, now - MAX_LAG_NS)
                b = max(0, now - self.t0) // self.spec["bin_ns"]
                for _ in range(MAX_BATCH):
                    if due > now:
                        break
                    try:
                        n = sock.send(payload)
                        rec["bytes"] += n
                        bins[b] = bins.get(b, 0) + n
                    except OSError:  # a full queue (ENOBUFS), or ICMP port unreachable
                        rec["send_errors"] += 1
                    due += gap * jitter.uniform(0.9, 1.1)
                time.sleep(max(MIN_SLEEP_S, (due - time.monotonic_ns()) / 1e9))

    def records(self) -> dict[str, Any]:
        return {
            "vm": self.spec["vm"],
            "received": {str(f): {k: v for k, v in r.items() if k != "size"}
                         for f, r in self.received.items()},
            "sent": {str(f): r for f, r in self.sent.items()},
            "errors": self.errors,
        }


def arrival_ns(ancillary: list[tuple[int, int, bytes]], realtime_offset: int) -> int | None:
    """A datagram's arrival on CLOCK_MONOTONIC, from its SO_TIMESTAMPNS ancillary data
    (`realtime_offset`: CLOCK_REALTIME less CLOCK_MONOTONIC), if the kernel gave one."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= TIMESPEC.size:
            sec, nsec = TIMESPEC.unpack_from(data)
            return sec * 1_000_000_000 + nsec - realtime_offset
    return None


def _tcp_counts(sock: socket.socket, rec: dict[str, Any]) -> None:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 512)
    if len(info) >= TCPI_TOTAL_RETRANS + 4:
        rec["retransmits"] = struct.unpack_from("I", info, TCPI_TOTAL_RETRANS)[0]
    if len(info) >= TCPI_TOTAL_RTO + 2:
        rec["timeouts"] = struct.unpack_from("H", info, TCPI_TOTAL_RTO)[0]


def _write_json(path: Path, data: object) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def _wait_for(path: Path, traffic: Traffic) -> bool:
    """Until the orchestrator writes `path`; False (the records written) if stopped first."""
    while not path.exists():
        if traffic.stopping.wait(GO_POLL_S):
            _write_json(Path(traffic.spec["out"]), traffic.records())
            return False
    return True


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    traffic = Traffic(spec)
    signal.signal(signal.SIGTERM, lambda *_: traffic.stopping.set())
    traffic.open_sinks()
    Path(spec["ready"]).touch()
    if spec["aggregators"]:
        if not _wait_for(Path(spec["listening"]), traffic):
            return 0
        try:
            if not traffic.connect_aggregators():
                _write_json(Path(spec["out"]), traffic.records())
                return 0
        except OSError as exc:
            print(exc, file=sys.stderr)
            return 1
        Path(spec["connected"]).touch()
    if not _wait_for(Path(spec["go"]), traffic):
        return 0
    clock = json.loads(Path(spec["go"]).read_text(encoding="utf-8"))
    traffic.t0, traffic.end = clock["start_mono_ns"], clock["end_mono_ns"]
    traffic.start(traffic.sink_loop)
    traffic.start(traffic.launch)
    for part in spec["aggregators"]:
        traffic.start(traffic.aggregate, part)
    for part in spec["workers"]:
        traffic.start(traffic.work, part)
    # Never before the end (a timed wait may return a little early): the orchestrator
    # counts an exit before it as a failure.
    while (left := traffic.end - time.monotonic_ns()) > 0:
        if traffic.stopping.wait(left / 1e9):
            break
    traffic.stopping.set()
    for thread in list(traffic.threads):
        thread.join(timeout=2.0)
    _write_json(Path(spec["out"]), traffic.records())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
