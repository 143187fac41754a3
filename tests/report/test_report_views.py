"""Every view and API report on the hand-built run of conftest.py (answers worked out there
and in the comments here)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from pdm_replay.report import api
from pdm_replay.report.db import connect


@pytest.fixture
def db(hand_run: Path):
    with connect(hand_run) as database:
        yield database


def _rows(df: pl.DataFrame, *cols: str) -> list[tuple]:
    return df.select(cols).rows()


def test_settings_come_from_the_footer(db) -> None:
    s = api.settings(db).row(0, named=True)
    assert (s["kind"], s["delta_kl"], s["delta_tv"], s["thresholds_source"]) == \
        ("replay", 0.1, 0.2, "tokens footer")


def test_out_of_region_and_direction_pairs(db) -> None:
    oor = db.query("SELECT family, seed, count(*) AS n FROM out_of_region GROUP BY ALL "
                   "ORDER BY ALL")
    # KL: seed 1 {0,1,2,3,5}, seed 2 {0,1,2}; TV: seed 1 {0,2}
    assert oor.rows() == [("kl", 1, 5), ("kl", 2, 3), ("tv", 1, 2)]
    pairs = db.query("SELECT DISTINCT family, estimator FROM direction_pairs ORDER BY ALL")
    # pdm_tv_uniform is absent: no tv/uniform pairs
    assert pairs.rows() == [("kl", "agg"), ("kl", "uniform"), ("tv", "agg")]


def test_disagreements_rows_and_post_values(db) -> None:
    all_rows = api.disagreements(db, limit=None)
    counts = all_rows.group_by("family", "estimator", "seed").len().sort(
        "family", "estimator", "seed")
    # kl/agg: seed 1 {1,2,3}, seed 2 {0,1,2}; kl/uniform: {2}, {0,1,2}; tv/agg: seed 1 {0}
    assert counts.rows() == [("kl", "agg", 1, 3), ("kl", "agg", 2, 3), ("kl", "uniform", 1, 1),
                             ("kl", "uniform", 2, 3), ("tv", "agg", 1, 1)]
    row = all_rows.filter((pl.col("seed") == 1) & (pl.col("family") == "kl")
                          & (pl.col("estimator") == "agg") & (pl.col("pos") == 2)).row(
        0, named=True)
    # seed 1 pos 2: A = -1, r = 1.3 -> ratio keeps, agg masks; ΔD: ratio +0.02, agg 0, none +0.01
    assert (row["kept_by"], row["ratio_mask"], row["predictive_mask"]) == \
        ("ratio", "dppo_topk_kl", "pdm_kl_agg")
    assert row["d_pre"] == pytest.approx(0.2) and row["delta"] == pytest.approx(0.1)
    assert row["delta_d_ratio"] == pytest.approx(0.02)
    assert row["d_post_ratio"] == pytest.approx(0.22)
    assert row["delta_d_predictive"] == pytest.approx(0.0)
    assert row["delta_d_none"] == pytest.approx(0.01)
    assert row["delta_d_kept"] == pytest.approx(0.02)
    assert row["d_predictive"] == pytest.approx(-0.1) and row["d_local"] == pytest.approx(0.1)
    tv = all_rows.filter(pl.col("family") == "tv").row(0, named=True)
    # seed 1 pos 0 in TV: kept by pdm_tv_agg, ΔD_tv +0.01 under it, -0.01 under none
    assert (tv["pos"], tv["kept_by"], tv["delta_d_kept"], tv["delta_d_none"]) == \
        (0, "predictive", pytest.approx(0.01), pytest.approx(-0.01))
    assert tv["d_local"] is None


def test_disagreements_paging_and_filters(db) -> None:
    everything = api.disagreements(db, limit=None)
    pages = [api.disagreements(db, limit=4, offset=o) for o in (0, 4, 8)]
    assert [p.height for p in pages] == [4, 4, 3]  # 11 rows in all
    assert pl.concat(pages).equals(everything)
    seed2 = api.disagreements(db, family="kl", estimator="uniform", seed=2)
    assert seed2["pos"].to_list() == [0, 1, 2]


def test_alignment_by_seed(db) -> None:
    everything = api.alignment_by_seed(db)
    # bases: each mask's own update, then `none` (no `actual` update in this run)
    assert everything["basis"].unique(maintain_order=True).to_list() == ["own", "none"]
    df = everything.filter(pl.col("basis") == "own")
    got = {(r["seed"], r["family"], r["estimator"], r["direction"]):
           (r["n_out_of_region"], r["n_disagree"], r["n_kept"], r["n_measured"], r["n_unsafe"],
            r["n_corrective"], r["unsafe_keep_rate"], r["corrective_rate"])
           for r in df.to_dicts()}
    assert got == {
        # seed 1 kl/agg: ratio keeps {2 (+0.02), 3 (-0.01)}, agg keeps {1 (-0.03)}
        (1, "kl", "agg", "ratio"): (5, 3, 2, 2, 1, 1, 0.5, 0.5),
        (1, "kl", "agg", "predictive"): (5, 3, 1, 1, 0, 1, 0.0, 1.0),
        # seed 1 kl/uniform: ratio keeps {2 (+0.02)}; uniform keeps nothing -> no rate
        (1, "kl", "uniform", "ratio"): (5, 1, 1, 1, 1, 0, 1.0, 0.0),
        (1, "kl", "uniform", "predictive"): (5, 1, 0, 0, 0, 0, None, None),
        # seed 1 tv/agg: agg keeps {0 (+0.01 under pdm_tv_agg)}
        (1, "tv", "agg", "ratio"): (2, 1, 0, 0, 0, 0, None, None),
        (1, "tv", "agg", "predictive"): (2, 1, 1, 1, 1, 0, 1.0, 0.0),
        # seed 2 kl/agg: ratio keeps {2 (+0.05)}; agg keeps {0 (+0.04), 1 (-0.02)}
        (2, "kl", "agg", "ratio"): (3, 3, 1, 1, 1, 0, 1.0, 0.0),
        (2, "kl", "agg", "predictive"): (3, 3, 2, 2, 1, 1, 0.5, 0.5),
        # seed 2 kl/uniform: uniform keeps {0 (-0.01), 1 (-0.03)}
        (2, "kl", "uniform", "ratio"): (3, 3, 1, 1, 1, 0, 1.0, 0.0),
        (2, "kl", "uniform", "predictive"): (3, 3, 2, 2, 0, 2, 0.0, 1.0),
        # seed 2 has no TV token out of region
        (2, "tv", "agg", "ratio"): (0, 0, 0, 0, 0, 0, None, None),
        (2, "tv", "agg", "predictive"): (0, 0, 0, 0, 0, 0, None, None),
    }
    assert set(zip(df["direction"], df["update_mask"])) == {
        ("ratio", "dppo_topk_kl"), ("predictive", "pdm_kl_agg"),
        ("predictive", "pdm_kl_uniform"), ("ratio", "dppo_topk_tv"),
        ("predictive", "pdm_tv_agg")}


def test_seed_rates_and_wins(db) -> None:
    rates = api.seed_rates(db).filter(pl.col("basis") == "own")
    # seed 1 kl/uniform: the uniform mask kept nothing measured -> 'empty', not dropped
    assert _rows(rates.filter(pl.col("family") == "kl"), "estimator", "seed", "unsafe_diff",
                 "outcome") == [("agg", 1, 0.5, "win"), ("agg", 2, 0.5, "win"),
                                ("uniform", 1, None, "empty"), ("uniform", 2, 1.0, "win")]
    wins = {(r["family"], r["estimator"]): r for r in api.seed_wins(db).to_dicts()
            if r["basis"] == "own"}
    agg = wins[("kl", "agg")]
    # 2 wins of 2: sign p = 2 * 1/4; Wilcoxon on [0.5, 0.5] (tied): 2 of 4 sign flips
    # reach W+ = 3 on one side -> p = 2 * 1/4
    assert (agg["wins"], agg["losses"], agg["ties"], agg["empty_seeds"],
            agg["seeds_compared"]) == (2, 0, 0, 0, 2)
    assert agg["win_seeds"] == [1, 2] and agg["seeds_independent"]
    assert agg["sign_test_p"] == pytest.approx(0.5)
    assert agg["wilcoxon_p"] == pytest.approx(0.5)
    # clusters: samples a (seed 1) and b (seed 2). Resampling (a, a) or (b, b) keeps each
    # seed's rates: pooled diff 1/2 - 0 = 1 - 1/2 = 0.5; (a, b): (1 + 1)/(2 + 1) - (0 + 1)/
    # (1 + 2) = 1/3. Half the draws each way: the 95% interval is [1/3, 1/2]. The per-seed
    # mean diff is 0.5 in every draw.
    assert agg["unsafe_diff_pooled"] == pytest.approx(1 / 3)
    assert (agg["ci_low"], agg["ci_high"]) == pytest.approx((1 / 3, 0.5))
    assert (agg["unsafe_diff_seed_mean"], agg["seed_mean_ci_low"],
            agg["seed_mean_ci_high"]) == pytest.approx((0.5, 0.5, 0.5))
    assert (agg["bootstrap_resamples"], agg["bootstrap_clusters"]) == (2000, 2)
    uni = wins[("kl", "uniform")]
    # only seed 2 has both rates: 1 win and 1 empty seed, sign p = 1, Wilcoxon (n = 1) p = 1
    assert (uni["wins"], uni["empty_seeds"], uni["empty_seed_list"], uni["seeds_compared"],
            uni["sign_test_p"], uni["wilcoxon_p"]) == (1, 1, [1], 1, 1.0, 1.0)
    tv = wins[("tv", "agg")]
    # seed 1: the ratio mask kept no TV disagreement token; seed 2: no TV token out of region
    assert (tv["seeds_compared"], tv["empty_seeds"], tv["sign_test_p"],
            tv["unsafe_diff_seed_mean"]) == (0, 2, None, None)


def test_headline_pooled(db) -> None:
    h = {(r["family"], r["estimator"]): r for r in api.headline(db).to_dicts()
         if r["basis"] == "own"}
    assert sorted(h) == [("kl", "agg"), ("kl", "uniform"), ("tv", "agg")]
    agg = h[("kl", "agg")]
    # out of region (5 + 3) / 2, disagreements (3 + 3) / 2; pooled ratio unsafe (1 + 1)/(2 + 1)
    assert (agg["n_seeds"], agg["out_of_region_per_seed"], agg["disagreement_per_seed"]) == \
        (2, 4.0, 3.0)
    assert agg["unsafe_ratio_pooled"] == pytest.approx(2 / 3)
    assert agg["unsafe_predictive_pooled"] == pytest.approx(1 / 3)  # (0 + 1) / (1 + 2)
    assert agg["corrective_ratio_pooled"] == pytest.approx(1 / 3)
    assert agg["corrective_predictive_pooled"] == pytest.approx(2 / 3)
    # per-seed means: ratio (1/2 + 1/1) / 2, predictive (0/1 + 1/2) / 2
    assert agg["unsafe_ratio_seed_mean"] == pytest.approx(0.75)
    assert agg["unsafe_predictive_seed_mean"] == pytest.approx(0.25)
    assert (agg["wins"], agg["seeds_compared"]) == (2, 2)
    uni = h[("kl", "uniform")]
    assert (uni["disagreement_per_seed"], uni["unsafe_ratio_pooled"],
            uni["unsafe_predictive_pooled"], uni["corrective_predictive_pooled"]) == \
        (2.0, 1.0, 0.0, 1.0)
    # seed-mean over the seeds with a rate: ratio seeds 1 (1/1), 2 (1/1); predictive seed 2
    assert (uni["unsafe_ratio_seed_mean"], uni["unsafe_predictive_seed_mean"]) == (1.0, 0.0)
    tv = h[("tv", "agg")]
    assert (tv["out_of_region_per_seed"], tv["disagreement_per_seed"],
            tv["unsafe_ratio_pooled"], tv["unsafe_predictive_pooled"]) == (1.0, 0.5, None, 1.0)


def test_headline_under_none(db) -> None:
    h = {(r["family"], r["estimator"]): r for r in api.headline(db).to_dicts()
         if r["basis"] == "none"}
    agg = h[("kl", "agg")]
    # ΔD under `none`: ratio keeps seed 1 {2 (+0.01), 3 (+0.03)}, seed 2 {2 (+0.02)};
    # agg keeps seed 1 {1 (-0.02)}, seed 2 {0 (+0.01), 1 (-0.01)}
    assert (agg["ratio_update"], agg["predictive_update"]) == ("none", "none")
    assert agg["unsafe_ratio_pooled"] == pytest.approx(1.0)
    assert agg["unsafe_predictive_pooled"] == pytest.approx(1 / 3)
    assert agg["unsafe_predictive_seed_mean"] == pytest.approx((0 + 1 / 2) / 2)


def test_sign_accuracy(db) -> None:
    pooled = {(r["family"], r["predictor"]): (r["n_tokens"], r["n_correct"])
              for r in api.sign_accuracy(db).to_dicts()}
    assert set(api.sign_accuracy(db)["basis"]) == {"none"}
    # KL, O with A != 0: seed 1 {0,1,2,3} realized (+,-,+,+), seed 2 {0,1,2} (+,-,+)
    # ratio predicts (+,+,-,-) and (+,+,-): 1 + 1 right; agg (+,-,+,+) and (-,-,+): 4 + 2;
    # uniform (+,+,+,-) and (-,-,+): 2 + 2. TV: seed 1 {0, 2}, realized (-,-): ratio (+,-)
    # 1 right; agg (-,-) 2 right; uniform = agg here. No exact column: no exact predictor.
    assert pooled == {("kl", "ratio"): (7, 2), ("kl", "predictive_agg"): (7, 6),
                      ("kl", "predictive_uniform"): (7, 4), ("tv", "ratio"): (2, 1),
                      ("tv", "predictive_agg"): (2, 2), ("tv", "predictive_uniform"): (2, 2)}
    by_seed = api.sign_accuracy(db, by_seed=True)
    assert _rows(by_seed.filter((pl.col("family") == "kl") & (pl.col("predictor") == "ratio")),
                 "seed", "n_tokens", "n_correct", "accuracy") == [(1, 4, 1, 0.25),
                                                                  (2, 3, 1, 1 / 3)]


def test_mask_summary(db) -> None:
    ms = api.mask_summary(db)
    # 10 tokens; dppo_topk_kl masks a0 a1 b0 b1; pdm_kl_agg a0 a2 a3 b2; uniform a0 a1 a2 b2;
    # dppo_topk_tv masks a0; out of region: KL 8, TV 2
    assert _rows(ms, "mask", "n_tokens", "n_kept", "n_masked", "keep_fraction",
                 "n_out_of_region") == [
        ("none", 10, 10, 0, 1.0, None), ("dppo_topk_kl", 10, 6, 4, 0.6, 8),
        ("pdm_kl_agg", 10, 6, 4, 0.6, 8), ("pdm_kl_uniform", 10, 6, 4, 0.6, 8),
        ("dppo_topk_tv", 10, 9, 1, 0.9, 2), ("pdm_tv_agg", 10, 10, 0, 1.0, 2)]
    by_seed = api.mask_summary(db, by_seed=True).filter(pl.col("mask") == "dppo_topk_kl")
    assert _rows(by_seed, "seed", "n_tokens", "n_kept") == [(1, 6, 4), (2, 4, 2)]


def test_log_health(db) -> None:
    h = api.log_health(db).row(0, named=True)
    # a4 overflows; a5 has A = 0; 10 tokens x 6 update masks
    assert (h["n_tokens"], h["n_seeds"], h["n_mass_overflow"], h["n_zero_advantage"],
            h["n_nonfinite"], h["n_exact"], h["n_update_rows"]) == (10, 2, 1, 1, 0, 0, 60)
    assert h["mass_overflow_fraction"] == pytest.approx(0.1)
    assert (h["recompute_deviation_max"], h["recompute_deviation_mean"]) == (0.002, 0.0005)


def test_estimator_accuracy_is_empty_without_exact_columns(db) -> None:
    assert api.estimator_accuracy(db).height == 0


def test_direction_terms_and_kept_deltas(db) -> None:
    terms = api.direction_terms(db).sort("seed", "pos")
    # KL out of region with A != 0: 4 + 3 tokens; seed 1 pos 2: A = -1, local 0.1, agg -0.1
    assert terms.height == 7
    a2 = terms.filter((pl.col("seed") == 1) & (pl.col("pos") == 2)).row(0, named=True)
    assert (a2["local_term"], a2["global_term"], a2["predicted"], a2["delta_d_none"]) == \
        pytest.approx((-0.1, -0.2, 0.1, 0.01))
    assert api.direction_terms(db, limit=3).height == 3
    kept = api.kept_deltas(db)
    assert kept.height == 11 and kept["delta_d_kept"].is_not_null().all()


def test_every_documented_view_exists_and_caching_keeps_results(db) -> None:
    from pdm_replay.report import db as db_module
    doc = db_module.__doc__.split("Views:")[1].split("Examples")[0]
    documented = {w.strip("`,.() ") for w in doc.split() if w.startswith("``")}
    tables = set(db.query("SELECT table_name FROM information_schema.tables")["table_name"])
    assert documented <= tables
    before = api.alignment_by_seed(db)
    db.cache_disagreements()
    assert api.alignment_by_seed(db).equals(before)
    assert api.disagreements(db, limit=None).height == 11
