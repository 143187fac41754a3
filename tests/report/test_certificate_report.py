"""Certificate section of the report, checked against polars on a masks output."""

from pathlib import Path

import polars as pl
import pytest

from pdm_replay.testing.fixtures import SyntheticLogConfig, write_synthetic_log
from pdm_replay.masks import Thresholds, mask_pairs
from pdm_replay.report.certificate_report import certificate_summary
from pdm_replay.report.db import connect
from pdm_replay.commands.masks import MasksConfig, run_masks
from pdm_replay.schema import keep_column


def test_certificate_summary_matches_polars(tmp_path: Path) -> None:
    log = write_synthetic_log(tmp_path / "log.parquet", SyntheticLogConfig(
        n_samples=64, response_len=8, vocab_size=60, top_k=6, mismatch=1.5))
    out = tmp_path / "tokens.parquet"
    run_masks(MasksConfig(log=log, out=out, thresholds=Thresholds(delta_kl=0.1)))
    df = pl.read_parquet(out).filter(pl.col("kl_topk") > 0.1)
    with connect(out) as db:
        got = certificate_summary(db)
    row = got.row(0, named=True)
    assert row["scope"] == "out_of_region" and row["n_tokens"] == df.height > 0
    for label in ("away", "toward", "uncertain"):
        assert row[f"n_{label}"] == df.filter(pl.col("direction_certified") == label).height
    inside = df.filter(pl.col("dkl_agg").is_between(pl.col("dkl_lo"), pl.col("dkl_hi")))
    assert row["agg_inside_share"] == pytest.approx(inside.height / df.height, abs=0.0)
    # the uniform estimate always lies inside: µ_tail/(n−m) <= max unseen µ <= cap
    assert row["uniform_inside_share"] == 1.0
    assert row["exact_inside_share"] is None  # no behavior checkpoint, no dkl_exact
    # one scope per KL pair of the registry, named from the pair, in registry order
    pairs = [p for p in mask_pairs() if p.family == "kl"]
    assert got["scope"].to_list()[1:] == [f"disagreement_{p.other}" for p in pairs if
                                          df.filter(pl.col(keep_column(p.base))
                                                    != pl.col(keep_column(p.other))).height]
    by_scope = {r["scope"]: r["n_tokens"] for r in got.to_dicts()}
    for p in pairs:
        dis = df.filter(pl.col(keep_column(p.base)) != pl.col(keep_column(p.other)))
        assert by_scope.get(f"disagreement_{p.other}", 0) == dis.height
    assert by_scope["disagreement_pdm_kl_agg"] > 0  # the paper's pair is among them
