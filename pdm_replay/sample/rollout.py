"""Rollouts the way an RL stack makes them: sample with ``generate``, log µ's top-K, recompute π.

The behavior policy µ is the distribution ``generate`` really samples from: with
temperature 1.0, ``top_k=0`` and ``top_p=1.0`` no logits processor runs, so the
post-processing ``output_scores`` are the model's full-softmax logits (float32 copies of
the engine's bf16 logits). transformers' default ``top_k=50`` would truncate; it is
switched off explicitly.

Examples
--------
>>> import torch
>>> logp = torch.log_softmax(torch.tensor([[3.0, 2.0, 1.0, 0.0]]), -1)
>>> ids, lp = topk_plus_sampled(logp, torch.tensor([3]), k=2)
>>> ids.tolist()
[[0, 1, 3]]
>>> topk_plus_sampled(logp, torch.tensor([1]), k=2)[0].tolist()
[[0, 1, -1]]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import torch
from torch import Tensor
from transformers import GenerationConfig, PreTrainedModel

if TYPE_CHECKING:
    from pdm_replay.sample.task import SortTask

PAD_TOPK = -1


@dataclass(frozen=True)
class Generation:
    """``B·G`` sampled responses (rows ``g·G .. g·G+G-1`` answer prompt ``g``)."""

    responses: Tensor  # (B*G, T) int64, pad_id after <eos>
    lengths: Tensor  # (B*G,) int64, up to and including <eos>
    logp: Tensor | None  # (B*G, T, V) float32 log-softmax of the sampled distribution


def sampling_config(max_new_tokens: int, group_size: int, eos_id: int, pad_id: int,
                    with_logprobs: bool) -> GenerationConfig:
    """Full-softmax sampling at temperature 1 (no truncation), ``group_size`` per prompt."""
    return GenerationConfig(
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
        num_return_sequences=group_size, max_new_tokens=max_new_tokens,
        eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None,
        output_scores=with_logprobs, return_dict_in_generate=True)


def response_lengths(responses: Tensor, eos_id: int) -> Tensor:
    """Length up to and including the first ``eos_id`` of each row ``(N, T)`` -> ``(N,)``."""
    is_eos = responses == eos_id
    first = torch.where(is_eos.any(-1), is_eos.int().argmax(-1) + 1, responses.shape[1])
    return first.long()


@torch.no_grad()
def generate(model: PreTrainedModel, prompt_ids: Tensor, group_size: int,
             max_new_tokens: int, eos_id: int, pad_id: int, *,
             with_logprobs: bool = False) -> Generation:
    """Sample ``group_size`` responses per prompt; ``prompt_ids`` is ``(B, P)`` (no padding)."""
    cfg = sampling_config(max_new_tokens, group_size, eos_id, pad_id, with_logprobs)
    out = model.generate(input_ids=prompt_ids, attention_mask=torch.ones_like(prompt_ids),
                         generation_config=cfg)
    responses = out.sequences[:, prompt_ids.shape[1]:]
    logp = None
    if with_logprobs:
        scores = torch.stack(out.scores, dim=1).float()  # (B*G, T, V)
        if not torch.isfinite(scores).all():
            raise RuntimeError("generate masked logits (a truncating processor ran); the "
                               "logged distribution would not be the full softmax")
        logp = torch.log_softmax(scores, dim=-1)
    return Generation(responses=responses, lengths=response_lengths(responses, eos_id),
                      logp=logp)


def topk_plus_sampled(logp: Tensor, token: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """vLLM-style top-K plus the sampled token: ids and log-probs ``(N, k+1)``.

    ``logp`` is ``(N, V)``, ``token`` ``(N,)``. Slot ``k`` holds the sampled token when it is
    outside the top-K, else ``-1`` / ``-inf`` (written as a K-long row).
    """
    top_lp, top_ids = torch.topk(logp, k, dim=-1)
    inside = (top_ids == token[:, None]).any(-1)
    extra_id = torch.where(inside, PAD_TOPK, token)
    extra_lp = torch.where(inside, -math.inf, logp.gather(1, token[:, None])[:, 0])
    return (torch.cat([top_ids, extra_id[:, None]], 1),
            torch.cat([top_lp, extra_lp[:, None]], 1))


def _right_padded(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                  pad_id: int) -> tuple[Tensor, Tensor]:
    """prompt + response token ids ``(B, L)`` right-padded with ``pad_id``, and the mask."""
    seqs = [list(p) + list(r) for p, r in zip(prompts, responses)]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    return ids, mask


def forward_logprobs(model: PreTrainedModel, prompts: Sequence[Sequence[int]],
                     responses: Sequence[Sequence[int]], pad_id: int) -> list[Tensor]:
    """Log-softmax ``(T_i, V)`` at every response position, one full forward per batch.

    Sequences are right-padded, so padding never precedes a real token and causal
    attention sees exactly the unpadded context.
    """
    ids, mask = _right_padded(prompts, responses, pad_id)
    logp = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits.float(), -1)
    # The logits at position j predict token j + 1.
    return [logp[i, len(p) - 1: len(p) - 1 + len(r)]
            for i, (p, r) in enumerate(zip(prompts, responses))]


def token_logprobs(model: PreTrainedModel, prompts: Sequence[Sequence[int]],
                   responses: Sequence[Sequence[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """log π(k_t) of every response token, ``(B, T_max)``, and its validity mask.

    Differentiable and vectorized, for training losses. The LM head runs only at the
    positions that predict a response token (the prompt's logits are never needed; with a
    4,103-token vocabulary the head is most of the model's cost).
    """
    ids, mask = _right_padded(prompts, responses, pad_id)
    hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, L, H)
    starts = torch.tensor([len(p) - 1 for p in prompts])
    lengths = torch.tensor([len(r) for r in responses])
    t = torch.arange(int(lengths.max()))
    index = (starts[:, None] + t).clamp(max=ids.shape[1] - 2)  # (B, T_max): predicts j + 1
    at = hidden.gather(1, index[..., None].expand(-1, -1, hidden.shape[-1]))
    logp = torch.log_softmax(model.lm_head(at).float(), -1)  # (B, T_max, V)
    next_lp = logp.gather(2, ids.gather(1, index + 1)[..., None])[..., 0]
    return next_lp, t < lengths[:, None]


def gather_topk(logp: Tensor, token: Tensor, topk_ids: Tensor) -> tuple[Tensor, Tensor]:
    """log p(token) ``(T,)`` and log p at ``topk_ids`` ``(T, K')`` (``-inf`` at padding)."""
    at_k = logp.gather(1, token[:, None])[:, 0]
    at_top = logp.gather(1, topk_ids.clamp(min=0)).masked_fill(topk_ids < 0, -math.inf)
    return at_k, at_top


@dataclass
class GroupRollout:
    """The ``G`` responses to one prompt; the µ fields are set when log-probs were asked for."""

    numbers: list[int]
    prompt_ids: list[int]
    responses: list[list[int]]  # G lists, each ending with <eos> unless cut at max length
    behavior_logprobs: list[Tensor] | None = None  # G × (T_g,)
    topk_ids: list[Tensor] | None = None  # G × (T_g, K+1), -1 where k is in the top-K
    topk_logprobs: list[Tensor] | None = None  # G × (T_g, K+1), -inf at -1


def _by_length(problems: Sequence[Sequence[int]], batch: int) -> list[list[int]]:
    """Indices of ``problems`` in batches of equal list length (prompts need no padding)."""
    order = sorted(range(len(problems)), key=lambda i: (len(problems[i]), i))
    batches: list[list[int]] = []
    for i in order:
        if batches and len(batches[-1]) < batch and \
                len(problems[batches[-1][0]]) == len(problems[i]):
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def _group(gen: Generation, b: int, group_size: int, numbers: list[int],
           prompt_ids: list[int], k: int | None) -> GroupRollout:
    """Prompt ``b`` of a batched generation; µ's top-K is cut out while logp is at hand."""
    group = GroupRollout(numbers=list(numbers), prompt_ids=list(prompt_ids), responses=[])
    logged = k is not None and gen.logp is not None
    if logged:
        group.behavior_logprobs, group.topk_ids, group.topk_logprobs = [], [], []
    for r in range(b * group_size, (b + 1) * group_size):
        tokens = gen.responses[r, : int(gen.lengths[r])]
        group.responses.append(tokens.tolist())
        if logged:
            logp = gen.logp[r, : len(tokens)]
            ids, top_lp = topk_plus_sampled(logp, tokens, k)
            group.behavior_logprobs.append(logp.gather(1, tokens[:, None])[:, 0])
            group.topk_ids.append(ids)
            group.topk_logprobs.append(top_lp)
    return group


def sample_problems(model: PreTrainedModel, task: "SortTask", problems: Sequence[list[int]],
                    group_size: int, *, top_k: int | None = None, batch_prompts: int = 16
                    ) -> list[GroupRollout]:
    """``group_size`` samples per problem, in problem order; ``top_k`` logs µ's top-K."""
    result: list[GroupRollout | None] = [None] * len(problems)
    for rows in _by_length(problems, batch_prompts):
        prompts = [task.prompt_ids(problems[i]) for i in rows]
        gen = generate(model, torch.tensor(prompts), group_size,
                       task.max_new_tokens(problems[rows[0]]), task.eos_id,
                       int(task.tokenizer.pad_token_id), with_logprobs=top_k is not None)
        for b, i in enumerate(rows):
            result[i] = _group(gen, b, group_size, problems[i], prompts[b], top_k)
    return [g for g in result if g is not None]
