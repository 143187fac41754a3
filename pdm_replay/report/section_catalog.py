"""The built-in report sections (:mod:`.sections`), one ``register_section`` each.

Plain data: a section's functions are ``"module:function"`` references, so importing the
catalog (the report connection, ``pdm-replay dashboard --help``) loads none of their code.
Adding a section: its ``pdm_replay/sql/*.sql`` (views, then its ``-- name:`` query), a
module with its frame / plot functions where the named query alone is not the frame, and
an entry here.

>>> [s.name for s in SECTIONS.values()]
['mask_comparison']
>>> MASK_COMPARISON.page.title, MASK_COMPARISON.after
('Mask comparison', 'mask_summary')
"""

from __future__ import annotations

from pdm_replay.report.sections import (SECTIONS, ReportSection, SectionPage, legend_terms,
                                        ordered, percent_columns, register_section,
                                        resolve, signed_columns, view_files)

__all__ = ["MASK_COMPARISON", "SECTIONS", "ReportSection", "SectionPage", "legend_terms",
           "ordered", "percent_columns", "register_section", "resolve", "signed_columns",
           "view_files"]

# Mask comparison (issue 19): which mask would have kept the divergence down, at what cost
# in kept gradient; the functions are pdm_replay.report.mask_comparison's.
MASK_COMPARISON = register_section(ReportSection(
    name="mask_comparison",
    title=("Mask comparison: keep fraction (the cost in kept gradient) vs the realized ΔD on "
           "out-of-region tokens under each mask's own update (lower ΔD: the divergence kept "
           "down; `actual` = the trainer's step)"),
    sql="views_mask_comparison.sql",
    frame="pdm_replay.report.mask_comparison:mask_comparison",
    note="pdm_replay.report.mask_comparison:section_note",
    # the columns a reader looks at first, with their labels (every format, the dashboard)
    labels={"mask": "mask", "family": "divergence", "keep_fraction": "keep",
            "n_out_of_region": "out of region", "out_of_region_keep_fraction":
            "out of region kept", "median_delta_d": "median ΔD", "p10_delta_d": "p10 ΔD",
            "p90_delta_d": "p90 ΔD", "share_increased": "ΔD > 0",
            "mean_delta_d": "mean ΔD", "update_mask": "update", "n_measured": "ΔD measured",
            "direction": "direction", "delta": "δ"},
    percent=("keep_fraction", "out_of_region_keep_fraction", "share_increased"),
    signed=("mean_delta_d", "p10_delta_d", "p25_delta_d", "median_delta_d", "p75_delta_d",
            "p90_delta_d"),  # a realized ΔD: its sign is the point
    narrow=("step", "mask", "divergence", "keep", "out of region", "out of region kept",
            "median ΔD", "p90 ΔD", "ΔD > 0", "update"),
    legend=(
        ("keep", "mask comparison: the share of all tokens a mask keeps (its gradient used); "
                 "the cost side: lower keeps less of the learning signal"),
        ("out of region kept", "mask comparison: the share of out-of-region tokens (top-K D "
                               "> δ at the run's thresholds, the same tokens for every mask) "
                               "the mask keeps"),
        ("median / p10 / p90 ΔD", "mask comparison: quantiles of the realized ΔD = D_post − "
                                  "D_pre on out-of-region tokens under the mask's own "
                                  "simulated update (`actual`: the trainer's real step); "
                                  "lower: the divergence kept down"),
        ("ΔD > 0", "mask comparison: the share of measured out-of-region tokens whose "
                   "divergence grew under the mask's own update")),
    plot="pdm_replay.report.mask_comparison:mask_comparison_png",
    plot_title=("Mask comparison: realized ΔD on out-of-region tokens under each mask's own "
                "update (box p25–p75, whiskers p10–p90) and its keep fraction; a box left of "
                "0 kept the divergence down"),
    page=SectionPage("Mask comparison", ":material/compare:", script="mask_comparison.py"),
    after="mask_summary",
))
