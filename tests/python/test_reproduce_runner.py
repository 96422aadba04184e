"""The reproduction's run cache and the report's record of how it was run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tacc import reproduce
from tacc.reproduce import runner
from tacc.reproduce.registry import (
    Experiment,
    Less,
    Row,
    Setting,
    Variant,
    inline,
    mechanism_setting,
    profile_means,
    scenario_setting,
    values,
)
from tacc.reproduce.report import (
    ExperimentResult,
    RowResult,
    Verdict,
    judge,
    verdicts,
    write_report,
)

TINY_FIGURE = "hygenicc-fig5"  # 6 runs of a 2-5 sender star


def test_cache_key_depends_on_every_input(tmp_path: Path) -> None:
    scen = tmp_path / "a.toml"
    scen.write_text("x = 1\n")
    base = runner.cache_key(scen, [("k", "1")], 1, "v1")
    assert base == runner.cache_key(scen, [("k", "1")], 1, "v1")
    assert base != runner.cache_key(scen, [("k", "2")], 1, "v1")
    assert base != runner.cache_key(scen, [("k", "1")], 2, "v1")
    assert base != runner.cache_key(scen, [("k", "1")], 1, "v2")
    scen.write_text("x = 2\n")
    assert base != runner.cache_key(scen, [("k", "1")], 1, "v1")


def test_second_run_reuses_cached_results(engine: None, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runner.SCALE_ENV, "0.05")
    exp = reproduce.select([TINY_FIGURE])
    tasks, _dirs, _ = runner.plan(exp, tmp_path, quick=True)
    tasks = tasks[:2]
    assert runner.execute(tasks, jobs=1) == 2
    stamps = [(Path(t.out) / "summary.json").stat().st_mtime_ns for t in tasks]
    assert runner.execute(tasks, jobs=1) == 0
    assert [(Path(t.out) / "summary.json").stat().st_mtime_ns for t in tasks] == stamps
    # the same plan maps to the same directories
    again, _, _ = runner.plan(exp, tmp_path, quick=True)
    assert [t.out for t in again[:2]] == [t.out for t in tasks]


def test_report_records_the_command_and_the_engine(tmp_path: Path) -> None:
    md, html = write_report([], tmp_path, quick=True, wall=61.0,
                            command="tacc reproduce sicc --engine ray", engine="ray")

    text = md.read_text()
    assert "Command: `tacc reproduce sicc --engine ray`. Engine: ray. Mode: quick" in text
    assert "wall time 1:01" in text
    assert "<code>tacc reproduce sicc --engine ray</code>. Engine: ray." in html.read_text()


def test_report_json_has_the_markdown_rows_with_their_numbers(tmp_path: Path) -> None:
    exp = reproduce.BY_ID[TINY_FIGURE]
    nan = float("nan")
    rows = [
        RowResult(TINY_FIGURE, "hygenicc", "goodput", "250", "250 Mb/s",
                  Verdict("253.0 Mb/s ± 1.5", True, False, 253.0, 1.5),
                  Verdict("120.0 Mb/s ± 2.0", False, False, 120.0, 2.0), ["on_shortage"], "",
                  ideal_value=250.0, unit="Mb/s"),
        RowResult(TINY_FIGURE, "hygenicc", "FCT a vs b", "shorter", "-",
                  Verdict("1 vs 2", True, True, 1.0, nan), None, [], "", unit="s"),
        RowResult(TINY_FIGURE, "hygenicc", "never measured", "-", "-",
                  Verdict("-", None, False, nan, nan), None, [], "", unit="%"),
    ]
    write_report([ExperimentResult(exp, rows=rows)], tmp_path, quick=False, wall=1.0,
                 command="tacc reproduce hygenicc-fig5", engine="local")

    def no_nan(name: str) -> None:
        raise AssertionError(f"{name} in report.json, which JSON readers refuse")

    doc = json.loads((tmp_path / "report.json").read_text(), parse_constant=no_nan)
    assert (doc["command"], doc["engine"], doc["mode"]) == (
        "tacc reproduce hygenicc-fig5", "local", "full")
    got = [(r["quantity"], r["paper"], r["tacc_mean"], r["tacc_ci95"], r["ideal"], r["unit"],
            r["holds"], r["within_seed_spread"], r["differs_by"]) for r in doc["rows"]]
    assert got == [
        ("goodput", "250", 253.0, 1.5, 250.0, "Mb/s", True, False, ["on_shortage"]),
        ("FCT a vs b", "shorter", 1.0, None, None, "s", True, True, []),
        ("never measured", "-", None, None, None, "%", None, False, []),
    ]
    assert doc["rows"][0]["published"] == {"mean": 120.0, "ci95": 2.0,
                                           "shown": "120.0 Mb/s ± 2.0", "holds": False,
                                           "within_seed_spread": False}
    assert doc["rows"][1]["published"] is None
    # the counts open the report, every row counted: the same claims both ways, then tacc's
    # own experiments (a comparison within the seeds' spread is not resolved)
    assert ("**The papers' claims (1 rows): with tacc's settings 1 hold, 0 fail, 0 not resolved (0 "
            "within the seeds' spread, 0 not judged); with the algorithms as the papers "
            "specify them 0 hold, 1 fail, 0 not resolved (0 within the seeds' spread, 0 not "
            "judged); tacc's own experiments (2 rows): 0 hold, 0 fail, 2 not resolved (1 "
            "within the seeds' spread, 1 not judged)**") in (tmp_path / "REPORT.md").read_text()
    # the Markdown's headline rows are the same rows
    md = (tmp_path / "REPORT.md").read_text().splitlines()
    for r in doc["rows"]:
        assert any(line.startswith(f"| {TINY_FIGURE} | {r['quantity']} | {r['paper']} |")
                   and f"| {r['tacc']} |" in line for line in md), r


def _limiter_experiment(published: tuple[Setting, ...]) -> Experiment:
    """Two variants, one with a rate limiter: a claim that the limited one is faster."""
    def build(_scale: float) -> list[Variant]:
        return [Variant("none", (("duration", '"1s"'),)),
                Variant("limited", (("mechanism", inline(kind="hygenicc")),))]
    return Experiment("x", "hygenicc", "x", "x.toml", build, lambda _r, _s: {},
                      lambda: [Row("limited faster", "-", None, "s",
                                   lambda m: values(m, "limited", "t"),
                                   Less("limited", "none", "t"))],
                      lambda *_a: [], published=published)


SHORTAGE = mechanism_setting("on_shortage", ("hygenicc",), '"drop"', "queue", "drop", "")
WINDOWS = scenario_setting("tcp.rcv_buf", '"2000000B"', "20 segments", "2 MB", "")


def test_every_variant_also_runs_as_the_paper_specifies_and_with_one_setting_changed() -> None:
    exp = _limiter_experiment((SHORTAGE, WINDOWS))
    names = {v.name: v.sets for v in exp.variants(1.0)}
    assert names["paper|limited"][-2:] == (("mechanism.on_shortage", '"drop"'),
                                           ("tcp.rcv_buf", '"2000000B"'))
    # a limiter setting leaves a run without limiters as it is
    assert names["paper|none"] == (("duration", '"1s"'), ("tcp.rcv_buf", '"2000000B"'))
    assert names["paper, tacc's on_shortage|limited"][-1] == ("tcp.rcv_buf", '"2000000B"')
    assert names["paper, tacc's tcp.rcv_buf|limited"][-1] == ("mechanism.on_shortage",
                                                              '"drop"')
    assert len(names) == 2 * 4
    # with one departure the paper's profile is the only other one
    assert len(_limiter_experiment((SHORTAGE,)).variants(1.0)) == 4
    assert _limiter_experiment(()).variants(1.0) == exp.build(1.0)


def test_short_flow_claims_also_run_and_are_judged_with_linux_tcp(tmp_path: Path) -> None:
    exp = dataclasses.replace(_limiter_experiment((SHORTAGE,)), linux_tcp=True)
    names = {v.name: v.sets for v in exp.variants(1.0)}
    assert names["linux|limited"] == names["limited"] + (("tcp.profile", '"linux"'),)
    assert names["linux|none"] == names["none"] + (("tcp.profile", '"linux"'),)
    assert len(names) == 6, "tacc's, the paper's and Linux's"
    # The verdict with Linux's TCP is the claim on those runs alone.
    means = {("limited", "t"): [1.0, 1.1], ("none", "t"): [2.0, 2.1],
             ("paper|limited", "t"): [1.0], ("paper|none", "t"): [2.0],
             ("linux|limited", "t"): [0.9, 1.0], ("linux|none", "t"): [0.5, 0.6]}
    row = exp.rows()[0]
    assert judge(row, profile_means(means, "linux")).holds is False
    assert judge(row, profile_means(means, None)).holds is True
    nan = float("nan")
    rows = [RowResult("x", "hygenicc", "limited faster", "-", "-",
                      Verdict("1.05 s", True, False, 1.05, nan),
                      Verdict("1.00 s", True, False, 1.0, nan), [], "",
                      linux=Verdict("0.95 s", False, False, 0.95, nan))]
    write_report([ExperimentResult(exp, rows=rows)], tmp_path, quick=False, wall=1.0,
                 command="tacc reproduce x", engine="local")
    text = (tmp_path / "REPORT.md").read_text()
    assert "| x | limited faster | - | - | 1.05 s | yes | 1.00 s | yes |  | 0.95 s | no |" in text
    assert "with Linux's TCP (1 rows) 0 hold, 1 fail" in text
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["rows"][0]["linux_tcp"]["holds"] is False


def test_identical_runs_of_two_profiles_run_once(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    exp = _limiter_experiment((SHORTAGE,))
    (tmp_path / "x.toml").write_text("")
    monkeypatch.setenv("TACC_SCENARIO_DIR", str(tmp_path))
    tasks, dirs, _ = runner.plan([exp], tmp_path, quick=False)
    # "paper|none" is "none" again: 3 distinct variants x 3 seeds
    assert len(tasks) == 9
    assert dirs["x"]["paper|none"] == dirs["x"]["none"]
    assert dirs["x"]["paper|limited"] != dirs["x"]["limited"]


def test_verdicts_name_the_setting_that_alone_gives_tacc_s_verdict() -> None:
    exp = _limiter_experiment((SHORTAGE, WINDOWS))
    row = exp.rows()[0]
    fast, slow = [1.0, 1.1, 0.9], [3.0, 3.1, 2.9]

    def means(**limited: list[float]) -> dict[tuple[str, str], list[float]]:
        m = {(f"{p}none" if p else "none", "t"): [2.0, 2.1, 1.9]
             for p in ("", "paper|", "paper, tacc's on_shortage|",
                       "paper, tacc's tcp.rcv_buf|")}
        for profile, t in limited.items():
            m[(f"{profile}|limited" if profile != "tacc" else "limited", "t")] = t
        return m

    tacc, paper, why = verdicts(exp, row, means(tacc=fast, paper=slow, **{
        "paper, tacc's on_shortage": fast, "paper, tacc's tcp.rcv_buf": slow}))
    assert (tacc.holds, paper.holds, why) == (True, False, ["on_shortage"])
    _, _, why = verdicts(exp, row, means(tacc=fast, paper=slow, **{
        "paper, tacc's on_shortage": slow, "paper, tacc's tcp.rcv_buf": slow}))
    assert why == []  # no single setting: the report says so
    _, paper, why = verdicts(exp, row, means(tacc=fast, paper=fast))
    assert paper is not None and paper.holds and why == []
    # tacc's own experiments have no published verdict
    assert verdicts(_limiter_experiment(None), row, means(tacc=fast))[1] is None  # type: ignore[arg-type]


def test_a_comparison_within_the_seeds_spread_runs_again_with_more_seeds(
        engine: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An experiment whose comparison the seeds' spread could explain runs again with twice
    the seeds, until the comparison resolves or the seeds reach MAX_SEED_FACTOR times its
    own; an experiment without one keeps its seeds. (The spread is scripted here: resolved
    once a variant has 4 values, then never.)"""
    monkeypatch.setenv(runner.SCALE_ENV, "0.02")
    latency, tiny = reproduce.BY_ID["sicc-latency"], reproduce.BY_ID[TINY_FIGURE]
    base = latency.quick_seeds
    monkeypatch.setattr(Less, "spread",
                        lambda self, m: len(values(m, self.a, self.metric)) < 2 * base)
    _, results = reproduce.reproduce([latency.id, TINY_FIGURE], quick=True, out=tmp_path)
    seeds = {r.exp.id: r.seeds for r in results}
    assert seeds == {latency.id: 2 * base, TINY_FIGURE: tiny.quick_seeds}

    monkeypatch.setattr(Less, "spread", lambda self, m: True)
    md, results = reproduce.reproduce([latency.id], quick=True, out=tmp_path)
    (res,) = results
    cap = reproduce.MAX_SEED_FACTOR * base
    assert res.seeds == cap and res.runs == cap * len(latency.variants(0.02))
    assert any(r.tacc.spread for r in res.rows)
    assert f"{res.runs} runs, {cap} seed(s)" in md.read_text()
