"""Tables keep the columns that matter within 100 terminal columns (issue 35 item 5)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pdm_replay.report.build import build_report
from pdm_replay.report.db import connect
from pdm_replay.report.display import format_value, headline_display, seed_wins_display
from pdm_replay.report.render import render_table


def _section(text: str, title: str) -> str:
    start = text.index(title)
    return text[start:text.index("\n\n", start) if "\n\n" in text[start:] else None]


def test_the_per_seed_table_shows_its_rates_in_100_columns(hand_run: Path) -> None:
    with connect(hand_run) as db:
        report = build_report(db, bootstrap_samples=50)
    text = render_table(report)
    assert max(len(line) for line in text.splitlines()) <= 100
    table = _section(text, "Unsafe-keep and corrective rates per seed")
    flat = " ".join(table.split())
    for r in report.seed_rates.filter(pl.col("unsafe_ratio").is_not_null()).to_dicts():
        assert format_value("unsafe_ratio", r["unsafe_ratio"]) in flat
        assert format_value("unsafe_diff", r["unsafe_diff"]) in flat
    assert "outcome" in flat and "predictive" in flat
    assert "more columns with --wide" in text


def test_a_band_region_shows_its_band_not_one_delta() -> None:
    row = {"basis": "own", "pair": "icepop_ratio vs icepop_pdm_kl", "family": "kl",
           "estimator": "agg", "region": "ratio ∉ [0.5, 5.0]", "delta": 0.5}
    head = headline_display(pl.DataFrame([{**row, **{k: None for k in (
        "n_seeds", "out_of_region_per_seed", "disagreement_per_seed")}}]).with_columns(
        *[pl.lit(None, pl.Float64).alias(c) for c in (
            "unsafe_ratio_pooled", "unsafe_predictive_pooled", "unsafe_ratio_seed_mean",
            "unsafe_predictive_seed_mean", "corrective_ratio_pooled",
            "corrective_predictive_pooled", "corrective_ratio_seed_mean",
            "corrective_predictive_seed_mean")]))
    assert head["δ"].to_list() == ["[0.5, 5.0]"]
    wins = seed_wins_display(pl.DataFrame([{**row, "n_seeds": 2, "wins": 1, "losses": 1,
                                            "ties": 0, "empty_seeds": 0,
                                            "empty_seed_list": [], "sign_test_p": 1.0,
                                            "wilcoxon_p": 1.0, "unsafe_diff_pooled": 0.0,
                                            "ci_low": 0.0, "ci_high": 0.0,
                                            "unsafe_diff_seed_mean": 0.0,
                                            "seed_mean_ci_low": 0.0, "seed_mean_ci_high": 0.0,
                                            "bootstrap_resamples": 10,
                                            "bootstrap_clusters": 2}]))
    assert wins["δ"].to_list() == ["[0.5, 5.0]"]
