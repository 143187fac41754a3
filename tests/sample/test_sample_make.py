"""``make-sample --size tiny`` end to end: a real model, real GRPO steps, a valid log."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
import torch
from sample_checks import (bf16_ulps, load, logit_ulps, replayed_trainer_update, rows,
                           rows_by_step, update_error_in_lr)
from transformers import AutoTokenizer, Qwen3ForCausalLM
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.io.reader import read_meta
from pdm_replay.commands.masks import MasksConfig, run_masks
from pdm_replay.commands.make_sample import LOG_FILE, SampleConfig, make_sample
from pdm_replay.sample.log_checks import log_statistics
from pdm_replay.commands.validate import validate_log

# The engine decoded incrementally (KV cache, a batch of G rows); the check decodes one
# row the same way (sample_checks.decoded_logits) from the same bf16 weights: 0 ulps on
# the default path, at most 2.0 bf16 ulps of the largest logit under
# ATEN_CPU_CAPABILITY=default on the shipped sample; 4 leaves 2x room.
BF16_ULPS = 4.0
# float32: the generator's own per-sequence forward on this CPU gives 0; another SIMD path
# (ATEN_CPU_CAPABILITY=default) reorders the sums: see test_sample_shipped.F32_ULPS.
F32_ULPS = 32.0
LOGGED, SAVED = [2, 3, 4, 5], [2, 3, 4, 5, 6]  # the tiny preset's steps and checkpoints
# The trainer summed the loss over a right-padded batch, the check one row at a time: the
# gradients differ by float32 rounding, and Adam divides them by √v. Measured on the tiny
# preset (seed 3, step 5): 3.0e-6 lr (default path) and 6.0e-6 lr (ATEN_CPU_CAPABILITY=
# default); on the shipped sample's step 23: see test_sample_shipped. 1e-4 lr leaves more
# than 10x room and is still 10^4 below one step (each coordinate moves by up to ~lr).
UPDATE_LR = 1e-4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sample") / "tiny"
    make_sample(out, SampleConfig(seed=3, size="tiny"))
    return out


def test_layout_and_footer(tiny: Path) -> None:
    assert sorted(p.name for p in tiny.iterdir()) == ["README.md", "behavior", "checkpoints",
                                                      "rollouts"]
    assert not list(tiny.parent.glob(".tiny.tmp-*")), "temporary directory left behind"
    assert sorted(p.name for p in (tiny / "checkpoints").iterdir()) == \
        [f"step_{t}" for t in SAVED]
    assert [p.parent.name for p in (tiny / "checkpoints").rglob("optimizer.pt")] == ["step_5"]
    meta = read_meta(tiny / "rollouts")
    assert (meta.top_k, meta.topk_convention, meta.logprobs_mode, meta.temperature,
            meta.top_p, meta.top_k_sampling) == (20, "plus_sampled", "raw", 1.0, 1.0, 0)
    assert meta.extra["generated_by"] == "pdm-replay make-sample --seed 3 --size tiny"
    assert (meta.extra["trainer_mask"], meta.extra["behavior_dtype"]) == \
        ("dppo_topk_kl", "bfloat16")
    rollouts = tiny / "rollouts"
    for t in LOGGED:
        # µ of step t is the engine's last sync (every 2 steps): a link, not a copy
        behavior = rollouts / meta.extra["behavior_checkpoint"].format(step=t)
        assert behavior.is_symlink()
        assert behavior.resolve() == (tiny / "checkpoints" / f"step_{t - t % 2}").resolve()
        nxt = meta.extra["next_checkpoint"].format(next_step=t + 1)
        assert (rollouts / nxt).resolve() == (tiny / "checkpoints" / f"step_{t + 1}").resolve()
    tok_dir = (rollouts / meta.tokenizer).resolve()
    assert meta.vocab_size == len(AutoTokenizer.from_pretrained(str(tok_dir))) == 4103


def test_log_passes_validate_and_masks(tiny: Path, tmp_path: Path) -> None:
    report = validate_log(tiny / "rollouts", max_errors=20)
    assert report.ok, [str(e) for e in report.errors]
    summary = run_masks(MasksConfig(log=tiny / "rollouts", out=tmp_path / "tokens.parquet"))
    table = pq.read_table(tmp_path / "tokens.parquet")
    stats = log_statistics(tiny / "rollouts")
    assert summary.tokens == table.num_rows == stats.tokens
    assert summary.keep_fraction["none"] == 1.0
    assert stats.steps == len(LOGGED)


def test_rows_are_grpo_groups_of_eight_per_step(tiny: Path) -> None:
    by_step = rows_by_step(tiny / "rollouts")
    assert sorted(by_step) == LOGGED
    for step_rows in by_step.values():
        groups: dict[str, list[dict]] = {}
        for r in step_rows:
            groups.setdefault(r["group_id"], []).append(r)
            assert len(set(r["advantages"])) == 1 and len(r["advantages"]) == len(
                r["response_ids"])
        assert len(groups) == 2  # rl_prompts of the tiny preset
        for members in groups.values():
            assert len(members) == 8
            assert len({tuple(m["prompt_ids"]) for m in members}) == 1
            rewards = np.array([m["reward"] for m in members])
            adv = np.array([m["advantages"][0] for m in members])
            expect = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
            np.testing.assert_allclose(adv, expect, atol=1e-5)


def test_checkpoints_load_offline(tiny: Path) -> None:
    for t in SAVED:
        model = load(tiny / "checkpoints" / f"step_{t}", torch.float32)
        assert isinstance(model, Qwen3ForCausalLM)
        assert (tiny / "checkpoints" / f"step_{t}" / "model.safetensors").exists()
        assert not list((tiny / "checkpoints" / f"step_{t}").glob("*.bin"))
    tok = AutoTokenizer.from_pretrained(str(tiny / "checkpoints" / "step_2"),
                                        local_files_only=True)
    row = rows(tiny / "rollouts", 1)[0]
    text = tok.decode(row["prompt_ids"] + row["response_ids"], skip_special_tokens=True)
    assert text.startswith("sort : ") and "->" in text
    prompt_text = tok.decode(row["prompt_ids"], skip_special_tokens=True)
    assert tok(prompt_text).input_ids == row["prompt_ids"]


def test_behavior_bf16_of_the_engine_checkpoint_reproduces_logged_topk(tiny: Path) -> None:
    by_step = rows_by_step(tiny / "rollouts")
    for t, samples in by_step.items():
        assert bf16_ulps(load(tiny / "behavior" / f"step_{t}", torch.bfloat16),
                         samples) <= BF16_ULPS
    # The tolerance is tight enough to tell the checkpoints apart: step 3's rows come from
    # θ_2 (stale by one step), not from θ_3.
    assert bf16_ulps(load(tiny / "checkpoints" / "step_3", torch.bfloat16),
                     by_step[3]) > BF16_ULPS


def test_each_steps_policy_reproduces_its_train_logprobs(tiny: Path) -> None:
    by_step = rows_by_step(tiny / "rollouts")
    for t, samples in by_step.items():
        ckpt = tiny / "checkpoints"
        f32 = logit_ulps(load(ckpt / f"step_{t}", torch.float32), samples, torch.float32,
                         "train_logprobs", "train_topk_logprobs")
        assert f32 <= F32_ULPS
        # ... and θ_(t+1) is another policy: the step moved it far beyond that tolerance
        moved = logit_ulps(load(ckpt / f"step_{t + 1}", torch.float32), samples,
                           torch.float32, "train_logprobs", "train_topk_logprobs")
        assert moved > 100 * F32_ULPS


def test_next_checkpoint_is_the_trainers_real_update(tiny: Path, tmp_path: Path) -> None:
    """θ_6 = one AdamW step from θ_5 with the saved optimizer state on step 5's logged batch
    (µ stale by one step), keeping what the trainer mask (as `pdm-replay masks` decides
    it) keeps."""
    run_masks(MasksConfig(log=tiny / "rollouts", out=tmp_path / "tokens.parquet"))
    tokens = pl.read_parquet(tmp_path / "tokens.parquet").filter(pl.col("step") == 5)
    keep = dict(zip(zip(tokens["sample_id"], tokens["pos"]), tokens["keep_dppo_topk_kl"]))
    ckpt, batch = tiny / "checkpoints", rows_by_step(tiny / "rollouts")[5]
    state_file = ckpt / "step_5" / "optimizer.pt"
    state = torch.load(state_file, weights_only=True)
    lr = state["param_groups"][0]["lr"]
    assert all(int(s["step"]) == 5 for s in state["state"].values())  # after steps 0..4
    after = replayed_trainer_update(ckpt / "step_5", state_file, batch, keep)
    err, moved = update_error_in_lr(after, ckpt / "step_6", ckpt / "step_5", lr)
    assert err <= UPDATE_LR and moved > 0.5, (err, moved)
    # Neither another keep set nor a fresh optimizer gives θ_6. Whether the mask dropped
    # anything on step 5 depends on the CPU: sampling turns float-path differences into
    # other tokens (one AMD EPYC: 16 of 76 dropped under ATEN_CPU_CAPABILITY=default, none
    # of 57 on its AVX2 path). So the other trainer drops one more token, a kept one with
    # Â ≠ 0 (measured: 0.017 lr and 0.027 lr from θ_6 on the two paths, 170x UPDATE_LR),
    # and, where the mask dropped some, a trainer that kept every token is checked too.
    advantage = {(r["sample_id"], t): a for r in batch for t, a in enumerate(r["advantages"])}
    one_more = dict(keep)
    one_more[next(k for k, v in keep.items() if v and advantage[k] != 0)] = False
    others = [one_more] + ([{k: True for k in keep}] if not all(keep.values()) else [])
    for other_keep in others:
        other = replayed_trainer_update(ckpt / "step_5", state_file, batch, other_keep)
        assert update_error_in_lr(other, ckpt / "step_6", ckpt / "step_5", lr)[0] > UPDATE_LR
    fresh = replayed_trainer_update(ckpt / "step_5", None, batch, keep, lr=lr)
    assert update_error_in_lr(fresh, ckpt / "step_6", ckpt / "step_5", lr)[0] > UPDATE_LR


def test_replay_every_step_against_its_next_checkpoint(tiny: Path, tmp_path: Path) -> None:
    """The README's replay on the tiny sample: templates, actual update, lr auto."""
    ckpt = tiny / "checkpoints"
    res = CliRunner().invoke(app, [
        "replay", str(tiny / "rollouts"), "--checkpoint", str(ckpt / "step_{step}"),
        "--next-checkpoint", str(ckpt / "step_{next_step}"), "--trainer-mask", "dppo_topk_kl",
        "--behavior-checkpoint", str(tiny / "behavior" / "step_{step}"), "--seed-by", "step",
        "--seeds", "4", "--batch-size", "16", "--lr", "auto", "--no-attribution",
        "--update-masks", "none,pdm_kl_agg", "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["recompute_deviation"]["max"] < 1e-4
    updates = pl.read_parquet(tmp_path / "run" / "updates")
    assert set(updates["update_mask"]) == {"actual", "none", "pdm_kl_agg"}
    assert sorted(set(updates["seed"])) == [0, 1, 2, 3]


def test_same_seed_same_data_other_seed_other_data(tiny: Path, tmp_path: Path) -> None:
    again = make_sample(tmp_path / "again", SampleConfig(seed=3, size="tiny")).out_dir
    first, second = pq.read_table(tiny / LOG_FILE), pq.read_table(again / LOG_FILE)
    assert first.equals(second) and first.schema.metadata == second.schema.metadata
    for t in SAVED:
        name = f"checkpoints/step_{t}/model.safetensors"
        assert (tiny / name).read_bytes() == (again / name).read_bytes()
    a = torch.load(tiny / "checkpoints/step_5/optimizer.pt", weights_only=True)
    b = torch.load(again / "checkpoints/step_5/optimizer.pt", weights_only=True)
    assert all(torch.equal(a["state"][i]["exp_avg_sq"], b["state"][i]["exp_avg_sq"])
               for i in a["state"])
    other = make_sample(tmp_path / "other", SampleConfig(seed=4, size="tiny")).out_dir
    assert not first.equals(pq.read_table(other / LOG_FILE))


def test_existing_sample_needs_force(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "s"
    out.mkdir()
    (out / "README.md").write_text("keep me")
    with pytest.raises(FileExistsError, match="pass force to replace them") as info:
        make_sample(out, SampleConfig(size="tiny"))
    assert info.value.fields == ("force", "out_dir")  # the CLI: --force, OUT_DIR
    assert (out / "README.md").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]


def test_cli_make_sample_tiny(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["make-sample", str(tmp_path / "cli"), "--size", "tiny",
                                      "--seed", "1"])
    assert result.exit_code == 0, result.output
    assert "topk_mass_median" in result.output and "check peaked" in result.output
    assert "pdm-replay make-sample" in (tmp_path / "cli" / "README.md").read_text()
    bad = CliRunner().invoke(app, ["make-sample", str(tmp_path / "cli"), "--size", "tiny"])
    assert bad.exit_code == 2 and "--force" in bad.output
