"""The headline direction analysis, computed once: one row per basis and comparison.

A row compares the ratio mask with the predictive mask of one registered pair (``pair``)
at one threshold setting (``delta``; ``region`` is the pair's out-of-region test, from the
registry's criterion; :mod:`pdm_replay.report.comparisons`) with ΔD of the pair's
``family`` measured under one basis (``actual`` first, then ``own``, then ``none``). It holds both
ways of pooling every rate (:mod:`pdm_replay.report.rates`: ``*_pooled`` = Σ unsafe /
Σ measured, ``*_seed_mean`` = mean of the per-seed rates), the seed outcomes (wins /
losses / ties / empty), the sign test and Wilcoxon p-values over the compared seeds, left
empty when the seeds share samples (manifest ``seed_overlap``), and sample-clustered
bootstrap intervals of the ratio − predictive unsafe-keep difference.

Examples
--------
>>> from pdm_replay.testing.synthetic_run import example_run
>>> from pdm_replay.report.db import connect
>>> with connect(example_run()) as db:
...     h = headline(db, n_resamples=200)
>>> h.select("basis", "pair", "region").rows()[:2]  # doctest: +NORMALIZE_WHITESPACE
[('own', 'dppo_topk_kl vs pdm_kl_agg', 'kl_topk > 0.15'),
 ('own', 'dppo_topk_kl vs pdm_kl_uniform', 'kl_topk > 0.15')]
>>> row = h.row(0, named=True)
>>> row["wins"] + row["losses"] + row["ties"] + row["empty_seeds"] == row["n_seeds"]
True
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from pdm_replay.report.db import ReportDB
from pdm_replay.report.rates import (ClusterCounts, bootstrap_weights,
                                     cluster_bootstrap_diff, rate_summary, seed_outcomes)
from pdm_replay.report.paired_tests import sign_test, wilcoxon_signed_rank

KEYS = ("basis", "pair", "delta")  # one row each; family, estimator, region describe it
LABELS = ("basis", "pair", "family", "estimator", "region", "delta")  # every frame's keys
SIDES = ("ratio", "predictive")
SHARED_WEIGHTS_BYTES = 1 << 28  # 256 MiB of uint16 resample weights at most


def _side_frame(by_seed: pl.DataFrame) -> pl.DataFrame:
    """alignment_by_seed with the two directions side by side, one row per seed."""
    cols = ["n_measured", "n_unsafe", "n_corrective", "unsafe_keep_rate", "update_mask"]
    sides = [by_seed.filter(pl.col("direction") == d).select(
        *LABELS, "seed", "n_out_of_region", "n_disagree",
        *[pl.col(c).alias(f"{c}_{d}") for c in cols]) for d in SIDES]
    return sides[0].join(sides[1].drop("n_out_of_region", "n_disagree"),
                         on=[*LABELS, "seed"], how="full", coalesce=True, nulls_equal=True)


def _rate_columns(g: pl.DataFrame) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for side in SIDES:
        for what in ("unsafe", "corrective"):
            r = rate_summary(g[f"n_{what}_{side}"].fill_null(0).to_numpy(),
                             g[f"n_measured_{side}"].fill_null(0).to_numpy())
            out[f"{what}_{side}_pooled"] = r.pooled
            out[f"{what}_{side}_seed_mean"] = r.seed_mean
    return out


def _seed_columns(g: pl.DataFrame, independent: bool) -> dict[str, Any]:
    """Outcomes, the per-seed mean of the difference and the paired tests."""
    rate_r, rate_p = g["unsafe_keep_rate_ratio"].to_list(), g["unsafe_keep_rate_predictive"].to_list()
    o = seed_outcomes(rate_r, rate_p)
    diffs = np.array([a - b for a, b in zip(rate_r, rate_p) if a is not None and b is not None])
    seeds = g["seed"].to_list()
    return {
        "wins": o.wins, "losses": o.losses, "ties": o.ties, "empty_seeds": o.empty,
        "seeds_compared": o.compared,
        "win_seeds": sorted(s for s, a, b in zip(seeds, rate_r, rate_p)
                            if a is not None and b is not None and a > b),
        "empty_seed_list": sorted(s for s, a, b in zip(seeds, rate_r, rate_p)
                                  if a is None or b is None),
        "unsafe_diff_seed_mean": float(diffs.mean()) if len(diffs) else None,
        "sign_test_p": sign_test(o.wins, o.losses) if independent else None,
        "wilcoxon_p": wilcoxon_signed_rank(diffs).pvalue if independent else None,
    }


def cluster_counts(frame: pl.DataFrame, seeds: list[Any], n_clusters: int,
                   ids: dict[str, int]) -> ClusterCounts:
    """:class:`ClusterCounts` of one comparison's ``cluster_counts`` rows (samples numbered
    by ``ids``, shared by every comparison; ``n_clusters`` counts every sample of the
    run)."""
    wide = frame.pivot(on="direction", index=["sample_id", "seed"],
                       values=["n_measured", "n_unsafe"], aggregate_function="sum")
    def col(name):
        return (wide[name].fill_null(0).to_numpy() if name in wide.columns
                else np.zeros(wide.height, np.int64))
    seed_ix = {s: i for i, s in enumerate(seeds)}
    return ClusterCounts(
        cluster=np.array([ids[s] for s in wide["sample_id"].to_list()], np.int64),
        seed=np.array([seed_ix[s] for s in wide["seed"].to_list()], np.int64),
        measured_ratio=col("n_measured_ratio"), unsafe_ratio=col("n_unsafe_ratio"),
        measured_predictive=col("n_measured_predictive"),
        unsafe_predictive=col("n_unsafe_predictive"),
        n_clusters=n_clusters, n_seeds=len(seeds))


def headline(db: ReportDB, *, n_resamples: int = 2000, confidence: float = 0.95,
             rng_seed: int = 0, by_seed: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per (basis, pair, delta): see the module docstring. ``rng_seed`` seeds the
    bootstrap's generator (not a replay seed, the ``seed`` column);
    ``by_seed``: ``alignment_by_seed`` where the caller has read it (else it is read)."""
    by_seed = db.named("alignment_by_seed") if by_seed is None else by_seed
    clusters = db.named("cluster_counts")
    n_samples = int(db.named("n_samples")["n"][0])
    independent = db.seeds_independent()
    ids = {s: i for i, s in enumerate(clusters["sample_id"].unique(maintain_order=True))}
    n_samples = max(n_samples, len(ids))
    shared = _shared_weights(n_samples, len(ids), n_resamples, rng_seed)
    masks = {(c.pair, c.delta): c for c in db.layout.comparisons}
    rows = []
    for key, g in _side_frame(by_seed).group_by(KEYS, maintain_order=True):
        basis, pair, delta = key
        c = masks[(pair, delta)]
        g = g.sort("seed", nulls_last=True)
        mine = clusters.filter(*(pl.col(k) == v for k, v in zip(KEYS, key)))
        ci = cluster_bootstrap_diff(cluster_counts(mine, g["seed"].to_list(), n_samples, ids),
                                    n_resamples=n_resamples, confidence=confidence,
                                    rng_seed=rng_seed,
                                    weights=shared)
        rates = _rate_columns(g)
        rows.append({
            "basis": basis, "pair": pair, "family": c.family, "estimator": c.estimator,
            "region": c.region, "delta": delta,
            "ratio_mask": c.ratio_mask, "predictive_mask": c.predictive_mask,
            "ratio_update": g["update_mask_ratio"][0],
            "predictive_update": g["update_mask_predictive"][0],
            "n_seeds": g.height, "out_of_region_per_seed": g["n_out_of_region"].mean(),
            "disagreement_per_seed": g["n_disagree"].mean(), **rates,
            "unsafe_diff_pooled": _diff(rates["unsafe_ratio_pooled"],
                                        rates["unsafe_predictive_pooled"]),
            "ci_low": ci.pooled_low, "ci_high": ci.pooled_high,
            **_seed_columns(g, independent),
            "seed_mean_ci_low": ci.seed_mean_low, "seed_mean_ci_high": ci.seed_mean_high,
            "seeds_independent": independent, "bootstrap_resamples": ci.n_resamples,
            "bootstrap_clusters": ci.n_clusters})
    return pl.DataFrame(rows, schema=SCHEMA).fill_nan(None)


def _shared_weights(n_samples: int, n_active: int, n_resamples: int,
                    rng_seed: int) -> np.ndarray | None:
    """One set of resamples for every comparison (they then share their draws), unless
    it would exceed SHARED_WEIGHTS_BYTES (each comparison then draws its own)."""
    itemsize = 2 if n_samples <= np.iinfo(np.uint16).max else 4
    if not n_active or itemsize * n_resamples * n_active > SHARED_WEIGHTS_BYTES:
        return None
    return bootstrap_weights(n_samples, n_active, n_resamples, rng_seed)


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


_F, _I, _S = pl.Float64, pl.Int64, pl.String
SCHEMA = {
    "basis": _S, "pair": _S, "family": _S, "estimator": _S, "region": _S, "delta": _F,
    "ratio_mask": _S,
    "predictive_mask": _S, "ratio_update": _S, "predictive_update": _S, "n_seeds": _I,
    "out_of_region_per_seed": _F, "disagreement_per_seed": _F,
    **{f"{w}_{s}_{p}": _F for s in SIDES for w in ("unsafe", "corrective")
       for p in ("pooled", "seed_mean")},
    "unsafe_diff_pooled": _F, "ci_low": _F, "ci_high": _F, "wins": _I, "losses": _I,
    "ties": _I, "empty_seeds": _I, "seeds_compared": _I, "win_seeds": pl.List(_I),
    "empty_seed_list": pl.List(_I), "unsafe_diff_seed_mean": _F, "sign_test_p": _F,
    "wilcoxon_p": _F, "seed_mean_ci_low": _F, "seed_mean_ci_high": _F,
    "seeds_independent": pl.Boolean, "bootstrap_resamples": _I, "bootstrap_clusters": _I,
}


SIDE_BY_SIDE = ("disagreement_per_seed", "unsafe_ratio_pooled", "unsafe_predictive_pooled",
                "unsafe_ratio_seed_mean", "unsafe_predictive_seed_mean", "wins",
                "seeds_compared")


def threshold_comparison(head: pl.DataFrame) -> pl.DataFrame:
    """The paper's δ comparison side by side: one row per (basis, pair) that was analyzed
    at several δ, the :data:`SIDE_BY_SIDE` columns of each δ as
    ``<column>@<δ>`` (empty when no comparison has two thresholds).

    >>> h = pl.DataFrame({"basis": ["own"] * 2, "pair": ["a vs b"] * 2, "family": ["kl"] * 2,
    ...                   "estimator": ["agg"] * 2, "delta": [0.05, 0.15],
    ...                   **{c: [1, 2] for c in SIDE_BY_SIDE}})
    >>> threshold_comparison(h).select("basis", "wins@0.05", "wins@0.15").row(0)
    ('own', 1, 2)
    """
    keys = ["basis", "pair", "family", "estimator"]
    if not head.height:
        return pl.DataFrame()
    swept = head.filter(pl.col("delta").n_unique().over(keys) > 1)
    if not swept.height:
        return pl.DataFrame()
    wide = swept.with_columns(pl.col("delta").cast(pl.String).alias("at"))
    out = wide.select(keys).unique(maintain_order=True)
    for at in wide["at"].unique(maintain_order=True).to_list():
        part = wide.filter(pl.col("at") == at).select(
            *keys, *[pl.col(c).alias(f"{c}@{at}") for c in SIDE_BY_SIDE])
        out = out.join(part, on=keys, how="left", maintain_order="left")
    return out
