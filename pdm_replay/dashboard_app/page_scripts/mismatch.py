"""Mismatch over training: the per-step metrics trainers log (verl ``rollout_corr/*``,
TRL ``sampling/*``, top-K), one small chart per metric over steps as W&B panels show them,
and each mask's keep statistics per step."""

from __future__ import annotations

import polars as pl
import streamlit as st

from pdm_replay.dashboard_app import charts
from pdm_replay.dashboard_app.state import data, open_page
from pdm_replay.report import dashboard_api as dapi
from pdm_replay.report.display import display_frame

# (key prefix, section title) in display order; a metric's section is the longest prefix
# it starts with
SECTIONS = (("rollout_corr/", "verl: off-policy metrics (compute_offpolicy_metrics)"),
            ("rollout_corr/rollout_is_", "verl: sequence IS weights (rollout_is=sequence)"),
            ("rollout_corr_token/", "verl: token IS weights (rollout_is=token)"),
            ("rollout_corr/rollout_rs_", "verl: rejection sampling, masked token fraction"),
            ("sampling/", "TRL: sampling/*"),
            ("topk/", "Top-K KL and TV (only top-K logs allow these)"))
PER_ROW = 3
KEEP_COLUMNS = ("masked_fraction", "masked_fraction_adv_pos", "masked_fraction_adv_neg",
                "out_of_region_kept_fraction", "out_of_region_dropped_fraction",
                "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean")


def _grid(frame: pl.DataFrame, metrics: list[str]) -> None:
    for start in range(0, len(metrics), PER_ROW):
        for col, metric in zip(st.columns(PER_ROW), metrics[start:start + PER_ROW]):
            col.altair_chart(charts.metric_panel(frame, metric))


def _section(metric: str) -> str:
    return max((p for p, _ in SECTIONS if metric.startswith(p)), key=len, default="")


def _sections(frame: pl.DataFrame) -> None:
    for i, (prefix, title) in enumerate(SECTIONS):
        mine = [c for c in frame.columns if c != "step" and _section(c) == prefix]
        if mine:
            with st.expander(f"{title} ({len(mine)})", expanded=i == 0 or i >= 4):
                _grid(frame, mine)


def _keep(keep: pl.DataFrame) -> None:
    st.subheader("Keep statistics per mask", help="Fractions of the step's loss tokens: "
                 "masked, masked with Â > 0 / Â < 0, out of the mask's region kept / dropped; "
                 "TRL's clip_ratio/* for the ratio masks.")
    masks = keep["mask"].unique(maintain_order=True).to_list()
    # open on the first mask that drops any token (`none` and idle masks show only zeros)
    drops = set(keep.filter(pl.col("masked_fraction") > 0)["mask"].to_list())
    first = next((i for i, m in enumerate(masks) if m in drops), 0)
    mask = st.selectbox("Mask", masks, index=first, key="mismatch_mask")
    mine = keep.filter(pl.col("mask") == mask)
    shown = [c for c in KEEP_COLUMNS if c in mine.columns and mine[c].null_count() < mine.height]
    _grid(mine, shown)
    st.dataframe(display_frame("keep_stats", mine), hide_index=True, key="mismatch_keep")


def render() -> None:
    run = open_page("Mismatch over training", "Per logged step, the training–inference "
                    "mismatch under the names verl and TRL log it (their own definitions), "
                    "and how much each mask drops.")
    mismatch, keep = data(run, dapi.mismatch_over_training)
    if not mismatch.height:
        st.info("The run has no tokens with a step: nothing to plot.")
        return
    _sections(mismatch)
    if keep.height:
        _keep(keep)


if __name__ == "__main__":  # Streamlit runs pages as __main__; importing renders nothing
    render()
