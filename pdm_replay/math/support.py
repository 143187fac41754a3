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
>>> round(red.mu_tail.item(), 12), round(red.pi_tail.item(), 12)
(0.2, 0.2)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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

    @property
    def size(self) -> Tensor:
        """m = |S| per token, (N,) int64."""
        return self.valid.sum(-1)


def build_support(token_id: Tensor, topk_ids: Tensor) -> Support:
    """Support of every token from the sampled ids ``(N,)`` and top-K ids ``(N, K)``.

    Entries ``< 0`` are padding. A top-K entry equal to k, or to an earlier entry, is
    marked invalid, so both top-K conventions (plus_sampled, replace_last) give the same S.
    """
    ids = torch.cat([token_id[:, None], topk_ids], dim=1).long()  # (N, M)
    m = ids.shape[1]
    earlier = torch.ones(m, m, dtype=torch.bool, device=ids.device).tril(-1)  # (M, M) j < i
    dup = ((ids[:, :, None] == ids[:, None, :]) & earlier).any(-1)  # (N, M)
    return Support(ids=ids, valid=(ids >= 0) & ~dup)


def gather_support_logprobs(support: Support, logp_k: Tensor, topk_logprobs: Tensor) -> Tensor:
    """Log-probs on the support ``(N, M)`` from log p(k) ``(N,)`` and top-K log-probs ``(N, K)``.

    Invalid slots hold ``-inf``; k's value always comes from ``logp_k``.
    """
    lp = torch.cat([logp_k[:, None], topk_logprobs], dim=1).double()
    return lp.masked_fill(~support.valid, -math.inf)


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
    """Reduced distribution from log-probs on S ``(N, M)``.

    With ``log_z`` (N,) the inputs are logits and are normalised by it (replay path);
    the tail is ``log_z + log1mexp(LSE_S - log_z)`` in log space, never ``log(1 - Σ)``.
    """
    logp_s = logp_s.double()
    if log_z is not None:
        logp_s = logp_s - log_z.double()[:, None]
    lse = torch.logsumexp(logp_s, dim=-1)  # (N,) log Σ_S p
    log_tail = log1mexp(lse)
    p = torch.exp(logp_s)
    return Reduced(p=p, logp=logp_s, tail=torch.exp(log_tail), log_tail=log_tail,
                   mass=torch.exp(lse))


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


def reduce_pair(support: Support, logp_mu_s: Tensor, logp_pi_s: Tensor) -> ReducedPair:
    """Pair the reduced µ and π given their log-probs on ``support`` (both ``(N, M)``)."""
    mask = lambda lp: lp.double().masked_fill(~support.valid, -math.inf)  # noqa: E731
    return ReducedPair(support, reduce_logprobs(mask(logp_mu_s)), reduce_logprobs(mask(logp_pi_s)))


def floored_log(logp: Tensor) -> Tensor:
    """Log-probabilities floored at log(1e-12), so ``0 · log 0`` terms vanish instead of NaN."""
    return torch.clamp(logp, min=LOG_FLOOR)
