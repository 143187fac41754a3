"""Attribution page: why a direction predictor's sign was wrong on out-of-region KL tokens,
split into parameter-space geometry, cross-token interference and curvature
(:mod:`pdm_replay.report.attribution_report`)."""

from __future__ import annotations

import polars as pl
import streamlit as st

from pdm_replay.dashboard_app import attribution_charts as charts
from pdm_replay.dashboard_app.state import data, open_page, run_info
from pdm_replay.names import NONE
from pdm_replay.report import attribution_report as attr

SPLIT_HELP = ("For each out-of-region KL token with Â ≠ 0 kept by the update, the chain "
              "predicted sign → self term (the token's own gradient, parameter space) → "
              "linear term (all kept tokens) → realized ΔD. A wrong prediction flips sign at "
              "one stage or at all three: geometry (self ≠ predicted), interference "
              "(linear ≠ self), curvature (realized ≠ linear). Without a self term (Adam, or "
              "tokens outside the SGD sample) geometry and interference merge into "
              "'parameter space' (linear ≠ predicted).")
NO_ATTRIBUTION = ("No update of this run carries the attribution columns: replay with "
                  "`--attribution` (the default); `--optimizer sgd` adds the self term.")


def _update_mask(run) -> str | None:
    coverage = data(run, attr.attribution_coverage).filter(pl.col("n_linear") > 0)
    if coverage.is_empty():
        return None
    masks = coverage["update_mask"].to_list()
    choice = st.selectbox("Update", masks, index=masks.index(NONE) if NONE in masks else 0,
                          key="attr_update", help="The simulated update whose ΔD is split.")
    row = coverage.filter(pl.col("update_mask") == choice).row(0, named=True)
    cols = st.columns(3)
    cols[0].metric("Tokens with a linear term", f"{row['n_linear']:,}")
    cols[1].metric("Tokens with a self term", f"{row['n_self']:,}")
    ratio = row["curvature_ratio"]
    cols[2].metric("mean |curvature| / mean |linear|", "–" if ratio is None else f"{ratio:.3g}")
    return choice


def _split(run, update_mask: str) -> None:
    st.subheader("Where the sign errors come from", help=SPLIT_HELP)
    scope = st.radio("Tokens", ("out_of_region", "disagreement"), horizontal=True,
                     key="attr_scope", format_func=lambda s: s.replace("_", " "))
    split = data(run, attr.attribution_split, update_mask=update_mask)
    split = split.filter(pl.col("scope") == scope)
    if split.is_empty():
        st.info("No out-of-region KL token with Â ≠ 0 was kept by this update.")
        return
    with_self = bool(split["n_errors_self"].sum())
    shares = charts.stage_shares(split, with_self=with_self)
    if shares.is_empty():
        st.info("No sign error to split.")
    else:
        st.altair_chart(charts.stage_chart(shares))
        base = "errors with a self term" if with_self else "errors (no self term in this run)"
        st.caption(f"Shares of each predictor's {base}; stages can overlap.")
    st.dataframe(split, hide_index=True, key="attr_split")


def _points(run, update_mask: str) -> None:
    st.subheader("Realized ΔD and its first-order parts")
    limit = st.select_slider("Tokens sampled", (1000, 2000, 5000, 10000), value=2000,
                             key="attr_limit")
    points = data(run, attr.attribution_points, update_mask=update_mask, limit=limit)
    if points.is_empty():
        st.info("No token to plot.")
        return
    cols = st.columns(2)
    with cols[0]:
        st.altair_chart(charts.parts_scatter(points, "lin", "delta_d", "linear term",
                                             "realized ΔD"))
    with cols[1]:
        if points["self_term"].null_count() == points.height:
            st.info("No self term (Adam replay, or no sampled token here).")
        else:
            st.altair_chart(charts.parts_scatter(points, "self_term", "lin", "self term",
                                                 "linear term"))
    st.caption(f"{points.height:,} tokens (fixed pseudo-random subset); dashed: y = x.")


def render() -> None:
    run = open_page("Attribution", "Why a direction criterion failed: the realized ΔD_KL "
                    "split into its token's own first-order effect, the other tokens' and "
                    "the higher-order rest.")
    info, _ = run_info(run)
    if not info.has_updates:
        st.info("No simulated update: attribution needs `pdm-replay replay`.")
        return
    update_mask = _update_mask(run)
    if update_mask is None:
        st.info(NO_ATTRIBUTION)
        return
    _split(run, update_mask)
    _points(run, update_mask)


if __name__ == "__main__":  # Streamlit runs pages as __main__; importing renders nothing
    render()
