"""A real ``verl.protocol.DataProto`` laid out as sail-sg/Stable-RL fills it, through the
documented dump + ``ingest --from verl`` and through ``RolloutLogger.log_verl``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from ingest_layouts import K, VOCAB, assert_same_tokens, make_truth, masks_frame, verl_arrays

from pdm_replay.commands.ingest import IngestConfig, IngestError, ingest
from pdm_replay.io.reader import read_meta
from pdm_replay.commands.validate import validate_log

verl = pytest.importorskip(
    "verl", reason="verl is not installed: pip install -e '.[integrations]' then "
    "pip install --no-deps 'verl==0.9.*' (as .ci/run does)")
from omegaconf import OmegaConf  # noqa: E402  (a verl dependency, in the extra)
from verl import DataProto  # noqa: E402

from pdm_replay.integrations.verl import rollout_logger  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _objects(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def stable_rl_batch(truth) -> DataProto:
    """The batch after ``compute_advantage`` in ``RayPPOTrainer.fit``: the agent loop's
    tensors (``_postprocess``) plus reward, advantage and old-log-prob keys, and the
    non-tensor keys verl carries (``uid``, dataset fields, ``__num_turns__``, ...)."""
    a = verl_arrays(truth)
    tensors = {k: torch.from_numpy(v) for k, v in a.items() if v.dtype != object}
    tensors["input_ids"] = torch.cat([tensors["prompts"], tensors["responses"]], 1)
    tensors["position_ids"] = (tensors["attention_mask"].cumsum(1) - 1).clamp(min=0)
    tensors["token_level_rewards"] = tensors["token_level_scores"].clone()
    tensors["returns"] = tensors["advantages"].clone()
    b = len(truth.rows)
    non_tensors = {
        "uid": a["uid"], "data_source": _objects(["openai/gsm8k"] * b),
        "reward_model": _objects([{"style": "rule", "ground_truth": str(i)} for i in range(b)]),
        "extra_info": _objects([{"index": i, "split": "train"} for i in range(b)]),
        "raw_prompt": _objects([[{"role": "user", "content": f"q{i}"}] for i in range(b)]),
        "multi_modal_inputs": _objects([{} for _ in range(b)]),
        "__num_turns__": np.full(b, 2)}
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors,
                               meta_info={"temperature": 1.0})


def _config(**rollout):
    """verl's own rollout defaults (the shipped rollout.yaml) plus overrides."""
    yaml = Path(verl.__file__).parent / "trainer" / "config" / "rollout" / "rollout.yaml"
    defaults = OmegaConf.load(yaml)
    return OmegaConf.create({"actor_rollout_ref": {
        "rollout": {k: defaults[k] for k in ("temperature", "top_p", "top_k", "logprobs_mode")}
        | rollout, "model": {"path": str(REPO / "sample_data" / "checkpoints" / "step_8")}}})


def test_documented_dump_and_log_verl_give_the_same_rows(tmp_path: Path) -> None:
    step = 5
    truth = make_truth(n=6, ids=[f"step5.pt#{i}" for i in range(6)], step=step,
                       convention="replace_last")
    batch = stable_rl_batch(truth)
    # the recipe of docs/ingest.md, verbatim
    torch.save({**batch.batch, **batch.non_tensor_batch, "global_steps": step,
                "temperature": batch.meta_info["temperature"]}, tmp_path / "step5.pt")
    summary = ingest(IngestConfig("verl", (tmp_path / "step5.pt",), tmp_path / "dump.parquet",
                                  vocab_size=VOCAB))
    assert summary.rows == 6 and summary.rejected == 0
    with rollout_logger(tmp_path / "run", _config(), vocab_size=VOCAB) as lg:
        assert lg.log_verl(batch, step=step) == 6
    for log in (tmp_path / "dump.parquet", tmp_path / "run"):
        assert validate_log(log).ok
        meta = read_meta(log)
        assert (meta.topk_convention, meta.top_k, meta.logprobs_mode, meta.temperature) == (
            "replace_last", K, "processed", 1.0)
    dumped, logged = pq.read_table(tmp_path / "dump.parquet"), pq.read_table(tmp_path / "run")
    names = [n for n in dumped.column_names if n != "sample_id"]  # the logger makes its own
    assert dumped.select(names).to_pylist() == logged.select(names).to_pylist()
    for got, want in zip(dumped.to_pylist(), truth.rows):
        for key in ("sample_id", "step", "group_id", "prompt_ids", "response_ids",
                    "loss_mask", "topk_ids"):
            assert got[key] == want[key], key
    assert_same_tokens(masks_frame(tmp_path / "dump.parquet", tmp_path / "a.parquet"),
                       masks_frame(truth.write(tmp_path / "direct.parquet"),
                                   tmp_path / "b.parquet"))


def test_pickled_dataproto_is_refused_by_name(tmp_path: Path) -> None:
    batch = stable_rl_batch(make_truth(n=2, convention="replace_last"))
    torch.save(batch, tmp_path / "proto.pt")  # not the recipe: the object itself
    with pytest.raises(IngestError, match=r"proto\.pt.*safe load refuses.*DataProto"):
        ingest(IngestConfig("verl", (tmp_path / "proto.pt",), tmp_path / "log.parquet",
                            vocab_size=VOCAB))
    assert not (tmp_path / "log.parquet").exists()


def test_rollout_logger_footer_from_the_config(tmp_path: Path) -> None:
    lg = rollout_logger(tmp_path / "a", _config(temperature=0.7, top_k=20, top_p=0.95,
                                                logprobs_mode="raw_logprobs"))
    assert lg.meta.vocab_size == 4103  # sample_data/checkpoints/step_8/config.json
    assert (lg.meta.temperature, lg.meta.top_k_sampling, lg.meta.top_p,
            lg.meta.logprobs_mode) == (0.7, 20, 0.95, "raw")
    with pytest.raises(ValueError, match="returns logits"):
        rollout_logger(tmp_path / "b", _config(logprobs_mode="processed_logits"))


def test_log_verl_refuses_a_plus_sampled_logger(tmp_path: Path) -> None:
    from pdm_replay import RolloutLogger
    batch = stable_rl_batch(make_truth(n=2, convention="replace_last"))
    with RolloutLogger(tmp_path / "run", vocab_size=VOCAB) as lg:
        with pytest.raises(ValueError, match="replace_last.*integrations.verl"):
            lg.log_verl(batch, step=0)
