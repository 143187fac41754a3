"""Paired tests over seeds, in pure Python/numpy (no scipy at runtime).

``sign_test`` is the exact two-sided binomial test of wins vs losses (ties dropped);
``wilcoxon_signed_rank`` follows scipy's defaults (zeros dropped, no continuity correction):
exact null distribution when n <= 50 without ties, exact enumeration of the 2^n sign flips
when there are ties and n <= 13, the normal approximation with tie correction otherwise.
``bootstrap_mean_ci`` is a seeded percentile bootstrap of the mean.

Examples
--------
>>> round(sign_test(9, 1), 6)
0.021484
>>> r = wilcoxon_signed_rank([0.3, 0.1, -0.05, 0.2, 0.4])
>>> r.n, r.statistic, round(r.pvalue, 4), r.method
(5, 1.0, 0.125, 'exact')
>>> bootstrap_mean_ci([1.0, 1.0, 1.0], rng_seed=0)
(1.0, 1.0)
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

EXACT_MAX_N = 50
PERMUTATION_MAX_N = 13


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test p-value: P(a Binomial(n, 1/2) is as unbalanced), n = w + l.

    NaN when there is nothing to compare (n = 0).

    >>> sign_test(3, 3), sign_test(0, 0)
    (1.0, nan)
    """
    n = wins + losses
    if n == 0:
        return math.nan
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1))
    return min(1.0, 2.0 * tail / 2.0**n)


@dataclass(frozen=True)
class WilcoxonResult:
    """``statistic`` = min(W+, W-); ``n`` nonzero differences; ``method`` how p was found."""

    statistic: float
    pvalue: float
    n: int
    method: str  # "exact" | "permutation" | "asymptotic" | "none"


def midranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``values`` ``(n,)``, ties sharing their average rank.

    >>> midranks(np.array([3.0, 1.0, 3.0])).tolist()
    [2.5, 1.0, 2.5]
    """
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    sorted_v = values[order]
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_v[end] != sorted_v[start]:
            ranks[order[start:end]] = (start + end + 1) / 2.0
            start = end
    return ranks


def _exact_null(n: int) -> np.ndarray:
    """``counts[s]`` = number of subsets of {1..n} with sum s (the W+ null, times 2^n)."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0  # float64 is exact here: counts <= 2^50 < 2^53
    for k in range(1, n + 1):
        counts[k:] = counts[k:] + counts[:-k].copy()
    return counts


def _two_sided(dist_le: float, dist_ge: float) -> float:
    return float(min(1.0, 2.0 * min(dist_le, dist_ge)))


def wilcoxon_signed_rank(diffs: Sequence[float]) -> WilcoxonResult:
    """Two-sided Wilcoxon signed-rank test that the paired differences ``(n,)`` center on 0."""
    d = np.asarray(diffs, dtype=np.float64)
    d = d[np.isfinite(d) & (d != 0)]
    n = len(d)
    if n == 0:
        return WilcoxonResult(math.nan, math.nan, 0, "none")
    ranks = midranks(np.abs(d))
    r_plus = float(ranks[d > 0].sum())
    statistic = min(r_plus, float(ranks.sum()) - r_plus)
    ties = len(np.unique(np.abs(d))) < n
    if not ties and n <= EXACT_MAX_N:
        counts = _exact_null(n)
        total = 2.0**n
        s = int(round(r_plus))
        p = _two_sided(counts[: s + 1].sum() / total, counts[s:].sum() / total)
        return WilcoxonResult(statistic, p, n, "exact")
    if ties and n <= PERMUTATION_MAX_N:
        flips = np.array(list(itertools.product((0.0, 1.0), repeat=n)))  # (2^n, n)
        null = flips @ ranks
        p = _two_sided(float(np.mean(null <= r_plus)), float(np.mean(null >= r_plus)))
        return WilcoxonResult(statistic, p, n, "permutation")
    _, tie_counts = np.unique(np.abs(d), return_counts=True)
    var = (n * (n + 1) * (2 * n + 1) - np.sum(tie_counts**3 - tie_counts) / 2.0) / 24.0
    z = (r_plus - n * (n + 1) / 4.0) / math.sqrt(var)
    return WilcoxonResult(statistic, math.erfc(abs(z) / math.sqrt(2.0)), n, "asymptotic")


def bootstrap_mean_ci(values: Sequence[float], *, n_resamples: int = 2000,
                      confidence: float = 0.95, rng_seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` ``(n,)``; NaNs are dropped.

    Deterministic in ``rng_seed``; ``(nan, nan)`` when no value is left.
    """
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(rng_seed)
    means = v[rng.integers(0, len(v), size=(n_resamples, len(v)))].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return float(lo), float(hi)
