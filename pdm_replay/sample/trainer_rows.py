"""Turn sampled groups into rollout/v1 rows, with the trainer's recomputed log-probs.

The trainer side is what verl/TRL/OpenRLHF log: the training policy π_θ (float32)
re-runs prompt + response in one forward pass and records log π_θ at the sampled token
and at µ's logged top-K ids.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor
from transformers import PreTrainedModel

from pdm_replay.sample.rollout import GroupRollout, forward_logprobs, gather_topk
from pdm_replay.sample.task import SortTask, group_advantages


@torch.no_grad()
def trainer_logprobs(policy: PreTrainedModel, groups: Sequence[GroupRollout], pad_id: int
                     ) -> list[tuple[Tensor, Tensor]]:
    """Per response (group order): log π(k) ``(T,)`` and log π at ``topk_ids`` ``(T, K+1)``.

    One unpadded forward per sequence, like a padding-free trainer (verl's remove-padding):
    any replay of one sequence reproduces these numbers to the last float32 bit, whereas
    padded batches of other shapes drift by a few float32 ulps of the logits (~1e-5 here).
    """
    out = []
    for g in groups:
        for resp, ids in zip(g.responses, g.topk_ids or []):
            (logp,) = forward_logprobs(policy, [g.prompt_ids], [resp], pad_id)
            out.append(gather_topk(logp, torch.tensor(resp), ids))
    return out


def _trim(ids: Tensor, lp: Tensor) -> tuple[list[list[int]], list[list[float]]]:
    """Drop the ``-1`` padding slot: rows of K or K + 1 entries (plus_sampled)."""
    keep = ids >= 0
    return ([row[m].tolist() for row, m in zip(ids, keep)],
            [row[m].tolist() for row, m in zip(lp, keep)])


def group_rows(task: SortTask, groups: Sequence[GroupRollout],
               train: Sequence[tuple[Tensor, Tensor]], step: int, first_group: int = 0
               ) -> list[dict]:
    """rollout/v1 rows of ``groups`` (µ logged) with trainer log-probs ``train``.

    Group ``p`` of this call is named ``p{first_group + p:05d}``; its samples ``-g{j}``.
    """
    rewards = torch.tensor([[task.reward(r, g.numbers) for r in g.responses] for g in groups])
    adv = group_advantages(rewards)
    rows, flat = [], iter(train)
    for p, g in enumerate(groups):
        name = f"p{first_group + p:05d}"
        for j, resp in enumerate(g.responses):
            lp_k, lp_top = next(flat)
            ids, mu_top = _trim(g.topk_ids[j], g.topk_logprobs[j])
            _, pi_top = _trim(g.topk_ids[j], lp_top)
            t = len(resp)
            rows.append({
                "sample_id": f"{name}-g{j}", "step": step, "group_id": name,
                "prompt_ids": g.prompt_ids, "response_ids": resp,
                "advantages": [float(adv[p, j])] * t,
                "behavior_logprobs": g.behavior_logprobs[j].tolist(),
                "topk_ids": ids, "topk_logprobs": mu_top, "loss_mask": [True] * t,
                "train_logprobs": lp_k.tolist(), "train_topk_logprobs": pi_top,
                "reward": float(rewards[p, j])})
    return rows
