"""The report API: one function per report, each returning a polars DataFrame.

Every function takes a :class:`~pdm_replay.report.db.ReportDB` from
:func:`~pdm_replay.report.db.connect`; the CLI and the dashboard both call these. Metric
definitions (SPEC §6), per seed and comparison (:mod:`pdm_replay.report.comparisons`: a
registered ratio / predictive mask pair, ``pair``, whose predictive mask declares the
divergence family f and estimator e, at a threshold setting δ), and per basis (the update
ΔD of f is measured under: ``actual``, ``own``, ``none``):

- out-of-region set O: tokens outside the pair's region (``region``: the predictive
  mask's proximity criterion as the registry builds it, e.g. ``kl_topk > 0.15``);
- disagreement set: tokens of O (Â ≠ 0) where the ratio criterion sign(Â)(r − 1) > 0 and
  the predictive criterion sign(Â)·Ḋ_e > 0 disagree (the masks' decisions on O, re-derived
  from stored columns so that any δ works);
- unsafe-keep rate of mask M: among disagreement tokens kept by M (with a ΔD under the
  basis), the fraction with ΔD > 0; corrective rate: ΔD < 0; pooled over seeds and as a
  per-seed mean (:mod:`pdm_replay.report.rates`);
- sign accuracy of a predictor: the fraction of O (Â ≠ 0) where its predicted sign of the
  change equals sign(ΔD) under ``none`` and ``actual``;
- a seed is a win / loss / tie when the predictive mask's unsafe-keep rate is below /
  above / equal to the ratio mask's, empty when a side has no rate.

On a ``masks``-only input (no updates) rates, sign accuracy and wins are empty; counts of
out-of-region and disagreement tokens are still there.

Examples
--------
>>> from pdm_replay.testing.synthetic_run import example_run
>>> from pdm_replay.report.db import connect
>>> db = connect(example_run())
>>> h = headline(db)
>>> own = h.filter((pl.col("basis") == "own") & pl.col("ratio_mask").str.starts_with("dppo"))
>>> own.select("family", "estimator", "n_seeds").rows()
[('kl', 'agg', 3), ('kl', 'uniform', 3), ('tv', 'agg', 3), ('tv', 'uniform', 3)]
>>> h["basis"].unique(maintain_order=True).to_list()  # no `actual` update in this run
['own', 'none']
>>> db.close()
"""

from __future__ import annotations

import polars as pl

from pdm_replay.report.db import ReportDB
# headline is re-exported: it is computed in report.headline only
from pdm_replay.report.headline import LABELS, headline  # noqa: F401


def settings(db: ReportDB) -> pl.DataFrame:
    """One row: run kind, thresholds and where they came from."""
    return db.named("settings")


def mask_summary(db: ReportDB, *, by_seed: bool = False) -> pl.DataFrame:
    """Keep fraction of every mask in the run, and the out-of-region count of its region.

    Columns: [seed,] mask, family, direction, estimator, n_tokens, n_kept, n_masked,
    keep_fraction, n_out_of_region (tokens outside the mask's own region as the registry
    builds it at the run's thresholds, e.g. ``kl_topk > δ_kl`` for ``pdm_kl_agg``,
    ``kl_binary > δ_kl`` for ``dppo_binary_kl``; null for masks without a family, sweep
    variants and regions SQL cannot test per token). Registry order.

    >>> from pdm_replay.testing.synthetic_run import example_run
    >>> from pdm_replay.report.db import connect
    >>> with connect(example_run()) as db:
    ...     df = mask_summary(db)
    >>> df.filter(pl.col("mask") == "none").select("n_tokens", "keep_fraction").row(0)
    (6000, 1.0)
    """
    return db.named("mask_summary_by_seed" if by_seed else "mask_summary")


def disagreements(db: ReportDB, *, pair: str | None = None, family: str | None = None,
                  estimator: str | None = None, seed: int | None = None,
                  limit: int | None = 100, offset: int = 0) -> pl.DataFrame:
    """Disagreement tokens with every pre/post value, one page (``limit`` None: all);
    ``pair`` (``<ratio mask> vs <predictive mask>``), ``family``, ``estimator`` filter.

    Ordered by seed, family, estimator, pair, sample_id, pos. ``kept_by`` names the mask that
    kept the token; ``delta_d_kept`` is ΔD under that mask's own update; ``delta_d_ratio``,
    ``delta_d_predictive``, ``delta_d_none`` are ΔD under each update (null without a replay).

    >>> from pdm_replay.testing.synthetic_run import example_run
    >>> from pdm_replay.report.db import connect
    >>> with connect(example_run()) as db:
    ...     page = disagreements(db, family="kl", estimator="agg", limit=5, offset=5)
    >>> page.height, set(page["family"]), (page["keep_ratio"] != page["keep_predictive"]).all()
    (5, {'kl'}, True)
    """
    return db.named("disagreements", {"pair": pair, "family": family, "estimator": estimator,
                                      "seed": seed, "limit": limit, "offset": offset})


def kept_deltas(db: ReportDB) -> pl.DataFrame:
    """ΔD of every measured kept disagreement token under the keeping mask's own update:
    seed, pair, family, estimator, region, δ, kept_by, update_mask, delta_d_kept (empty
    without a replay)."""
    return db.named("kept_deltas")


def alignment_by_seed(db: ReportDB) -> pl.DataFrame:
    """Per seed, basis (``actual`` / ``own`` / ``none``: the update ΔD is measured under),
    pair (with its family, estimator and region), δ and direction (``update_mask``: the
    update measured): counts of out-of-region, disagreement, kept, measured, unsafe and
    corrective tokens and the rates.

    >>> from pdm_replay.testing.synthetic_run import example_run
    >>> from pdm_replay.report.db import connect
    >>> with connect(example_run()) as db:
    ...     df = alignment_by_seed(db)
    >>> kl = df.filter(pl.col("region") == "kl_topk > 0.15")
    >>> kl.height  # 3 seeds x 2 bases (own, none) x 2 pairs (agg, uniform) x 2 directions
    24
    >>> sorted(kl["pair"].unique())
    ['dppo_topk_kl vs pdm_kl_agg', 'dppo_topk_kl vs pdm_kl_uniform']
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
              rng_seed: int = 0) -> pl.DataFrame:
    """Per basis and comparison: the seed outcomes of :func:`headline` (wins: predictive
    lower unsafe-keep rate than ratio; empty: a side kept no measured token), the tests
    over independent seeds and the per-seed mean difference with its interval.

    >>> from pdm_replay.testing.synthetic_run import example_run
    >>> from pdm_replay.report.db import connect
    >>> with connect(example_run()) as db:
    ...     w = seed_wins(db, n_resamples=100)
    >>> w.columns[:8]
    ['basis', 'pair', 'family', 'estimator', 'region', 'delta', 'n_seeds', 'wins']
    >>> bool(((w["wins"] + w["losses"] + w["ties"]) == w["seeds_compared"]).all())
    True
    """
    return seed_wins_of(headline(db, n_resamples=n_resamples, confidence=confidence,
                                 rng_seed=rng_seed))


def seed_wins_of(head: pl.DataFrame) -> pl.DataFrame:
    """The seed-outcome columns of a :func:`headline` frame."""
    return head.select(*LABELS, "n_seeds", "wins", "losses", "ties", "empty_seeds",
                       "seeds_compared", "win_seeds", "empty_seed_list", "sign_test_p",
                       "wilcoxon_p", "seeds_independent", "unsafe_diff_pooled", "ci_low",
                       "ci_high", "unsafe_diff_seed_mean", "seed_mean_ci_low",
                       "seed_mean_ci_high", "bootstrap_resamples", "bootstrap_clusters")


def sign_accuracy(db: ReportDB, *, by_seed: bool = False) -> pl.DataFrame:
    """Accuracy of each direction predictor (ratio, predictive_agg, predictive_uniform,
    predictive_exact where the run has ``dkl_exact``) against sign(ΔD) under ``none``, on
    out-of-region tokens with Â ≠ 0; pooled over seeds unless ``by_seed``.

    >>> from pdm_replay.testing.synthetic_run import example_run
    >>> from pdm_replay.report.db import connect
    >>> with connect(example_run()) as db:
    ...     acc = sign_accuracy(db)
    >>> acc.filter(pl.col("region") == "kl_topk > 0.15")["predictor"].to_list()
    ['ratio', 'predictive_agg', 'predictive_uniform', 'predictive_exact']
    """
    return db.named("sign_accuracy_by_seed" if by_seed else "sign_accuracy")


def estimator_accuracy(db: ReportDB) -> pl.DataFrame:
    """Top-K KL slope estimators (agg, uniform) vs the exact slope ``dkl_exact``: sign
    agreement, mean / max absolute error, over all tokens and out-of-region ones. Empty
    unless the replay had a behavior checkpoint.

    >>> from pdm_replay.testing.synthetic_run import example_run
    >>> from pdm_replay.report.db import connect
    >>> with connect(example_run()) as db:
    ...     est = estimator_accuracy(db)
    >>> est.select("estimator", "scope").rows()[:2]
    [('agg', 'all'), ('agg', 'out_of_region')]
    """
    return db.named("estimator_accuracy")


def behavior_fidelity(db: ReportDB) -> pl.DataFrame:
    """Logged vs reloaded µ (replay with a behavior checkpoint), over all tokens and the
    disagreement tokens: median / p99 / max |behavior_logp_gap| at the sampled token, the
    max support gap, and the share within one rounding of the logged log-prob in the
    behavior dtype (u·|log µ(k)|, u from the manifest's ``behavior_fidelity``; every
    token when the manifest does not record u). Empty without the gap columns."""
    fid = (db.info.manifest or {}).get("behavior_fidelity") or {}
    return db.named("behavior_fidelity", {"unit_roundoff": fid.get("unit_roundoff")})


def log_health(db: ReportDB) -> pl.DataFrame:
    """One row: token and seed counts, mass overflow (logged top-K µ mass > 1), non-finite
    statistics, zero advantages, exact and update row counts, and the replay's
    recomputation deviation (``manifest.json`` ``recompute_deviation``; null if absent).

    >>> from pdm_replay.testing.synthetic_run import example_run
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
    """Out-of-region KL tokens (Â ≠ 0, at most ``limit``, a fixed pseudo-random subset):
    ``local_term`` and ``global_term`` of the slope, signed by sign(Â), and ΔD under
    ``none`` (null without a replay). Predictive "away" is local_term - global_term > 0."""
    return db.named("direction_terms", {"limit": limit})
