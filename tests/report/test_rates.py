"""Pooled vs per-seed-mean rates, seed outcomes and the sample-clustered bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdm_replay.report.rates import (ClusterCounts, Outcomes, cluster_bootstrap_diff,
                                     rate_summary, seed_outcomes, weighted_diffs)


def test_pooled_and_seed_mean_differ_by_hand() -> None:
    # seed 0: 9 of 10 unsafe, seed 1: 0 of 1. Pooled 9/11; per-seed mean (0.9 + 0) / 2
    r = rate_summary([9, 0], [10, 1])
    assert r.pooled == pytest.approx(9 / 11) and r.seed_mean == pytest.approx(0.45)
    # a seed with nothing kept has no rate: it is left out of the mean, not counted as 0
    r = rate_summary([9, 0, 0], [10, 1, 0])
    assert (r.seed_mean, r.n_seeds) == (pytest.approx(0.45), 2)
    assert rate_summary([0], [0]) == rate_summary([], []) == type(r)(None, None, 0)


def test_outcomes_count_empty_sides() -> None:
    # win (0.5 > 0.25), tie, empty (ratio side has no rate), loss, empty (NaN)
    got = seed_outcomes([0.5, 0.2, None, 0.3, math.nan], [0.25, 0.2, 0.1, 0.4, 0.1])
    assert got == Outcomes(wins=1, losses=1, ties=1, empty=2) and got.compared == 3


rates = st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=12)


@given(rates)
def test_both_rates_lie_between_the_seed_rates(pairs) -> None:
    num = [min(a, b) for a, b in pairs]
    den = [max(a, b) for a, b in pairs]
    r = rate_summary(num, den)
    per = [n / d for n, d in zip(num, den) if d]
    if not per:
        assert r.pooled is None and r.seed_mean is None
        return
    eps = 1e-12  # a mean of <= 12 ratios in [0, 1]: a few ulps of rounding at most
    assert min(per) - eps <= r.pooled <= max(per) + eps
    assert min(per) - eps <= r.seed_mean <= max(per) + eps
    if len(set(den[i] for i in range(len(den)) if den[i])) == 1:  # equal weights: same
        assert r.pooled == pytest.approx(r.seed_mean, abs=eps)


def counts(rows: list[tuple[int, int, int, int, int, int]], n_clusters: int,
           n_seeds: int) -> ClusterCounts:
    """rows: (cluster, seed, measured_ratio, unsafe_ratio, measured_pred, unsafe_pred)."""
    a = np.array(rows, dtype=np.int64).reshape(-1, 6)
    return ClusterCounts(a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4], a[:, 5],
                         n_clusters, n_seeds)


def test_weighted_diffs_by_hand() -> None:
    # cluster 0 (seed 0): ratio 1 of 2 unsafe, pred 0 of 1; cluster 1 (seed 1): ratio 1 of
    # 1, pred 1 of 2. Weights (1, 1): pooled 2/3 - 1/3; per seed (1/2 - 0, 1 - 1/2) -> 1/2.
    # Weights (2, 0): only seed 0 is left: 1/2 - 0 both ways; (0, 2): 1 - 1/2.
    c = counts([(0, 0, 2, 1, 1, 0), (1, 1, 1, 1, 2, 1)], 2, 2)
    pooled, mean = weighted_diffs(c, np.array([[1, 1], [2, 0], [0, 2]]))
    assert pooled == pytest.approx([1 / 3, 0.5, 0.5])
    assert mean == pytest.approx([0.5, 0.5, 0.5])


def test_duplicated_samples_do_not_narrow_the_interval() -> None:
    # The same 6 samples, once in one seed, and copied into a second seed (as overlapping
    # seeds do): a token bootstrap would see twice the tokens and shrink; resampling
    # samples sees the same 6 clusters with doubled counts, so the interval is unchanged.
    rng = np.random.default_rng(3)
    base = [(i, 0, int(m), int(rng.integers(0, m + 1)), int(p), int(rng.integers(0, p + 1)))
            for i, (m, p) in enumerate(rng.integers(1, 5, size=(6, 2)))]
    once = cluster_bootstrap_diff(counts(base, 6, 1), n_resamples=500, rng_seed=7)
    twice = cluster_bootstrap_diff(counts(base + [(c, 1, *r) for c, _, *r in base], 6, 2),
                                   n_resamples=500, rng_seed=7)
    assert (twice.pooled_low, twice.pooled_high) == pytest.approx(
        (once.pooled_low, once.pooled_high), abs=1e-12)
    assert once.pooled_high > once.pooled_low  # not a degenerate case


def test_every_sample_alike_gives_a_point_interval() -> None:
    # each sample: ratio 1 of 2 unsafe, predictive 0 of 1: every resample has diff 1/2
    c = counts([(i, i % 3, 2, 1, 1, 0) for i in range(9)], 12, 3)  # 3 samples with no token
    ci = cluster_bootstrap_diff(c, n_resamples=300, rng_seed=0)
    assert (ci.pooled_low, ci.pooled_high, ci.seed_mean_low, ci.seed_mean_high) == \
        pytest.approx((0.5, 0.5, 0.5, 0.5))
    assert (ci.n_resamples, ci.n_clusters) == (300, 12)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 600))
def test_bootstrap_is_deterministic_and_brackets_possible_values(seed: int, b: int) -> None:
    c = counts([(0, 0, 3, 2, 1, 0), (1, 0, 1, 0, 2, 2), (2, 1, 2, 2, 2, 1)], 3, 2)
    one = cluster_bootstrap_diff(c, n_resamples=b, rng_seed=seed)
    assert one == cluster_bootstrap_diff(c, n_resamples=b, rng_seed=seed)
    assert -1.0 <= one.pooled_low <= one.pooled_high <= 1.0


def test_empty_input_has_no_interval() -> None:
    ci = cluster_bootstrap_diff(counts([], 4, 2), n_resamples=10)
    assert all(math.isnan(v) for v in (ci.pooled_low, ci.pooled_high, ci.seed_mean_low))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.data())
def test_resample_weights_are_bootstrap_counts(n_clusters: int, data) -> None:
    from pdm_replay.report.rates import resample_weights
    n_active = data.draw(st.integers(1, n_clusters))
    w = resample_weights(np.random.default_rng(0), n_clusters, n_active, 400)
    assert w.shape == (400, n_active) and (w >= 0).all()
    sums = w.sum(axis=1)
    assert (sums <= n_clusters).all()  # the inactive clusters take the other draws
    if n_active == n_clusters:
        assert (sums == n_clusters).all()
    # each cluster is drawn n_clusters * (1 / n_clusters) = 1 time on average; over 400
    # resamples the mean's standard error is sqrt((1 - 1/C) / 400) <= 0.05: 6 sigma
    assert abs(w.mean() - 1.0) < 0.3
