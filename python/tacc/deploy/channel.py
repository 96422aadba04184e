"""The controller's end of `tacc agent`'s control channel (crates/tacc-agent/src/channel.rs
says the protocol): agents connect over TCP, both sides prove they hold the host's key, and
the controller sends each host its `HostMessage`s (the JSON of tacc_mech::control), signed
with a key of that session alone.

    end = ControllerEnd({"hv1": key}, ("192.0.2.1", 7400))
    end.wait_for("hv1", timeout_s=10)
    end.send("hv1", {"Congestion": {"to_src": 167772161, "from_dst": 167772163, "marks": 4.0}})
    end.close()
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import struct
import threading
import time
from collections import deque
from typing import Any

MAGIC = b"TACC1"
NONCE_LEN = 16
HANDSHAKE_TIMEOUT_S = 2.0
# A send that cannot complete in this time (an agent that stopped reading) ends its session,
# so that one host never holds up the others' messages.
SEND_TIMEOUT_S = 2.0
# An agent that vanished without closing (its host down) is found by TCP keepalive: idle
# 5 s, then 3 probes 1 s apart.
KEEPALIVE = ((socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
             (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 5),
             (socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1),
             (socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3))
RECENT_REFUSALS = 10


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed during the handshake")
        data += chunk
    return data


class _Session:
    def __init__(self, sock: socket.socket, key: bytes) -> None:
        self.sock, self.key = sock, key
        self.seq = 0
        self.lock = threading.Lock()

    def end(self) -> None:
        """Ends the connection: shut down first, for closing alone neither sends the FIN
        while the session's reader is blocked in recv nor wakes that reader."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class ControllerEnd:
    """Listens for agents; `keys` maps each host's name (as its agent gives it) to its key."""

    def __init__(self, keys: dict[str, bytes], address: tuple[str, int]) -> None:
        self.keys = keys
        self.sessions: dict[str, _Session] = {}
        self.in_control = False  # said on every session once true (take_control)
        self.refused = 0  # connections that failed the handshake
        self.recent_refusals: deque[str] = deque(maxlen=RECENT_REFUSALS)  # and why
        self._changed = threading.Condition()
        self._listener = socket.create_server(address)
        self.address = self._listener.getsockname()[:2]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handshake, args=(sock,), daemon=True).start()

    def _handshake(self, sock: socket.socket) -> None:
        sock.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            hello = _read_exactly(sock, len(MAGIC) + NONCE_LEN + 1)
            if not hello.startswith(MAGIC):
                raise ConnectionError("not a tacc agent")
            nonce_a = hello[len(MAGIC):len(MAGIC) + NONCE_LEN]
            host = _read_exactly(sock, hello[-1]).decode(errors="replace")
            key = self.keys.get(host)
            if key is None:
                raise ConnectionError(f"no key for host {host!r}")
            nonce_c = os.urandom(NONCE_LEN)
            sock.sendall(nonce_c + _mac(key, b"controller", nonce_a, nonce_c))
            proof = _read_exactly(sock, 32)
            if not hmac.compare_digest(proof, _mac(key, b"agent", nonce_c, nonce_a)):
                raise ConnectionError(f"host {host!r} does not hold its key")
        except (OSError, ConnectionError) as exc:
            self.refused += 1
            self.recent_refusals.append(str(exc))
            sock.close()
            return
        sock.settimeout(SEND_TIMEOUT_S)
        for level, option, value in KEEPALIVE:
            sock.setsockopt(level, option, value)
        session = _Session(sock, _mac(key, b"session", nonce_a, nonce_c))
        with self._changed:
            old = self.sessions.get(host)
            if old is not None:
                old.end()
            self.sessions[host] = session
            self._changed.notify_all()
        if self.in_control:
            self._say_in_control(host)
        self._watch(host, session)

    def _watch(self, host: str, session: _Session) -> None:
        """Reads the session until it ends (the agent sends nothing once up): its end, or
        keepalive finding the agent gone, ends the session here too."""
        while True:
            try:
                if not session.sock.recv(64):
                    break
            except TimeoutError:
                continue
            except OSError:
                break
        self._drop(host, session)

    def _drop(self, host: str, session: _Session) -> None:
        with self._changed:
            if self.sessions.get(host) is session:
                del self.sessions[host]
        session.end()

    def wait_for(self, host: str, timeout_s: float) -> None:
        """Returns once `host`'s agent has a session; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while host not in self.sessions:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no session with {host!r} after {timeout_s} s "
                                       f"(refused: {list(self.recent_refusals)})")
                self._changed.wait(left)

    def take_control(self) -> None:
        """The controller has its switches: tells every agent, now and at each session to
        come, that it is in control (an agent back from an outage holds its rates until
        then)."""
        if self.in_control:
            return
        self.in_control = True
        for host in list(self.sessions):
            self._say_in_control(host)

    def _say_in_control(self, host: str) -> None:
        try:
            self.send(host, "InControl")
        except (KeyError, OSError):
            pass  # the session ended; the next one is told at its start

    def send(self, host: str, message: dict[str, Any] | str) -> int:
        """Sends `message` (a HostMessage as JSON data, or "InControl") to `host`'s agent;
        returns the bytes it took on the channel. KeyError without a session; OSError if the
        send fails, which ends the session."""
        session = self.sessions[host]
        body = json.dumps(message).encode()
        with session.lock:
            session.seq += 1
            signed = struct.pack(">Q", session.seq) + body
            frame = _mac(session.key, signed) + signed
            try:
                session.sock.sendall(struct.pack(">I", len(frame)) + frame)
            except OSError:
                self._drop(host, session)
                raise
        return 4 + len(frame)

    def close(self) -> None:
        """Stops listening and ends every session (the agents see their controller gone)."""
        # Shut down first: closing alone leaves an accept() blocked in another thread (and
        # the socket listening) until a connection comes.
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self._changed:
            for s in self.sessions.values():
                s.end()
            self.sessions.clear()
