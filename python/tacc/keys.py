"""Every key of a scenario file, as the engine declares it (crates/tacc-sim/src/keys.rs and each
mechanism kind's config.rs): `tacc keys [NAME]` prints them, docs/scenario-keys.md is
`markdown()` of them all, and a test keeps that page current."""

from __future__ import annotations

import textwrap
from typing import Any

import tacc

PAGE = "docs/scenario-keys.md"


def tables(name: str | None = None) -> list[dict[str, Any]]:
    """The documented tables `name` picks ("tcp", "tcp.rto_min", "mechanism.sicc"), every
    table when None; a name that picks nothing is a ValueError naming the tables."""
    found: list[dict[str, Any]] = tacc._engine().keys(name)
    if name is not None and not found:
        names = ", ".join(sorted({_name(t) for t in tacc._engine().keys() if _name(t)}))
        raise ValueError(f"keys: no table or key {name!r}; the tables: {names}")
    return found


def _name(t: dict[str, Any]) -> str:
    tag = t["tag"]
    return f"{t['table']}.{tag[1]}" if tag else t["table"]


def _header(t: dict[str, Any]) -> str:
    if not t["table"]:
        return "top level"
    brackets = "[[{}]]" if t["array"] else "[{}]"
    header = brackets.format(t["table"])
    if t["tag"]:
        header += f' {t["tag"][0]} = "{t["tag"][1]}"'
    return header


def text(found: list[dict[str, Any]], width: int = 100) -> str:
    """The tables and keys as a terminal shows them: the table, then each key with its unit,
    default and range, and its doc wrapped below."""
    lines: list[str] = []
    for t in found:
        if lines:
            lines.append("")
        lines.append(_header(t) + (f": {t['doc']}" if t["doc"] else ""))
        if not t["keys"] and t["tag"]:
            lines.append("  (no keys)")
        for k in t["keys"]:
            default = k["default"]
            facts = [k["unit"], default if default == "required" else f"default {default}"]
            if k["range"]:
                facts.append(k["range"])
            lines.append(f"  {k['key']} ({'; '.join(facts)})")
            lines.extend(textwrap.wrap(k["doc"], width, initial_indent="      ",
                                       subsequent_indent="      "))
    return "\n".join(lines)


def _cell(s: str) -> str:
    return s.replace("|", "\\|") or " "


def markdown(found: list[dict[str, Any]] | None = None) -> str:
    """docs/scenario-keys.md: one section per table, one row per key."""
    found = tables() if found is None else found
    out = [
        "# Scenario keys",
        "",
        "Every key a scenario file takes, with its unit, default and accepted values. This page",
        "is generated from the engine's declarations (`tacc keys --markdown`); `tacc keys NAME`",
        'prints one table or key ("tcp", "tcp.rto_min", "mechanism.hygenicc"). Units are',
        'written in values: times "25us", rates "1Gbps", sizes "100pkt" or "150KB", bytes "64KB".',
        "",
    ]
    for t in found:
        out += [f"## {_header(t)}", ""]
        if t["doc"]:
            out += [t["doc"], ""]
        if not t["keys"]:
            out += ["No keys.", ""]
            continue
        out += ["| key | unit | default | accepted | meaning |", "|---|---|---|---|---|"]
        for k in t["keys"]:
            cells = [f"`{k['key']}`", k["unit"], k["default"], k["range"], k["doc"]]
            out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        out.append("")
    return "\n".join(out)
