"""Dashboard display rules of issue 19: empty vs 0% bars, the headline's key columns first,
small values in scientific notation on Log health."""

from __future__ import annotations

import polars as pl

from pdm_replay.dashboard_app.charts import seed_unsafe_chart
from pdm_replay.dashboard_app.tables import HEADLINE_KEY, headline_order, report_cells
from pdm_replay.report.render import display_frame


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
