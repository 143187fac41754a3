"""Estimators page: the aggregated- and uniform-tail KL slope estimators against the exact
full-vocabulary slope (when the replay had a behavior checkpoint)."""

from __future__ import annotations

import polars as pl
import streamlit as st

from pdm_replay.dashboard_app import charts
from pdm_replay.dashboard_app.state import RunRef, data, open_page, run_info
from pdm_replay.report import api
from pdm_replay.report import dashboard_api as dapi
from pdm_replay.report.display import display_frame


def _fidelity(run: RunRef) -> None:
    """The logged vs reloaded µ gap, which the accuracy against "exact" includes."""
    st.subheader("µ fidelity: logged vs reloaded behavior log-probs")
    fidelity = data(run, api.behavior_fidelity)
    if fidelity.is_empty():
        st.info("No logged-vs-reloaded µ gap: it needs a replay with `--behavior-checkpoint`.")
        return
    st.dataframe(display_frame("behavior_fidelity", fidelity), hide_index=True,
                 key="est_fidelity")
    st.caption("\"Exact\" is the reloaded behavior checkpoint, not the µ that was "
               "sampled from: the accuracy above mixes the tail model's error with this "
               "gap. within_one_rounding: share of tokens whose gap is at most one "
               "rounding of log µ(k) in the behavior dtype.")


def _per_token(run: RunRef, has_exact: bool) -> None:
    """A fixed pseudo-random subset of tokens: each estimate against the reference."""
    st.subheader("Estimates per token")
    limit = st.select_slider("Tokens sampled", (1000, 2000, 5000, 10000), value=2000,
                             key="est_limit")
    sample = data(run, dapi.estimator_sample, limit=limit)
    reference = "dkl_exact" if has_exact else "dkl_agg"
    if reference == "dkl_exact":
        sample = sample.filter(pl.col("dkl_exact").is_not_null())
    if sample.is_empty():
        st.info("No token to plot.")
        return
    st.altair_chart(charts.estimator_scatter(sample, reference))
    st.caption(f"{sample.height:,} tokens (fixed pseudo-random subset); x = {reference}.")


def render() -> None:
    run = open_page("Estimators", "Top-K estimators of the KL slope Ḋ_KL: aggregated tail "
                    "vs uniform tail vs the exact full-vocabulary slope.")
    info, _ = run_info(run)
    st.subheader("Accuracy against the exact slope (vs the reloaded µ)")
    accuracy = data(run, api.estimator_accuracy)
    if accuracy.is_empty():
        st.info("This run has no exact slope (`dkl_exact`): replay with "
                "`--behavior-checkpoint` to compare the estimators with it. Below, the "
                "uniform-tail estimator is plotted against the aggregated one.")
    else:
        st.dataframe(display_frame("estimator_accuracy", accuracy), hide_index=True,
                     key="est_accuracy")
    _fidelity(run)
    st.subheader("Sign accuracy against the realized ΔD (updates `actual`, `none`)")
    signs = data(run, api.sign_accuracy)
    if signs.is_empty():
        st.info("No realized ΔD: sign accuracy needs a replay.")
    else:
        st.dataframe(display_frame("sign_accuracy", signs.filter(pl.col("family") == "kl")),
                     hide_index=True, key="est_sign_accuracy")
    _per_token(run, info.has_exact)


if __name__ == "__main__":  # Streamlit runs pages as __main__; importing renders nothing
    render()
