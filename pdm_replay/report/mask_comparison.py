"""Mask comparison: which mask would have kept the divergence down, at what cost in kept
gradient (issue 19; the SQL is ``pdm_replay/sql/views_mask_comparison.sql``).

One row per mask of the run (registry order, sweep variants included, the trainer's real
step ``actual`` last) and divergence family (``kl``, ``tv``): its keep fraction over every
token, the out-of-region count (``D_pre > δ`` at the run's thresholds, the same tokens for
every mask) and how many of them it kept, and the realized ΔD on those tokens under the
mask's own simulated update (``update_mask``; null where the replay did not run the mask
as an update mask, and on ``pdm-replay masks`` output, which has no update).

Examples
--------
>>> from pdm_replay.testing.synthetic_run import example_run
>>> from pdm_replay.report.db import connect
>>> with connect(example_run()) as db:
...     df = mask_comparison(db, family="kl")
>>> df.filter(pl.col("mask") == "none").select("keep_fraction", "update_mask").row(0)
(1.0, 'none')
>>> bool((df["n_out_of_region"] == df["n_out_of_region"][0]).all())  # same tokens for all
True
"""

from __future__ import annotations

import polars as pl

from pdm_replay.report.db import ReportDB

COLUMNS = ("mask", "direction", "mask_family", "family", "delta", "n_tokens", "n_kept",
           "keep_fraction", "n_out_of_region", "n_out_of_region_kept",
           "out_of_region_keep_fraction", "update_mask", "n_measured", "mean_delta_d",
           "p10_delta_d", "p25_delta_d", "median_delta_d", "p75_delta_d", "p90_delta_d",
           "share_increased")
# the column a reader looks at first, with its label (terminal, Markdown, HTML, dashboard)
LABELS = {"mask": "mask", "family": "divergence", "keep_fraction": "keep",
          "n_out_of_region": "out of region", "out_of_region_keep_fraction":
          "out of region kept", "median_delta_d": "median ΔD", "p10_delta_d": "p10 ΔD",
          "p90_delta_d": "p90 ΔD", "share_increased": "ΔD > 0", "mean_delta_d": "mean ΔD",
          "update_mask": "update", "n_measured": "ΔD measured", "direction": "direction",
          "delta": "δ"}
PERCENT = ("keep_fraction", "out_of_region_keep_fraction", "share_increased")
DELTA_COLUMNS = tuple(c for c in COLUMNS if c.endswith("_delta_d"))  # printed signed
NO_UPDATES = ("ΔD columns are empty: this run has no simulated update (updates/v1); run "
              "`pdm-replay replay` with --update-masks naming the masks to compare (and "
              "--next-checkpoint for `actual`)")
NOT_SIMULATED = ("ΔD is empty for {masks}: the replay did not simulate them (add them to "
                 "replay --update-masks)")


def mask_comparison(db: ReportDB, *, family: str | None = None) -> pl.DataFrame:
    """Every mask x divergence family (``family``: one of ``kl``, ``tv``; None: both).

    Columns: mask, direction (registry; ``trainer`` for ``actual``), mask_family, family,
    delta, n_tokens, n_kept, keep_fraction, n_out_of_region, n_out_of_region_kept,
    out_of_region_keep_fraction, update_mask (the update ΔD is read under; null when not
    simulated), n_measured, mean / p10 / p25 / median / p75 / p90 of ΔD, share_increased
    (share of measured out-of-region tokens with ΔD > 0).
    """
    return db.named("mask_comparison", {"family": family}).select(COLUMNS)


def comparison_note(frame: pl.DataFrame, has_updates: bool) -> str | None:
    """Why some ΔD cells are empty (``None`` when every mask's own update was measured)."""
    if not frame.height:
        return None
    if not has_updates:
        return NO_UPDATES
    missing = frame.filter(pl.col("update_mask").is_null())["mask"].unique(
        maintain_order=True).to_list()
    return NOT_SIMULATED.format(masks=", ".join(missing)) if missing else None

