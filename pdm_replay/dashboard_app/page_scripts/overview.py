"""Overview page: the run's manifest, the headline alignment table, per-seed unsafe-keep
rates of ratio vs predictive masks (a table; their chart on demand), and the mask summary.

Its data is one cached call (:func:`pdm_replay.report.overview.overview`), which the server
computes at start-up (:mod:`pdm_replay.dashboard_app.warmup`) so the first session finds it
ready; the server imports this module before it starts. It draws no chart until asked:
Altair's import and Vega's JavaScript would be most of a cold first render."""

from __future__ import annotations

from typing import Any, Mapping

import polars as pl
import streamlit as st

from pdm_replay.dashboard_app.tables import (SEED_RATES_KEY, headline_cells, headline_columns,
                                            headline_order, key_order, report_cells,
                                            seed_rates_columns)
from pdm_replay.dashboard_app.state import RunRef, data, open_page, run_info
from pdm_replay.report.headline import threshold_comparison
from pdm_replay.report.dashboard_api import RunStatus
from pdm_replay.report.legend import LEGEND
from pdm_replay.report.overview import Overview, overview
from pdm_replay.report.display import display_frame

HEADLINE_HELP = "  \n".join(f"**{term}**: {text}" for term, text in LEGEND)


def facts(kind: str, status: RunStatus, health: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The run at a glance: (label, value) of its kind, status, seeds, tokens, update rows.

    >>> from pdm_replay.report.dashboard_api import RunStatus
    >>> facts("replay", RunStatus(None, None), {"n_seeds": 3, "n_tokens": 4500,
    ...                                         "n_update_rows": 31500})[2:]
    [('Seeds', '3'), ('Tokens', '4,500'), ('Update rows', '31,500')]
    """
    return [("Kind", kind), ("Status", status.status or "n/a"),
            ("Seeds", str(health["n_seeds"])), ("Tokens", f"{health['n_tokens']:,}"),
            ("Update rows", f"{health['n_update_rows']:,}")]


def _manifest(run: RunRef, ov: Overview) -> None:
    info, status = run_info(run)
    manifest: Mapping[str, Any] = info.manifest or {}
    config = manifest.get("config") or {}
    health = ov.health
    # one line, not st.metric: the first page loads no JavaScript it can do without
    st.markdown(" · ".join(f"**{k}** {v}" for k, v in facts(info.kind, status, health)))
    st.markdown(f"**Checkpoint** `{config.get('checkpoint', 'n/a')}` · **log** "
                f"`{config.get('log', 'n/a')}` · **behavior checkpoint** "
                f"`{config.get('behavior_checkpoint') or 'none'}` · **source** `{info.source}`")
    if st.toggle("Show the manifest: config, versions, log metadata", key="manifest"):
        left, right = st.columns(2)
        left.json(dict(config) or {"config": "not recorded"}, expanded=True)
        right.json({"versions": manifest.get("versions"), "log_meta": manifest.get("log_meta"),
                    "thresholds": ov.settings}, expanded=True)


def _seed_rates(rates: pl.DataFrame) -> None:
    st.subheader("Unsafe-keep rate per seed")
    if rates.filter(pl.col("unsafe_ratio").is_not_null()
                    | pl.col("unsafe_predictive").is_not_null()).is_empty():
        st.info("No unsafe-keep rates: they need the simulated updates of a replay.")
        return
    st.dataframe(report_cells(rates), hide_index=True, key="seed_rates",
                 column_order=key_order(rates, SEED_RATES_KEY),
                 column_config=seed_rates_columns())
    if st.toggle("Plot the rates per seed", key="seed_chart",
                 help="Bars per seed, ratio vs predictive; ∅ marks a seed where the mask "
                      "kept no disagreement token, a tick at 0 a rate of 0%."):
        from pdm_replay.dashboard_app import charts  # Altair: loaded only when asked

        st.altair_chart(charts.seed_unsafe_chart(rates))


def _whole_run(ov: Overview) -> None:
    """A `masks --engine ray` output's whole-run counts, read from its summary.parquet,
    beside the note saying which rows the per-token tables read."""
    if not ov.whole_run.height:
        return
    st.subheader("Whole run (summary.parquet)")
    for note in ov.notes:
        st.caption(note)
    st.dataframe(display_frame("whole_run", ov.whole_run), hide_index=True, key="whole_run")


def render() -> None:
    run = open_page("Overview", "What was replayed, and how the ratio and predictive "
                    "direction criteria compare on the tokens where they disagree.")
    ov = data(run, overview)
    _manifest(run, ov)
    head = ov.headline
    if ov.verdict:
        st.subheader("Verdict")
        st.markdown("\n".join(f"- {v}" for v in ov.verdict))
    st.caption(f"Coverage: {ov.coverage}")
    for w in ov.warnings:
        st.warning(w.message, icon="⚠️")
    with st.expander("Legend: what each number means"):
        st.markdown("\n".join(f"- **{term}**: {text}" for term, text in LEGEND))
    st.subheader("Headline: ratio vs predictive masks", help=HEADLINE_HELP)
    st.dataframe(headline_cells(head), hide_index=True, key="headline",
                 column_order=headline_order(headline_cells(head)),
                 column_config=headline_columns())
    side = threshold_comparison(head)
    if side.height:
        st.subheader("Threshold comparison: every δ side by side")
        st.dataframe(report_cells(side), hide_index=True, key="threshold_comparison")
    _seed_rates(ov.seed_rates)
    _whole_run(ov)
    st.subheader("Mask summary")
    st.dataframe(display_frame("mask_summary", ov.mask_summary), hide_index=True,
                 key="mask_summary")


if __name__ == "__main__":  # Streamlit runs pages as __main__; importing renders nothing
    render()
