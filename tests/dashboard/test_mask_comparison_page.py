"""The Mask comparison page (page_scripts/mask_comparison.py) through Streamlit's AppTest,
on a replay run and on a `pdm-replay masks` output."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from pdm_replay.report.db import connect
from pdm_replay.report.mask_comparison import NO_UPDATES, mask_comparison
from dashboard_fixtures import app_for, run_dir, tokenizer_dir  # noqa: F401 (fixtures)


def test_page_shows_every_mask_and_the_chart(app_for, run_dir: Path) -> None:
    at = app_for(run_dir, "Mask comparison")
    assert not at.exception and not at.error, [e.value for e in at.exception]
    assert at.title[0].value == "Mask comparison"
    with connect(run_dir) as db:
        expected = mask_comparison(db, family="kl")
    shown = at.dataframe[0].value
    assert list(shown["mask"]) == expected["mask"].to_list()
    assert list(shown["out of region"]) == [str(n) for n in expected["n_out_of_region"]]
    assert not shown.isna().any().any() and "None" not in shown.to_numpy()
    assert len(at.get("vega_lite_chart")) == 1
    at.radio(key="mc_family").set_value("TV").run()
    assert not at.exception
    assert set(at.dataframe[0].value["divergence"]) == {"tv"}


@pytest.fixture
def masks_file(run_dir: Path, tmp_path: Path) -> Path:
    """One seed's tokens of the replay as a `pdm-replay masks` file (no updates)."""
    part = sorted((run_dir / "tokens").rglob("*.parquet"))[0]
    table = pq.read_table(part)
    path = tmp_path / "tokens.parquet"
    pq.write_table(table.drop_columns(["seed"]) if "seed" in table.column_names else table,
                   path)
    return path


def test_masks_output_says_why_delta_d_is_empty(app_for, masks_file: Path) -> None:
    at = app_for(masks_file, "Mask comparison")
    assert not at.exception and not at.error
    assert any(NO_UPDATES in i.value for i in at.info)
    assert not at.get("vega_lite_chart")
    shown = at.dataframe[0].value
    assert len(shown) > 0 and (shown["median ΔD"] == "–").all()


def test_overlapping_points_are_spread_and_keep_their_exact_values() -> None:
    """Masks of one family keep nearly the same fraction with nearly the same median ΔD:
    their points overprinted one another. Spread, every pair of points is apart."""
    from pdm_replay.dashboard_app.charts import DODGE, NEAR, dodge

    frame = pl.DataFrame({"mask": ["a", "b", "c", "d"],
                          "keep_fraction": [0.95, 0.9501, 0.9502, 0.60],
                          "median_delta_d": [0.01, 0.01, 0.0101, 0.2]})
    shown = dodge(frame, "keep_fraction", "median_delta_d")
    assert shown["keep_fraction"].equals(frame["keep_fraction"])  # the tooltip's, exact
    xs = sorted(shown["keep_fraction_shown"].to_list()[:3])
    step = DODGE * (0.9502 - 0.60)
    assert all(b - a >= step * (1 - 1e-9) for a, b in zip(xs, xs[1:]))
    assert abs(sum(xs) / 3 - frame["keep_fraction"][:3].mean()) < NEAR
    assert shown["keep_fraction_shown"][3] == 0.60  # a point alone stays put
