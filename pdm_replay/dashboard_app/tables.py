"""The dashboard's tables: cells as the report prints them, the headline's column order
and widths (no Altair: the first page draws no chart until asked, so it loads none).

Examples
--------
>>> import polars as pl
>>> report_cells(pl.DataFrame({"unsafe_ratio": [0.0, None], "seed": [0, 1]})).rows()
[('0.0%', '0'), ('–', '1')]
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl
import streamlit as st

from pdm_replay.names import ACTUAL
from pdm_replay.report.dashboard_api import pair_options
from pdm_replay.report.display import format_value, threshold_cell

# the headline columns a 1,280 px window shows without scrolling, in this order (the
# seed means, then every other column, follow); `outcomes` is W/L/T/empty in one cell
HEADLINE_KEY = ("basis", "pair", "delta", "unsafe_ratio_pooled",
                "unsafe_predictive_pooled", "outcomes", "sign_test_p", "wilcoxon_p",
                "unsafe_ratio_seed_mean", "unsafe_predictive_seed_mean")
# pixels per character of Streamlit's table font (14 px sans-serif: ~7 px for the
# identifiers and digits the cells hold), and a cell's padding
CHAR_PX, PAD_PX = 7.5, 16
VISIBLE_PX = 800  # what a 1,280 px window leaves the table beside the sidebar
VISIBLE_KEY = 6  # the key columns that fit VISIBLE_PX: update, pair, δ, rates, outcomes


# the per-seed rates' columns shown first, and their labels
# (the region, not δ: the IcePop pair's is a band, "ratio ∉ [0.5, 5.0]", not "0.5")
SEED_RATES_KEY = ("seed", "basis", "pair", "region", "n_disagree", "unsafe_ratio",
                  "unsafe_predictive", "outcome")
SEED_RATES_LABELS = {"basis": "update", "n_disagree": "disagreements",
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
    """``frame`` with every cell as the report prints it (:func:`display.format_value`:
    rates as percent, p-values 3 digits, "–" where a rate has no tokens), under its column
    names: Streamlit draws a null number as an empty cell, which reads like a missing
    value, not like "no kept disagreement token" (a 0% rate prints "0.0%")."""
    return pl.DataFrame({c: [format_value(c, v) for v in frame[c].to_list()]
                         for c in frame.columns}, schema={c: pl.String for c in frame.columns})


def headline_cells(head: pl.DataFrame) -> pl.DataFrame:
    """The headline as :func:`report_cells`, plus ``outcomes`` (``W/L/T/empty``) and the δ
    of a band region shown as its band (:func:`display.threshold_cell`)."""
    cells = report_cells(head)
    if not head.height:
        return cells.with_columns(outcomes=pl.lit(None, pl.String))
    rows = head.to_dicts()
    return cells.with_columns(
        outcomes=pl.Series([f"{r['wins']}/{r['losses']}/{r['ties']}/{r['empty_seeds']}"
                            for r in rows], dtype=pl.String),
        delta=pl.Series([threshold_cell(r) for r in rows], dtype=pl.String))


HEADLINE_LABELS = {"unsafe_ratio_pooled": "ratio pooled", "unsafe_predictive_pooled":
                   "pred. pooled", "unsafe_ratio_seed_mean": "ratio seed mean",
                   "unsafe_predictive_seed_mean": "pred. seed mean", "sign_test_p": "sign p",
                   "wilcoxon_p": "Wilcoxon p", "outcomes": "W/L/T/empty", "basis": "update",
                   "pair": "pair", "delta": "δ"}
# the widest cell each key column holds (a rate: "100.0%"); the pair's is the registry's
# longest pair name
HEADLINE_WIDEST = {"delta": "[0.5, 5.0]", "basis": ACTUAL, "outcomes": "10/10/10/10",
                   "sign_test_p": "0.0923", "wilcoxon_p": "0.0266"}


def headline_widths() -> dict[str, int]:
    """Pixel width of each key column: its label or its widest cell, whichever is wider.

    >>> headline_widths()["pair"] >= len("dppo_topk_kl vs pdm_kl_uniform") * CHAR_PX
    True
    """
    widest = {**HEADLINE_WIDEST, "pair": max(pair_options(), key=len)}
    return {c: math.ceil(max(len(HEADLINE_LABELS[c]), len(widest.get(c, "100.0%")))
                         * CHAR_PX + PAD_PX) for c in HEADLINE_KEY}


def headline_columns() -> dict[str, Any]:
    """Streamlit column configs of the headline's key columns (cells from
    :func:`headline_cells`): short labels (the rates are unsafe-keep rates, as the
    subheader's help says), each column as wide as its label and widest cell
    (:func:`headline_widths`), so no pair name or header is cut."""
    width = headline_widths()
    return {c: st.column_config.TextColumn(HEADLINE_LABELS[c], width=width[c])
            for c in HEADLINE_KEY}
