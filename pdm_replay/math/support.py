"""Top-K support construction and reduced distributions over ``S ∪ {tail}`` (SPEC §1).

Pure torch, float64, vectorised over N tokens. Column 0 of every support is the sampled
token k, so ``support.ids[:, 0] == k`` and per-token quantities of k are ``[:, 0]``.

Examples
--------
>>> import torch, math
>>> ids = build_support(torch.tensor([7]), torch.tensor([[3, 7, -1]]))
>>> ids.ids.tolist(), ids.valid.tolist()
([[7, 3, 7, -1]], [[True, True, False, False]])
>>> red = reduce_pair(ids, torch.log(torch.tensor([[0.5, 0.3, 0.0, 0.0]], dtype=torch.float64)),
...                   torch.log(torch.tensor([[0.4, 0.4, 0.0, 0.0]], dtype=torch.float64)))
>>> round(red.mu.tail.item(), 12), round(red.pi.tail.item(), 12)
(0.2, 0.2)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
from torch import Tensor

PROB_FLOOR = 1e-12
LOG_FLOOR = math.log(PROB_FLOOR)
MASS_TOLERANCE = 1e-4  # logged top-K mass above 1 + this counts as "mass overflow"
_LN2 = math.log(2.0)


def log1mexp(x: Tensor) -> Tensor:
    """``log(1 - exp(x))`` for ``x <= 0``, accurate at both ends (Mächler 2012).

    ``x >= 0`` gives ``-inf`` (no mass left), so an overflowing sum clamps the tail to 0.
    """
    x = torch.clamp(x, max=0.0)
    return torch.where(x > -_LN2, torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


@dataclass(frozen=True)
class Support:
    """``S = unique(topk_ids ∪ {k})`` laid out as ``(N, M)``, M = K + 1, column 0 = k."""

    ids: Tensor  # (N, M) int64, PAD (-1) or duplicates where not valid
    valid: Tensor  # (N, M) bool

    @cached_property
    def size(self) -> Tensor:
        """m = |S| per token, (N,) int64 (cached: several slopes and the masks need it)."""
        return self.valid.sum(-1)


def build_support(token_id: Tensor, topk_ids: Tensor) -> Support:
    """Support of every token from the sampled ids ``(N,)`` and top-K ids ``(N, K)``.

    Entries ``< 0`` are padding. A top-K entry equal to k, or to an earlier entry, is
    marked invalid, so both top-K conventions (plus_sampled, replace_last) give the same S.
    """
    topk = topk_ids.long()
    ids = torch.cat([token_id.long()[:, None], topk], dim=1)  # (N, M)
    valid_topk = (topk >= 0) & ~_repeats(topk) & (topk != ids[:, :1])
    return Support(ids=ids, valid=torch.cat([ids[:, :1] >= 0, valid_topk], dim=1))


def _sorted_rows(x: Tensor) -> Tensor:
    """Each row of ``x`` ``(N, K)`` sorted ascending.

    On CPU numpy's SIMD sort is ~6x faster than ``torch.sort`` on rows this short
    (benchmarks/README.md); the data stay put, ``from_numpy`` shares memory.
    """
    if x.device.type == "cpu":
        return torch.from_numpy(np.sort(x.numpy(), axis=1))
    return torch.sort(x, dim=1).values


def _repeats(topk: Tensor) -> Tensor:
    """``(N, K)`` bool: True at every occurrence of an id after its first in the row."""
    srt = _sorted_rows(topk)
    rows = ((srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)).any(1)  # (N,) has a repeat
    repeat = torch.zeros_like(topk, dtype=torch.bool)
    if rows.any():  # rare (validated logs have none): a stable sort puts first occurrences first
        dup = topk[rows]
        srt, order = torch.sort(dup, dim=1, stable=True)
        repeat[rows] = torch.zeros_like(dup, dtype=torch.bool).scatter_(
            1, order[:, 1:], srt[:, 1:] == srt[:, :-1])
    return repeat


def gather_support_logprobs(support: Support, logp_k: Tensor, topk_logprobs: Tensor) -> Tensor:
    """Log-probs on the support ``(N, M)`` from log p(k) ``(N,)`` and top-K log-probs ``(N, K)``.

    Invalid slots hold ``-inf``; k's value always comes from ``logp_k``.
    """
    lp = torch.cat([logp_k.double()[:, None], topk_logprobs.double()], dim=1)  # a new tensor
    return lp.masked_fill_(~support.valid, -math.inf)


@dataclass(frozen=True)
class Reduced:
    """One distribution over ``S ∪ {tail}``: probabilities and log-probabilities."""

    p: Tensor  # (N, M) float64, 0 where invalid
    logp: Tensor  # (N, M) float64, -inf where invalid
    tail: Tensor  # (N,) float64, in [0, 1]
    log_tail: Tensor  # (N,) float64
    mass: Tensor  # (N,) float64, Σ_{i∈S} p_i as logged (may exceed 1)

    @property
    def p_k(self) -> Tensor:
        return self.p[:, 0]

    @property
    def logp_k(self) -> Tensor:
        return self.logp[:, 0]


def reduce_logprobs(logp_s: Tensor, log_z: Tensor | None = None) -> Reduced:
    """Reduced distribution from log-probs on S ``(N, M)`` (``-inf`` where invalid).

    With ``log_z`` (N,) the inputs are logits and are normalised by it (replay path).
    The tail is ``log1mexp(log Σ_S p)`` in log space, never ``log(1 − Σ)``; a logged mass
    above 1 gives a tail of exactly 0.
    """
    logp_s = logp_s.double()
    if log_z is not None:
        logp_s = logp_s - log_z.double()[:, None]
    p = torch.exp(logp_s)
    # log Σ_S p = m + log1p(Σ_{i≠argmax} p_i / p_max): exact when one atom dominates,
    # where both log(Σ p) and 1 − Σ p lose the tail's leading digits.
    # The ratios come from exp(logp − max), not p / p_max: below log p ≈ −745 every p_i
    # underflows to 0 and exp(−max) to inf, and 0·inf was NaN.
    top, arg = logp_s.max(-1, keepdim=True)
    rest = torch.exp(logp_s - top).scatter_(1, arg, 0.0).sum(-1)
    lse = top[:, 0] + torch.log1p(rest)
    lse = torch.where(torch.isfinite(top[:, 0]), lse, top[:, 0])  # empty support: -inf
    log_tail = log1mexp(lse)
    mass = torch.exp(lse)
    return Reduced(p=p, logp=logp_s, tail=torch.exp(log_tail), log_tail=log_tail, mass=mass)


@dataclass(frozen=True)
class ReducedPair:
    """Behaviour µ and training π on one support; ``m`` is |S|, ``overflow`` flags µ mass > 1."""

    support: Support
    mu: Reduced
    pi: Reduced

    @property
    def m(self) -> Tensor:
        return self.support.size

    @property
    def overflow(self) -> Tensor:
        return self.mu.mass > 1.0 + MASS_TOLERANCE

    # Intermediates shared by several divergences and slopes, computed once per pair.
    @cached_property
    def diff(self) -> Tensor:
        """``π_i − µ_i`` on S, (N, M)."""
        return self.pi.p - self.mu.p

    @cached_property
    def sigma(self) -> Tensor:
        """``sign(π_i − µ_i)`` on S, (N, M); 0 where equal or invalid."""
        return torch.sign(self.diff)

    @cached_property
    def pi_diff_others(self) -> Tensor:
        """``Σ_{i∈S, i≠k} π_i (π_i − µ_i)``, (N,): the KL slopes' head sum."""
        return (self.pi.p[:, 1:] * self.diff[:, 1:]).sum(-1)

    @cached_property
    def sigma_pi_others(self) -> Tensor:
        """``σ_i π_i`` for ``i∈S, i≠k``, (N, M − 1): shared by every TV slope."""
        return self.sigma[:, 1:] * self.pi.p[:, 1:]

    @cached_property
    def pi_sq_others(self) -> Tensor:
        """``Σ_{i∈S, i≠k} π_i²``, (N,)."""
        pi_o = self.pi.p[:, 1:]
        return (pi_o * pi_o).sum(-1)


def reduce_pair(support: Support, logp_mu_s: Tensor, logp_pi_s: Tensor) -> ReducedPair:
    """Pair the reduced µ and π given their log-probs on ``support`` (both ``(N, M)``)."""
    invalid = ~support.valid
    mask = lambda lp: lp.double().masked_fill(invalid, -math.inf)  # noqa: E731
    return ReducedPair(support, reduce_logprobs(mask(logp_mu_s)), reduce_logprobs(mask(logp_pi_s)))


def floored_log(logp: Tensor) -> Tensor:
    """Log-probabilities floored at log(1e-12), so ``0 · log 0`` terms vanish instead of NaN."""
    return torch.clamp(logp, min=LOG_FLOOR)
