"""Loading, tabulating and plotting result directories (no compiled engine needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tacc
from tacc.plot import plot_dir
from tacc.summary import read_summary

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_load_reads_every_table(result_dir: Path) -> None:
    result = tacc.load(result_dir)

    assert result.dir == result_dir
    assert result.summary["scenario"] == "synthetic"
    assert list(result.flows["name"]) == ["f0", "f1", "f2"]
    assert list(result.flows["group"]) == ["bulk", "mice", "bulk"]
    assert result.flows["completed"].tolist() == [True, True, False]
    assert result.flows["fct"].isna().tolist() == [False, False, True]
    assert list(result.ports["name"]) == ["sw0->r0", "sw0->s0", "idle->port"]
    assert set(result.goodput.columns) == {"time_s", "flow", "goodput_mbps"}
    assert len(result.goodput) == 3 * 10
    assert len(result.queues) == 3 * 10
    assert result.rates is None
    assert "synthetic" in repr(result)


def test_load_reads_optional_rates(make_result_dir) -> None:
    result = tacc.load(make_result_dir(with_rates=True))

    assert result.rates is not None
    assert sorted(result.rates["vm"].unique()) == ["vm0", "vm1"]


def test_load_keeps_names_that_look_like_missing_values(result_dir: Path) -> None:
    flows_csv = result_dir / "flows.csv"
    flows_csv.write_text(flows_csv.read_text().replace("f1,mice", "NA,mice"))

    assert tacc.load(result_dir).flows["name"].tolist() == ["f0", "NA", "f2"]


def test_load_rejects_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such result directory"):
        tacc.load(tmp_path / "absent")


def test_load_rejects_a_directory_without_summary(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a tacc result directory"):
        tacc.load(tmp_path)


def test_load_names_the_file_with_invalid_json(result_dir: Path) -> None:
    (result_dir / "summary.json").write_text("{not json")

    with pytest.raises(ValueError, match=r"summary\.json: invalid JSON"):
        tacc.load(result_dir)


def test_load_names_missing_summary_fields(result_dir: Path) -> None:
    path = result_dir / "summary.json"
    summary = json.loads(path.read_text())
    del summary["conservation"]
    path.write_text(json.dumps(summary))

    with pytest.raises(ValueError, match="missing conservation"):
        read_summary(result_dir)


def test_load_names_a_csv_without_required_columns(result_dir: Path) -> None:
    (result_dir / "goodput.csv").write_text("time,who\n0,f0\n")

    with pytest.raises(ValueError, match=r"goodput\.csv: missing column\(s\) time_s"):
        tacc.load(result_dir)


def test_summary_table_lists_flows_busy_ports_and_totals(result_dir: Path) -> None:
    table = tacc.summary_table(read_summary(result_dir))
    lines = table.splitlines()

    assert lines[0] == "scenario synthetic (seed 42) from synthetic.toml"
    for name in ("f0", "f1", "f2"):
        assert any(line.split()[:1] == [name] for line in lines), name
    f0 = next(line for line in lines if line.split()[:1] == ["f0"])
    assert f0.split() == ["f0", "tcp/dctcp+ecn", "0", "5.000ms", "100.0", "5.000ms", "0/0"]
    f2 = next(line for line in lines if line.split()[:1] == ["f2"])
    assert f2.split()[3] == "-" and f2.split()[5] == "-"  # never finished
    assert "sw0->r0" in table and "sw0->s0" in table
    assert "idle->port" not in table  # no traffic, not a bottleneck
    assert "ports with traffic (2 of 3)" in table
    assert "delivered 1,000" in table and ": ok" in table
    assert "events 123,456" in table and "246,912 events/s" in table


def test_summary_table_orders_ports_deepest_queue_first(result_dir: Path) -> None:
    table = tacc.summary_table(read_summary(result_dir))

    assert table.index("sw0->r0") < table.index("sw0->s0")


def test_summary_table_prints_every_flow_up_to_the_limit(make_result_dir) -> None:
    table = tacc.summary_table(read_summary(make_result_dir(n_flows=40)))

    assert "f39" in table
    assert "by group" not in table


def test_summary_table_aggregates_groups_above_40_flows(make_result_dir) -> None:
    table = tacc.summary_table(read_summary(make_result_dir(n_flows=41)))
    lines = table.splitlines()

    assert "f0" not in table.split() and "f40" not in table
    assert "flows (41, by group; FCT over completed flows)" in table
    bulk = next(line for line in lines if line.split()[:1] == ["bulk"])
    mice = next(line for line in lines if line.split()[:1] == ["mice"])
    # bulk: flows 0,2..40 (21, the last unfinished); mice: 1,3..39 (20, all finished).
    assert bulk.split()[1:6] == ["21", "20", "120.0", "100.0", "140.0"]
    assert mice.split()[1:6] == ["20", "20", "120.0", "101.0", "139.0"]


def test_summary_table_flags_a_conservation_violation(result_dir: Path) -> None:
    summary = read_summary(result_dir)
    summary["conservation"]["ok"] = False

    assert "VIOLATED" in tacc.summary_table(summary)


@pytest.mark.parametrize(
    ("values", "expected"),
    [([1, 1, 1, 1], 1.0), ([1, 0, 0, 0], 0.25), ([1, 2], 0.9), ([0, 0], 1.0)],
)
def test_jain_index_matches_hand_values(values: list[float], expected: float) -> None:
    assert tacc.jain_index(values) == pytest.approx(expected)


@pytest.mark.parametrize("values", [[], [1, -1], [1, float("nan")]])
def test_jain_index_rejects_meaningless_input(values: list[float]) -> None:
    with pytest.raises(ValueError):
        tacc.jain_index(values)


def _assert_pngs(paths: list[Path], names: list[str]) -> None:
    assert [p.name for p in paths] == names
    for path in paths:
        assert path.read_bytes()[:8] == PNG_MAGIC
        assert path.stat().st_size > 1000


def test_plot_dir_writes_goodput_and_queue_pngs(result_dir: Path) -> None:
    paths = plot_dir(result_dir)

    _assert_pngs(paths, ["goodput.png", "queues.png"])
    assert all(p.parent == result_dir for p in paths)


def test_plot_dir_adds_rates_png_when_rates_exist(make_result_dir) -> None:
    _assert_pngs(plot_dir(make_result_dir(with_rates=True)),
                 ["goodput.png", "queues.png", "rates.png"])


def test_plot_dir_plots_groups_for_many_flows(make_result_dir) -> None:
    _assert_pngs(plot_dir(make_result_dir(n_flows=30)), ["goodput.png", "queues.png"])


def test_plot_dir_copes_without_samples(make_result_dir) -> None:
    _assert_pngs(plot_dir(make_result_dir(with_samples=False, with_rates=True)),
                 ["goodput.png", "queues.png", "rates.png"])
