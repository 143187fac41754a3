"""The trainers' own metric code, called on one logged step padded to ``(B, T)``.

- verl 0.9: ``rollout_corr_helper.compute_rollout_correction_and_rejection_mask`` (which
  calls ``compute_offpolicy_metrics``, ``compute_rollout_correction_weights`` ->
  ``compute_is_metrics`` and ``compute_rollout_rejection_mask``), called directly.
- TRL 1.16 ``sampling/*``: computed inline in ``GRPOTrainer._generate_and_score_completions``
  (no smaller function exists, and driving the whole method needs generation and rewards):
  the installed method's own source lines are executed, unchanged, on a minimal trainer
  object (the IS-ratio block and the metrics block, located by their first statements).
- TRL 1.16 ``clip_ratio/*``: the real ``GRPOTrainer._compute_loss`` driven on a minimal
  trainer object whose ``_get_per_token_logps_and_entropies`` returns log π, with
  ``old_per_token_logps`` = log µ (so ``coef_1`` = π/µ, our ``ratio``).
"""

from __future__ import annotations

import inspect
import math
import textwrap
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import torch

SEQUENCE_IS = "compute_rollout_correction_and_rejection_mask"


def padded(rows: list[dict], dtype: torch.dtype = torch.float64
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """log π, log µ, advantages and the response mask (= loss mask) ``(B, T)`` of rollout/v1
    ``rows`` (responses with no loss token left out, as tokens/v1 has none of them)."""
    rows = [r for r in rows if any(r["loss_mask"] or [True] * len(r["response_ids"]))]
    t = max(len(r["response_ids"]) for r in rows)
    out = [torch.zeros(len(rows), t, dtype=dtype) for _ in range(4)]
    for i, r in enumerate(rows):
        n = len(r["response_ids"])
        for j, key in enumerate(("train_logprobs", "behavior_logprobs", "advantages")):
            out[j][i, :n] = torch.tensor(r[key], dtype=torch.float64)
        out[3][i, :n] = torch.tensor(r["loss_mask"] or [True] * n, dtype=torch.float64)
    return out[0], out[1], out[2], out[3]


def verl_metrics(lt: torch.Tensor, lb: torch.Tensor, mask: torch.Tensor, *, level: str,
                 cap: float, rs: dict[str, str]) -> dict[str, float]:
    """verl's ``rollout_corr/*`` metrics of the batch (``rs``: option -> threshold spec)."""
    from verl.trainer.ppo import rollout_corr_helper as rc
    _, _, metrics = getattr(rc, SEQUENCE_IS)(
        lt, lb, mask, rollout_is=level, rollout_is_threshold=cap,
        rollout_rs=",".join(rs) or None, rollout_rs_threshold=",".join(rs.values()) or None)
    return metrics


def _block(source: str, start: str, stop: str, after: str = "") -> str:
    """The lines of ``source`` from the one holding ``start`` (the first after ``after``)
    to ``stop``, dedented."""
    begin = source.index(start, source.index(after) if after else 0)
    return textwrap.dedent(source[source.rindex("\n", 0, begin) + 1:source.index(stop, begin)])


def _accelerator() -> SimpleNamespace:
    return SimpleNamespace(gather=lambda x: x.reshape(-1), reduce=lambda x, reduction: x,
                           num_processes=1, sync_gradients=True)


def trl_sampling(lt: torch.Tensor, lb: torch.Tensor, mask: torch.Tensor, *, mode: str,
                 cap_max: float | None, cap_min: float | None = None) -> dict[str, float]:
    """TRL's ``sampling/*`` metrics: its own source lines run on ``old_per_token_logps`` = π,
    ``sampling_per_token_logps`` = µ."""
    from trl.trainer import grpo_trainer as g
    src = inspect.getsource(g.GRPOTrainer._generate_and_score_completions)
    ratio = _block(src, "if self.use_vllm and self.vllm_importance_sampling_correction:",
                   "# Compute the per-token log probabilities for the reference model",
                   after="# Compute the importance sampling ratio when using vLLM")
    logged = _block(src, "if self.use_vllm and self.vllm_importance_sampling_correction:",
                    "output = {", after="self._pending_metrics.clear()")
    me = SimpleNamespace(use_vllm=True, vllm_importance_sampling_correction=True,
                         vllm_importance_sampling_mode=mode, _metrics=defaultdict(
        lambda: defaultdict(list)), vllm_importance_sampling_clip_max=cap_max,
        vllm_importance_sampling_clip_min=cap_min, accelerator=_accelerator())
    scope: dict[str, Any] = {"self": me, "torch": torch, "math": math, "tool_mask": None,
                             "completion_mask": mask, "old_per_token_logps": lt,
                             "sampling_per_token_logps": lb, "device": lt.device,
                             "mode": "train", "nanmin": g.nanmin, "nanmax": g.nanmax}
    exec(ratio, scope)  # noqa: S102  (TRL's installed source, unchanged)
    exec(logged, scope)  # noqa: S102
    return {k: v[0] for k, v in me._metrics["train"].items()}


def trl_clip_ratio(lt: torch.Tensor, lb: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                   *, eps_low: float, eps_high: float) -> dict[str, float]:
    """TRL's ``clip_ratio/*`` metrics from the real ``GRPOTrainer._compute_loss``
    (``loss_type`` grpo, token-level IS, no KL, no vLLM correction)."""
    from trl.trainer.grpo_trainer import GRPOTrainer
    b = lt.shape[0]
    me = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (lt, torch.zeros_like(lt), None),
        aux_loss_enabled=False, top_entropy_quantile=1.0, off_policy_mask_threshold=None,
        importance_sampling_level="token", beta=0.0, loss_type="grpo", epsilon_low=eps_low,
        epsilon_high=eps_high, args=SimpleNamespace(delta=None), use_vllm=False,
        vllm_importance_sampling_correction=False, model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1, _entropy_bonus_enabled=False,
        accelerator=_accelerator(), _metrics={"train": defaultdict(list)})
    inputs = {"prompt_ids": torch.zeros(b, 1, dtype=torch.long),
              "prompt_mask": torch.ones(b, 1, dtype=torch.long),
              "completion_ids": torch.zeros_like(mask, dtype=torch.long),
              "completion_mask": mask, "advantages": adv, "old_per_token_logps": lb}
    GRPOTrainer._compute_loss(me, None, inputs)
    return {k: v[0] for k, v in me._metrics["train"].items() if k.startswith("clip_ratio/")
            and k.endswith("_mean")}
