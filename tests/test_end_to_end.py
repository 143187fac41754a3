"""The README flow on the shipped sample data: replay -> report, and masks -> report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.report.headline import SCHEMA as HEADLINE_SCHEMA
from tolerances import RECOMPUTE_VS_LOGGED

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"
runner = CliRunner()
HEADLINE_FIELDS = set(HEADLINE_SCHEMA)


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Quickstart's replay, smaller (2 seeds = 2 logged steps x 16 samples): every row
    against its own step's θ_t and θ_(t+1) (templates, the actual update), µ's checkpoint
    (the engine's, by link) for exact columns."""
    out = tmp_path_factory.mktemp("e2e") / "run"
    ckpt = SAMPLE / "checkpoints"
    res = runner.invoke(app, [
        "replay", str(SAMPLE / "rollouts"), "--checkpoint", str(ckpt / "step_{step}"),
        "--next-checkpoint", str(ckpt / "step_{next_step}"), "--trainer-mask", "dppo_topk_kl",
        "--behavior-checkpoint", str(SAMPLE / "behavior" / "step_{step}"), "--out", str(out),
        "--seed-by", "step", "--seeds", "2", "--batch-size", "16", "--lr", "auto",
        "--update-masks", "none,dppo_topk_kl,pdm_kl_agg"])
    assert res.exit_code == 0, res.output
    return out


def test_replay_then_report_json_has_headline(sample_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    res = runner.invoke(app, ["report", str(sample_run), "--format", "json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["kind"] == "replay"
    kl_agg = next(h for h in doc["headline"] if (h["family"], h["estimator"]) == ("kl", "agg"))
    assert HEADLINE_FIELDS <= set(kl_agg)
    assert kl_agg["n_seeds"] == 2 and kl_agg["out_of_region_per_seed"] > 0
    manifest = json.loads((sample_run / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    # the checkpoint reproduces the trainer's logged log-probs (right checkpoint, right batching)
    assert manifest["recompute_deviation"]["max"] < RECOMPUTE_VS_LOGGED  # tolerances.py


def test_masks_then_report_says_what_needs_replay(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.parquet"
    res = runner.invoke(app, ["masks", str(SAMPLE / "rollouts"), "--out", str(tokens)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["report", str(tokens), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["kind"] != "replay"
    assert any("replay" in note for note in doc["notes"])
