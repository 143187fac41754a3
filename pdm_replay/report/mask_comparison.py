"""Mask comparison: which mask would have kept the divergence down, at what cost in kept
gradient (issue 19; the SQL is ``pdm_replay/sql/views_mask_comparison.sql``). A report
section (:data:`pdm_replay.report.section_catalog.MASK_COMPARISON`, its spec): these are its
frame, note and plot functions.

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

from typing import Any

import polars as pl

from pdm_replay.report.db import ReportDB
from pdm_replay.report.figures import _empty, _figure, _png
from pdm_replay.report.section_catalog import MASK_COMPARISON

COLUMNS = ("mask", "direction", "mask_family", "family", "delta", "n_tokens", "n_kept",
           "keep_fraction", "n_out_of_region", "n_out_of_region_kept",
           "out_of_region_keep_fraction", "update_mask", "n_measured", "mean_delta_d",
           "p10_delta_d", "p25_delta_d", "median_delta_d", "p75_delta_d", "p90_delta_d",
           "share_increased")
# the columns a reader looks at first, with their labels (terminal, Markdown, HTML,
# dashboard): the section's spec
LABELS = dict(MASK_COMPARISON.labels or {})
PERCENT = MASK_COMPARISON.percent
DELTA_COLUMNS = MASK_COMPARISON.signed  # printed signed
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
    return db.named(MASK_COMPARISON.query_name, {"family": family},
                    sql_file=MASK_COMPARISON.sql).select(COLUMNS)


def comparison_note(frame: pl.DataFrame, has_updates: bool) -> str | None:
    """Why some ΔD cells are empty (``None`` when every mask's own update was measured)."""
    if not frame.height:
        return None
    if not has_updates:
        return NO_UPDATES
    missing = frame.filter(pl.col("update_mask").is_null())["mask"].unique(
        maintain_order=True).to_list()
    return NOT_SIMULATED.format(masks=", ".join(missing)) if missing else None



def section_note(frame: pl.DataFrame, db: ReportDB) -> str | None:
    """:func:`comparison_note` of the section's ``frame`` on ``db`` (the spec's ``note``)."""
    return comparison_note(frame, db.info.has_updates)


def _horizontal(ax: Any) -> dict[str, Any]:
    """``bxp``'s horizontal option: ``orientation`` from matplotlib 3.10 (``vert`` is
    deprecated in 3.11), ``vert=False`` before."""
    import inspect

    if "orientation" in inspect.signature(ax.bxp).parameters:
        return {"orientation": "horizontal"}
    return {"vert": False}


def mask_comparison_png(frame: pl.DataFrame) -> bytes:
    """One panel per divergence family: a box of ΔD (p25–p75, whiskers p10–p90, median
    line) per mask whose own update was measured, labeled with its keep fraction."""
    measured = frame.filter(pl.col("n_measured") > 0)
    families = measured["family"].unique(maintain_order=True).to_list() or ["kl"]
    n = max((measured["family"] == f).sum() for f in families) if measured.height else 1
    fig = _figure(5.0 * len(families), 1.2 + 0.32 * n)
    axes = fig.subplots(1, len(families), squeeze=False)[0]
    if not measured.height:
        _empty(axes[0], "no realized ΔD: the run has no simulated update (needs a replay)")
        return _png(fig)
    for ax, family in zip(axes, families):
        rows = measured.filter(pl.col("family") == family).to_dicts()[::-1]
        ax.bxp([{"whislo": r["p10_delta_d"], "q1": r["p25_delta_d"],
                 "med": r["median_delta_d"], "q3": r["p75_delta_d"], "whishi": r["p90_delta_d"],
                 "fliers": [], "label": f"{r['mask']} (keep {r['keep_fraction']:.0%})"}
                for r in rows], showfliers=False, **_horizontal(ax))
        ax.axvline(0.0, color="black", lw=0.8)
        ax.set_title(f"{family.upper()}: δ = {rows[0]['delta']:g}, "
                     f"{rows[0]['n_out_of_region']:,} tokens out of region", fontsize=9)
        ax.set_xlabel("ΔD, own update (< 0: divergence kept down)")
        ax.tick_params(axis="y", labelsize=7)
    return _png(fig)
