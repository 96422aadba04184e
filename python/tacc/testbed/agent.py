"""A testbed agent process: `python -m tacc.testbed.agent host|switch|wire CONFIG.json`,
started by `tacc testbed` inside a hypervisor, switch or wire namespace (`ip netns exec`).
The agent itself is Rust (crates/tacc-agent): it attaches the eBPF programs and runs the
mechanism's state machine (the wire: the links' delays) until it is killed. Exit status 2 with one `tacc-agent: error: ...` line when it cannot start.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("host", "switch", "wire"):
        print("usage: python -m tacc.testbed.agent host|switch|wire CONFIG.json",
              file=sys.stderr)
        return 2
    from tacc import _core

    try:
        _core.agent_run(argv[0], Path(argv[1]).read_text(encoding="utf-8"))
    except OSError as exc:
        print(f"tacc-agent: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
