"""Mask comparison page: every mask of the run, its keep fraction and out-of-region count,
and the realized ΔD on out-of-region tokens under its own update and the trainer's
(``actual``): which mask would have kept the divergence down, at what cost in kept
gradient."""

from __future__ import annotations

import polars as pl
import streamlit as st

from pdm_replay.dashboard_app import charts
from pdm_replay.dashboard_app.state import data, open_page
from pdm_replay.names import ACTUAL
from pdm_replay.report import dashboard_api as dapi
from pdm_replay.report.display import section_display
from pdm_replay.report.section_catalog import MASK_COMPARISON

FAMILIES = {"KL": "kl", "TV": "tv"}


def render() -> None:
    run = open_page("Mask comparison", "Which mask would have kept the divergence down, "
                    "at what cost in kept gradient? Every mask on the same out-of-region "
                    "tokens (top-K D > δ at the run's thresholds).")
    family = FAMILIES[st.radio("Divergence", list(FAMILIES), horizontal=True,
                               key="mc_family")]
    frame, why = data(run, dapi.section_table, section=MASK_COMPARISON.name, family=family)
    st.subheader("Keep fraction vs realized ΔD under each mask's own update")
    measured = frame.filter(pl.col("n_measured") > 0)
    if measured.is_empty():
        st.info(why or "No realized ΔD on out-of-region tokens.")
    else:
        st.altair_chart(charts.mask_comparison_chart(measured))
        st.caption(f"{measured.height} masks with a measured own update; below 0: the "
                   f"divergence of out-of-region tokens shrank. `{ACTUAL}` is the trainer's "
                   "real step.")
    st.subheader("Every mask")
    st.dataframe(section_display(MASK_COMPARISON.name, frame), hide_index=True,
                 key="mask_comparison")
    if why and not measured.is_empty():
        st.caption(why)
    st.markdown("\n".join(f"- **{t}**: {text}" for t, text in MASK_COMPARISON.legend))


if __name__ == "__main__":  # Streamlit runs pages as __main__; importing renders nothing
    render()
