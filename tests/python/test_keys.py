"""`tacc keys` and docs/scenario-keys.md: every key documented from the engine's declarations,
the page kept current."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tacc import keys
from test_cli import assert_one_line_error, tacc_cli

ROOT = Path(__file__).resolve().parents[2]


def test_the_page_is_the_declarations(engine: None) -> None:
    page = (ROOT / keys.PAGE).read_text(encoding="utf-8")
    assert page == keys.markdown() + "\n", (
        f"{keys.PAGE} is out of date: regenerate it with "
        f"`tacc keys --markdown > {keys.PAGE}`"
    )


def test_a_mechanism_kind_documents_every_key_with_unit_default_and_range(engine: None) -> None:
    proc = tacc_cli("keys", "mechanism.hygenicc")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith('[mechanism] kind = "hygenicc": HyGenICC'), out
    documented = re.findall(r"^  (\w+) \((.+)\)$", out, re.M)
    names = [k for k, _ in documented]
    for key in ["update_interval", "feedback_timeout", "fast_increase", "weights", "burst",
                "on_shortage", "idle_timeout", "scrub"]:
        assert key in names, (key, names)
    interval = dict(documented)["update_interval"]
    assert interval.startswith("time; default 500us"), interval
    assert "on_shortage" in names and '"drop" or "queue"' in dict(documented)["on_shortage"]


def test_one_key_and_every_table(engine: None) -> None:
    one = tacc_cli("keys", "tcp.rto_min")
    assert one.returncode == 0, one.stderr
    assert one.stdout.startswith("[tcp]"), one.stdout
    assert len(re.findall(r"^  \w+ \(", one.stdout, re.M)) == 1, one.stdout
    every = tacc_cli("keys")
    tables = re.findall(r"^(\[\[?[\w.]+\]\]?.*?|top level)(?::|$)", every.stdout, re.M)
    for t in ["top level", "[tcp]", "[[flows]]", "[[incast]]", "[[traffic]]", "[[rules]]",
              "[queue]", "[nic]", "[output]", '[topology] kind = "fat-tree"',
              '[[loss]] model = "gilbert-elliott"', '[mechanism] kind = "sdn-ecn"']:
        assert t in tables, (t, tables)


def test_a_name_that_is_no_key_is_one_error_line(engine: None) -> None:
    proc = tacc_cli("keys", "tcp.warp_drive")
    assert_one_line_error(proc)
    assert "tcp.warp_drive" in proc.stderr and "tcp" in proc.stderr


@pytest.mark.parametrize("cell", ["a|b", ""])
def test_markdown_cells_survive_pipes_and_blanks(cell: str) -> None:
    table = {"table": "t", "tag": None, "array": False, "doc": "",
             "keys": [{"key": "k", "unit": "time", "default": "1s", "range": cell, "doc": "d"}]}
    (row,) = [r for r in keys.markdown([table]).splitlines() if r.startswith("| `k`")]
    assert row.count(" | ") == 4, row
