"""Supervised fine-tuning of the sample policy and the knobs of its RL run (CPU, float32).

The RL steps themselves (GRPO from a stale bfloat16 rollout engine) are in
:mod:`pdm_replay.sample.rl`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor
from transformers import PreTrainedModel

from pdm_replay.sample.rollout import token_logprobs
from pdm_replay.sample.task import SortTask


@dataclass(frozen=True)
class TrainConfig:
    """SFT and RL knobs (the ``small`` preset of :mod:`pdm_replay.commands.make_sample` ships)."""

    sft_steps: int = 2000
    sft_batch: int = 64
    sft_lr: float = 1e-2
    rl_steps: int = 24  # GRPO steps 0 .. rl_steps - 1 after SFT (θ_0 = the SFT model)
    sync_every: int = 8  # the engine reloads θ_t when t % sync_every == 0: staleness 0..7
    logged_steps: int = 16  # the last ones are logged, with θ_t .. θ_{rl_steps} saved
    rl_prompts: int = 96  # prompts per step (× group_size samples)
    rl_lr: float = 3e-3
    group_size: int = 8
    trainer_mask: str = "dppo_topk_kl"  # the trust-region mask the trainer applies
    delta_kl: float = 0.15

    def __post_init__(self) -> None:
        # Logging starts at an engine sync, so every logged step's engine weights are a
        # saved checkpoint.
        if not 1 <= self.logged_steps <= self.rl_steps or self.first_logged % self.sync_every:
            raise ValueError(f"logged_steps={self.logged_steps}: the logged steps must start "
                             f"at an engine sync (a multiple of sync_every={self.sync_every}) "
                             f"and end at rl_steps={self.rl_steps}")

    @property
    def first_logged(self) -> int:
        return self.rl_steps - self.logged_steps

    def engine_step(self, step: int) -> int:
        """The step whose θ the engine served at ``step`` (its last sync)."""
        return step - step % self.sync_every


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
