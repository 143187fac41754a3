"""The built-in report sections (:mod:`.sections`), one ``register_section`` each.

Plain data: a section's functions are ``"module:function"`` references, so importing the
catalog (the report connection, ``pdm-replay dashboard --help``) loads none of their code.
Adding a section: its ``pdm_replay/sql/*.sql`` (views, then its ``-- name:`` query), a
module with its frame / plot functions where the named query alone is not the frame, and
an entry here.

>>> [s.name for s in SECTIONS.values()]
['mask_comparison', 'mismatch', 'keep_stats']
>>> MASK_COMPARISON.page.title, MASK_COMPARISON.after
('Mask comparison', 'mask_summary')
"""

from __future__ import annotations

from pdm_replay.report.sections import (SECTIONS, ReportSection, SectionPage, legend_terms,
                                        ordered, percent_columns, register_section,
                                        resolve, signed_columns, view_files)

__all__ = ["KEEP_STATS", "MASK_COMPARISON", "MISMATCH", "SECTIONS", "ReportSection", "SectionPage", "legend_terms",
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

# Training–inference mismatch and keep statistics per logged step, under the trainers' own
# names (pdm_replay.report.mismatch: one computation for both, its SQL queries_mismatch.sql,
# read by the frame functions); one dashboard page shows both.
MISMATCH = register_section(ReportSection(
    name="mismatch",
    title=("Training–inference mismatch per step, under the trainers' own names (verl "
           "rollout_corr/*, TRL sampling/*, top-K; report.mismatch)"),
    frame="pdm_replay.report.mismatch:mismatch_table",
    headers=True,  # the trainers' metric names, as W&B shows them
    narrow=("step", "rollout_corr/kl", "rollout_corr/k3_kl", "rollout_corr/chi2_token",
            "rollout_corr/chi2_seq", "sampling/importance_sampling_ratio/max",
            "topk/kl_topk_p99"),
    legend=(("rollout_corr/* / sampling/* / topk/*",
             "mismatch over training: per logged step, verl 0.9's rollout-correction metrics "
             "(compute_offpolicy_metrics, compute_is_metrics, the rs masks' masked "
             "fractions), TRL 1.16's sampling metrics, and the top-K KL / TV mean, p99 and "
             "out-of-region share at each δ, by the trainers' own definitions"),),
    plot="pdm_replay.report.mismatch_plots:mismatch_png",
    plot_title=("Training–inference mismatch over steps (verl rollout_corr/*, TRL "
                "sampling/*, top-K), one panel per metric"),
    page=SectionPage("Mismatch over training", ":material/show_chart:", script="mismatch.py"),
    after="log_health",
))

KEEP_STATS = register_section(ReportSection(
    name="keep_stats",
    title=("Keep statistics per step and mask, as trainers log them (fractions of the step's "
           "tokens; TRL clip_ratio/* for the ratio masks)"),
    frame="pdm_replay.report.mismatch:keep_stats_table",
    headers=True,
    narrow=("step", "mask", "masked_fraction", "masked_fraction_adv_pos",
            "masked_fraction_adv_neg", "out_of_region_dropped_fraction",
            "clip_ratio/low_mean", "clip_ratio/high_mean"),
    legend=(("masked_fraction / clip_ratio/*",
             "keep statistics: per step and mask, the share of loss tokens it drops (all, "
             "Â > 0, Â < 0, below / above its region) and of tokens out of its region kept / "
             "dropped; for the ratio masks TRL's clip_ratio/low_mean, high_mean, "
             "region_mean"),),
    plot="pdm_replay.report.mismatch_plots:keep_stats_png",
    plot_title="Masked token fraction per mask over steps, by the sign of Â",
    after="mismatch",  # on the Mismatch over training page
))
