"""The dashboard's queries (pdm_replay.report.dashboard_api): the hand-built run's numbers,
agreement with the report API's disagreement view, and in-progress runs."""

from __future__ import annotations

import itertools
import json
import math
import shutil
from pathlib import Path

import polars as pl
import pytest

from pdm_replay.report import api
from pdm_replay.report import dashboard_api as dapi
from pdm_replay.testing.synthetic_run import write_synthetic_run


@pytest.fixture
def hand_db(hand_run: Path):
    db, status = dapi.connect_dashboard(hand_run)
    yield db
    db.close()


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_run(tmp_path_factory.mktemp("syn") / "run", seeds=(0, 1),
                               rows_per_seed=1500, tokens_per_sample=30)


def keys(df: pl.DataFrame) -> list[tuple]:
    return list(df.select("seed", "sample_id", "pos").iter_rows())


# Worked out in report_fixtures.py: kl/agg disagreements are seed 1 pos 1-3, seed 2 pos 0-2.
@pytest.mark.parametrize("flt, expected", [
    (dict(family="kl", estimator="agg"), 6),
    (dict(family="kl", estimator="agg", delta_sign=1), 3),  # own update: s1p2 s2p0 s2p2
    (dict(family="kl", estimator="agg", delta_sign=-1), 3),
    (dict(family="kl", estimator="agg", update="none", delta_sign=1), 4),
    (dict(family="kl", estimator="agg", adv_sign=-1), 2),  # s1p2, s2p1
    (dict(family="kl", estimator="agg", kept_by="ratio"), 3),  # s1p2, s1p3, s2p2
    (dict(family="kl", estimator="uniform", seed=1), 1),  # s1p2
    (dict(family="tv"), 1),  # tv/agg s1p0 (tv/uniform is not in the run)
])
def test_hand_run_counts(hand_db, flt: dict, expected: int) -> None:
    f = dapi.DisagreementFilter(**flt)
    assert dapi.disagreement_count(hand_db, f) == expected
    assert dapi.disagreement_page(hand_db, f, limit=50).height == expected


def test_hand_run_delta_d_follows_the_chosen_update(hand_db) -> None:
    f = dapi.DisagreementFilter(family="kl", estimator="agg", seed=1)
    own = dapi.disagreement_page(hand_db, f).select("pos", "delta_d", "update_mask").rows()
    assert own == [(1, pytest.approx(-0.03), "pdm_kl_agg"),
                   (2, pytest.approx(0.02), "dppo_topk_kl"),
                   (3, pytest.approx(-0.01), "dppo_topk_kl")]
    ratio = dapi.DisagreementFilter(family="kl", estimator="agg", seed=1, update="ratio")
    assert dapi.disagreement_page(hand_db, ratio)["update_mask"].unique().to_list() == [
        "dppo_topk_kl"]


def test_sort_descending_and_paging(hand_db) -> None:
    f = dapi.DisagreementFilter(family="kl")
    full = dapi.disagreement_page(hand_db, f, sort="d_pre", descending=True, limit=100)
    assert full["d_pre"].to_list() == sorted(full["d_pre"].to_list(), reverse=True)
    pages = [dapi.disagreement_page(hand_db, f, sort="d_pre", descending=True, limit=3,
                                    offset=o) for o in range(0, full.height, 3)]
    assert keys(pl.concat(pages)) == keys(full)


def test_agrees_with_the_report_disagreements(synthetic_run: Path) -> None:
    db, _ = dapi.connect_dashboard(synthetic_run)
    with db:
        every = api.disagreements(db, limit=None).with_columns(
            own=pl.when(pl.col("kept_by") == "ratio").then(pl.col("delta_d_ratio"))
            .otherwise(pl.col("delta_d_predictive")))
        for family, kept_by, adv, delta in itertools.product(
                (None, "kl", "tv"), (None, "ratio", "predictive"), (None, 1, -1), (None, 1)):
            f = dapi.DisagreementFilter(family=family, kept_by=kept_by, adv_sign=adv,
                                        delta_sign=delta)
            want = every
            for col, value in (("family", family), ("kept_by", kept_by)):
                if value is not None:
                    want = want.filter(pl.col(col) == value)
            if adv is not None:
                want = want.filter(pl.col("advantage").sign() == adv)
            if delta is not None:
                want = want.filter(pl.col("own").sign() == delta)
            assert dapi.disagreement_count(db, f) == want.height, f
            page = dapi.disagreement_page(db, f, limit=10_000)
            assert sorted(keys(page)) == sorted(keys(want)), f


def test_bad_filters_and_arguments_are_refused(hand_db) -> None:
    with pytest.raises(ValueError, match="update 'mine'"):
        dapi.DisagreementFilter(update="mine")
    with pytest.raises(ValueError, match="family 'js'"):
        dapi.DisagreementFilter(family="js")
    with pytest.raises(ValueError, match="sort 'pos'"):
        dapi.disagreement_page(hand_db, dapi.DisagreementFilter(), sort="pos")
    with pytest.raises(ValueError, match="column 'ratio'"):
        dapi.value_histogram(hand_db, "ratio")


def test_token_queries(hand_db) -> None:
    row = dapi.token_row(hand_db, 1, "a", 2)
    assert row.height == 1 and row["kl_topk"][0] == pytest.approx(0.2)
    updates = dapi.token_updates(hand_db, 1, "a", 2)
    assert set(updates["update_mask"]) == {"none", "dppo_topk_kl", "pdm_kl_agg",
                                          "pdm_kl_uniform", "dppo_topk_tv", "pdm_tv_agg"}
    context = dapi.response_tokens(hand_db, 1, "a", 2, window=1)
    assert context["pos"].to_list() == [1, 2, 3]
    assert dapi.token_row(hand_db, 2, "a", 2).is_empty()


def test_histogram_counts_every_token(hand_db) -> None:
    for column in dapi.HISTOGRAM_COLUMNS:
        for log in (True, False):
            hist = dapi.value_histogram(hand_db, column, bins=7, log=log)
            assert hist["n"].sum() == 10 and hist["bin"].max() <= 6  # 6 + 4 tokens
            assert (hist["x_lo"] < hist["x_hi"]).all()


def test_support_masses_sum_to_one() -> None:
    token = {"logp_behavior": math.log(0.3), "logp_train": math.log(0.6), "mu_tail": 0.05,
             "pi_tail": 0.1}
    updates = pl.DataFrame({"update_mask": ["none"], "logp_post": [math.log(0.7)]})
    masses = dapi.support_masses(token, updates)
    sums = masses.group_by("distribution").agg(pl.sum("p"),
                                               unknown=pl.col("p").null_count())
    assert dict(sums.select("distribution", "p").rows()) == pytest.approx(
        {"µ": 1.0, "π_pre": 1.0, "π_post[none]": 0.7})  # π_post is known at k only
    assert dict(sums.select("distribution", "unknown").rows()) == {
        "µ": 0, "π_pre": 0, "π_post[none]": 2}


def test_in_progress_run_is_opened_on_finished_seeds(hand_run: Path, tmp_path: Path) -> None:
    run = Path(shutil.copytree(hand_run, tmp_path / "copy"))
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "status": "running"}))
    (run / "done").mkdir()
    (run / "done" / "seed=2.json").write_text("{}")
    db, status = dapi.connect_dashboard(run)
    with db:
        assert dapi.seeds(db) == [2]
    assert status.partial and status.finished_seeds == (2,) and status.ignored_files == 2
    (run / "done" / "seed=2.json").unlink()
    with pytest.raises(dapi.RunNotReady, match="no seed has finished yet"):
        dapi.connect_dashboard(run)


def test_damaged_tokens_file_is_named(hand_run: Path) -> None:
    part = sorted((hand_run / "tokens").rglob("*.parquet"))[-1]
    part.write_bytes(b"garbage")
    with pytest.raises(ValueError, match="seed=2/part-0000.parquet: not a readable Parquet"):
        dapi.connect_dashboard(hand_run)
