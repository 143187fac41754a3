"""Report inputs: run discovery, thresholds provenance, masks-only output, bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from report_fixtures import THRESHOLDS, write_run
from pdm_replay.testing.fixtures import SyntheticLogConfig, write_synthetic_log
from pdm_replay.masks import MASK_SPECS, Thresholds, comparison_pairs
from pdm_replay.report import api
from pdm_replay.report.build import build_report
from pdm_replay.report.db import connect
from pdm_replay.report.run_info import discover_run
from pdm_replay.commands.masks import MasksConfig, run_masks


def test_thresholds_from_manifest_when_footer_lacks_them(tmp_path: Path) -> None:
    manifest = {"config": {"thresholds": {**THRESHOLDS, "delta_kl": 0.12}}}
    info = discover_run(write_run(tmp_path / "r", footer=None, manifest=manifest))
    assert (info.thresholds.delta_kl, info.thresholds_source) == (0.12, "manifest.json")


def test_thresholds_default_with_a_note(tmp_path: Path) -> None:
    info = discover_run(write_run(tmp_path / "r", footer=None, manifest=None))
    assert info.thresholds == Thresholds() and info.thresholds_source == "defaults"
    assert any("assuming the defaults" in n for n in info.notes)


def test_footer_wins_over_a_different_manifest(tmp_path: Path) -> None:
    manifest = {"config": {"delta_kl": 0.3}}
    info = discover_run(write_run(tmp_path / "r", manifest=manifest))
    assert info.thresholds.delta_kl == 0.1
    assert any("differ from the tokens footer" in n for n in info.notes)


def test_footers_that_disagree_are_an_error(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r")
    f = run / "tokens" / "seed=2" / "part-0000.parquet"
    table = pq.read_table(f)
    md = {**table.schema.metadata,
          b"pdm_replay.thresholds": json.dumps({**THRESHOLDS, "delta_kl": 0.5}).encode()}
    pq.write_table(table.replace_schema_metadata(md), f)
    with pytest.raises(ValueError, match="disagree on thresholds"):
        discover_run(run)


def test_rollout_log_is_rejected_with_a_hint(small_log: Path) -> None:
    with pytest.raises(ValueError, match="rollout/v1.*not a rollout log"):
        discover_run(small_log)


def test_missing_path_names_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope"):
        discover_run(tmp_path / "nope")


def test_missing_update_rows_are_left_out_and_noted(tmp_path: Path) -> None:
    # no pdm_kl_uniform update: its kept disagreement tokens (seed 2 pos 0, 1) are unmeasured
    masks = ["none", "dppo_topk_kl", "pdm_kl_agg", "dppo_topk_tv", "pdm_tv_agg"]
    with connect(write_run(tmp_path / "r", update_masks=masks)) as db:
        row = api.alignment_by_seed(db).filter(
            (pl.col("seed") == 2) & (pl.col("estimator") == "uniform")
            & (pl.col("direction") == "predictive") & (pl.col("basis") == "none")
        ).row(0, named=True)
        # the `none` update measures them; their own update (pdm_kl_uniform) was not
        # simulated, so kl/uniform has no `own` rows
        assert (row["n_kept"], row["n_measured"], row["unsafe_keep_rate"]) == (2, 2, 0.5)
        own = api.alignment_by_seed(db).filter(
            (pl.col("basis") == "own") & (pl.col("estimator") == "uniform")
            & (pl.col("family") == "kl"))
        assert own.height == 0
        notes = build_report(db).notes
    note = "dppo_topk_kl vs pdm_kl_uniform at δ = 0.1 (kl_topk > 0.1): no own-update rates"
    assert any(note in n for n in notes)


def test_masks_only_file_reports_counts_and_says_what_needs_a_replay(
        hand_masks_file: Path) -> None:
    with connect(hand_masks_file) as db:
        assert db.info.kind == "masks" and not db.info.has_updates
        report = build_report(db)
    h = {(r["family"], r["estimator"]): r for r in report.headline.to_dicts()}
    # pooled over the whole file (no seeds): KL out of region 8, disagreements agg 6, uni 4
    assert (h[("kl", "agg")]["out_of_region_per_seed"],
            h[("kl", "agg")]["disagreement_per_seed"]) == (8.0, 6.0)
    assert h[("kl", "uniform")]["disagreement_per_seed"] == 4.0
    assert h[("kl", "agg")]["unsafe_ratio_pooled"] is None
    assert set(report.headline["basis"]) == {"own"}
    assert report.sign_accuracy.height == 0 and report.seed_wins["wins"].sum() == 0
    assert any("no simulated update" in n and "pdm-replay replay" in n for n in report.notes)
    assert any("dppo_topk_tv vs pdm_tv_uniform comparison" in n for n in report.notes)
    assert any("kl_exact" in n for n in report.notes)


def test_masks_only_counts_match_the_masks_command(tmp_path: Path) -> None:
    log = write_synthetic_log(tmp_path / "log.parquet", SyntheticLogConfig(
        n_samples=16, response_len=12, vocab_size=60, top_k=5, mismatch=1.0))
    summary = run_masks(MasksConfig(log=log, out=tmp_path / "tokens.parquet",
                                    thresholds=Thresholds(delta_kl=0.05, delta_tv=0.1)))
    with connect(tmp_path / "tokens.parquet") as db:
        headline = api.headline(db)
        keep = dict(api.mask_summary(db).select("mask", "keep_fraction").rows())
    assert keep == pytest.approx(summary.keep_fraction)
    for r in headline.to_dicts():
        assert r["out_of_region_per_seed"] == summary.out_of_region[r["pair"]]
        assert r["disagreement_per_seed"] == summary.disagreements[r["pair"]]


def test_sql_pairs_follow_the_mask_registry() -> None:
    # the report's comparisons (report/comparisons.py) come from comparison_pairs: check its
    # pairs against the registry metadata, so a renamed mask breaks this test first
    for family, estimator, ratio, pred in comparison_pairs(list(MASK_SPECS)):
        assert MASK_SPECS[ratio].direction == "ratio" and MASK_SPECS[ratio].family in (None, family)
        assert (MASK_SPECS[pred].family, MASK_SPECS[pred].direction, MASK_SPECS[pred].estimator) == \
            (family, "predictive", estimator)
        assert MASK_SPECS[ratio].proximity == MASK_SPECS[pred].proximity
    # the paper's pairs are among them (a composed mask may add more)
    assert {(f, e, r, p) for f, e, r, p in comparison_pairs(list(MASK_SPECS))} >= {
        (f, e, f"dppo_topk_{f}", f"pdm_{f}_{e}") for f in ("kl", "tv") for e in ("agg", "uniform")}


def test_a_pair_sql_cannot_rederive_is_left_out_with_a_note(tmp_path: Path,
                                                            user_registry: None) -> None:
    # a registered pair whose region is a derived statistic (k3, not a tokens/v1 column)
    from pdm_replay.masks.kinds import Criterion
    from pdm_replay.masks import MaskSpec, register

    for name, direction, family in (("k3_ratio", "ratio", None), ("k3_pdm", "predictive", "kl")):
        register(MaskSpec(name, lambda t, d=direction: Criterion(
            "k3", high=t.rs_k3, direction=d, slope="dkl_agg" if d == "predictive" else ""),
            family, direction, "agg" if family else None, "test", ("rs_k3",),
            proximity="k3_test"))
    log = write_synthetic_log(tmp_path / "log.parquet", SyntheticLogConfig(
        n_samples=8, response_len=8, vocab_size=60, top_k=5, mismatch=1.0))
    run_masks(MasksConfig(log=log, out=tmp_path / "t.parquet", masks=[
        "none", "dppo_topk_kl", "pdm_kl_agg", "k3_ratio", "k3_pdm"]))
    with connect(tmp_path / "t.parquet") as db:
        report = build_report(db, bootstrap_samples=10)
    assert set(report.headline["pair"]) == {"dppo_topk_kl vs pdm_kl_agg"}
    assert any(n.startswith("k3_ratio vs k3_pdm is left out of the direction analysis: k3 is "
                            "not a per-token tokens/v1 column") for n in report.notes)
