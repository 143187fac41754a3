"""The elementwise math of every mask (pure torch): statistics, slopes, decisions, weights.

A binary mask keeps a token unless it is outside the region and ``sign(Â)·slope > 0``
(:func:`away`; the slope of each direction criterion, SPEC §3, is built here). Statistics named by the
registry are TokenStats fields or verl's rollout-correction k-estimators of the log
ratio ``log r = log π − log µ`` (``verl/trainer/ppo/rollout_corr_helper.py``,
``compute_rollout_rejection_mask``: ``k1 = −log r``, ``k2 = ½ (log r)²``,
``k3 = r − 1 − log r``, log r clamped to ±20 first, verl's ``SAFETY_BOUND``).

Examples
--------
Hand-worked k-statistics at r = 2 (log r = 0.693147...): k1 = −0.693147, k2 = 0.240227,
k3 = 2 − 1 − 0.693147 = 0.306853.

>>> import math, torch
>>> lr = torch.tensor([math.log(2.0)], dtype=torch.float64)
>>> [round(float(f(lr)), 6) for f in (k1, k2, k3)]
[-0.693147, 0.240227, 0.306853]
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from pdm_replay.math.metrics import TokenStats
from pdm_replay.math.segments import Segments

SAFETY_BOUND = 20.0  # verl rollout_corr_helper.SAFETY_BOUND: |log r| clamp before exp


def log_ratio(s: TokenStats) -> Tensor:
    """``log π(k) − log µ(k)`` ``(N,)`` float64, clamped to ±``SAFETY_BOUND``."""
    return (s.logp_train.double() - s.logp_behavior.double()).clamp(-SAFETY_BOUND,
                                                                    SAFETY_BOUND)


def k1(lr: Tensor) -> Tensor:
    return -lr


def k2(lr: Tensor) -> Tensor:
    return 0.5 * lr * lr


def k3(lr: Tensor) -> Tensor:
    return torch.expm1(lr) - lr  # expm1: no cancellation near r = 1


DERIVED = {"log_ratio": lambda s: log_ratio(s), "k1": lambda s: k1(log_ratio(s)),
           "k2": lambda s: k2(log_ratio(s)), "k3": lambda s: k3(log_ratio(s)),
           # π(k) − µ(k), signed (prime-rl's prob_delta; tv_binary is its absolute value)
           "prob_diff": lambda s: torch.exp(s.logp_train.double())
           - torch.exp(s.logp_behavior.double())}


def statistic(s: TokenStats, name: str) -> Tensor:
    """The per-token statistic ``name`` ``(N,)``: a TokenStats field or a k-estimator."""
    if name in DERIVED:
        return DERIVED[name](s)
    return getattr(s, name)


def per_sequence(values: Tensor, reduce: str, seqs: Segments | None, what: str) -> Tensor:
    """``values`` reduced over each sequence (``reduce`` "" = token level: unchanged)."""
    if not reduce:
        return values
    if seqs is None:
        raise ValueError(f"{what} is a sequence mask: pass the tokens' Segments")
    return seqs.reduce(values, reduce)


def slope(s: TokenStats, direction: str, field: str, reduce: str,
          seqs: Segments | None) -> Tensor:
    """``(N,)`` whose sign times sign(Â) says "moves away" under ``direction``.

    ratio: r − 1 per token, Σ log r per sequence; predictive: the Ḋ field ``field``,
    summed over the sequence; certified: the sign certificate (``none`` and
    ``negative_advantage`` need no slope: :func:`away`).
    """
    if direction == "ratio":
        if reduce:
            return per_sequence(log_ratio(s), "sum", seqs, "a ratio-direction sequence mask")
        # sign(log π − log µ) = sign(r − 1) exactly (ratio_slope's expm1 keeps the sign)
        return s.logp_train - s.logp_behavior
    if direction == "predictive":
        return per_sequence(getattr(s, field), "sum" if reduce else "", seqs, field)
    if direction == "certified":
        return s.direction_certified.double() * torch.sign(s.advantage)
    raise ValueError(f"direction {direction!r} has no slope")


def away(s: TokenStats, direction: str, field: str, reduce: str,
         seqs: Segments | None) -> Tensor:
    """``(N,)`` bool: the update moves away under ``direction`` (never where Â = 0)."""
    if direction == "none":
        return s.advantage != 0
    if direction == "negative_advantage":
        return s.advantage < 0
    return torch.sign(s.advantage) * slope(s, direction, field, reduce, seqs) > 0


def outside(value: Tensor, low: float, high: float) -> Tensor:
    """``(N,)`` bool: ``value`` outside ``[low, high]`` (an infinite bound costs nothing)."""
    if low == -math.inf:
        return value > high
    if high == math.inf:
        return value < low
    return (value < low) | (value > high)


def dual_clip(keep: Tensor, s: TokenStats, c: float) -> Tensor:
    """verl's dual-clip (``compute_policy_loss_vanilla``, ``clip_ratio_c``): Â < 0 and
    r > c also get no gradient; ``c = 0`` is off."""
    if c <= 0:
        return keep
    return keep & ~((s.advantage < 0) & (s.ratio > c))


def is_weight(s: TokenStats, low: float, high: float, reduce: str, truncate: bool,
              seqs: Segments | None) -> Tensor:
    """``w`` ``(N,)`` with ``w·r = f(ρ)``: ρ the token ratio (``reduce`` "") or the
    sequence ratio exp(Σ log r) (clamped as verl's ``SAFETY_BOUND``); ``f`` clamps ρ to
    [low, high] (TIS, CISPO) or zeroes it outside (MIS, ``truncate`` False)."""
    lr = log_ratio(s)
    rho = torch.exp(per_sequence(lr, "sum", seqs, "a sequence IS weight")
                    .clamp(-SAFETY_BOUND, SAFETY_BOUND)) if reduce else torch.exp(lr)
    if truncate:
        f = rho.clamp(min=low, max=high)
    else:
        f = torch.where((rho >= low) & (rho <= high), rho, torch.zeros_like(rho))
    return f / torch.exp(lr)
