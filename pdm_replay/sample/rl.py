"""The sample's RL run: GRPO steps of a float32 trainer fed by a stale bfloat16 rollout engine.

As in asynchronous RL (and PPO with several optimizer steps per rollout batch), the engine
serves a copy of the policy that is refreshed only every ``sync_every`` steps: at step
``t`` with ``t % sync_every == 0`` the trainer's checkpoint θ_t is saved, the engine
reloads it in bfloat16 (``from_pretrained(dtype=bfloat16)``, as vLLM/SGLang load weights)
and samples the rollout batches of steps ``t .. t + sync_every − 1`` at once. Step
``t + s`` then trains θ_{t+s} on rollouts of µ = bf16(θ_t): staleness ``s`` steps plus the
precision gap.

One trainer step (the loss SPEC §6 replays): GRPO advantages per group; π_θ recomputed
per sequence (the logged ``train_logprobs`` / ``train_topk_logprobs``); the trainer's
trust-region mask (a registry mask, e.g. ``dppo_topk_kl``) decides ``keep`` from logged µ
and π on each token's support S = top-K ∪ {k}; loss ``−Σ_t keep_t · r_t · Â_t / N_tokens``
with ``r_t = π_θ(k_t) / µ(k_t)``; one AdamW step (state kept across steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import Tensor
from transformers import PreTrainedModel

from pdm_replay.masks import MASK_SPECS, Thresholds
from pdm_replay.math.metrics import token_stats
from pdm_replay.math.support import build_support, reduce_logged_pair
from pdm_replay.sample.model import load_checkpoint
from pdm_replay.sample.trainer_rows import trainer_logprobs
from pdm_replay.sample.rollout import GroupRollout, sample_problems, token_logprobs
from pdm_replay.sample.task import SortTask, group_advantages
from pdm_replay.sample.train import TrainConfig


@dataclass(frozen=True)
class RLStepStats:
    """What one GRPO step saw (``staleness``: steps since the engine's weights)."""

    step: int
    staleness: int
    mean_reward: float
    loss: float
    tokens: int
    kept: float  # share of tokens the trainer's mask kept
    update_norm: float  # ‖θ_{t+1} − θ_t‖


@dataclass(frozen=True)
class StepBatch:
    """One step's training data: µ logged in ``groups``, π_θt (per response) in ``train``."""

    step: int
    groups: list[GroupRollout]
    train: list[tuple[Tensor, Tensor]]
    stats: RLStepStats


# (step t, model θ_t, optimizer before step t or None after the last) -> θ_t's directory
# (None when θ_t was not saved; it must be saved at every engine sync step)
SaveCheckpoint = Callable[[int, PreTrainedModel, torch.optim.Optimizer | None], Path | None]


def _flat(groups: Sequence[GroupRollout], train: Sequence[tuple[Tensor, Tensor]],
          advantages: Tensor) -> tuple:
    """Every token of the batch: k ``(N,)``, µ and π at k ``(N,)`` and at the ids ``(N, K+1)``."""
    resp = [torch.tensor(r) for g in groups for r in g.responses]
    adv = torch.cat([advantages.reshape(-1)[i].expand(len(r)) for i, r in enumerate(resp)])
    ids = torch.cat([t for g in groups for t in g.topk_ids])
    mu = (torch.cat([t for g in groups for t in g.behavior_logprobs]),
          torch.cat([t for g in groups for t in g.topk_logprobs]))
    pi = (torch.cat([k for k, _ in train]), torch.cat([top for _, top in train]))
    return torch.cat(resp), ids, mu, pi, adv


def trainer_keep(groups: Sequence[GroupRollout], train: Sequence[tuple[Tensor, Tensor]],
                 advantages: Tensor, cfg: TrainConfig, vocab_size: int) -> Tensor:
    """``(N,)`` bool, the trainer mask's decision on every token (response order).

    The same library computation ``pdm-replay masks`` runs on the written log.
    """
    token, ids, mu, pi, adv = _flat(groups, train, advantages)
    pair = reduce_logged_pair(build_support(token, ids), mu, pi)
    stats = token_stats(pair, adv, vocab_size)
    return MASK_SPECS[cfg.trainer_mask].build(Thresholds(delta_kl=cfg.delta_kl)).keep(stats)


def _padded(values: list[Tensor], width: int, fill: float | bool) -> Tensor:
    """``(B, width)`` rows of ``values``, ``fill`` after each row's end."""
    dtype = torch.bool if isinstance(fill, bool) else torch.float32
    out = torch.full((len(values), width), fill, dtype=dtype)
    for i, v in enumerate(values):
        out[i, : len(v)] = v
    return out


def trainer_step(model: PreTrainedModel, opt: torch.optim.Optimizer, task: SortTask,
                 groups: list[GroupRollout], cfg: TrainConfig, step: int, staleness: int
                 ) -> StepBatch:
    """One off-policy GRPO update of ``model`` on ``groups`` (µ logged by the engine)."""
    pad, vocab = int(task.tokenizer.pad_token_id), len(task.tokenizer)
    rewards = torch.tensor([[task.reward(r, g.numbers) for r in g.responses] for g in groups])
    adv = group_advantages(rewards)
    model.eval()
    train = trainer_logprobs(model, groups, pad)
    keep = trainer_keep(groups, train, adv, cfg, vocab)
    before = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    model.train()
    prompts = [g.prompt_ids for g in groups for _ in g.responses]
    responses = [r for g in groups for r in g.responses]
    lp, valid = token_logprobs(model, prompts, responses, pad)  # (B, T_max)
    mu = _padded([m for g in groups for m in g.behavior_logprobs], lp.shape[1], 0.0)
    kept = _padded(list(keep.split([len(r) for r in responses])), lp.shape[1], False)
    n = int(valid.sum())
    weight = torch.where(valid & kept, adv.reshape(-1, 1).float(), 0.0)
    loss = -(torch.exp(lp - mu) * weight).sum() / n
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    model.eval()
    after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    stats = RLStepStats(step=step, staleness=staleness, mean_reward=rewards.mean().item(),
                        loss=loss.item(), tokens=n, kept=float(keep.float().mean()),
                        update_norm=float((after - before).norm()))
    return StepBatch(step=step, groups=groups, train=train, stats=stats)


def run_rl(model: PreTrainedModel, task: SortTask, cfg: TrainConfig, gen: torch.Generator,
           top_k: int, save: SaveCheckpoint, on_step: Callable[[StepBatch], None]
           ) -> list[RLStepStats]:
    """``cfg.rl_steps`` GRPO steps from ``model`` (θ_0, changed in place) with one AdamW.

    ``save`` is called with θ_t before every step and with θ_{rl_steps} at the end;
    at every sync step the engine loads the directory it returns.
    """
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.rl_lr, weight_decay=0.0)
    per_step, stats = cfg.rl_prompts, []
    rollouts: list[GroupRollout] = []
    for t in range(cfg.rl_steps):
        directory = save(t, model, opt)
        s = t - cfg.engine_step(t)
        if s == 0:
            assert directory is not None, f"θ_{t} of an engine sync step was not saved"
            engine = load_checkpoint(directory, torch.bfloat16)
            problems = task.sample_lists(cfg.sync_every * per_step, gen)
            rollouts = sample_problems(engine, task, problems, cfg.group_size, top_k=top_k)
            del engine
        batch = trainer_step(model, opt, task, rollouts[s * per_step:(s + 1) * per_step],
                             cfg, t, s)
        stats.append(batch.stats)
        on_step(batch)
    save(cfg.rl_steps, model, None)
    return stats
