"""The mask comparison view (issue 19 item 3) on the hand-built run of report_fixtures.

KL region (kl_topk > 0.1): seed 1 pos 0, 1, 2, 3, 5 and seed 2 pos 0, 1, 2 (8 tokens); TV
region (tv_topk > 0.2): seed 1 pos 0, 2. Keep decisions and ΔD: the tables of
report_fixtures.py.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from report_fixtures import token_rows
from pdm_replay.report.db import connect
from pdm_replay.report.mask_comparison import NO_UPDATES, comparison_note, mask_comparison
from pdm_replay.report.display import mask_comparison_display
from pdm_replay.schema import UPDATES_V1


def _row(frame: pl.DataFrame, mask: str, family: str) -> dict:
    rows = frame.filter((pl.col("mask") == mask) & (pl.col("family") == family)).to_dicts()
    assert len(rows) == 1, (mask, family, rows)
    return rows[0]


def test_counts_and_own_update_deltas_by_hand(hand_run: Path) -> None:
    with connect(hand_run) as db:
        df = mask_comparison(db)
    # every present mask x {kl, tv}, registry order within a family
    assert df["mask"].to_list()[:6] == ["none", "dppo_topk_kl", "pdm_kl_agg", "pdm_kl_uniform",
                                        "dppo_topk_tv", "pdm_tv_agg"]
    assert df["family"].to_list() == ["kl"] * 6 + ["tv"] * 6
    ratio = _row(df, "dppo_topk_kl", "kl")
    # kept: 6 of 10 tokens; in the KL region it keeps s1 pos 2, 3, 5 and s2 pos 2
    assert (ratio["n_tokens"], ratio["n_kept"], ratio["keep_fraction"]) == (10, 6, 0.6)
    assert (ratio["n_out_of_region"], ratio["n_out_of_region_kept"]) == (8, 4)
    # own update dppo_topk_kl on the 8 region tokens: +0.02, -0.01, +0.05 and five zeros
    assert ratio["update_mask"] == "dppo_topk_kl" and ratio["n_measured"] == 8
    assert ratio["mean_delta_d"] == pytest.approx(0.06 / 8, abs=1e-15)
    assert ratio["share_increased"] == 2 / 8 and ratio["median_delta_d"] == 0.0
    pred = _row(df, "pdm_kl_agg", "kl")  # -0.03 (s1 pos 1), +0.04, -0.02 (s2 pos 0, 1)
    assert pred["mean_delta_d"] == pytest.approx(-0.01 / 8, abs=1e-15)
    assert pred["share_increased"] == 1 / 8
    tv = _row(df, "pdm_tv_agg", "tv")  # TV region s1 pos 0 (+0.01) and pos 2 (0)
    assert (tv["n_out_of_region"], tv["n_out_of_region_kept"], tv["n_measured"]) == (2, 2, 2)
    assert tv["median_delta_d"] == pytest.approx(0.005, abs=1e-15)
    assert _row(df, "pdm_kl_agg", "tv")["n_out_of_region_kept"] == 0  # both TV tokens dropped
    assert comparison_note(df, True) is None


def test_masks_output_has_counts_and_no_deltas(hand_masks_file: Path) -> None:
    with connect(hand_masks_file) as db:
        df = mask_comparison(db, family="kl")
    assert set(df["family"]) == {"kl"} and df.height == 6
    assert (df["n_out_of_region"] == 8).all()
    assert _row(df, "pdm_kl_agg", "kl")["n_out_of_region_kept"] == 4
    assert df["update_mask"].is_null().all() and df["mean_delta_d"].is_null().all()
    assert (df["n_measured"] == 0).all()
    assert comparison_note(df, False) == NO_UPDATES
    shown = mask_comparison_display(df)
    assert (shown["median ΔD"] == "–").all() and shown["keep"][0] == "100.0%"


def test_unsimulated_mask_and_actual_row(tmp_path: Path) -> None:
    from report_fixtures import write_run
    run = write_run(tmp_path / "run", update_masks=["none", "pdm_kl_agg"])
    # the trainer's real step: kept = keep_dppo_topk_kl, ΔD_kl = +0.1 on every token
    rows = [{"seed": r["seed"], "update_mask": "actual", "sample_id": r["sample_id"],
             "pos": r["pos"], "kept": r["keep_dppo_topk_kl"], "logp_post": -1.0,
             "kl_topk_post": r["kl_topk"] + 0.1, "tv_topk_post": r["tv_topk"],
             "delta_kl_topk": 0.1, "delta_tv_topk": 0.0, "delta_logp": 0.0}
            for r in token_rows()]
    for seed in (1, 2):
        pq.write_table(pa.Table.from_pylist([r for r in rows if r["seed"] == seed],
                                            schema=UPDATES_V1),
                       run / "updates" / f"seed={seed}" / "part-0001.parquet")
    with connect(run) as db:
        df = mask_comparison(db, family="kl")
    assert df["mask"].to_list()[-1] == "actual"
    actual = _row(df, "actual", "kl")
    assert actual["direction"] == "trainer" and actual["update_mask"] == "actual"
    assert (actual["n_kept"], actual["n_out_of_region_kept"], actual["n_measured"]) == (6, 4, 8)
    assert actual["mean_delta_d"] == pytest.approx(0.1) and actual["share_increased"] == 1.0
    missing = _row(df, "dppo_topk_kl", "kl")
    assert missing["update_mask"] is None and missing["n_measured"] == 0
    assert "dppo_topk_kl" in comparison_note(df, True)
    assert "pdm_kl_agg" not in comparison_note(df, True)


@pytest.mark.parametrize("fmt", ["table", "markdown", "json", "html"])
@pytest.mark.parametrize("source", ["hand_run", "hand_masks_file"])
def test_every_format_has_the_section(fmt: str, source: str, request) -> None:
    import json

    from typer.testing import CliRunner

    from pdm_replay.cli import app
    from pdm_replay.report.legend import LEGEND_TEXT

    path = request.getfixturevalue(source)
    result = CliRunner().invoke(app, ["report", str(path), "-f", fmt,
                                      "--bootstrap-samples", "20"])
    assert result.exit_code == 0, result.output
    masks_only = source == "hand_masks_file"
    if fmt == "json":
        doc = json.loads(result.stdout)
        rows = doc["mask_comparison"]
        assert {(r["mask"], r["family"]) for r in rows} >= {("pdm_kl_agg", "kl"),
                                                            ("pdm_kl_agg", "tv")}
        assert all((r["median_delta_d"] is None) == masks_only for r in rows)
        assert (doc["section_notes"].get("mask_comparison") == NO_UPDATES) == masks_only
        return
    flat = " ".join(result.stdout.split()).replace("&gt;", ">")
    assert "Mask comparison: keep fraction" in flat
    assert ("ΔD columns are empty: this run has no simulated update" in flat) == masks_only
    assert " ".join(LEGEND_TEXT["ΔD > 0"].split()[:6]) in flat
    if fmt == "html":  # html always embeds the plots
        assert 'alt="mask_comparison"' in flat
