"""The dashboard's tables: cells as the report prints them, the headline's column order
and widths (no Altair: the first page draws no chart until asked, so it loads none).

Examples
--------
>>> import polars as pl
>>> report_cells(pl.DataFrame({"unsafe_ratio": [0.0, None], "seed": [0, 1]})).rows()
[('0.0%', '0'), ('–', '1')]
"""

from __future__ import annotations

from typing import Any

import polars as pl
import streamlit as st

from pdm_replay.report.render import format_value

# the headline columns a 1,280 px window shows without scrolling, in this order
HEADLINE_KEY = ("basis", "pair", "delta", "unsafe_ratio_pooled",
                "unsafe_predictive_pooled", "unsafe_ratio_seed_mean",
                "unsafe_predictive_seed_mean", "wins", "losses", "ties", "empty_seeds",
                "sign_test_p", "wilcoxon_p")


# the per-seed rates' columns shown first, and their labels
SEED_RATES_KEY = ("seed", "basis", "pair", "delta", "n_disagree", "unsafe_ratio",
                  "unsafe_predictive", "outcome")
SEED_RATES_LABELS = {"basis": "update", "delta": "δ", "n_disagree": "disagreements",
                     "unsafe_ratio": "ratio unsafe", "unsafe_predictive": "pred. unsafe"}


def key_order(frame: pl.DataFrame, key: tuple[str, ...]) -> list[str]:
    """``frame``'s columns, those of ``key`` first, in its order."""
    first = [c for c in key if c in frame.columns]
    return first + [c for c in frame.columns if c not in first]


def headline_order(head: pl.DataFrame) -> list[str]:
    """The headline's columns, :data:`HEADLINE_KEY` first (corrective keeps, always
    100% − unsafe, and the bookkeeping columns after them)."""
    return key_order(head, HEADLINE_KEY)


def seed_rates_columns() -> dict[str, Any]:
    """Streamlit column configs of the per-seed rates' key columns: readable labels."""
    return {c: st.column_config.TextColumn(SEED_RATES_LABELS.get(c, c))
            for c in SEED_RATES_KEY}


def report_cells(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with every cell as the report prints it (:func:`render.format_value`:
    rates as percent, p-values 3 digits, "–" where a rate has no tokens), under its column
    names: Streamlit draws a null number as an empty cell, which reads like a missing
    value, not like "no kept disagreement token" (a 0% rate prints "0.0%")."""
    return pl.DataFrame({c: [format_value(c, v) for v in frame[c].to_list()]
                         for c in frame.columns}, schema={c: pl.String for c in frame.columns})


def headline_columns() -> dict[str, Any]:
    """Streamlit column configs of the headline's key columns (cells from
    :func:`report_cells`): short labels (the rates are unsafe-keep rates, as the
    subheader's help says), every column narrow so all fit 1,280 px."""
    label = {"unsafe_ratio_pooled": "ratio pooled", "unsafe_predictive_pooled": "pred. pooled",
             "unsafe_ratio_seed_mean": "ratio seed-mean",
             "unsafe_predictive_seed_mean": "pred. seed-mean", "sign_test_p": "sign p",
             "wilcoxon_p": "Wilcoxon p", "empty_seeds": "empty", "basis": "update",
             "pair": "pair", "delta": "δ"}
    # pixels: 13 columns in the ~800 px a 1,280 px window leaves beside the sidebar
    width = {"basis": 55, "pair": 112, "delta": 45, "sign_test_p": 62, "wilcoxon_p": 70} | {
        c: 72 for c in label if c.startswith("unsafe_")}
    return {c: st.column_config.TextColumn(label.get(c, c), width=width.get(c, 48))
            for c in HEADLINE_KEY}
