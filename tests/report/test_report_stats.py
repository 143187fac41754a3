"""Sign test, Wilcoxon signed-rank and bootstrap against scipy (tests only) and by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from pdm_replay.report.paired_tests import (bootstrap_mean_ci, midranks, sign_test,
                                            wilcoxon_signed_rank)


def test_sign_test_by_hand() -> None:
    # 38 wins of 61 (the paper): p = 2 * P(Bin(61, .5) <= 23)
    expected = 2 * sum(math.comb(61, i) for i in range(24)) / 2**61
    assert sign_test(38, 23) == pytest.approx(expected)
    assert sign_test(5, 0) == pytest.approx(2 / 32)
    assert math.isnan(sign_test(0, 0))


@given(st.integers(0, 80), st.integers(0, 80))
@settings(max_examples=60, deadline=None)
def test_sign_test_matches_scipy(wins: int, losses: int) -> None:
    if wins + losses == 0:
        return
    assert sign_test(wins, losses) == pytest.approx(sps.binomtest(wins, wins + losses).pvalue)


def test_wilcoxon_by_hand() -> None:
    # d = [1, -2, 3, 4]: W+ = 1 + 3 + 4 = 8 of 10; the 16 sign patterns give W+ >= 8 in 3
    # (8, 9, 10), so p = 2 * 3/16
    r = wilcoxon_signed_rank([1.0, -2.0, 3.0, 4.0])
    assert (r.n, r.statistic, r.method) == (4, 2.0, "exact")
    assert r.pvalue == pytest.approx(6 / 16)


@pytest.mark.parametrize("n", [3, 8, 20, 50])
def test_wilcoxon_exact_matches_scipy(n: int) -> None:
    d = np.random.default_rng(n).normal(0.2, 1.0, n)
    r = wilcoxon_signed_rank(d)
    ref = sps.wilcoxon(d)
    assert r.method == "exact"
    assert (r.statistic, r.pvalue) == pytest.approx((ref.statistic, ref.pvalue))


def test_wilcoxon_ties_small_n_enumerates_like_scipy() -> None:
    d = np.array([0.5, 0.5, -0.25, 1.0, 0.25, 0.5, -1.0])
    r = wilcoxon_signed_rank(d)
    ref = sps.wilcoxon(d)
    assert r.method == "permutation"
    assert (r.statistic, r.pvalue) == pytest.approx((ref.statistic, ref.pvalue))


@pytest.mark.parametrize("n", [61, 200])
def test_wilcoxon_asymptotic_matches_scipy(n: int) -> None:
    rng = np.random.default_rng(n)
    d = np.round(rng.normal(0.05, 0.2, n), 2)  # rounding makes ties
    d = d[d != 0]
    r = wilcoxon_signed_rank(d)
    ref = sps.wilcoxon(d, method="asymptotic")
    assert r.method == "asymptotic"
    assert (r.statistic, r.pvalue) == pytest.approx((ref.statistic, ref.pvalue))


def test_wilcoxon_drops_zeros_and_nans() -> None:
    r = wilcoxon_signed_rank([0.0, float("nan"), 1.0, -2.0, 3.0, 4.0])
    assert r.n == 4 and r.pvalue == pytest.approx(6 / 16)
    assert math.isnan(wilcoxon_signed_rank([0.0, 0.0]).pvalue)


def test_midranks() -> None:
    assert midranks(np.array([2.0, 2.0, 1.0, 5.0, 2.0])).tolist() == [3.0, 3.0, 1.0, 5.0, 3.0]


def test_bootstrap_is_seeded_and_covers_the_mean() -> None:
    v = np.random.default_rng(1).normal(0.03, 0.05, 61)
    a = bootstrap_mean_ci(v, rng_seed=7)
    assert a == bootstrap_mean_ci(v, rng_seed=7)
    assert a != bootstrap_mean_ci(v, rng_seed=8)
    assert a[0] < v.mean() < a[1]
    # the percentile interval is close to mean +- 1.96 standard errors for 61 normal values
    se = v.std(ddof=1) / math.sqrt(len(v))
    assert a == pytest.approx((v.mean() - 1.96 * se, v.mean() + 1.96 * se), abs=0.3 * se)
    narrow = bootstrap_mean_ci(v, confidence=0.5, rng_seed=7)
    assert a[0] < narrow[0] < narrow[1] < a[1]
    assert all(math.isnan(x) for x in bootstrap_mean_ci([float("nan")]))
