"""The math of the masks other trainers ship that are not a region × direction test (pure torch).

Each function reads per-token statistics ``(N,)`` and returns a keep ``(N,)`` bool or a
weight ``w`` ``(N,)`` float64 of the replay's surrogate ``−Σ w·r·Â / N``: ``w·r`` is the
factor the producer's loss puts on ``Â·∇log π(k_t)``, so a producer whose loss normalizes
per sequence (GMPO, SAPO) agrees with ``w`` up to that normalizer. Sources (read 2026):

- AReaL M2PO: inclusionAI/AReaL ``areal/trainer/ppo/actor.py``
  ``_apply_m2po_masking`` / ``_get_m2po_loss_mask``;
- open-instruct VACO: allenai/open-instruct ``open_instruct/grpo_utils.py``
  ``compute_rho_correction`` (``rho_mask_tv_divergence``);
- SAPO: verl 0.9 ``verl/trainer/ppo/core_algos.py`` ``compute_policy_loss_sapo`` (TRL 1.16
  ``GRPOTrainer._compute_loss``, ``loss_type="sapo"``, is the same gate);
- GMPO: verl 0.9 ``core_algos.py`` ``compute_policy_loss_geo_mean``.

Examples
--------
M2PO at threshold 0.04 on (log µ − log π)² = (0.25, 0.09, 0.01, 0.0): the suffix means of
the sorted values are 0.0875, 0.0333, 0.005, 0: the first below 0.04 starts at index 1, so
the largest token alone is dropped.

>>> import torch
>>> lr = torch.tensor([0.5, -0.3, 0.1, 0.0], dtype=torch.float64)
>>> m2po_keep(lr, torch.ones(4, dtype=torch.bool), torch.ones(4), 0.04).tolist()
[False, True, True, True]
"""

from __future__ import annotations

import torch
from torch import Tensor

from pdm_replay.math.segments import Segments

VACO_LOG_CLAMP = 10.0  # open-instruct compute_rho_correction clamps log ρ to ±10 before exp
SAFETY_BOUND = 20.0  # verl's |log r| bound (rollout_corr_helper.SAFETY_BOUND)


def m2po_keep(lr: Tensor, valid: Tensor, advantage: Tensor, threshold: float,
              group: Tensor | None = None) -> Tensor:
    """AReaL's M2PO: among the ``valid`` tokens of each ``group`` (``(N,)`` int64, dense
    0..G−1; None: one group), drop those with the largest second moment
    ``(log µ − log π)²`` until the mean of the rest is below ``threshold`` (all but one
    when no suffix is); ``lr`` ``(N,)`` is log π − log µ. Tokens with Â = 0 (no gradient)
    and non-loss tokens are kept.
    """
    keep = torch.ones_like(valid, dtype=torch.bool)
    m2 = (lr * lr)[valid]
    n = m2.numel()
    if n == 0:
        return keep
    g = torch.zeros(n, dtype=torch.long) if group is None else group[valid].long()
    order = torch.sort(m2, descending=True, stable=True).indices
    order = order[torch.sort(g[order], stable=True).indices]  # by group, m2 descending
    gs, ms = g[order], m2[order]
    size = torch.bincount(gs, minlength=int(gs.max()) + 1)
    first = torch.cumsum(size, 0) - size  # where each group starts in the sorted order
    rank = torch.arange(n) - first[gs]  # 0 = the group's largest m2
    total = torch.zeros(size.shape[0], dtype=ms.dtype).index_add_(0, gs, ms)
    before = torch.cumsum(ms, 0) - ms - (torch.cumsum(ms, 0) - ms)[first][gs]
    # mean of the group's suffix from this token on: the tokens left if those before go
    suffix = (total[gs] - before) / (size[gs] - rank).to(ms.dtype)
    k = torch.full_like(size, n).scatter_reduce(
        0, gs, torch.where(suffix < threshold, rank, torch.full_like(rank, n)), "amin")
    k = torch.where(k == n, size - 1, k)  # no suffix below: keep one (AReaL's rule)
    kept_valid = torch.empty(n, dtype=torch.bool)
    kept_valid[order] = rank >= k[gs]
    keep[valid] = kept_valid
    return keep | (advantage == 0)


def vaco_weight(lr: Tensor, advantage: Tensor, seqs: Segments, delta: float,
                cap: float) -> Tensor:
    """open-instruct's VACO TV mask with its ρ correction: ``ρ_t = exp(clamp(log r, ±10))``,
    a response's TV ``mean_t |ρ_t − 1|``; where it exceeds ``delta`` a token is dropped if
    ``sign(log r)·Â > 0`` (its update raises the TV); the kept tokens carry ``min(ρ, cap)``,
    so ``w = keep·min(ρ, cap)/r`` ``(N,)``."""
    lrc = lr.clamp(-VACO_LOG_CLAMP, VACO_LOG_CLAMP)
    rho = torch.exp(lrc)
    tv = seqs.reduce((rho - 1.0).abs(), "mean")
    drop = (tv > delta) & (torch.sign(lrc) * advantage > 0)
    f = torch.where(drop, torch.zeros_like(rho), rho.clamp(max=cap))
    return f / torch.exp(lr)


def sapo_weight(lr: Tensor, advantage: Tensor, tau_pos: float, tau_neg: float) -> Tensor:
    """SAPO's soft gate ``f(r) = σ(τ(r − 1))·4/τ`` (τ = ``tau_pos`` where Â > 0, else
    ``tau_neg``) as a weight: ``d f/d log π = 4σ(1 − σ)·r``, so ``w = 4σ(x)(1 − σ(x))``,
    ``x = τ(r − 1)``, ``(N,)``; 1 at r = 1, vanishing far outside (σ rounds to 1 or 0 there,
    as it does in verl's autograd)."""
    tau = torch.where(advantage > 0, torch.full_like(lr, tau_pos), torch.full_like(lr, tau_neg))
    sig = torch.sigmoid(tau * torch.expm1(lr.clamp(-SAFETY_BOUND, SAFETY_BOUND)))
    return 4.0 * sig * (1.0 - sig)


def gmpo_weight(lr: Tensor, advantage: Tensor, seqs: Segments, eps_low: float,
                eps_high: float) -> Tensor:
    """GMPO's geometric-mean clip as a weight ``(N,)``: each token's log r is clipped to
    ``[−eps_low, eps_high]`` on the side its advantage pushes (Â > 0: above ``eps_high``;
    Â < 0: below ``−eps_low``; Â = 0 counts 0, as verl's sign product gives), the response
    ratio is ``R = exp(mean_t clipped)``; a clipped token has no gradient and the others
    ``R·Â/L·∇log π``: ``w = R·[not clipped]/r`` (mean over the response's loss tokens)."""
    sgn = torch.sign(advantage)
    clamped = lr.clamp(-eps_low, eps_high)
    value = sgn * torch.minimum(sgn * lr, sgn * clamped)
    clipped = sgn * lr > sgn * clamped
    ratio = torch.exp(seqs.reduce(value, "mean").clamp(-SAFETY_BOUND, SAFETY_BOUND))
    return torch.where(clipped, torch.zeros_like(ratio), ratio) / torch.exp(lr)
