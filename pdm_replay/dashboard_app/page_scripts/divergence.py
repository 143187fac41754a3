"""Divergence page: distributions of the top-K KL and TV divergences with δ marked, and the
local vs global term of the KL slope colored by agreement with the realized ΔD."""

from __future__ import annotations

import polars as pl
import streamlit as st

from pdm_replay.dashboard_app import charts
from pdm_replay.dashboard_app.state import data, open_page
from pdm_replay.names import ACTUAL, NONE
from pdm_replay.report import api
from pdm_replay.report import dashboard_api as dapi
from pdm_replay.report.display import display_frame

TERMS_HELP = ("Out-of-region KL tokens with Â ≠ 0 (a fixed pseudo-random subset). Both terms "
              "are signed by sign(Â). The ratio rule calls a token 'moving away' when the local "
              "term is > 0 (above the grey line); the predictive rule when local > global (above "
              "the dashed diagonal). Color: does the predictive sign match the realized ΔD "
              "under the `none` update?")


def render() -> None:
    run = open_page("Divergence", "How far π_pre is from µ per token, and what the two "
                    "terms of the slope Ḋ say about where a step moves it.")
    settings = data(run, api.settings).row(0, named=True)
    log = st.toggle("log10 axis", value=True, key="div_log")
    bins = st.slider("Bins", 10, 120, 60, step=10, key="div_bins")
    cols = st.columns(2)
    for col, (column, family) in zip(cols, (("kl_topk", "kl"), ("tv_topk", "tv"))):
        hist = data(run, dapi.value_histogram, column=column, bins=bins, log=log)
        with col:
            if hist.is_empty():
                st.info(f"No finite {column} values.")
                continue
            st.altair_chart(charts.histogram_chart(
                hist, threshold=settings[f"delta_{family}"], log=log, title=column))
    st.subheader("Local vs global term of Ḋ_KL", help=TERMS_HELP)
    limit = st.select_slider("Tokens sampled", (1000, 2000, 5000, 10000, 20000), value=5000,
                             key="div_limit")
    terms = data(run, api.direction_terms, limit=limit)
    if terms.is_empty():
        st.info("No out-of-region KL token with Â ≠ 0.")
    else:
        st.altair_chart(charts.terms_scatter(terms))
        measured = terms.filter(pl.col("delta_d_none").is_not_null())
        st.caption(f"{terms.height:,} tokens shown, {measured.height:,} with a realized ΔD.")
    accuracy = data(run, api.sign_accuracy)
    bases = accuracy["basis"].unique(maintain_order=True).to_list() if accuracy.height else []
    st.subheader(sign_accuracy_heading(bases))
    st.dataframe(display_frame("sign_accuracy", accuracy), hide_index=True,
                 key="div_sign_accuracy")


BASIS_NAMES = {ACTUAL: f"`{ACTUAL}` (the trainer's real step)",
               NONE: f"`{NONE}` (every token kept)"}


def sign_accuracy_heading(bases: list[str]) -> str:
    """The sign-accuracy heading, naming the updates of its rows in their order.

    >>> sign_accuracy_heading(["actual", "none"])
    "Sign accuracy of the direction predictors vs ΔD under `actual` (the trainer's real step), then `none` (every token kept): column basis"
    """
    names = [BASIS_NAMES.get(b, f"`{b}`") for b in bases] or [BASIS_NAMES[NONE]]
    return ("Sign accuracy of the direction predictors vs ΔD under " + ", then ".join(names)
            + (": column basis" if len(names) > 1 else ""))


if __name__ == "__main__":  # Streamlit runs pages as __main__; importing renders nothing
    render()
