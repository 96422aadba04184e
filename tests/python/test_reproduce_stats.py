"""The reproduction's statistics over seeds, and how a noisy comparison is reported."""

from __future__ import annotations

import numpy as np
import pytest

from tacc.reproduce.registry import Less
from tacc.reproduce.report import Verdict, _verdict
from tacc.reproduce.stats import mean_ci, t95, within_spread


def test_mean_ci() -> None:
    assert mean_ci([5.0]) == (5.0, 0.0)
    m, ci = mean_ci([1.0, 3.0])
    assert m == 2.0 and ci == pytest.approx(12.706 * 2 ** 0.5 / 2 ** 0.5)
    # 12 seeds: 11 degrees of freedom, between the table's 10 and 15, take 10's wider 2.228
    # (not the normal 1.96)
    values = [float(i % 2) for i in range(12)]
    m, ci = mean_ci(values)
    sd = float(np.std(values, ddof=1))
    assert m == 0.5 and ci == pytest.approx(2.228 * sd / 12 ** 0.5)
    assert t95(100) == 2.042 and t95(1) == 12.706


def test_within_spread_is_welch_t_test() -> None:
    # means 2 and 11, each sample variance 1 over 3 seeds: standard error sqrt(2/3), Welch
    # df 4, t = 2.776: the difference 9 is far outside 2.776 * 0.816 = 2.27
    assert within_spread([1, 2, 3], [10, 11, 12]) is False
    # a difference of 1 is inside it
    assert within_spread([1, 2, 3], [2, 3, 4]) is True
    # one seed on a side: nothing to judge the spread by
    assert within_spread([1.0], [2.0, 3.0]) is None


def test_noisy_comparison_is_marked_within_seed_spread() -> None:
    claim = Less("a", "b", "fct")
    noisy = {("a", "fct"): [1.0, 3.0, 2.0], ("b", "fct"): [2.5, 2.0, 3.0]}
    clear = {("a", "fct"): [1.0, 1.1, 0.9], ("b", "fct"): [2.5, 2.4, 2.6]}
    assert claim(0.0, noisy) and claim.spread(noisy)
    assert claim(0.0, clear) and not claim.spread(clear)
    assert _verdict(Verdict("1 vs 2", True, True, 1.0, 0.5)) == "yes, within seed spread"


def test_a_time_that_never_came_has_a_mean_but_no_interval() -> None:
    m, ci = mean_ci([0.1, float("inf")])
    assert m == float("inf") and np.isnan(ci)
