"""Read a tacc result directory into pandas DataFrames (`load`); pandas is imported when a
directory is loaded, not with this module. Writers that produce such a directory outside the
engine (the testbed, the link decomposition) write it in the engine's format here
(`write_table`, `write_atomic`).
"""

from __future__ import annotations

import csv
import errno
import io
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tacc.summary import read_summary

if TYPE_CHECKING:
    import pandas as pd


def _cell(value: Any) -> str:
    # As the engine writes them: empty for none, lower-case booleans.
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def write_table(path: Path, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A result CSV file as the engine writes one."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([_cell(v) for v in row] for row in rows)
    write_atomic(path, buf.getvalue())


def write_atomic(path: Path, text: str) -> None:
    """Written aside and renamed, as the engine writes its result files: a reader never sees
    half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)

_CSV_COLUMNS = {
    "flows.csv": ("name", "group", "goodput_mbps", "fct"),
    "goodput.csv": ("time_s", "flow", "goodput_mbps"),
    "queues.csv": ("time_s", "port", "backlog_pkts"),
    "rates.csv": ("time_s", "vm", "rate_mbps"),
}
_PORT_FIELDS = (
    "name", "rate_bps", "enqueued", "dropped", "marked",
    "max_backlog_pkts", "mean_backlog_pkts", "utilization",
)


@dataclass(frozen=True, repr=False)
class Result:
    """One simulation's output: `summary` as written, the rest as DataFrames."""

    dir: Path
    summary: dict[str, Any]
    flows: pd.DataFrame
    ports: pd.DataFrame
    goodput: pd.DataFrame
    queues: pd.DataFrame
    rates: pd.DataFrame | None

    def __repr__(self) -> str:
        return (
            f"Result(dir={str(self.dir)!r}, scenario={self.summary['scenario']!r}, "
            f"seed={self.summary['seed']}, flows={len(self.flows)})"
        )


def load(directory: str | PathLike[str]) -> Result:
    """Load the result directory written by `tacc.run` / `tacc run`."""
    root = Path(directory)
    summary = read_summary(root)
    rates = root / "rates.csv"
    return Result(
        dir=root,
        summary=summary,
        flows=_read_flows(root / "flows.csv"),
        ports=_ports_frame(summary["ports"]),
        goodput=_read_csv(root / "goodput.csv"),
        queues=_read_csv(root / "queues.csv"),
        rates=_read_csv(rates) if rates.exists() else None,
    )


def _read_flows(path: Path) -> pd.DataFrame:
    flows = _read_csv(path)
    # An empty group cell means "no group"; keep it a string so grouping sees it.
    flows["group"] = flows["group"].fillna("")
    return flows


def _read_csv(path: Path) -> pd.DataFrame:
    import pandas as pd

    if not path.is_file():
        raise FileNotFoundError(errno.ENOENT, "missing result file", str(path))
    try:
        # Only empty cells are missing values: a flow or port named "NA" stays a name.
        frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: unreadable CSV: {exc}") from exc
    missing = [c for c in _CSV_COLUMNS[path.name] if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
    return frame


def _ports_frame(ports: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(ports) if ports else pd.DataFrame(columns=list(_PORT_FIELDS))
