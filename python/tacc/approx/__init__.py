"""Approximate runs of scenarios too large for one packet-level run.

`link-decomposition` (in the manner of Parsimon, Zhao et al., NSDI'23): every link the
workload loads is simulated alone, packet by packet with tacc's engine, with only the flows
that cross it; a flow's completion time is its ideal one plus the delays it met on each of its
links. The link simulations are independent tasks, run in a local process pool or on Ray.
"""

from tacc.approx.decomposition import (
    METHOD,
    ApproxError,
    Options,
    ideal_fct_ns,
    link_tasks,
    run_link_decomposition,
)

__all__ = [
    "METHOD",
    "ApproxError",
    "Options",
    "ideal_fct_ns",
    "link_tasks",
    "run_link_decomposition",
]
