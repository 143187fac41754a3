"""Bad inputs: each a clear error before any work, and no run directory left behind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from pdm_replay.io.rollouts import write_rollouts
from pdm_replay.replay.checkpoint import CheckpointError
from pdm_replay.replay.config import ReplayConfig
from pdm_replay.commands.replay import run_replay
from pdm_replay.schema import RolloutMeta

from replay_helpers import LOG_CFG, VOCAB, ragged_log, save_tiny, tiny_qwen3


def replay(log: Path, ckpt: Path, out: Path, **kw):
    return run_replay(ReplayConfig(log=log, checkpoint=ckpt, out=out, seeds=1, batch_size=4,
                                   **kw))


def expect_error(match: str, log: Path, ckpt: Path, out: Path, kind: type = ValueError,
                 **kw) -> str:
    with pytest.raises(kind, match=match) as info:
        replay(log, ckpt, out, **kw)
    assert not out.exists(), "a failed start must not create the run directory"
    return str(info.value)


def copy_ckpt(src: Path, dst: Path, drop: tuple[str, ...] = ()) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*drop))
    return dst


def test_missing_checkpoint_dir(tmp_path, replay_log):
    msg = expect_error("not a directory", replay_log, tmp_path / "nope", tmp_path / "run", CheckpointError)
    assert str(tmp_path / "nope") in msg


def test_missing_weights(tmp_path, replay_log, model_dir):
    ckpt = copy_ckpt(model_dir, tmp_path / "ckpt", drop=("*.safetensors",))
    expect_error(r"no weight files \(\*\.safetensors\)", replay_log, ckpt, tmp_path / "run", CheckpointError)


def test_missing_config(tmp_path, replay_log, model_dir):
    ckpt = copy_ckpt(model_dir, tmp_path / "ckpt", drop=("config.json",))
    expect_error("no config.json", replay_log, ckpt, tmp_path / "run", CheckpointError)


def test_missing_shard_of_index(tmp_path, replay_log, model_dir):
    ckpt = copy_ckpt(model_dir, tmp_path / "ckpt")
    index = {"weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors"}}
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(index))
    expect_error("model-00002-of-00002.safetensors missing", replay_log, ckpt,
                 tmp_path / "run")


def test_pickle_only_needs_the_flag(tmp_path, replay_log):
    ckpt = tmp_path / "pickled"
    model = tiny_qwen3(0)
    model.config.save_pretrained(ckpt)
    torch.save(model.state_dict(), ckpt / "pytorch_model.bin")  # a pre-safetensors checkpoint
    msg = expect_error("only pickle weights", replay_log, ckpt, tmp_path / "run", CheckpointError)
    assert "pass allow_pickle if you trust the files" in msg  # the CLI: --allow-pickle
    res = replay(replay_log, ckpt, tmp_path / "run", allow_pickle=True)
    assert res.manifest["status"] == "complete"


def test_remote_code_needs_the_flag(tmp_path, replay_log, model_dir):
    ckpt = copy_ckpt(model_dir, tmp_path / "ckpt")
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_x.XForCausalLM"}
    (ckpt / "config.json").write_text(json.dumps(cfg))
    expect_error("pass trust_remote_code only if", replay_log, ckpt, tmp_path / "run")


def test_vocabulary_mismatch(tmp_path, replay_log):
    ckpt = save_tiny(tmp_path / "bigger", rng_seed=0, vocab=VOCAB + 16)
    msg = expect_error("vocabulary mismatch", replay_log, ckpt, tmp_path / "run", CheckpointError)
    assert f"vocab_size={VOCAB}" in msg and f"{VOCAB + 16}" in msg


def test_tokenizer_mismatch(tmp_path, model_dir):
    log = write_rollouts(tmp_path / "log.parquet",
                         pq.read_table(ragged_log(tmp_path / "src.parquet")),
                         RolloutMeta(vocab_size=VOCAB, top_k=LOG_CFG.k,
                                     tokenizer="Qwen/Qwen3-0.6B"))
    ckpt = copy_ckpt(model_dir, tmp_path / "ckpt")
    (ckpt / "tokenizer_config.json").write_text(json.dumps({"name_or_path": "meta/Llama-3"}))
    msg = expect_error("tokenizer mismatch", log, ckpt, tmp_path / "run")
    assert "Qwen/Qwen3-0.6B" in msg and "pass tokenizer_check=False" in msg  # CLI: --no-...
    replay(log, ckpt, tmp_path / "run", tokenizer_check=False)


def test_tokenizer_named_by_relative_path_is_compared_by_content(tmp_path, model_dir):
    """Like sample_data: the footer names the tokenizer by a path relative to the log's dir."""
    (tmp_path / "rollouts").mkdir()
    src = pq.read_table(ragged_log(tmp_path / "src.parquet"))
    meta = RolloutMeta(vocab_size=VOCAB, top_k=LOG_CFG.k, tokenizer="../tok")
    write_rollouts(tmp_path / "rollouts" / "part-0.parquet", src, meta)
    ckpt = copy_ckpt(model_dir, tmp_path / "ckpt")
    (ckpt / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0}}}')
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text('{"model": {"vocab": {"b": 0}}}')
    msg = expect_error("tokenizer mismatch", tmp_path / "rollouts", ckpt, tmp_path / "run")
    assert "tokenizer.json" in msg
    shutil.copy(ckpt / "tokenizer.json", tmp_path / "tok" / "tokenizer.json")
    assert replay(tmp_path / "rollouts", ckpt, tmp_path / "run").manifest["status"] == "complete"


def test_log_without_prompt_ids(tmp_path, model_dir):
    log = ragged_log(tmp_path / "log.parquet", LOG_CFG.__class__(
        **{**LOG_CFG.__dict__, "with_prompt": False}))
    msg = expect_error("no prompt_ids", log, model_dir, tmp_path / "run")
    assert "s0000000" in msg and str(log) in msg


def test_token_id_outside_vocabulary(tmp_path, model_dir, replay_log):
    rows = pq.read_table(replay_log).to_pylist()
    rows[2]["prompt_ids"][0] = VOCAB + 5
    log = write_rollouts(tmp_path / "log.parquet", rows, LOG_CFG.meta())
    msg = expect_error("outside the vocabulary", log, model_dir, tmp_path / "run")
    assert rows[2]["sample_id"] in msg and "prompt_ids[0]" in msg


def test_a_footer_temperature_of_0(tmp_path, model_dir, replay_log):
    table = pq.read_table(replay_log)
    log = tmp_path / "t0.parquet"
    pq.write_table(table.replace_schema_metadata(
        {**table.schema.metadata, b"temperature": b"0"}), log)
    msg = expect_error("footer temperature=0.0; π is recomputed at the sampling",
                       log, model_dir, tmp_path / "run")
    assert str(log) in msg


def test_existing_run_dir_without_resume(tmp_path, replay_log, model_dir):
    """A directory holding a run refuses a plain start before any input is loaded (an empty
    one, or one a killed start left holding only its lock file, is not a run)."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_text("{}")
    with pytest.raises(ValueError, match="pass resume to continue it") as info:
        replay(replay_log, tmp_path / "no-checkpoint-needed", out)
    assert info.value.fields == ("resume", "out")  # the CLI: --resume, --out
    assert sorted(p.name for p in out.iterdir()) == [".lock", "manifest.json"]


def test_resume_with_different_options_or_checkpoint(tmp_path, replay_log, model_dir,
                                                     behavior_dir):
    out = tmp_path / "run"
    replay(replay_log, model_dir, out)
    with pytest.raises(ValueError, match="lr"):
        replay(replay_log, model_dir, out, resume=True, lr=0.5)
    with pytest.raises(ValueError, match=r"checkpoint \(content\)"):
        replay(replay_log, behavior_dir, out, resume=True)


def test_bad_options():
    with pytest.raises(ValueError, match="unknown mask"):
        ReplayConfig(log=Path("l"), checkpoint=Path("c"), out=Path("o"), update_masks=["x"])
    with pytest.raises(ValueError, match="optimizer must be one of adam, sgd"):
        ReplayConfig(log=Path("l"), checkpoint=Path("c"), out=Path("o"), optimizer="lion")


def test_behavior_dtype_follows_option_then_footer_then_dtype() -> None:
    from pathlib import Path

    from pdm_replay.replay.config import ReplayConfig
    from pdm_replay.replay.models import behavior_dtype
    from pdm_replay.schema import RolloutMeta
    base = dict(log=Path("l"), checkpoint=Path("c"), out=Path("o"))
    bf16 = RolloutMeta(vocab_size=4, top_k=1, extra={"behavior_dtype": "bfloat16"})
    plain = RolloutMeta(vocab_size=4, top_k=1)

    def chosen(cfg: ReplayConfig, meta: RolloutMeta) -> str:
        return behavior_dtype(meta, cfg.behavior_dtype, cfg.dtype)
    assert chosen(ReplayConfig(**base), bf16) == "bfloat16"
    assert chosen(ReplayConfig(**base), plain) == "float32"
    assert chosen(ReplayConfig(**base, behavior_dtype="float32"), bf16) == "float32"
