"""Builders for the replay tests: tiny random Qwen3 checkpoints and ragged synthetic logs."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import torch

from pdm_replay.testing.fixtures import (TINY_VOCAB, SyntheticLogConfig, save_tiny,  # noqa: F401
                                 tiny_qwen3, write_synthetic_log)
from pdm_replay.io.rollouts import write_rollouts
from pdm_replay.schema import PER_TOKEN_COLUMNS

VOCAB = TINY_VOCAB
LOG_CFG = SyntheticLogConfig(n_samples=16, response_len=6, vocab_size=VOCAB, top_k=6,
                             prompt_len=5, group_size=4, mismatch=0.5, rng_seed=3)


def ragged_log(target: Path, cfg: SyntheticLogConfig = LOG_CFG) -> Path:
    """The synthetic log with prompts of 1..prompt_len and responses of 2..response_len
    tokens, so micro-batches need padding."""
    full = write_synthetic_log(target.with_suffix(".full.parquet"), cfg)
    rows = pq.read_table(full).to_pylist()
    for i, row in enumerate(rows):
        if row["prompt_ids"] is not None:
            row["prompt_ids"] = row["prompt_ids"][: 1 + i % cfg.prompt_len]
        t = 2 + (i * 7) % (cfg.response_len - 1)
        for name in PER_TOKEN_COLUMNS:
            if row.get(name) is not None:
                row[name] = row[name][:t]
    return write_rollouts(target, rows, cfg.meta())


def sample_rows(log: Path) -> dict[str, dict]:
    """Every row of a rollout log by sample_id."""
    return {r["sample_id"]: r for r in pq.read_table(log).to_pylist()}


def one_step_checkpoint(src: Path, dst: Path, log: Path, *, lr: float = 1e-3,
                        seed: int = 0) -> Path:
    """θ_{t+1}: ``src`` after one real ``torch.optim.AdamW`` step on the mean token
    cross-entropy of ``log``'s responses (a trainer's step, independent of the replay's
    code), saved with save_pretrained."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for row in sample_rows(log).values():
        ids = torch.tensor([row["prompt_ids"] + row["response_ids"]])
        logits = model(input_ids=ids).logits[0, len(row["prompt_ids"]) - 1:-1]
        losses.append(torch.nn.functional.cross_entropy(
            logits, torch.tensor(row["response_ids"]), reduction="sum"))
    (torch.stack(losses).sum() / sum(len(r["response_ids"]) for r in
                                     sample_rows(log).values())).backward()
    opt.step()
    model.eval().save_pretrained(dst)
    return dst


def plain_logprobs(model, prompt: list[int], response: list[int]) -> torch.Tensor:
    """``log_softmax(model(prompt + response).logits)`` at the response positions ``(T, V)``
    in float64: one unpadded forward, the full vocabulary."""
    with torch.no_grad():
        z = model(input_ids=torch.tensor([prompt + response])).logits[0]
    return torch.log_softmax(z[len(prompt) - 1:len(prompt) - 1 + len(response)].double(), -1)
