"""The report of issue 17 on the hand-built run (report_fixtures.py): the `actual` update
first, overlapping seeds without p-values, report-time thresholds, per-step sections and
µ fidelity, each worked out by hand; decisions re-derived in SQL against the masks'."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from report_fixtures import MANIFEST, token_rows
from pdm_replay.cli import app
from pdm_replay.testing.fixtures import SyntheticLogConfig, write_synthetic_log
from pdm_replay.masks import Thresholds
from pdm_replay.report import api
from pdm_replay.report.build import build_report
from pdm_replay.report.db import connect
from pdm_replay.commands.masks import MasksConfig, run_masks
from pdm_replay.schema import UPDATES_V1

runner = CliRunner()
# ΔD_kl under the trainer's real step, per (seed, pos); every other token 0
ACTUAL_KL = {(1, 0): 0.01, (1, 1): 0.02, (1, 2): -0.03, (1, 3): 0.04,
             (2, 0): -0.01, (2, 1): 0.01, (2, 2): 0.02}


def add_actual(run: Path) -> Path:
    """An `actual` update of every token (kept by dppo_topk_kl, the trainer's mask)."""
    for seed in (1, 2):
        rows = [{"seed": seed, "update_mask": "actual", "sample_id": r["sample_id"],
                 "pos": r["pos"], "kept": r["keep_dppo_topk_kl"], "logp_post": -0.9,
                 "kl_topk_post": r["kl_topk"] + ACTUAL_KL.get((seed, r["pos"]), 0.0),
                 "tv_topk_post": r["tv_topk"],
                 "delta_kl_topk": ACTUAL_KL.get((seed, r["pos"]), 0.0), "delta_tv_topk": 0.0,
                 "delta_logp": 0.1, "delta_kl_lin": -ACTUAL_KL.get((seed, r["pos"]), 0.0)}
                for r in token_rows(seed)]
        pq.write_table(pa.Table.from_pylist(rows, schema=UPDATES_V1),
                       run / "updates" / f"seed={seed}" / "part-0001.parquet")
    manifest = {**MANIFEST, "trainer_mask": {"mask": "dppo_topk_kl"}}
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def rewrite_tokens(run: Path, **columns: dict[tuple[int, int], float]) -> None:
    """Set per-token columns (e.g. step) of the tokens files from {(seed, pos): value}."""
    for seed in (1, 2):
        f = run / "tokens" / f"seed={seed}" / "part-0000.parquet"
        t = pq.read_table(f)
        for name, values in columns.items():
            col = pa.array([values[(seed, p)] for p in t["pos"].to_pylist()])
            t = (t.set_column(t.schema.get_field_index(name), name, col)
                 if name in t.column_names else t.append_column(name, col))
        pq.write_table(t, f)


def test_actual_update_comes_first_with_every_statistic(hand_run: Path) -> None:
    with connect(add_actual(hand_run)) as db:
        report = build_report(db, bootstrap_samples=200)
    head = report.headline
    assert head["basis"].unique(maintain_order=True).to_list() == ["actual", "own", "none"]
    agg = head.filter((pl.col("basis") == "actual") & (pl.col("family") == "kl")
                      & (pl.col("estimator") == "agg")).row(0, named=True)
    # kl/agg disagreements: seed 1 {1 pred-kept, 2 and 3 ratio-kept}, seed 2 {0, 1 pred-kept,
    # 2 ratio-kept}. Under `actual`: ratio kept s1 {-0.03, +0.04}, s2 {+0.02}: pooled 2/3,
    # seed mean (1/2 + 1)/2; predictive kept s1 {+0.02}, s2 {-0.01, +0.01}: 2/3 and
    # (1 + 1/2)/2. Seed 1: 1/2 - 1 < 0 (loss), seed 2: 1 - 1/2 > 0 (win).
    assert (agg["ratio_update"], agg["predictive_update"]) == ("actual", "actual")
    assert (agg["unsafe_ratio_pooled"], agg["unsafe_ratio_seed_mean"]) == \
        pytest.approx((2 / 3, 0.75))
    assert (agg["unsafe_predictive_pooled"], agg["unsafe_predictive_seed_mean"]) == \
        pytest.approx((2 / 3, 0.75))
    assert (agg["wins"], agg["losses"], agg["ties"], agg["empty_seeds"]) == (1, 1, 0, 0)
    acc = report.sign_accuracy.filter((pl.col("basis") == "actual") & (pl.col("family") == "kl"))
    # O with A != 0: s1 {0..3} realized (+,+,-,+), s2 {0,1,2} (-,+,+); ratio predicts
    # (+,+,-,-) and (+,+,-): 3 + 1 right of 7
    assert acc.filter(pl.col("predictor") == "ratio").select("n_tokens", "n_correct").row(0) \
        == (7, 4)
    assert report.sign_accuracy["basis"].unique(maintain_order=True).to_list() == \
        ["actual", "none"]
    assert any("trainer used dppo_topk_kl" in n for n in report.notes)
    # attribution along the real step (delta_kl_lin of the `actual` rows, here -ΔD: every
    # sign error is curvature); the simulated updates carry no linear term in this run
    split = report.attribution.filter(pl.col("scope") == "out_of_region")
    assert set(split["update_mask"]) == {"actual"}
    ratio = split.filter(pl.col("predictor") == "ratio").row(0, named=True)
    # kept by dppo_topk_kl (the trainer's mask) among O with A != 0: s1 {2, 3}, s2 {2};
    # realized (-, +) and (+), ratio predicts (-, -) and (-): 1 right, 2 wrong
    assert (ratio["n_tokens"], ratio["n_errors"], ratio["n_curvature_all"]) == (3, 2, 2)
    dis = api.disagreements(db := connect(hand_run), family="kl", estimator="agg", seed=1)
    db.close()
    assert dis["delta_d_actual"].to_list() == pytest.approx([0.02, -0.03, 0.04])


def test_overlapping_seeds_get_no_p_values_and_a_warning(hand_run: Path) -> None:
    manifest = {**MANIFEST, "seed_overlap": {"overlap": True, "samples_in_several_seeds": 1}}
    (hand_run / "manifest.json").write_text(json.dumps(manifest))
    result = runner.invoke(app, ["report", str(hand_run), "-f", "json",
                                 "--bootstrap-samples", "100"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert all(r["sign_test_p"] is None and r["wilcoxon_p"] is None
               and r["seeds_independent"] is False for r in doc["headline"])
    assert all(r["ci_low"] is not None for r in doc["headline"] if r["unsafe_diff_pooled"])
    assert any(w["code"] == "seeds_overlap" and "not independent" in w["message"]
               for w in doc["warnings"])
    table = runner.invoke(app, ["report", str(hand_run), "-f", "markdown"])
    assert "no p-values: the seeds are not independent" in table.stdout


def test_report_time_threshold(hand_run: Path) -> None:
    result = runner.invoke(app, ["report", str(hand_run), "-f", "json", "--delta-kl", "0.2",
                                 "--bootstrap-samples", "100"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    kl = [r for r in doc["headline"] if r["family"] == "kl"]
    # the replay simulated its masks at δ = 0.1 only: no own-update rows at 0.2, a note
    assert {(r["basis"], r["delta"]) for r in kl} == {("none", 0.2)}
    note = "dppo_topk_kl vs pdm_kl_agg at δ = 0.2 (kl_topk > 0.2): no own-update rates"
    assert any(note in n for n in doc["notes"])
    agg = next(r for r in kl if r["estimator"] == "agg")
    # kl > 0.2: seed 1 {0, 1, 5}, seed 2 {0, 1}. Disagreements: s1 pos 1 (ratio masks,
    # agg keeps), s2 pos 0 and 1 (both ratio-away, agg-toward). Under `none`: predictive
    # kept {-0.02} and {+0.01, -0.01}: pooled 1/3, seed mean (0 + 1/2)/2; the ratio mask
    # keeps none of them: both seeds have an empty side.
    assert (agg["out_of_region_per_seed"], agg["disagreement_per_seed"]) == (2.5, 1.5)
    assert (agg["unsafe_predictive_pooled"], agg["unsafe_predictive_seed_mean"]) == \
        pytest.approx((1 / 3, 0.25))
    assert (agg["unsafe_ratio_pooled"], agg["empty_seeds"], agg["seeds_compared"]) == \
        (None, 2, 0)
    tv = {(r["basis"], r["delta"]) for r in doc["headline"] if r["family"] == "tv"}
    assert tv == {("own", 0.2), ("none", 0.2)}  # untouched: the run's δ_tv


def test_report_time_threshold_equals_a_run_at_that_threshold(tmp_path: Path) -> None:
    # the out-of-region and disagreement sets are functions of stored columns: a masks run
    # at δ = 0.02 re-thresholded to 0.08 counts what a masks run at 0.08 counts
    log = write_synthetic_log(tmp_path / "log.parquet", SyntheticLogConfig(
        n_samples=24, response_len=12, vocab_size=60, top_k=5, mismatch=1.0))
    for d in (0.02, 0.08):
        run_masks(MasksConfig(log=log, out=tmp_path / f"t{d}.parquet",
                              thresholds=Thresholds(delta_kl=d, delta_tv=d)))
    keys = ["basis", "family", "estimator", "delta", "out_of_region_per_seed",
            "disagreement_per_seed"]
    with connect(tmp_path / "t0.02.parquet", thresholds={"delta_kl": 0.08,
                                                         "delta_tv": 0.08}) as db:
        moved = api.headline(db, n_resamples=10).select(keys)
    with connect(tmp_path / "t0.08.parquet") as db:
        direct = api.headline(db, n_resamples=10).select(keys)
    assert moved.equals(direct) and direct["disagreement_per_seed"].sum() > 0


def test_derived_decisions_equal_the_masks_keep_columns(tmp_path: Path) -> None:
    # the views decide on O from stored columns (any δ); at the run's δ those decisions
    # must be the masks' own (pdm_replay.math.mask_ops.away on the same tokens)
    log = write_synthetic_log(tmp_path / "log.parquet", SyntheticLogConfig(
        n_samples=32, response_len=16, vocab_size=60, top_k=5, mismatch=1.0))
    run_masks(MasksConfig(log=log, out=tmp_path / "t.parquet",
                          thresholds=Thresholds(delta_kl=0.03, delta_tv=0.05)))
    with connect(tmp_path / "t.parquet") as db:
        # each pair's two masks' stored keep columns, found by name (unpivoted)
        got = db.query("""
            WITH k AS (
                UNPIVOT (SELECT sample_id, pos, COLUMNS('^keep_') FROM tokens)
                ON COLUMNS('^keep_') INTO NAME keep_column VALUE keep
            )
            SELECT d.pair, count(*) AS n,
                   count(*) FILTER (WHERE d.keep_ratio <> r.keep
                                    OR d.keep_predictive <> p.keep) AS n_differ
            FROM direction_pairs AS d
            JOIN k AS r ON r.sample_id = d.sample_id AND r.pos = d.pos
             AND r.keep_column = 'keep_' || d.ratio_mask
            JOIN k AS p ON p.sample_id = d.sample_id AND p.pos = d.pos
             AND p.keep_column = 'keep_' || d.predictive_mask
            GROUP BY ALL ORDER BY ALL""")
    n = dict(got.select("pair", "n").rows())
    assert all(n.get(f"dppo_topk_{f} vs pdm_{f}_{e}", 0) > 0 for f in ("kl", "tv")
               for e in ("agg", "uniform"))
    assert (got["n_differ"] == 0).all()


def test_by_step_groups_every_section(hand_run: Path) -> None:
    rewrite_tokens(hand_run, step={(s, p): 3 if s == 1 else 4 for s in (1, 2)
                                   for p in range(6)})
    result = runner.invoke(app, ["report", str(hand_run), "-f", "json", "--by", "step",
                                 "--bootstrap-samples", "50"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["by"] == "step" and [r["step"] for r in doc["log_health"]] == [3, 4]
    own = {(r["step"], r["estimator"]): r for r in doc["headline"]
           if r["basis"] == "own" and r["family"] == "kl"}
    # step 3 holds seed 1 only (ratio kl/agg unsafe 1 of 2), step 4 seed 2 (1 of 1)
    assert (own[(3, "agg")]["n_seeds"], own[(3, "agg")]["unsafe_ratio_pooled"]) == (1, 0.5)
    assert (own[(4, "agg")]["n_seeds"], own[(4, "agg")]["unsafe_ratio_pooled"]) == (1, 1.0)
    assert {r["step"] for r in doc["mask_summary"]} == {3, 4}
    table = runner.invoke(app, ["report", str(hand_run), "--by", "step"])
    assert table.exit_code == 0
    assert "step 3, dppo_topk_kl vs pdm_kl_agg (kl/agg" in " ".join(table.stdout.split())
    bad = runner.invoke(app, ["report", str(hand_run), "--by", "seed"])
    assert bad.exit_code == 2 and "is not one of 'step'" in bad.output  # --help lists it


GAP = {(1, 0): 0.001, (1, 1): -0.002, (1, 2): 0.01, (1, 3): 0.0, (1, 4): 0.003,
       (1, 5): -0.05, (2, 0): 0.0, (2, 1): 0.02, (2, 2): -0.001, (2, 3): 0.004}


def test_behavior_fidelity_against_one_rounding(hand_run: Path) -> None:
    rewrite_tokens(hand_run, behavior_logp_gap=GAP,
                   behavior_logp_gap_max={k: abs(v) * 2 for k, v in GAP.items()})
    manifest = {**MANIFEST, "behavior_fidelity": {"dtype": "bfloat16",
                                                  "unit_roundoff": 2.0**-8}}
    (hand_run / "manifest.json").write_text(json.dumps(manifest))
    with connect(hand_run) as db:
        fid = {r["scope"]: r for r in api.behavior_fidelity(db).to_dicts()}
    # logp_behavior = -1 everywhere: one bf16 rounding moves it by up to 2^-8 = 0.0039.
    # All 10 |gaps|: 0, 0, .001, .001, .002, .003, .004, .01, .02, .05: median .0025,
    # 6 within one rounding. Disagreement tokens (any comparison): seed 1 {0..3}, seed 2
    # {0, 1, 2}: .001 .002 .01 0 0 .02 .001, 5 of 7 within.
    a, d = fid["all"], fid["disagreement"]
    assert (a["n_tokens"], a["median_abs_gap"], a["max_abs_gap"], a["max_support_gap"]) == \
        pytest.approx((10, 0.0025, 0.05, 0.1))
    assert a["within_one_rounding"] == pytest.approx(0.6)
    assert (d["n_tokens"], d["max_abs_gap"], d["within_one_rounding"]) == \
        pytest.approx((7, 0.02, 5 / 7))


def make_sweep(run: Path, values: tuple[float, ...] = (0.1, 0.2)) -> Path:
    """The hand run as a `--delta-kl 0.1,0.2` replay: KL masks as `<mask>@<value>` keep
    columns and updates (the same ΔD at both values), mask_variants in the footer."""
    kl = ("dppo_topk_kl", "pdm_kl_agg", "pdm_kl_uniform")
    variants = {f"{m}@{v!r}": {"mask": m, "delta_kl": v} for m in kl for v in values}
    for seed in (1, 2):
        f = run / "tokens" / f"seed={seed}" / "part-0000.parquet"
        t = pq.read_table(f)
        for m in kl:
            col = t[f"keep_{m}"]
            t = t.drop([f"keep_{m}"])
            for v in values:
                t = t.append_column(f"keep_{m}@{v!r}", col)
        md = {**t.schema.metadata, b"pdm_replay.mask_variants": json.dumps(variants).encode()}
        pq.write_table(t.replace_schema_metadata(md), f)
        u = run / "updates" / f"seed={seed}" / "part-0000.parquet"
        rows = pq.read_table(u).to_pylist()
        out = [r for r in rows if r["update_mask"] not in kl]
        out += [{**r, "update_mask": f"{r['update_mask']}@{v!r}"}
                for r in rows if r["update_mask"] in kl for v in values]
        pq.write_table(pa.Table.from_pylist(out, schema=UPDATES_V1), u)
    return run


def test_a_sweep_keeps_the_kl_family_grouped_by_threshold(hand_run: Path,
                                                          tmp_path: Path) -> None:
    from report_fixtures import write_run
    plain = write_run(tmp_path / "plain")
    with connect(plain) as db:
        ref = {r["basis"]: r for r in api.headline(db, n_resamples=100).to_dicts()
               if (r["family"], r["estimator"]) == ("kl", "agg")}
    with connect(plain, thresholds={"delta_kl": 0.2}) as db:
        at_02 = next(r for r in api.headline(db, n_resamples=100).to_dicts()
                     if (r["family"], r["estimator"], r["basis"]) == ("kl", "agg", "none"))
    with connect(make_sweep(hand_run)) as db:
        report = build_report(db, bootstrap_samples=100)
    rows = {(r["basis"], r["delta"]): r for r in report.headline.to_dicts()
            if (r["family"], r["estimator"]) == ("kl", "agg")}
    assert sorted(rows) == [("none", 0.1), ("none", 0.2), ("own", 0.1), ("own", 0.2)]
    assert (rows[("own", 0.1)]["ratio_update"], rows[("own", 0.2)]["predictive_update"]) == \
        ("dppo_topk_kl@0.1", "pdm_kl_agg@0.2")
    names = {"ratio_update", "predictive_update"}
    same = lambda a, b: {k: v for k, v in a.items() if k not in names} == \
        {k: v for k, v in b.items() if k not in names}  # noqa: E731
    # δ = 0.1 rows are the plain run's; `none` at 0.2 is the plain run re-thresholded
    assert same(rows[("own", 0.1)], ref["own"]) and same(rows[("none", 0.1)], ref["none"])
    assert same(rows[("none", 0.2)], at_02)
    side = report.threshold_comparison.filter(
        (pl.col("basis") == "none") & (pl.col("family") == "kl")
        & (pl.col("estimator") == "agg")).row(0, named=True)
    assert (side["disagreement_per_seed@0.1"], side["disagreement_per_seed@0.2"]) == (3.0, 1.5)
    md = runner.invoke(app, ["report", str(hand_run), "-f", "markdown"])
    assert "## Threshold comparison" in md.stdout


def test_mask_summary_labels_sweep_variants(hand_run: Path) -> None:
    with connect(make_sweep(hand_run)) as db:
        ms = {r["mask"]: r for r in api.mask_summary(db).to_dicts()}
    # variants take their mask's labels; their out-of-region count (at another δ than the
    # primary one the counts use) is left empty; unswept masks keep theirs
    assert (ms["pdm_kl_agg@0.2"]["family"], ms["pdm_kl_agg@0.2"]["estimator"],
            ms["pdm_kl_agg@0.2"]["n_out_of_region"]) == ("kl", "agg", None)
    assert ms["dppo_topk_tv"]["n_out_of_region"] == 2


def test_dashboard_page_reads_the_actual_update(hand_run: Path) -> None:
    from pdm_replay.report import dashboard_api as dapi
    db, _ = dapi.connect_dashboard(add_actual(hand_run))
    with db:
        page = dapi.disagreement_page(db, dapi.DisagreementFilter(
            family="kl", estimator="agg", seed=1, update="actual"))
    # seed 1 kl/agg disagreements {1, 2, 3}: ΔD under `actual` +0.02, -0.03, +0.04
    assert page["update_mask"].to_list() == ["actual"] * 3
    assert page["delta_d"].to_list() == pytest.approx([0.02, -0.03, 0.04])


def test_seeds_sharing_a_sample_in_the_data_are_not_independent(hand_run: Path) -> None:
    # no seed_overlap in the manifest (an older replay), but seed 2's sample is also "a"
    f = hand_run / "tokens" / "seed=2" / "part-0000.parquet"
    t = pq.read_table(f)
    pq.write_table(t.set_column(t.schema.get_field_index("sample_id"), "sample_id",
                                pa.array(["a"] * t.num_rows)), f)
    with connect(hand_run) as db:
        assert (db.shared_samples(), db.seeds_independent()) == (1, False)
        report = build_report(db, bootstrap_samples=50)
    assert report.headline["sign_test_p"].is_null().all()
    assert any(w.code == "seeds_overlap" and "seeds overlap: 1 samples" in w.message
               for w in report.warnings)
