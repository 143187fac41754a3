"""Training of the sample policy: supervised fine-tuning, then real GRPO steps (CPU, float32).

GRPO step: sample ``G`` responses per prompt from the current policy, score them with
the verifiable reward, normalise rewards per group, and take one optimiser step on the
token-level surrogate ``−Σ_t r_t Â / N_tokens`` with ``r_t = π_θ(k_t) / sg(π_θ(k_t))``
(on-policy, so r = 1 and its gradient is the policy gradient).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor
from transformers import PreTrainedModel

from pdm_replay.sample.rollout import sample_problems, token_logprobs
from pdm_replay.sample.task import SortTask, group_advantages


@dataclass(frozen=True)
class TrainConfig:
    """SFT and RL knobs (the ``small`` preset of :mod:`pdm_replay.sample.make` ships)."""

    sft_steps: int = 1000
    sft_batch: int = 64
    sft_lr: float = 1e-2
    rl_steps: int = 1
    rl_prompts: int = 32
    rl_lr: float = 1.5e-3  # staleness: 1e-3 puts ~3% of tokens out of region, 3e-3 ~30%
    group_size: int = 8


@dataclass(frozen=True)
class RLStepStats:
    """What one GRPO step saw: mean reward of its rollouts, surrogate loss, tokens."""

    mean_reward: float
    loss: float
    tokens: int


def sft_loss(model: PreTrainedModel, task: SortTask, problems: Sequence[list[int]]) -> Tensor:
    """Mean cross-entropy of the target answers (numbers and ``<eos>``) given the prompts."""
    prompts = [task.prompt_ids(p) for p in problems]
    targets = [task.target_ids(p) for p in problems]
    lp, valid = token_logprobs(model, prompts, targets, int(task.tokenizer.pad_token_id))
    return -torch.where(valid, lp, 0.0).sum() / valid.sum()


def sft(model: PreTrainedModel, task: SortTask, cfg: TrainConfig, gen: torch.Generator,
        on_step: Callable[[int, float], None] | None = None) -> list[float]:
    """AdamW with cosine decay on fresh problems each step; returns the loss per step."""
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.sft_lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(cfg.sft_steps, 1))
    model.train()
    losses = []
    for step in range(cfg.sft_steps):
        loss = sft_loss(model, task, task.sample_lists(cfg.sft_batch, gen))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(step, losses[-1])
    model.eval()
    return losses


def grpo_loss(model: PreTrainedModel, task: SortTask, groups: list, advantages: Tensor
              ) -> tuple[Tensor, int]:
    """Token-level GRPO surrogate of ``groups`` with advantages ``(P, G)``; returns (loss, N)."""
    prompts = [g.prompt_ids for g in groups for _ in g.responses]
    responses = [r for g in groups for r in g.responses]
    lp, valid = token_logprobs(model, prompts, responses, int(task.tokenizer.pad_token_id))
    ratio = torch.exp(lp - lp.detach())  # (B·G, T_max), 1 with the policy gradient
    n = int(valid.sum())
    return -torch.where(valid, ratio * advantages.reshape(-1, 1), 0.0).sum() / n, n


def grpo_step(model: PreTrainedModel, opt: torch.optim.Optimizer, task: SortTask,
              problems: Sequence[list[int]], group_size: int) -> RLStepStats:
    """One on-policy GRPO update of ``model`` (float32) on fresh rollouts of ``problems``."""
    model.eval()
    groups = sample_problems(model, task, problems, group_size)
    rewards = torch.tensor([[task.reward(r, g.numbers) for r in g.responses] for g in groups])
    model.train()
    loss, n = grpo_loss(model, task, groups, group_advantages(rewards))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    model.eval()
    return RLStepStats(mean_reward=rewards.mean().item(), loss=loss.item(), tokens=n)


def rl(model: PreTrainedModel, task: SortTask, cfg: TrainConfig, gen: torch.Generator
       ) -> list[RLStepStats]:
    """``cfg.rl_steps`` GRPO steps with one Adam optimiser (fresh state, as a new run)."""
    opt = torch.optim.Adam(model.parameters(), lr=cfg.rl_lr)
    return [grpo_step(model, opt, task, task.sample_lists(cfg.rl_prompts, gen), cfg.group_size)
            for _ in range(cfg.rl_steps)]
