"""Progress bars on stderr, drawn by tqdm, and only on a terminal: a log or a pipe gets
nothing. tqdm is imported when a bar is first drawn, never at start-up."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at start-up
if TYPE_CHECKING:
    from typing import IO, Any


def _is_terminal(stream: IO[str]) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class SimulationBar:
    """Simulated time against the run's end, fed by the engine's `progress(now_ns, end_ns)`
    calls; its rate is simulated seconds per wall second (or the inverse when slower)."""

    def __init__(self, stream: IO[str], desc: str = "simulating") -> None:
        self._stream = stream
        self._desc = desc
        self._bar: Any = None

    def __call__(self, now_ns: int, end_ns: int) -> None:
        if self._bar is None:
            # The engine's first call comes after 2^20 events: short runs never import tqdm.
            from tqdm import tqdm

            self._bar = tqdm(
                total=end_ns / 1e9, file=self._stream, unit=" sim s", leave=False,
                desc=self._desc,
                bar_format="{desc} {percentage:3.0f}%|{bar}| {n:.3f}/{total:.3f} s "
                           "[{elapsed}<{remaining}, {rate_fmt}]",
            )
        self._bar.update(now_ns / 1e9 - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def simulation_bar(
    stream: IO[str] | None = None, desc: str = "simulating"
) -> SimulationBar | None:
    """A bar for one run on `stream` (stderr), or None when it is not a terminal; a testbed
    run feeds it emulated time (`desc` "emulating")."""
    stream = stream or sys.stderr
    return SimulationBar(stream, desc) if _is_terminal(stream) else None


@contextmanager
def task_bar(
    total: int, done: int = 0, desc: str = "runs", stream: IO[str] | None = None
) -> Iterator[Callable[[int], None]]:
    """Yields step(n): n more of `total` tasks finished (`done` of them before the start)."""
    stream = stream or sys.stderr
    if not _is_terminal(stream):
        yield lambda _n: None
        return
    from tqdm import tqdm

    with tqdm(total=total, initial=done, file=stream, unit=" run", desc=desc) as bar:
        yield bar.update
