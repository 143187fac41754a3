"""Top-K support construction and reduced distributions over ``S ∪ {tail}`` (SPEC §1).

Pure torch, float64, vectorized over N tokens. Column 0 of every support is the sampled
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

from pdm_replay.math.rows import take_rows

PROB_FLOOR = 1e-12
LOG_FLOOR = math.log(PROB_FLOOR)
MASS_TOLERANCE = 1e-4  # logged top-K mass above 1 + this counts as "mass overflow"
_LN2 = math.log(2.0)


def mass_overflow(mass: Tensor | np.ndarray) -> Tensor | np.ndarray:
    """Where a logged mass on S ``(N,)`` exceeds 1 by more than rounding (``MASS_TOLERANCE``)."""
    return mass > 1.0 + MASS_TOLERANCE


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

    def take(self, index: slice | Tensor) -> "Support":
        """The support of some of the tokens (:func:`~pdm_replay.math.rows.take_rows`)."""
        return take_rows(self, index)

    @cached_property
    def size(self) -> Tensor:
        """m = |S| per token, (N,) int64 (cached: several slopes and the masks need it)."""
        return self.valid.sum(-1)

    @cached_property
    def invalid(self) -> Tensor:
        """``~valid`` (N, M), cached: every gather onto the support masks with it."""
        return ~self.valid


def build_support(token_id: Tensor, topk_ids: Tensor, *, known_unique: bool = False
                  ) -> Support:
    """Support of every token from the sampled ids ``(N,)`` and top-K ids ``(N, K)``.

    Entries ``< 0`` are padding. A top-K entry equal to k, or to an earlier entry, is
    marked invalid, so both top-K conventions (plus_sampled, replace_last) give the same S.
    ``known_unique=True`` promises that no top-K row repeats an id (``validate`` rejects
    such rows) and skips the search for repeats, a row sort.
    """
    n, k = topk_ids.shape
    ids = torch.empty((n, k + 1), dtype=torch.int64, device=topk_ids.device)  # (N, M)
    ids[:, 0] = token_id
    ids[:, 1:] = topk_ids
    valid = ids >= 0
    valid[:, 1:] &= ids[:, 1:] != ids[:, :1]
    repeat = None if known_unique else _repeats(topk_ids)
    if repeat is not None:
        valid[:, 1:] &= ~repeat
    return Support(ids=ids, valid=valid)


def _repeat_rows(topk: Tensor) -> Tensor | None:
    """``(N,)`` bool: rows of ``topk`` ``(N, K)`` with an id twice; None when there are none.

    On CPU numpy's SIMD sort is ~6x faster than ``torch.sort`` on rows this short, and one
    whole-array ``any`` settles the common case (validated logs have no repeats).
    """
    if topk.device.type == "cpu":
        srt = np.sort(topk.numpy(), axis=1)
        dup = (srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)
        return torch.from_numpy(dup.any(1)) if dup.any() else None
    srt = torch.sort(topk, dim=1).values
    rows = ((srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)).any(1)
    return rows if bool(rows.any()) else None


def _repeats(topk: Tensor) -> Tensor | None:
    """``(N, K)`` bool: True at every occurrence of an id after its first in the row;
    None when no row repeats an id."""
    rows = _repeat_rows(topk)
    if rows is None:
        return None
    # rare: a stable sort of the affected rows puts first occurrences first
    dup = topk[rows].long()
    srt, order = torch.sort(dup, dim=1, stable=True)
    repeat = torch.zeros(topk.shape, dtype=torch.bool, device=topk.device)
    repeat[rows] = torch.zeros_like(dup, dtype=torch.bool).scatter_(
        1, order[:, 1:], srt[:, 1:] == srt[:, :-1])
    return repeat


def gather_support_logprobs(support: Support, logp_k: Tensor, topk_logprobs: Tensor,
                            out: Tensor | None = None) -> Tensor:
    """Log-probs on the support ``(N, M)`` from log p(k) ``(N,)`` and top-K log-probs ``(N, K)``.

    Invalid slots hold ``-inf``; k's value always comes from ``logp_k``. Written into
    ``out`` (float64 ``(N, M)``) when given, else into a new tensor.
    """
    lp = (torch.empty(support.ids.shape, dtype=torch.float64, device=support.ids.device)
          if out is None else out)
    lp[:, 0] = logp_k
    lp[:, 1:] = topk_logprobs  # converts float32 logs to float64 in the same pass
    return lp.masked_fill_(support.invalid, -math.inf)


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

    def take(self, index: slice | Tensor) -> "Reduced":
        """The same distribution for some of the tokens (a slice: views, no copy)."""
        return take_rows(self, index)


def reduce_logprobs(logp_s: Tensor, log_z: Tensor | None = None) -> Reduced:
    """Reduced distribution from log-probs on S ``(N, M)`` (``-inf`` where invalid).

    With ``log_z`` (N,) the inputs are logits and are normalized by it (replay path).
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
    # underflows to 0 and exp(−max) to inf, and 0·inf was NaN; near the max they are also
    # more accurate (checked against 60-digit arithmetic).
    top, arg = logp_s.max(-1, keepdim=True)
    rest = torch.exp(logp_s - top).scatter_(1, arg, 0.0).sum(-1)
    top = top[:, 0]
    lse = top + torch.log1p(rest)
    lse = torch.where(torch.isfinite(top), lse, top)  # empty support: -inf
    log_tail = log1mexp(lse)
    mass = torch.exp(lse)
    return Reduced(p=p, logp=logp_s, tail=torch.exp(log_tail), log_tail=log_tail, mass=mass)


@dataclass(frozen=True)
class ReducedPair:
    """Behavior µ and training π on one support; ``m`` is |S|, ``overflow`` flags µ mass > 1."""

    support: Support
    mu: Reduced
    pi: Reduced

    @property
    def m(self) -> Tensor:
        return self.support.size

    @property
    def overflow(self) -> Tensor:
        return mass_overflow(self.mu.mass)


def reduce_logged_pair(support: Support, mu: tuple[Tensor, Tensor], pi: tuple[Tensor, Tensor]
                       ) -> ReducedPair:
    """Pair from logged ``(log p(k) (N,), top-K log-probs (N, K))`` of µ and of π.

    Both are gathered into one ``(2N, M)`` tensor and reduced together: one call per
    operation instead of two, which matters on the small chunks the log-only path uses.
    """
    n, m = support.ids.shape
    both = torch.empty((2, n, m), dtype=torch.float64, device=support.ids.device)
    gather_support_logprobs(support, *mu, out=both[0])
    gather_support_logprobs(support, *pi, out=both[1])
    red = reduce_logprobs(both.view(2 * n, m))
    return ReducedPair(support, red.take(slice(0, n)), red.take(slice(n, 2 * n)))


def reduce_pair(support: Support, logp_behavior_s: Tensor, logp_train_s: Tensor) -> ReducedPair:
    """Pair the reduced µ and π given their log-probs on ``support`` (both ``(N, M)``)."""
    def mask(lp):
        return lp.double().masked_fill(support.invalid, -math.inf)
    return ReducedPair(support, reduce_logprobs(mask(logp_behavior_s)),
                       reduce_logprobs(mask(logp_train_s)))


def floored_log(logp: Tensor) -> Tensor:
    """Log-probabilities floored at log(1e-12), so ``0 · log 0`` terms vanish instead of NaN."""
    return torch.clamp(logp, min=LOG_FLOOR)


def kl_terms(p: Tensor, logp: Tensor, logq: Tensor) -> Tensor:
    """Elementwise ``p · (log p − log q)`` with logs floored at 1e-12 (0 where p = 0)."""
    return p * (floored_log(logp) - floored_log(logq))
