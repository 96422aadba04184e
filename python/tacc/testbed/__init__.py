"""The testbed: a scenario emulated on real Linux (network namespaces, veth pairs, tc qdiscs,
the kernel's own TCP and UDP), written as a result directory that `tacc show`, `tacc plot`
and `tacc compare` read like a simulation's.

Modules: `plan` (the engine's built world as JSON, checked; rate scaling), `features` (what
the machine must have), `topology` (namespaces, links, routes, queues, and their teardown),
`traffic` (the per-VM process of sources and sinks), `collect` (result files), `run` (the
orchestration), `compare` (two result directories side by side, or the spread of several
runs a side), `repeat` (repeated runs and their spread), `control` (signed messages to the
host agents). The host and switch agent (`agent`) is the mechanisms' Linux driver and
lives apart. Importing this package imports none of them.
"""

from __future__ import annotations


class TestbedError(RuntimeError):
    """A testbed run failed: a command, an agent or a traffic process."""


class TestbedUnavailable(TestbedError):
    """The machine lacks what a run needs; `missing` has one line per missing item."""

    def __init__(self, missing: list[str]) -> None:
        super().__init__("\n".join(missing))
        self.missing = missing
