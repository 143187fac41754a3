"""Deterministic synthetic rollout/v1 logs for tests, docs and benchmarks.

Behavior logits are Gaussian with a temperature-like ``peak``; the training policy's
logits add ``mismatch``-scaled noise, so the mismatch size is one knob. ``top_k=None``
logs the whole vocabulary (K = n), where every top-K estimator must equal the exact value.

Examples
--------
>>> import tempfile, pathlib, pyarrow.parquet as pq
>>> cfg = SyntheticLogConfig(n_samples=4, response_len=6, vocab_size=50, top_k=5)
>>> p = write_synthetic_log(pathlib.Path(tempfile.mkdtemp()) / "log.parquet", cfg)
>>> t = pq.read_table(p); t.num_rows, len(t["response_ids"][0])
(4, 6)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import torch

from pdm_replay.io.rollouts import RolloutWriter, rollout_schema
from pdm_replay.schema import RolloutMeta


@dataclass(frozen=True)
class SyntheticLogConfig:
    """Knobs of a synthetic log; the same config always gives the same bytes of data."""

    n_samples: int = 64
    response_len: int = 16
    vocab_size: int = 1000
    top_k: int | None = 20  # None: whole vocabulary (K = n)
    peak: float = 3.0  # std of behavior logits: larger = more peaked
    mismatch: float = 0.3  # std of the π − µ logit noise
    group_size: int = 8
    convention: str = "plus_sampled"
    rng_seed: int = 0
    with_train: bool = True
    with_prompt: bool = True
    prompt_len: int = 4
    chunk_samples: int = 4096

    @property
    def k(self) -> int:
        return self.vocab_size if self.top_k is None else self.top_k

    def meta(self) -> RolloutMeta:
        return RolloutMeta(vocab_size=self.vocab_size, top_k=self.k,
                           topk_convention=self.convention, logprobs_mode="raw",
                           temperature=1.0)


def _lists(flat: np.ndarray, rows: int, per_row: int, typ: pa.DataType) -> pa.Array:
    offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * per_row)
    return pa.ListArray.from_arrays(offsets, pa.array(flat, type=typ))


def _topk(logp: torch.Tensor, k_ids: torch.Tensor, cfg: SyntheticLogConfig) -> torch.Tensor:
    """Logged top-K ids ``(N, K')`` under the configured convention."""
    top = torch.topk(logp, cfg.k, dim=-1).indices  # (N, K)
    in_top = (top == k_ids[:, None]).any(-1)
    if cfg.convention == "replace_last":
        top[:, -1] = torch.where(in_top, top[:, -1], k_ids)
        return top
    # plus_sampled: K + 1 slots; the extra slot repeats the last top-K id when k is in it,
    # then is trimmed: rows stay K + 1 wide only where k was appended (ragged in Parquet).
    return torch.cat([top, torch.where(in_top, -1, k_ids)[:, None]], 1)


def _chunk(cfg: SyntheticLogConfig, first: int, count: int, gen: torch.Generator) -> pa.Table:
    n_tok, t = count * cfg.response_len, cfg.response_len
    z_mu = torch.randn(n_tok, cfg.vocab_size, generator=gen, dtype=torch.float64) * cfg.peak
    z_pi = z_mu + torch.randn(z_mu.shape, generator=gen, dtype=torch.float64) * cfg.mismatch
    logp_behavior = torch.log_softmax(z_mu, -1).float()
    logp_train = torch.log_softmax(z_pi, -1).float()
    k_ids = torch.multinomial(logp_behavior.double().exp(), 1, generator=gen)[:, 0]
    top = _topk(logp_behavior, k_ids, cfg)  # (N, K')
    valid, safe = top >= 0, top.clamp(min=0)
    ids_flat = top[valid].numpy().astype(np.int32)
    lens = valid.sum(-1).numpy().astype(np.int32)
    nested = partial(_nested, np.concatenate([[0], np.cumsum(lens)]).astype(np.int32), count, t)
    rewards = torch.randint(0, 2, (count,), generator=gen).float()
    groups = (torch.arange(first, first + count) // cfg.group_size).numpy()
    adv = _group_advantages(rewards, torch.from_numpy(groups))
    cols = {
        "sample_id": pa.array([f"s{first + i:07d}" for i in range(count)]),
        "step": pa.array(np.zeros(count, dtype=np.int64)),
        "group_id": pa.array([f"g{g:06d}" for g in groups]),
        "response_ids": _lists(k_ids.numpy().astype(np.int32), count, t, pa.int32()),
        "advantages": _lists(np.repeat(adv.numpy(), t), count, t, pa.float32()),
        "behavior_logprobs": _lists(logp_behavior.gather(1, k_ids[:, None])[:, 0].numpy(), count, t,
                                    pa.float32()),
        "topk_ids": nested(torch.from_numpy(ids_flat), pa.int32()),
        "topk_logprobs": nested(logp_behavior.gather(1, safe)[valid], pa.float32()),
        "reward": pa.array(rewards.numpy(), type=pa.float32()),
    }
    if cfg.with_prompt:
        prompt = torch.randint(0, cfg.vocab_size, (count * cfg.prompt_len,), generator=gen)
        cols["prompt_ids"] = _lists(prompt.numpy().astype(np.int32), count, cfg.prompt_len,
                                    pa.int32())
    if cfg.with_train:
        cols["train_logprobs"] = _lists(logp_train.gather(1, k_ids[:, None])[:, 0].numpy(), count,
                                        t, pa.float32())
        cols["train_topk_logprobs"] = nested(logp_train.gather(1, safe)[valid], pa.float32())
    schema = rollout_schema(cfg.meta())
    return pa.table({f.name: cols.get(f.name, pa.nulls(count, f.type)) for f in schema},
                    schema=schema)


def _nested(inner: np.ndarray, count: int, t: int, values: torch.Tensor,
            typ: pa.DataType) -> pa.Array:
    """``count`` rows of ``t`` positions of ragged lists: ``values`` (flat) split at the
    per-position offsets ``inner`` (count·t + 1,)."""
    inner_arr = pa.ListArray.from_arrays(pa.array(inner), pa.array(values.numpy(), type=typ))
    return pa.ListArray.from_arrays(pa.array(np.arange(count + 1, dtype=np.int32) * t),
                                    inner_arr)


def _group_advantages(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """GRPO advantages ``(B,)``: reward minus group mean, over group std (+1e-6)."""
    g = (groups - groups.min()).numpy()
    r = rewards.double().numpy()
    count = np.bincount(g)
    mean = np.bincount(g, weights=r) / np.maximum(count, 1)
    std = np.sqrt(np.bincount(g, weights=(r - mean[g]) ** 2) / np.maximum(count, 1))
    return torch.from_numpy((r - mean[g]) / (std[g] + 1e-6)).float()


def iter_synthetic_chunks(cfg: SyntheticLogConfig) -> Iterator[pa.Table]:
    """The log as Arrow tables of at most ``cfg.chunk_samples`` rows each."""
    gen = torch.Generator().manual_seed(cfg.rng_seed)
    for first in range(0, cfg.n_samples, cfg.chunk_samples):
        yield _chunk(cfg, first, min(cfg.chunk_samples, cfg.n_samples - first), gen)


def write_synthetic_log(target: Path | str, cfg: SyntheticLogConfig | None = None,
                        **overrides: object) -> Path:
    """Write a synthetic rollout/v1 log to ``target`` (one file) and return its path."""
    cfg = replace(cfg or SyntheticLogConfig(), **overrides)
    with RolloutWriter(target, cfg.meta()) as writer:
        for table in iter_synthetic_chunks(cfg):
            writer.append(table)
    return Path(target)


TINY_VOCAB = 384


def tiny_qwen3(rng_seed: int, vocab: int = TINY_VOCAB):  # -> transformers.Qwen3ForCausalLM
    """A random 2-layer Qwen3ForCausalLM with hidden size 32 (logits std ~1 via init)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=8, max_position_embeddings=128, tie_word_embeddings=False,
                      initializer_range=0.2)
    torch.manual_seed(rng_seed)
    return Qwen3ForCausalLM(cfg).eval()


def save_tiny(path: Path, rng_seed: int, vocab: int = TINY_VOCAB) -> Path:
    """:func:`tiny_qwen3` saved with ``save_pretrained`` (safetensors) at ``path``."""
    tiny_qwen3(rng_seed, vocab).save_pretrained(path)
    return path
