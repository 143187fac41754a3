"""Ground-truth rollouts and writers of every input layout, built from the documented fields.

``make_truth`` draws behavior µ and training π distributions per position, samples k
from µ and keeps the exact top-K; ``Truth.rows`` are the rollout/v1 rows (plus_sampled:
top-K plus k when k is outside it) that ``write_rollouts`` writes directly. Each
``write_*`` function writes the same data the way that engine/trainer lays it out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from pdm_replay.io.rollouts import write_rollouts
from pdm_replay.commands.masks import MasksConfig, run_masks
from pdm_replay.schema import RolloutMeta

VOCAB, K = 40, 4


@dataclass
class Position:
    k: int
    top: list[int]  # exact top-K ids of µ, best first
    mu: np.ndarray  # (V,) float32 log µ
    pi: np.ndarray  # (V,) float32 log π


@dataclass
class Truth:
    rows: list[dict]
    positions: list[list[Position]]
    prompts: list[list[int]]
    meta: RolloutMeta = field(default_factory=lambda: RolloutMeta(vocab_size=VOCAB, top_k=K))

    def write(self, path: Path) -> Path:
        return write_rollouts(path, self.rows, self.meta)


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max()
    return (z - np.log(np.exp(z).sum())).astype(np.float32)


def logged_ids(p: Position, convention: str) -> list[int]:
    """The top-K slots a ``convention`` logs: top-K first, k appended or in slot K."""
    if p.k in p.top:
        return list(p.top)
    return [*p.top, p.k] if convention == "plus_sampled" else [*p.top[:-1], p.k]


def make_truth(n: int = 6, seed: int = 0, ids: list[str] | None = None,
               per_token_adv: bool = True, loss_mask: bool = True,
               step: int = 0, convention: str = "plus_sampled") -> Truth:
    """``n`` samples with varying lengths; token 0 is often in the top-K (padding tests)."""
    rng = np.random.default_rng(seed)
    rows, positions, prompts = [], [], []
    for i in range(n):
        t_len, p_len = int(rng.integers(2, 7)), int(rng.integers(1, 5))
        pos_list = []
        for _ in range(t_len):
            z = rng.normal(0, 2.0, VOCAB)
            z[0] += 3.0 * rng.random()  # id 0 is a genuine, frequent token
            mu = _log_softmax(z)
            pi = _log_softmax(z + rng.normal(0, 0.7, VOCAB))
            k = int(rng.choice(VOCAB, p=np.exp(mu.astype(np.float64)) /
                               np.exp(mu.astype(np.float64)).sum()))
            pos_list.append(Position(k, [int(j) for j in np.argsort(-mu)[:K]], mu, pi))
        ids_row = [logged_ids(p, convention) for p in pos_list]
        adv = (rng.normal(size=t_len) if per_token_adv else np.full(t_len, rng.normal()))
        prompt = [int(x) for x in rng.integers(1, VOCAB, p_len)]
        row = {
            "sample_id": ids[i] if ids else f"s{i}", "step": step, "group_id": f"g{i // 2}",
            "prompt_ids": prompt, "response_ids": [p.k for p in pos_list],
            "advantages": [float(np.float32(a)) for a in adv],
            "behavior_logprobs": [float(p.mu[p.k]) for p in pos_list],
            "topk_ids": ids_row,
            "topk_logprobs": [[float(p.mu[j]) for j in r] for p, r in zip(pos_list, ids_row)],
            "train_logprobs": [float(p.pi[p.k]) for p in pos_list],
            "train_topk_logprobs": [[float(p.pi[j]) for j in r]
                                    for p, r in zip(pos_list, ids_row)],
            "reward": float(np.float32(rng.random())),
        }
        if loss_mask:
            row["loss_mask"] = [bool(j % 3 != 1) for j in range(t_len)]
        rows.append(row)
        positions.append(pos_list)
        prompts.append(prompt)
    return Truth(rows, positions, prompts,
                 RolloutMeta(vocab_size=VOCAB, top_k=K, topk_convention=convention))


def per_sample_fields(row: dict) -> dict:
    keys = ("sample_id", "step", "group_id", "prompt_ids", "advantages", "reward",
            "loss_mask", "train_logprobs")
    return {k: row[k] for k in keys if k in row}


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def vllm_order(p: Position) -> list[int]:
    """vLLM's per-position logprobs dict order: the sampled token, then the top-K."""
    return [p.k] + [j for j in p.top if j != p.k]


def openai_record(truth: Truth, i: int, token=lambda j: f"token_id:{j}") -> dict:
    """A vLLM chat-completion line: top_logprobs = the first K of {sampled, top-K...}."""
    row, pos = truth.rows[i], truth.positions[i]
    content = [{"token": token(p.k), "logprob": float(p.mu[p.k]),
                "top_logprobs": [{"token": token(j), "logprob": float(p.mu[j])}
                                 for j in vllm_order(p)[:K]]} for p in pos]
    train_topk = [[float(p.pi[j]) for j in vllm_order(p)[:K]] for p in pos]
    return {**per_sample_fields(row), "train_topk_logprobs": train_topk,
            "response": {"id": f"chatcmpl-{row['sample_id']}", "object": "chat.completion",
                         "choices": [{"index": 0, "message": {"role": "assistant"},
                                      "logprobs": {"content": content},
                                      "finish_reason": "stop"}]}}


def vllm_record(truth: Truth, i: int) -> dict:
    """A serialized RequestOutput: per position {token_id: Logprob}, sampled token first."""
    row, logprobs = truth.rows[i], []
    for p in truth.positions[i]:
        order = vllm_order(p)
        rank = {int(j): r + 1 for r, j in enumerate(np.argsort(-p.mu))}
        logprobs.append({str(j): {"logprob": float(p.mu[j]), "rank": rank[j],
                                  "decoded_token": f"w{j}"} for j in order})
    train_topk = [[float(p.pi[j]) for j in vllm_order(p)] for p in truth.positions[i]]
    return {**per_sample_fields(row), "train_topk_logprobs": train_topk,
            "request_id": row["sample_id"], "prompt_token_ids": row["prompt_ids"],
            "outputs": [{"index": 0, "token_ids": row["response_ids"], "logprobs": logprobs,
                         "text": "", "cumulative_logprob": None, "finish_reason": "stop"}],
            "sampling_params": {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "logprobs": K}}


def sglang_record(truth: Truth, i: int) -> dict:
    """A /generate response: output_top_logprobs is the exact top-K (no sampled token)."""
    row = truth.rows[i]
    fields = per_sample_fields(row)
    fields.pop("sample_id")
    return {**fields, "text": "", "input_ids": fields.pop("prompt_ids"),
            "train_topk_logprobs": [[float(p.pi[j]) for j in p.top] for p in truth.positions[i]],
            "meta_info": {"id": row["sample_id"], "finish_reason": {"type": "stop"},
                          "output_token_logprobs": [[float(p.mu[p.k]), p.k, None]
                                                    for p in truth.positions[i]],
                          "output_top_logprobs": [[[float(p.mu[j]), j, None] for j in p.top]
                                                  for p in truth.positions[i]]},
            "sampling_params": {"temperature": 1.0, "top_p": 1.0, "top_k": -1}}


def verl_arrays(truth: Truth, pad_t: int = 8, pad_p: int = 6) -> dict[str, np.ndarray]:
    """A verl batch as sail-sg/Stable-RL lays it out: left-padded prompts, right-padded
    responses, ``rollout_topk_*`` of shape (B, T, K) in rank order with the sampled token
    in the last slot when it is outside the top-K, rows past the response zero-padded
    (``vllm_async_server.generate`` and ``AgentLoopWorker._agent_loop_postprocess``).

    ``truth`` must be a ``replace_last`` truth: its rows are exactly those K slots.
    """
    assert truth.meta.topk_convention == "replace_last"
    b = len(truth.rows)
    out = {"prompts": np.zeros((b, pad_p), np.int64), "responses": np.zeros((b, pad_t), np.int64),
           "attention_mask": np.zeros((b, pad_p + pad_t), np.int64),
           "response_mask": np.zeros((b, pad_t), np.int64),
           "rollout_log_probs": np.zeros((b, pad_t), np.float32),
           "old_log_probs": np.zeros((b, pad_t), np.float32),
           "advantages": np.zeros((b, pad_t), np.float32),
           "token_level_scores": np.zeros((b, pad_t), np.float32),
           "rollout_topk_token_ids": np.zeros((b, pad_t, K), np.int64),
           "rollout_topk_logprobs": np.zeros((b, pad_t, K), np.float32),
           "old_topk_log_probs": np.zeros((b, pad_t, K), np.float32),
           "uid": np.array([r["group_id"] for r in truth.rows], dtype=object)}
    for i, row in enumerate(truth.rows):
        p, t = len(row["prompt_ids"]), len(row["response_ids"])
        out["prompts"][i, pad_p - p:] = row["prompt_ids"]
        out["attention_mask"][i, pad_p - p:pad_p + t] = 1
        out["responses"][i, :t] = row["response_ids"]
        out["response_mask"][i, :t] = row.get("loss_mask", [1] * t)
        out["rollout_log_probs"][i, :t] = row["behavior_logprobs"]
        out["old_log_probs"][i, :t] = row["train_logprobs"]
        out["advantages"][i, :t] = row["advantages"]
        out["token_level_scores"][i, t - 1] = row["reward"]
        out["rollout_topk_token_ids"][i, :t] = row["topk_ids"]
        out["rollout_topk_logprobs"][i, :t] = row["topk_logprobs"]
        out["old_topk_log_probs"][i, :t] = row["train_topk_logprobs"]
    return out


def masks_frame(log: Path, out: Path) -> pl.DataFrame:
    """tokens/v1 of ``log`` (log-only mode), sorted by (sample_id, pos)."""
    run_masks(MasksConfig(log=log, out=out))
    return pl.read_parquet(out).sort(["sample_id", "pos"])


def assert_same_tokens(a: pl.DataFrame, b: pl.DataFrame) -> None:
    """Two tokens/v1 tables hold the same tokens and the same numbers."""
    assert a.columns == b.columns and a.height == b.height > 0
    for name in a.columns:
        x, y = a[name].to_numpy(), b[name].to_numpy()
        if a[name].dtype.is_float():
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-9, err_msg=name)
        else:
            assert (x == y).all(), name
