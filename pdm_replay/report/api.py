"""The report API: one function per report, each returning a polars DataFrame.

Every function takes a :class:`~pdm_replay.report.db.ReportDB` from
:func:`~pdm_replay.report.db.connect`; the CLI and the dashboard both call these. Metric
definitions (SPEC §6), per seed, family f in (kl, tv) and estimator e in (agg, uniform):

- out-of-region set O: tokens with ``f_topk > delta_f``;
- disagreement set: tokens of O where ``keep_dppo_topk_f != keep_pdm_f_e``;
- unsafe-keep rate of mask M: among disagreement tokens kept by M (with an update row),
  the fraction with ΔD > 0 under M's own update; corrective rate: ΔD < 0;
- sign accuracy of a predictor: the fraction of O (Â ≠ 0) where its predicted sign of the
  change equals sign(ΔD) under the ``none`` update;
- a seed is a win when the predictive mask's unsafe-keep rate is below the ratio mask's.

On a ``masks``-only input (no updates) rates, sign accuracy and wins are empty; counts of
out-of-region and disagreement tokens are still there.

Examples
--------
>>> from pdm_replay.report.synthetic import example_run
>>> from pdm_replay.report.db import connect
>>> db = connect(example_run())
>>> h = headline(db)
>>> h.select("family", "estimator", "n_seeds").rows()
[('kl', 'agg', 3), ('kl', 'uniform', 3), ('tv', 'agg', 3), ('tv', 'uniform', 3)]
>>> db.close()
"""

from __future__ import annotations

import polars as pl

from pdm_replay.report.db import ReportDB
from pdm_replay.report.stats import bootstrap_mean_ci, sign_test, wilcoxon_signed_rank

PAIR_KEYS = ("family", "estimator")


def settings(db: ReportDB) -> pl.DataFrame:
    """One row: run kind, thresholds and where they came from."""
    return db.named("settings")


def mask_summary(db: ReportDB, *, by_seed: bool = False) -> pl.DataFrame:
    """Keep fraction of every mask in the run, and its family's out-of-region count.

    Columns: [seed,] mask, family, direction, estimator, n_tokens, n_kept, n_masked,
    keep_fraction, n_out_of_region (tokens with ``family_topk > delta``; null for masks
    without a family). Registry order.

    >>> from pdm_replay.report.synthetic import example_run
    >>> from pdm_replay.report.db import connect
    >>> with connect(example_run()) as db:
    ...     df = mask_summary(db)
    >>> df.filter(pl.col("mask") == "none").select("n_tokens", "keep_fraction").row(0)
    (6000, 1.0)
    """
    return db.named("mask_summary_by_seed" if by_seed else "mask_summary")


def disagreements(db: ReportDB, *, family: str | None = None, estimator: str | None = None,
                  seed: int | None = None, limit: int | None = 100, offset: int = 0
                  ) -> pl.DataFrame:
    """Disagreement tokens with every pre/post value, one page (``limit`` None: all).

    Ordered by seed, family, estimator, sample_id, pos. ``kept_by`` names the mask that
    kept the token; ``delta_d_kept`` is ΔD under that mask's own update; ``delta_d_ratio``,
    ``delta_d_predictive``, ``delta_d_none`` are ΔD under each update (null without a replay).

    >>> from pdm_replay.report.synthetic import example_run
    >>> from pdm_replay.report.db import connect
    >>> with connect(example_run()) as db:
    ...     page = disagreements(db, family="kl", estimator="agg", limit=5, offset=5)
    >>> page.height, set(page["family"]), (page["keep_ratio"] != page["keep_predictive"]).all()
    (5, {'kl'}, True)
    """
    return db.named("disagreements", {"family": family, "estimator": estimator, "seed": seed,
                                      "limit": limit, "offset": offset})


def kept_deltas(db: ReportDB) -> pl.DataFrame:
    """ΔD of every measured kept disagreement token under the keeping mask's own update:
    seed, family, estimator, kept_by, update_mask, delta_d_kept (empty without a replay)."""
    return db.named("kept_deltas")


def alignment_by_seed(db: ReportDB) -> pl.DataFrame:
    """Per seed, family, estimator and direction (its mask is the update mask): counts of
    out-of-region, disagreement, kept, measured, unsafe and corrective tokens and the rates.

    >>> from pdm_replay.report.synthetic import example_run
    >>> from pdm_replay.report.db import connect
    >>> with connect(example_run()) as db:
    ...     df = alignment_by_seed(db)
    >>> df.height  # 3 seeds x 4 (family, estimator) pairs x 2 directions
    24
    >>> bool((df["n_unsafe"] + df["n_corrective"] <= df["n_measured"]).all())
    True
    """
    return db.named("alignment_by_seed")


def alignment(db: ReportDB) -> pl.DataFrame:
    """:func:`alignment_by_seed` pooled over seeds (rates = summed counts / summed measured)."""
    return db.named("alignment")


def seed_rates(db: ReportDB) -> pl.DataFrame:
    """Per seed and pair: unsafe-keep and corrective rates of both masks side by side,
    ``unsafe_diff`` = ratio - predictive and ``outcome`` win / loss / tie (null: a rate is
    missing)."""
    return db.named("seed_rates")


def seed_wins(db: ReportDB, *, n_resamples: int = 2000, confidence: float = 0.95,
              seed: int = 0) -> pl.DataFrame:
    """Per (family, estimator): seeds where predictive beats ratio on unsafe-keep rate.

    Columns: family, estimator, seeds_compared, wins, losses, ties, win_seeds,
    sign_test_p (exact, ties dropped), wilcoxon_p (signed-rank on unsafe_diff),
    mean_unsafe_diff (ratio - predictive, mean over seeds), ci_low, ci_high (bootstrap of
    that mean over seeds, ``confidence`` level, ``n_resamples`` draws, seeded).

    >>> from pdm_replay.report.synthetic import example_run
    >>> from pdm_replay.report.db import connect
    >>> with connect(example_run()) as db:
    ...     w = seed_wins(db)
    >>> w.columns[:6]
    ['family', 'estimator', 'seeds_compared', 'wins', 'losses', 'ties']
    >>> bool(((w["wins"] + w["losses"] + w["ties"]) == w["seeds_compared"]).all())
    True
    """
    rates = seed_rates(db)
    rows = []
    for (family, estimator), g in rates.group_by(PAIR_KEYS, maintain_order=True):
        outcome = g["outcome"]
        wins, losses = int((outcome == "win").sum()), int((outcome == "loss").sum())
        ties = int((outcome == "tie").sum())
        diffs = g["unsafe_diff"].drop_nulls().to_numpy()
        lo, hi = bootstrap_mean_ci(diffs, n_resamples=n_resamples, confidence=confidence,
                                   seed=seed)
        rows.append({
            "family": family, "estimator": estimator, "seeds_compared": wins + losses + ties,
            "wins": wins, "losses": losses, "ties": ties,
            "win_seeds": sorted(g.filter(outcome == "win")["seed"].to_list()),
            "sign_test_p": sign_test(wins, losses),
            "wilcoxon_p": wilcoxon_signed_rank(diffs).pvalue,
            "mean_unsafe_diff": float(diffs.mean()) if len(diffs) else None,
            "ci_low": lo, "ci_high": hi,
        })
    return pl.DataFrame(rows, schema=_SEED_WINS_SCHEMA).fill_nan(None)


_SEED_WINS_SCHEMA = {
    "family": pl.String, "estimator": pl.String, "seeds_compared": pl.Int64,
    "wins": pl.Int64, "losses": pl.Int64, "ties": pl.Int64, "win_seeds": pl.List(pl.Int64),
    "sign_test_p": pl.Float64, "wilcoxon_p": pl.Float64, "mean_unsafe_diff": pl.Float64,
    "ci_low": pl.Float64, "ci_high": pl.Float64,
}


def sign_accuracy(db: ReportDB, *, by_seed: bool = False) -> pl.DataFrame:
    """Accuracy of each direction predictor (ratio, predictive_agg, predictive_uniform,
    predictive_exact where the run has ``dkl_exact``) against sign(ΔD) under ``none``, on
    out-of-region tokens with Â ≠ 0; pooled over seeds unless ``by_seed``.

    >>> from pdm_replay.report.synthetic import example_run
    >>> from pdm_replay.report.db import connect
    >>> with connect(example_run()) as db:
    ...     acc = sign_accuracy(db)
    >>> acc.filter(pl.col("family") == "kl")["predictor"].to_list()
    ['ratio', 'predictive_agg', 'predictive_uniform', 'predictive_exact']
    """
    return db.named("sign_accuracy_by_seed" if by_seed else "sign_accuracy")


def estimator_accuracy(db: ReportDB) -> pl.DataFrame:
    """Top-K KL slope estimators (agg, uniform) vs the exact slope ``dkl_exact``: sign
    agreement, mean / max absolute error, over all tokens and out-of-region ones. Empty
    unless the replay had a behaviour checkpoint.

    >>> from pdm_replay.report.synthetic import example_run
    >>> from pdm_replay.report.db import connect
    >>> with connect(example_run()) as db:
    ...     est = estimator_accuracy(db)
    >>> est.select("estimator", "scope").rows()[:2]
    [('agg', 'all'), ('agg', 'out_of_region')]
    """
    return db.named("estimator_accuracy")


def log_health(db: ReportDB) -> pl.DataFrame:
    """One row: token and seed counts, mass overflow (logged top-K µ mass > 1), non-finite
    statistics, zero advantages, exact and update row counts, and the replay's
    recomputation deviation (``manifest.json`` ``recompute_deviation``; null if absent).

    >>> from pdm_replay.report.synthetic import example_run
    >>> from pdm_replay.report.db import connect
    >>> with connect(example_run()) as db:
    ...     h = log_health(db)
    >>> h.select("n_tokens", "n_seeds", "recompute_deviation_max").row(0)
    (6000, 3, 0.0015)
    """
    health = db.named("log_health")
    dev = db.info.recompute_deviation or {}
    n = health["n_tokens"][0]
    return health.with_columns(
        mass_overflow_fraction=pl.col("n_mass_overflow") / n if n else pl.lit(None),
        recompute_deviation_max=pl.lit(dev.get("max"), pl.Float64),
        recompute_deviation_mean=pl.lit(dev.get("mean"), pl.Float64),
        kind=pl.lit(db.info.kind), has_updates=pl.lit(db.info.has_updates),
        thresholds_source=pl.lit(db.info.thresholds_source),
    )


def direction_terms(db: ReportDB, *, limit: int = 20_000) -> pl.DataFrame:
    """Out-of-region KL tokens (Â ≠ 0, at most ``limit``, a fixed pseudo-random sample):
    ``local_term`` and ``global_term`` of the slope, signed by sign(Â), and ΔD under
    ``none`` (null without a replay). Predictive "away" is local_term - global_term > 0."""
    return db.named("direction_terms", {"limit": limit})


def headline(db: ReportDB, *, n_resamples: int = 2000, confidence: float = 0.95,
             seed: int = 0) -> pl.DataFrame:
    """The paper's token-level analysis, one row per (family, estimator).

    Columns: family, estimator, ratio_mask, predictive_mask, n_seeds,
    out_of_region_per_seed, disagreement_per_seed (means over seeds), unsafe_keep_ratio,
    unsafe_keep_predictive, corrective_ratio, corrective_predictive (pooled over seeds),
    then :func:`seed_wins`' wins, seeds_compared, sign_test_p, wilcoxon_p,
    mean_unsafe_diff, ci_low, ci_high.
    """
    by_seed = alignment_by_seed(db)
    per_seed = (by_seed.filter(pl.col("direction") == "ratio")
                .group_by(PAIR_KEYS, maintain_order=True)
                .agg(ratio_mask=pl.first("update_mask"), n_seeds=pl.len().cast(pl.Int64),
                     out_of_region_per_seed=pl.mean("n_out_of_region"),
                     disagreement_per_seed=pl.mean("n_disagree")))
    pooled = alignment(db)
    rates = [pooled.filter(pl.col("direction") == d).select(
        *PAIR_KEYS, pl.col("unsafe_keep_rate").alias(f"unsafe_keep_{d}"),
        pl.col("corrective_rate").alias(f"corrective_{d}"),
        *([pl.col("update_mask").alias("predictive_mask")] if d == "predictive" else []))
        for d in ("ratio", "predictive")]
    wins = seed_wins(db, n_resamples=n_resamples, confidence=confidence, seed=seed).select(
        *PAIR_KEYS, "wins", "seeds_compared", "sign_test_p", "wilcoxon_p",
        "mean_unsafe_diff", "ci_low", "ci_high")
    out = per_seed
    for frame in (*rates, wins):
        out = out.join(frame, on=list(PAIR_KEYS), how="left", maintain_order="left")
    return out.select(
        *PAIR_KEYS, "ratio_mask", "predictive_mask", "n_seeds", "out_of_region_per_seed",
        "disagreement_per_seed", "unsafe_keep_ratio", "unsafe_keep_predictive",
        "corrective_ratio", "corrective_predictive", "wins", "seeds_compared",
        "sign_test_p", "wilcoxon_p", "mean_unsafe_diff", "ci_low", "ci_high")
