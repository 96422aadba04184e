"""Messages to the host agents' control sockets (`agent-h<j>.sock` in the run's directory),
signed with the run's key so that an agent acts only on messages from a holder of it.

`tacc testbed` writes a fresh random key per run (`control.key` in its working directory,
readable by root only) before any agent starts, and gives each host agent its path. A
controller, or a test acting as one, sends with `ControlSender(key_path).send(socket_path,
message)`, `message` being a `tacc_mech::control::HostMessage` as JSON (e.g.
`{"Congestion": {"to_src": ..., "from_dst": ..., "marks": ...}}`).

One datagram carries one message (crates/tacc-agent/src/control.rs reads it):

    mac (32 bytes) || seq (8 bytes, big-endian u64) || message (the HostMessage's JSON)
    mac = HMAC-SHA256(key, seq || message)

An agent accepts a datagram only if its MAC verifies and its seq is above every seq it
accepted before. It counts the others: `control_forged` (a bad MAC, or shorter than the 40
bytes of header), `control_replayed` (authentic, seq not above the last accepted) and
`control_malformed` (authentic and fresh, but not a HostMessage); with `control_accepted`,
they reach summary.json as `testbed.host_agents.<host>`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import socket
import time
from pathlib import Path
from typing import Any

from tacc.testbed import TestbedError

KEY_FILE = "control.key"
KEY_BYTES = 32


def new_key(workdir: Path) -> Path:
    """A fresh random key in `workdir`, readable by its owner only; returns its path."""
    path = workdir / KEY_FILE
    # Created with its mode: the key is never readable by others, not even for a moment.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(KEY_BYTES))
    return path


def read_key(path: str | os.PathLike[str]) -> bytes:
    try:
        key = Path(path).read_bytes()
    except OSError as exc:
        raise TestbedError(f"control key: {exc}") from exc
    if len(key) != KEY_BYTES:
        raise TestbedError(f"control key {path}: expected {KEY_BYTES} bytes, found {len(key)}")
    return key


def sign(key: bytes, seq: int, message: dict[str, Any]) -> bytes:
    """The datagram of `message` with sequence number `seq` (1 to 2**64 - 1)."""
    body = json.dumps(message, separators=(",", ":")).encode()
    head = seq.to_bytes(8, "big")
    return hmac.new(key, head + body, hashlib.sha256).digest() + head + body


class ControlSender:
    """Signs and sends messages to host agents with the key at `key_path`.

    Sequence numbers are nanoseconds since the epoch (one more than the last, if the clock has
    not moved on): a sender started again, after a crash, signs above everything it sent
    before, as the agents require. Two senders at once may interleave: a datagram that reaches
    an agent after one of the other sender's with a higher seq counts as replayed.
    """

    def __init__(self, key_path: str | os.PathLike[str]) -> None:
        self.key = read_key(key_path)
        self.last_seq = 0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)

    def send(self, path: str | os.PathLike[str], message: dict[str, Any]) -> bytes:
        """Sends `message` to the agent's socket at `path`; returns the datagram sent (its
        length is the bytes on the channel). OSError if the agent's socket is not there."""
        self.last_seq = max(time.time_ns(), self.last_seq + 1)
        datagram = sign(self.key, self.last_seq, message)
        self.sock.sendto(datagram, os.fspath(path))
        return datagram

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> ControlSender:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
