"""``pdm-replay replay`` through Typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.heap import heap_choice

runner = CliRunner()


def text(res) -> str:
    """The output with rich's line wrapping undone."""
    return " ".join(res.output.split())


def test_replay_cli_runs_and_prints_summary(tmp_path: Path, replay_log: Path,
                                            model_dir: Path) -> None:
    out = tmp_path / "run"
    args = ["replay", str(replay_log), "--checkpoint", str(model_dir), "--out", str(out),
            "--seeds", "2", "--batch-size", "6", "--optimizer", "sgd", "--lr", "0.1",
            "--chunk-tokens", "32", "--delta-kl", "0.5", "--masks", "none,pdm_kl_agg",
            "--update-masks", "none,dppo_topk_kl,pdm_kl_agg", "--threads", "1"]
    threads_before = torch.get_num_threads()
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert torch.get_num_threads() == threads_before  # the run's count is not left behind
    assert "replayed" in res.output and "pdm_kl_agg" in res.output
    assert "recompute vs logged train_logprobs" in res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["optimizer"] == "sgd"
    assert manifest["config"]["thresholds"]["delta_kl"] == 0.5
    assert manifest["config"]["masks"] == ["none", "pdm_kl_agg"]
    assert manifest["threads"]["threads"] == 1 and manifest["threads"]["source"] == "--threads"
    assert set(manifest["threads"]) >= {"affinity", "quota", "OMP_WAIT_POLICY"}
    assert manifest["threads"]["heap_reuse"] == heap_choice(True).heap_reuse
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "--resume" in text(again)
    resumed = runner.invoke(app, args + ["--resume"])
    assert resumed.exit_code == 0, resumed.output


def test_replay_cli_bad_input_is_clear_error(tmp_path: Path, replay_log: Path) -> None:
    res = runner.invoke(app, ["replay", str(replay_log), "--checkpoint", str(tmp_path),
                              "--out", str(tmp_path / "run")])
    assert res.exit_code == 2 and "no config.json" in text(res)
    assert not (tmp_path / "run").exists()


def test_replay_cli_unknown_update_mask(tmp_path: Path, replay_log: Path,
                                        model_dir: Path) -> None:
    res = runner.invoke(app, ["replay", str(replay_log), "--checkpoint", str(model_dir),
                              "--out", str(tmp_path / "run"), "--update-masks", "nope"])
    assert res.exit_code == 2 and "unknown mask(s) nope" in text(res)


def test_replay_cli_actual_update_sweep_and_lr_auto(tmp_path: Path, replay_log: Path,
                                                   model_dir: Path, behavior_dir: Path
                                                   ) -> None:
    """The issue 17 options end to end; behavior_dir stands in for θ_{t+1} (the same
    architecture: a valid pair, whatever its weights)."""
    out = tmp_path / "run"
    res = runner.invoke(app, [
        "replay", str(replay_log), "--checkpoint", str(model_dir), "--out", str(out),
        "--next-checkpoint", str(behavior_dir), "--trainer-mask", "dppo_topk_kl@0.05",
        "--lr", "auto", "--delta-kl", "0.05,0.15", "--seeds", "1", "--seed-by", "step",
        "--batch-size", "6", "--chunk-tokens", "32", "--no-attribution",
        "--update-masks", "none,dppo_topk_kl"])
    assert res.exit_code == 0, res.output
    said = text(res)
    assert "actual update: the trainer's next checkpoint, kept by dppo_topk_kl@0.05" in said
    assert "--lr auto: each simulated step scaled" in said
    m = json.loads((out / "manifest.json").read_text())
    assert m["updates"] == ["actual", "none", "dppo_topk_kl@0.05", "dppo_topk_kl@0.15"]
    assert m["config"]["sweep"]["delta_kl"] == [0.05, 0.15] and m["config"]["lr"] == "auto"
    assert m["trainer_mask"] == {"mask": "dppo_topk_kl", "delta_kl": 0.05}
    assert m["seed_plan"]["by"] == "step"


def test_replay_cli_too_many_seeds_says_how_many_fit(tmp_path: Path, replay_log: Path,
                                                     model_dir: Path) -> None:
    res = runner.invoke(app, ["replay", str(replay_log), "--checkpoint", str(model_dir),
                              "--out", str(tmp_path / "run"), "--seeds", "5",
                              "--batch-size", "8"])
    assert res.exit_code == 2 and "2 seeds fit" in text(res) and "--allow-overlap" in text(res)
    res = runner.invoke(app, ["replay", str(replay_log), "--checkpoint", str(model_dir),
                              "--out", str(tmp_path / "run"), "--lr", "fast"])
    assert res.exit_code == 2 and "expected a number or 'auto'" in text(res)
    assert not (tmp_path / "run").exists()
