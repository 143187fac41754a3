"""``make-sample --size tiny`` end to end: a real model, real generation, a valid log."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from sample_checks import bf16_ulps, load, max_abs_diff, rows
from transformers import AutoTokenizer, Qwen3ForCausalLM
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.io.reader import read_meta
from pdm_replay.run_masks import MasksConfig, run_masks
from pdm_replay.sample.make import LOG_FILE, SampleConfig, make_sample
from pdm_replay.sample.stats import log_statistics
from pdm_replay.validate import validate_log

# The engine decoded incrementally (KV cache, a batch of G rows); a replay runs one full
# forward of one row. Both load the same bf16 weights, so they differ only by bf16 rounding
# along different kernel paths: measured <= 2 ulps of the largest logit (fp32: ~25).
BF16_ULPS = 4.0
FP32_ATOL = 1e-5


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sample") / "tiny"
    make_sample(out, SampleConfig(seed=3, size="tiny"))
    return out


def test_layout_and_footer(tiny: Path) -> None:
    assert sorted(p.name for p in tiny.iterdir()) == ["README.md", "behavior", "policy",
                                                      "rollouts"]
    assert not list(tiny.parent.glob(".tiny.tmp-*")), "temporary directory left behind"
    meta = read_meta(tiny / "rollouts")
    assert (meta.top_k, meta.topk_convention, meta.logprobs_mode, meta.temperature,
            meta.top_p, meta.top_k_sampling) == (20, "plus_sampled", "raw", 1.0, 1.0, 0)
    assert meta.extra["generated_by"] == "pdm-replay make-sample --seed 3 --size tiny"
    assert (tiny / "rollouts" / meta.extra["behavior_checkpoint"]).resolve() == \
        (tiny / "behavior").resolve()
    tok_dir = (tiny / "rollouts" / meta.tokenizer).resolve()
    assert (tok_dir / "tokenizer.json").exists()
    assert meta.vocab_size == len(AutoTokenizer.from_pretrained(str(tok_dir)))


def test_log_passes_validate_and_masks(tiny: Path, tmp_path: Path) -> None:
    report = validate_log(tiny / "rollouts", max_errors=20)
    assert report.ok, [str(e) for e in report.errors]
    summary = run_masks(MasksConfig(log=tiny / "rollouts", out=tmp_path / "tokens.parquet"))
    table = pq.read_table(tmp_path / "tokens.parquet")
    assert summary.tokens == table.num_rows == log_statistics(tiny / "rollouts").tokens
    assert summary.keep_fraction["none"] == 1.0


def test_rows_are_grpo_groups_of_eight(tiny: Path) -> None:
    t = rows(tiny / "rollouts")
    groups: dict[str, list[dict]] = {}
    for r in t:
        groups.setdefault(r["group_id"], []).append(r)
        assert len(set(r["advantages"])) == 1 and len(r["advantages"]) == len(
            r["response_ids"])
    for members in groups.values():
        assert len(members) == 8
        assert len({tuple(m["prompt_ids"]) for m in members}) == 1
        rewards = np.array([m["reward"] for m in members])
        adv = np.array([m["advantages"][0] for m in members])
        expect = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
        np.testing.assert_allclose(adv, expect, atol=1e-5)


def test_checkpoints_load_offline(tiny: Path) -> None:
    for name in ("behavior", "policy"):
        model = load(tiny / name, torch.float32)
        assert isinstance(model, Qwen3ForCausalLM)
        assert (tiny / name / "model.safetensors").exists()
        assert not list((tiny / name).glob("*.bin"))
    tok = AutoTokenizer.from_pretrained(str(tiny / "policy"), local_files_only=True)
    row = rows(tiny / "rollouts", 1)[0]
    text = tok.decode(row["prompt_ids"] + row["response_ids"], skip_special_tokens=True)
    assert text.startswith("sort : ") and "->" in text
    prompt_text = tok.decode(row["prompt_ids"], skip_special_tokens=True)
    assert tok(prompt_text).input_ids == row["prompt_ids"]


def test_behavior_bf16_reproduces_logged_topk(tiny: Path) -> None:
    samples = rows(tiny / "rollouts")
    assert bf16_ulps(load(tiny / "behavior", torch.bfloat16), samples) <= BF16_ULPS
    # The tolerance is tight enough to tell the checkpoints apart.
    assert bf16_ulps(load(tiny / "policy", torch.bfloat16), samples) > BF16_ULPS


def test_policy_fp32_reproduces_train_logprobs(tiny: Path) -> None:
    samples = rows(tiny / "rollouts")
    at_k, at_top = max_abs_diff(load(tiny / "policy", torch.float32), samples,
                                "train_logprobs", "train_topk_logprobs")
    assert at_k < FP32_ATOL and at_top < FP32_ATOL
    # ... and the policy is not the behaviour checkpoint: the RL step moved it.
    stale_k, _ = max_abs_diff(load(tiny / "behavior", torch.float32), samples,
                              "train_logprobs", "train_topk_logprobs")
    assert stale_k > 1e-3


def test_same_seed_same_data_other_seed_other_data(tiny: Path, tmp_path: Path) -> None:
    again = make_sample(tmp_path / "again", SampleConfig(seed=3, size="tiny")).out_dir
    first, second = pq.read_table(tiny / LOG_FILE), pq.read_table(again / LOG_FILE)
    assert first.equals(second) and first.schema.metadata == second.schema.metadata
    for name in ("behavior", "policy"):
        assert (tiny / name / "model.safetensors").read_bytes() == \
            (again / name / "model.safetensors").read_bytes()
    other = make_sample(tmp_path / "other", SampleConfig(seed=4, size="tiny")).out_dir
    assert not first.equals(pq.read_table(other / LOG_FILE))


def test_existing_sample_needs_force(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "s"
    out.mkdir()
    (out / "README.md").write_text("keep me")
    with pytest.raises(FileExistsError, match="--force"):
        make_sample(out, SampleConfig(size="tiny"))
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
