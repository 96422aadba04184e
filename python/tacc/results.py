"""Read a tacc result directory into pandas DataFrames (`load`); pandas is imported when a
directory is loaded, not with this module. Writers that produce such a directory outside the
engine (the testbed) write it in the engine's format here
(`write_table`, `write_atomic`).
"""

from __future__ import annotations

import csv
import dataclasses
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


def at_scenario_rates(result: Result) -> Result:
    """A testbed run's result with its rates at the scenario's: the testbed runs every link
    at `testbed.rate_scale` times the scenario's rate, so goodputs, limiter rates, ports'
    rates and the bytes a flow without an FCT delivered (a bulk flow's) are divided by that
    scale (a simulation is returned as it is). Times (FCTs too), queue lengths,
    utilizations, packet counts and a finished flow's bytes stay as measured: at a scale
    under 1 a sized flow's FCT is its FCT at the scaled rates, unless the run was dilated in
    time (`testbed.time_dilation`, as a run with applications is), which gives the
    scenario's."""
    scale = float(result.summary.get("testbed", {}).get("rate_scale", 1.0))
    if scale == 1.0:
        return result

    def divided(frame: pd.DataFrame, column: str, rows: Any = slice(None)) -> pd.DataFrame:
        frame = frame.astype({column: float})
        frame.loc[rows, column] = frame.loc[rows, column] / scale
        return frame

    flows = divided(result.flows, "goodput_mbps")
    flows = divided(flows, "bytes_delivered", flows["fct"].isna())
    summary = dict(result.summary)
    summary["ports"] = [{**p, "rate_bps": p["rate_bps"] / scale} for p in summary["ports"]]
    summary["flows"] = [{**f, "goodput_mbps": f["goodput_mbps"] / scale,
                         "bytes_delivered": f["bytes_delivered"] / (scale if f["fct"] is None
                                                                    else 1.0)}
                        for f in summary["flows"]]
    rates = None if result.rates is None else divided(result.rates, "rate_mbps")
    return dataclasses.replace(result, summary=summary, flows=flows,
                               goodput=divided(result.goodput, "goodput_mbps"),
                               ports=_ports_frame(summary["ports"]), rates=rates)


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
