"""The attribution split (geometry / interference / curvature) on the hand-built run of
report_fixtures.py, with attribution columns added here and every count worked out below.

Out-of-region KL tokens with A != 0 (delta_kl = 0.1), their predicted signs
sign(A)·slope, and the realized ΔD under `none` (report_fixtures.DELTA_KL):

  token  ratio agg | realized | self    linear  | ratio error: stages flipped
  s1 p0    +    +  |  +0.05   | +0.04   +0.06   | -
  s1 p1    +    -  |  -0.02   | +0.01   -0.03   | interference
  s1 p2    -    +  |  +0.01   | +0.02   +0.015  | geometry
  s1 p3    -    +  |  +0.03   |  null   -0.01   | (no self) curvature_all
  s2 p0    +    -  |  +0.01   | -0.01   +0.02   | - (agg error: interference)
  s2 p1    +    -  |  -0.01   | -0.005  +0.004  | geometry, interference, curvature
  s2 p2    -    +  |  +0.02   | -0.01   -0.002  | curvature

Disagreement tokens (keep_dppo_topk_kl differs from keep_pdm_kl_agg or _uniform): every
token above except s1 p0. Under `pdm_kl_agg` only seed 2 carries attribution: it keeps
p0 (linear +0.03, realized +0.04) and p1 (linear -0.01, realized -0.02), drops p2.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from report_fixtures import MASK_NAMES, updates_table, write_run

from pdm_replay.report import attribution_report as attr
from pdm_replay.report.build import build_report
from pdm_replay.report.db import connect
from pdm_replay.report.render import render_markdown
from pdm_replay.schema import UPDATES_V1

# (seed, update mask, pos) -> (linear, self)
ATTRIBUTION = {
    (1, "none", 0): (0.06, 0.04), (1, "none", 1): (-0.03, 0.01),
    (1, "none", 2): (0.015, 0.02), (1, "none", 3): (-0.01, None),
    (2, "none", 0): (0.02, -0.01), (2, "none", 1): (0.004, -0.005),
    (2, "none", 2): (-0.002, -0.01),
    (2, "pdm_kl_agg", 0): (0.03, None), (2, "pdm_kl_agg", 1): (-0.01, None),
    (2, "pdm_kl_agg", 2): (0.0, None),
}


def _with_attribution(seed: int) -> pa.Table:
    rows = updates_table(seed, MASK_NAMES).to_pylist()
    for r in rows:
        lin, own = ATTRIBUTION.get((seed, r["update_mask"], r["pos"]), (None, None))
        r["delta_kl_lin"] = lin
        r["delta_kl_curv"] = None if lin is None else r["delta_kl_topk"] - lin
        r["delta_kl_self"] = own
        r["delta_kl_cross"] = None if own is None else lin - own
    return pa.Table.from_pylist(rows, schema=UPDATES_V1)


@pytest.fixture
def db(tmp_path: Path):
    run = write_run(tmp_path / "run")
    for seed in (1, 2):
        pq.write_table(_with_attribution(seed),
                       run / "updates" / f"seed={seed}" / "part-0000.parquet")
    with connect(run) as database:
        yield database


def _row(df: pl.DataFrame, scope: str, predictor: str) -> dict:
    return df.filter((pl.col("scope") == scope) & (pl.col("predictor") == predictor)).row(
        0, named=True)


def test_split_of_ratio_errors_pooled(db) -> None:
    split = attr.attribution_split(db)
    assert split["predictor"].unique(maintain_order=True).to_list() == [
        "ratio", "predictive_agg", "predictive_uniform"]  # no dkl_exact in this run
    r = _row(split, "out_of_region", "ratio")
    # errors s1p1, s1p2, s1p3, s2p1, s2p2; s1p3 has no self term
    assert (r["n_seeds"], r["n_tokens"], r["n_errors"], r["n_errors_self"]) == (2, 7, 5, 4)
    assert r["accuracy"] == pytest.approx(2 / 7)
    # geometry s1p2, s2p1; interference s1p1, s2p1; curvature s2p1, s2p2; all three: s2p1
    assert (r["n_geometry"], r["n_interference"], r["n_curvature"], r["n_all_three"]) == \
        (2, 2, 2, 1)
    assert r["n_geometry"] + r["n_interference"] + r["n_curvature"] == \
        r["n_errors_self"] + 2 * r["n_all_three"]
    assert (r["geometry_share"], r["interference_share"], r["curvature_share"]) == \
        pytest.approx((0.5, 0.5, 0.5))
    # linear sign vs predicted: s1p1, s1p2; realized vs linear: s1p3, s2p1, s2p2
    assert (r["n_parameter_space"], r["n_curvature_all"]) == (2, 3)
    assert (r["parameter_space_share"], r["curvature_all_share"]) == pytest.approx((0.4, 0.6))


def test_split_of_predictive_errors_and_disagreement_scope(db) -> None:
    split = attr.attribution_split(db)
    a = _row(split, "out_of_region", "predictive_agg")
    # the one agg error is s2p0: pred -, self -, linear +, realized +
    assert (a["n_errors"], a["n_errors_self"], a["n_geometry"], a["n_interference"],
            a["n_curvature"], a["n_parameter_space"], a["n_curvature_all"]) == \
        (1, 1, 0, 1, 0, 1, 0)
    d = _row(split, "disagreement", "ratio")  # s1p0 (correct) is the only token left out
    assert (d["n_tokens"], d["n_errors"], d["n_geometry"], d["n_curvature_all"]) == (6, 5, 2, 3)


def test_split_by_seed_and_by_update_mask(db) -> None:
    by_seed = attr.attribution_split(db, by_seed=True)
    s1 = by_seed.filter((pl.col("seed") == 1) & (pl.col("scope") == "out_of_region")
                        & (pl.col("predictor") == "ratio")).row(0, named=True)
    # seed 1: errors p1 (interference), p2 (geometry), p3 (no self; curvature_all)
    assert (s1["n_tokens"], s1["n_errors"], s1["n_errors_self"], s1["n_geometry"],
            s1["n_interference"], s1["n_curvature"], s1["n_curvature_all"]) == \
        (4, 3, 2, 1, 1, 0, 1)
    agg = attr.attribution_split(db, update_mask="pdm_kl_agg")
    r = _row(agg, "out_of_region", "predictive_agg")
    # kept p0 (pred -, linear +, realized +: parameter space) and p1 (correct)
    assert (r["n_tokens"], r["n_errors"], r["n_errors_self"], r["n_parameter_space"],
            r["n_curvature_all"]) == (2, 1, 0, 1, 0)
    assert r["geometry_share"] is None


def test_points_coverage_and_report_section(db) -> None:
    pts = attr.attribution_points(db, limit=100)
    assert pts.height == 7 and pts["self_term"].null_count() == 1
    assert pts.filter(pl.col("pos") == 1).sort("seed")["curv"].to_list() == \
        pytest.approx([0.01, -0.014])
    cov = attr.attribution_coverage(db).filter(pl.col("update_mask") == "none").row(
        0, named=True)
    assert (cov["n_rows"], cov["n_linear"], cov["n_self"]) == (10, 7, 6)
    report = build_report(db, bootstrap_samples=50)
    assert report.attribution.equals(attr.attribution_split(db))
    assert "first-order attribution" in render_markdown(report)


def test_run_without_attribution_has_empty_split_and_a_note(hand_run: Path) -> None:
    with connect(hand_run) as db:
        assert attr.attribution_split(db).height == 0
        report = build_report(db, bootstrap_samples=50)
    assert any("--attribution" in n for n in report.notes)
