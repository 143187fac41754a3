"""The report explains itself (issue 19): legend, coverage line and warnings in every
format, and each warning's threshold at its boundary."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from report_fixtures import MANIFEST
from pdm_replay.cli import app
from pdm_replay.report.legend import (LEGEND, MIN_SEEDS, MIN_TOKENS, MIN_WITHIN_ROUNDING,
                                      _behavior, _few_seeds, _few_tokens)

runner = CliRunner()


def _report(run: Path, fmt: str) -> str:
    result = runner.invoke(app, ["report", str(run), "-f", fmt, "--bootstrap-samples", "50"])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("fmt", ["table", "markdown", "html"])
def test_every_text_format_has_legend_coverage_and_warnings(hand_run: Path, fmt: str) -> None:
    text = _report(hand_run, fmt)
    flat = " ".join(text.split())  # the table wraps long lines
    for term, line in LEGEND:
        assert " ".join(line.split()[:6]) in flat.replace("&quot;", '"').replace("&#x27;", "'")
    # the hand run: 2 samples ("a", "b"), 10 tokens, 2 seeds, updates own and none
    assert "2 samples" in flat and "10 tokens over 2 seeds" in flat
    assert "too few tokens to compare" in flat and "Thresholds(" not in flat


def test_json_carries_the_same_as_fields(hand_run: Path) -> None:
    doc = json.loads(_report(hand_run, "json"))
    assert doc["legend"] == dict(LEGEND)
    assert doc["coverage"] == {"kind": "replay", "n_samples": 2, "n_tokens": 10, "n_seeds": 2,
                               "log_samples": None, "status": None, "bases": ["own", "none"],
                               "own_updates": ["dppo_topk_kl", "dppo_topk_tv", "pdm_kl_agg",
                                               "pdm_kl_uniform", "pdm_tv_agg"]}
    codes = {w["code"]: w["threshold"] for w in doc["warnings"]}
    # at most 3 disagreement tokens per comparison, and 2 seeds
    assert codes == {"few_tokens": MIN_TOKENS, "few_seeds": MIN_SEEDS}


def test_partial_run_warns_of_status_and_samples(hand_run: Path) -> None:
    manifest = {**MANIFEST, "status": "running", "log_rows": 8}
    (hand_run / "manifest.json").write_text(json.dumps(manifest))
    doc = json.loads(_report(hand_run, "json"))
    partial = [w["message"] for w in doc["warnings"] if w["code"] == "partial_run"]
    assert len(partial) == 2 and "status running" in partial[0]
    assert "covers 2 of the log's 8 samples (25%)" in partial[1]
    assert doc["coverage"]["log_samples"] == 8


def _rates(n_ratio: int, n_pred: int) -> pl.DataFrame:
    # two seeds whose counts sum to (n_ratio, n_pred)
    return pl.DataFrame({"seed": [0, 1], "basis": ["own"] * 2,
                         "pair": ["dppo_topk_kl vs pdm_kl_agg"] * 2, "family": ["kl"] * 2,
                         "estimator": ["agg"] * 2, "delta": [0.1] * 2,
                         "n_measured_ratio": [n_ratio - n_ratio // 2, n_ratio // 2],
                         "n_measured_predictive": [n_pred - n_pred // 2, n_pred // 2]})


def test_few_tokens_boundary() -> None:
    assert _few_tokens(_rates(MIN_TOKENS, MIN_TOKENS)) == []
    (w,) = _few_tokens(_rates(MIN_TOKENS, MIN_TOKENS - 1))
    assert f"({MIN_TOKENS} / {MIN_TOKENS - 1})" in w.message
    assert "dppo_topk_kl vs pdm_kl_agg" in w.message


def test_few_seeds_boundary() -> None:
    head = lambda n: pl.DataFrame({"unsafe_ratio_pooled": [0.5], "unsafe_predictive_pooled":  # noqa: E731
                                   [0.4], "seeds_compared": [n]})
    assert _few_seeds(head(MIN_SEEDS)) == []
    (w,) = _few_seeds(head(MIN_SEEDS - 1))
    assert "0.0625" in w.message  # 2 · 0.5⁵, the smallest two-sided sign-test p over 5 seeds


def test_behavior_mismatch_boundary() -> None:
    frame = lambda share: pl.DataFrame({"scope": ["all", "disagreement"],  # noqa: E731
                                        "within_one_rounding": [share, 0.0]})
    assert _behavior(frame(MIN_WITHIN_ROUNDING)) == []
    (w,) = _behavior(frame(0.98))
    assert w.code == "behavior_mismatch" and "98.0%" in w.message
