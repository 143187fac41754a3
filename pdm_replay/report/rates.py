"""Rates over seeds and their uncertainty, as pure numpy functions (no I/O).

Two ways to pool a rate num/den over seeds, both reported and named:

- **pooled**: Σ_s num_s / Σ_s den_s (every kept token weighs the same);
- **per-seed mean**: mean over the seeds with den_s > 0 of num_s / den_s (every seed
  weighs the same; the paper's 34.2% / 36.9% read like this).

Seed outcomes of a paired comparison: a win / loss / tie compares the two sides' per-seed
rates; a seed where either side kept no measured token is *empty* (counted, never
silently dropped). The interval of the ratio − predictive difference is a percentile
bootstrap that resamples **samples** (clusters), not tokens: a sample's tokens, in every
seed it appears in, move together, so a log whose seeds share samples does not look more
precise than it is.

Examples
--------
>>> r = rate_summary([1, 0, 3], [2, 0, 4])
>>> r.pooled, r.seed_mean, r.n_seeds   # 4/6; (1/2 + 3/4)/2 over the 2 seeds with den > 0
(0.6666666666666666, 0.625, 2)
>>> seed_outcomes([0.5, 0.2, None, 0.3], [0.25, 0.2, 0.1, 0.4])
Outcomes(wins=1, losses=1, ties=1, empty=1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

DRAW_BUDGET = 1 << 22  # weights per block (32 MiB of int64/float64) bound the memory


@dataclass(frozen=True)
class RateSummary:
    """``pooled`` Σnum/Σden and ``seed_mean`` over the ``n_seeds`` seeds with den > 0."""

    pooled: float | None
    seed_mean: float | None
    n_seeds: int


def rate_summary(num: Sequence[float], den: Sequence[float]) -> RateSummary:
    """Pooled and per-seed-mean rate of per-seed counts ``num``, ``den`` ``(S,)``."""
    n, d = np.asarray(num, np.float64), np.asarray(den, np.float64)
    has = d > 0
    pooled = float(n.sum() / d.sum()) if d.sum() > 0 else None
    mean = float(np.mean(n[has] / d[has])) if has.any() else None
    return RateSummary(pooled, mean, int(has.sum()))


@dataclass(frozen=True)
class Outcomes:
    """Seeds where ratio − predictive unsafe-keep rate is > 0 (win), < 0, = 0, or a side
    has no rate (empty)."""

    wins: int
    losses: int
    ties: int
    empty: int

    @property
    def compared(self) -> int:
        return self.wins + self.losses + self.ties


def _rates(values: Sequence[float | None]) -> np.ndarray:
    return np.array([math.nan if v is None else float(v) for v in values], np.float64)


def seed_outcomes(ratio: Sequence[float | None],
                  predictive: Sequence[float | None]) -> Outcomes:
    """Outcomes of per-seed rates ``(S,)`` (None / NaN: that side kept nothing measured)."""
    diff = _rates(ratio) - _rates(predictive)
    ok = np.isfinite(diff)
    return Outcomes(int((diff[ok] > 0).sum()), int((diff[ok] < 0).sum()),
                    int((diff[ok] == 0).sum()), int((~ok).sum()))


@dataclass(frozen=True)
class ClusterCounts:
    """Kept disagreement tokens per (cluster, seed) row ``(R,)``: ``cluster`` indexes
    0..n_clusters-1 (a sample), ``seed`` 0..n_seeds-1; counts of each side's measured and
    unsafe tokens (0 where that side kept none)."""

    cluster: np.ndarray
    seed: np.ndarray
    measured_ratio: np.ndarray
    unsafe_ratio: np.ndarray
    measured_predictive: np.ndarray
    unsafe_predictive: np.ndarray
    n_clusters: int
    n_seeds: int


@dataclass(frozen=True)
class DiffInterval:
    """Bootstrap intervals of the ratio − predictive unsafe-keep difference, pooled and
    per-seed mean; ``n_resamples`` draws of ``n_clusters`` samples with replacement."""

    pooled_low: float
    pooled_high: float
    seed_mean_low: float
    seed_mean_high: float
    n_resamples: int
    n_clusters: int


def _div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def weighted_diffs(c: ClusterCounts, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pooled and per-seed-mean differences ``(B,)`` under cluster ``weights`` ``(B, C)``
    (each cluster's tokens count ``weights[b, cluster]`` times; NaN where undefined)."""
    r, s = len(c.seed), c.n_seeds
    design = np.zeros((r, 4 * s))  # column k*S + seed holds count k of the row's seed
    for k, x in enumerate((c.unsafe_ratio, c.measured_ratio, c.unsafe_predictive,
                           c.measured_predictive)):
        design[np.arange(r), k * s + c.seed] = x
    per = (weights[:, c.cluster].astype(np.float64) @ design).reshape(-1, 4, s)  # (B, 4, S)
    u_r, m_r, u_p, m_p = per.sum(axis=2).T  # pooled sums, each (B,)
    pooled = _div(u_r, m_r) - _div(u_p, m_p)
    diff = _div(per[:, 0], per[:, 1]) - _div(per[:, 2], per[:, 3])  # (B, S), NaN: empty
    valid = np.isfinite(diff)
    with np.errstate(invalid="ignore"):
        mean = np.where(valid.any(axis=1), np.nansum(diff, axis=1) / valid.sum(axis=1),
                        np.nan)
    return pooled, mean


def _percentiles(draws: np.ndarray, confidence: float) -> tuple[float, float]:
    draws = draws[np.isfinite(draws)]
    if not len(draws):
        return math.nan, math.nan
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(draws, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def resample_weights(rng: np.random.Generator, n_clusters: int, n_active: int,
                     size: int) -> np.ndarray:
    """``(size, n_active)`` counts: how often each of the first ``n_active`` of
    ``n_clusters`` clusters is drawn in ``size`` resamples of ``n_clusters`` draws with
    replacement (bootstrap weights restricted to the clusters that hold data). Exact and
    cheaper than drawing every index: the number of draws that land on the active
    clusters is Binomial(n_clusters, n_active / n_clusters), spread uniformly over them."""
    hits = rng.binomial(n_clusters, n_active / n_clusters, size=size)
    idx = rng.integers(0, n_active, size=int(hits.sum()))
    rows = np.repeat(np.arange(size), hits)
    return np.bincount(rows * n_active + idx, minlength=size * n_active).reshape(size,
                                                                                 n_active)


def bootstrap_weights(n_clusters: int, n_active: int, n_resamples: int,
                      rng_seed: int = 0) -> np.ndarray:
    """``(n_resamples, n_active)`` resample weights of :func:`resample_weights`, drawn in
    blocks from one generator seeded by ``rng_seed`` (uint16 where counts cannot
    overflow)."""
    rng = np.random.default_rng(rng_seed)
    dtype = np.uint16 if n_clusters <= np.iinfo(np.uint16).max else np.uint32
    block = max(1, DRAW_BUDGET // max(n_active, 1))
    return np.concatenate([
        resample_weights(rng, n_clusters, n_active, min(block, n_resamples - start))
        .astype(dtype) for start in range(0, n_resamples, block)])


def cluster_bootstrap_diff(c: ClusterCounts, *, n_resamples: int = 2000,
                           confidence: float = 0.95, rng_seed: int = 0,
                           weights: np.ndarray | None = None) -> DiffInterval:
    """Percentile intervals of the ratio − predictive unsafe-keep difference, resampling
    the ``n_clusters`` samples with replacement (deterministic in ``rng_seed``). Clusters with
    no kept disagreement token take part in the draw (they weigh 0 tokens). ``weights``
    ``(B, ≥ max cluster + 1)``, from :func:`bootstrap_weights`, lets several comparisons
    share one set of resamples (their ``cluster`` indices then number the same samples)."""
    if weights is None and c.n_clusters and len(c.cluster):
        weights = bootstrap_weights(c.n_clusters, int(c.cluster.max()) + 1, n_resamples,
                                    rng_seed)
    pooled, mean = [], []
    if weights is not None and len(c.cluster):
        block = max(1, DRAW_BUDGET // len(c.cluster))
        for start in range(0, len(weights), block):
            a, b = weighted_diffs(c, weights[start:start + block])
            pooled.append(a)
            mean.append(b)
    pooled_all = np.concatenate(pooled) if pooled else np.zeros(0)
    mean_all = np.concatenate(mean) if mean else np.zeros(0)
    return DiffInterval(*_percentiles(pooled_all, confidence),
                        *_percentiles(mean_all, confidence), n_resamples, c.n_clusters)
