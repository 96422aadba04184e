"""PNG plots of a result directory, drawn with the Agg backend (no display needed)."""

from __future__ import annotations

from os import PathLike
from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tacc.results import Result, load

MAX_SERIES = 12  # more flows than this are plotted as per-group means
MAX_PORTS = 8


def plot_dir(directory: str | PathLike[str]) -> list[Path]:
    """Write goodput.png, queues.png (and rates.png if rates.csv exists) into the directory."""
    return plot_result(load(directory))


def plot_result(result: Result) -> list[Path]:
    """Like `plot_dir`, for an already loaded result."""
    written = [
        _draw(result, "goodput", "goodput (Mb/s)", _goodput_series(result)),
        _draw(result, "queues", "backlog (packets)", _queue_series(result)),
    ]
    if result.rates is not None:
        written.append(_draw(result, "rates", "allocated rate (Mb/s)", _rate_series(result.rates)))
    return written


def _goodput_series(result: Result) -> dict[str, pd.Series]:
    if result.goodput.empty:
        return {}
    if len(result.flows) > MAX_SERIES:
        return _group_goodput_series(result)
    binned = _binned(result.goodput, "flow", "goodput_mbps")
    mean = result.flows.set_index("name")["goodput_mbps"]
    return {
        f"{name} (mean {mean[name]:.1f} Mb/s)": binned[name]
        for name in result.flows["name"]
        if name in binned.columns
    }


def _group_goodput_series(result: Result) -> dict[str, pd.Series]:
    group_of = result.flows.set_index("name")["group"]
    per_group = result.goodput.assign(group=result.goodput["flow"].map(group_of))
    # Dividing the group's total by its size counts silent flows as zero goodput.
    total = _binned(per_group, "group", "goodput_mbps")
    series = {}
    for group, members in result.flows.groupby("group", sort=True):
        if group in total.columns:
            label = (
                f"{group or '(none)'}: {len(members)} flows "
                f"(mean {members['goodput_mbps'].mean():.1f} Mb/s)"
            )
            series[label] = total[group] / len(members)
    return series


def _queue_series(result: Result) -> dict[str, pd.Series]:
    busiest = _busiest_ports(result.ports)
    samples = result.queues[result.queues["port"].isin(busiest["name"])]
    if samples.empty:
        return {}
    binned = _binned(samples, "port", "backlog_pkts")
    return {
        f"{port.name} (max {port.max_backlog_pkts} pkts, {port.utilization:.0%} util)":
            binned[port.name]
        for port in busiest.itertuples()
        if port.name in binned.columns
    }


def _busiest_ports(ports: pd.DataFrame) -> pd.DataFrame:
    with_traffic = ports[ports["enqueued"] > 0]
    return with_traffic.sort_values(
        ["mean_backlog_pkts", "enqueued"], ascending=False, kind="stable"
    ).head(MAX_PORTS)


def _rate_series(rates: pd.DataFrame) -> dict[str, pd.Series]:
    if rates.empty:
        return {}
    binned = _binned(rates, "vm", "rate_mbps")
    return {str(vm): binned[vm] for vm in rates["vm"].unique()}


def _binned(frame: pd.DataFrame, key: str, value: str) -> pd.DataFrame:
    """Long format -> one column per key, indexed by time; absent samples are zero."""
    return frame.pivot_table(
        index="time_s", columns=key, values=value, aggfunc="sum", fill_value=0.0
    )


def _draw(result: Result, kind: str, ylabel: str, series: dict[str, pd.Series]) -> Path:
    """Step plot (samples are bin starts) of each series, saved as <dir>/<kind>.png."""
    fig = Figure(figsize=(10, 4.5), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    scale, unit = _time_unit(result)
    for label, values in series.items():
        ax.step(values.index * scale, values.to_numpy(), where="post", label=label)
    summary = result.summary
    ax.set_title(f"{summary['scenario']}: {kind} (seed {summary['seed']})")
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if series:
        ax.set_ylim(bottom=0)  # every plotted quantity is non-negative
        if len(series) <= MAX_SERIES:
            ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center")
    path = result.dir / f"{kind}.png"
    # The figure's extent with the legend beside the axes, measured without drawing:
    # `bbox_inches="tight"` drew the whole figure twice.
    fig.savefig(path, bbox_inches=fig.get_tightbbox(fig.canvas.get_renderer()).padded(0.1))
    return path


def _time_unit(result: Result) -> tuple[float, str]:
    # Most data-center runs last milliseconds; seconds would squash the tick labels.
    if result.summary["sim_seconds"] < 1:
        return 1e3, "ms"
    return 1.0, "s"
