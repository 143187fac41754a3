"""Dashboard display rules of issue 19: empty vs 0% bars, the headline's key columns first,
small values in scientific notation on Log health."""

from __future__ import annotations

import polars as pl

from pdm_replay.dashboard_app.charts import seed_unsafe_chart
from pdm_replay.dashboard_app.tables import (CHAR_PX, HEADLINE_KEY, HEADLINE_LABELS, PAD_PX,
                                            VISIBLE_KEY, VISIBLE_PX, headline_cells,
                                            headline_order, headline_widths, report_cells)
from pdm_replay.report import dashboard_api as dapi
from pdm_replay.report.display import display_frame


def test_zero_rate_and_empty_seed_draw_differently() -> None:
    rates = pl.DataFrame({"seed": [0, 1], "basis": ["own"] * 2,
                          "pair": ["dppo_topk_kl vs pdm_kl_agg"] * 2, "family": ["kl"] * 2,
                          "estimator": ["agg"] * 2, "delta": [0.1] * 2,
                          "unsafe_ratio": [0.0, 0.5], "unsafe_predictive": [0.25, None]})
    spec = seed_unsafe_chart(rates).to_dict()
    layers = spec["spec"]["layer"]
    filters = [layer.get("transform", [{}])[0].get("filter") for layer in layers]
    assert filters == [None, "datum.unsafe_keep_rate === 0", "datum.kept === 'empty'"]
    rows = {(r["seed"], r["direction"]): r for r in spec["datasets"][spec["data"]["name"]]}
    # seed 0 ratio: a real 0% (tick); seed 1 predictive: no kept token (∅)
    assert rows[(0, "ratio")]["unsafe_keep_rate"] == 0 and rows[(0, "ratio")]["kept"] is None
    assert rows[(1, "predictive")]["kept"] == "empty"


def test_headline_columns_hold_their_labels_and_widest_cells() -> None:
    """At 1,280 px no pair name or header is cut ("dppo_topk_kl vs p", "ratio poole"):
    every key column is as wide as its label and widest cell, and the first
    VISIBLE_KEY fit the table's width beside the sidebar."""
    widths = headline_widths()
    for c in HEADLINE_KEY:
        assert widths[c] >= len(HEADLINE_LABELS[c]) * CHAR_PX + PAD_PX
    assert widths["pair"] >= max(map(len, dapi.pair_options())) * CHAR_PX + PAD_PX
    assert sum(widths[c] for c in HEADLINE_KEY[:VISIBLE_KEY]) <= VISIBLE_PX
    head = pl.DataFrame({"basis": ["own"], "pair": ["icepop_ratio vs icepop_pdm_kl"],
                         "region": ["ratio ∉ [0.5, 5.0]"], "delta": [0.5], "wins": [3],
                         "losses": [2], "ties": [1], "empty_seeds": [0]})
    cells = headline_cells(head).row(0, named=True)
    assert (cells["delta"], cells["outcomes"]) == ("[0.5, 5.0]", "3/2/1/0")


def test_headline_key_columns_come_first() -> None:
    head = pl.DataFrame({c: [1] for c in ("corrective_ratio_pooled", "ratio_mask",
                                          *reversed(HEADLINE_KEY))})
    order = headline_order(head)
    assert order[:len(HEADLINE_KEY)] == list(HEADLINE_KEY)
    assert order[len(HEADLINE_KEY):] == ["corrective_ratio_pooled", "ratio_mask"]


def test_log_health_small_values_are_scientific() -> None:
    health = pl.DataFrame({"n_tokens": [6000], "recompute_deviation_max": [9.39e-06],
                           "mass_overflow_fraction": [None]}, schema_overrides={
                               "mass_overflow_fraction": pl.Float64})
    shown = dict(display_frame("log_health", health).rows())
    assert shown == {"n_tokens": "6000", "recompute_deviation_max": "9.39e-06",
                     "mass_overflow_fraction": "–"}


def test_report_cells_tell_no_tokens_from_zero() -> None:
    """A rate with no kept disagreement token is "–", a real 0% is "0.0%" (the browser
    test fails on an empty cell, which is what Streamlit draws for a null number)."""
    head = pl.DataFrame({"pair": ["a vs b"] * 2, "delta": [0.15, 0.15],
                         "unsafe_ratio_pooled": [0.0, None], "sign_test_p": [0.03125, None],
                         "wins": [3, 0]})
    cells = report_cells(head)
    assert cells.rows() == [("a vs b", "0.15", "0.0%", "0.0312", "3"),
                            ("a vs b", "0.15", "–", "–", "0")]
    assert all(dtype == pl.String for dtype in cells.dtypes)
