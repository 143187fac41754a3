"""Per-token sums over the support S: all the divergences and slopes need of ``(N, M)`` data.

Every proximity and direction criterion of SPEC §2–§3 is a function of a few values of
the sampled token k, the two tails and a handful of sums over S. :func:`pair_sums` reduces
a :class:`~pdm_replay.math.support.ReducedPair` to those ``(N,)`` tensors once; the
criteria in :mod:`~pdm_replay.math.divergence` and :mod:`~pdm_replay.math.direction` then
run on ``(N,)`` tensors only. So a long log can be reduced in small, cache-sized chunks of
tokens and the per-token math run once over the concatenation (:meth:`PairSums.cat`).

Examples
--------
S = {k, j} plus tail, µ = (0.5, 0.3 | 0.2), π = (0.4, 0.4 | 0.2):
Σ_{i≠k} π_i(π_i − µ_i) = 0.4·0.1 = 0.04 and Σ_S |π_i − µ_i| = 0.1 + 0.1 = 0.2.

>>> import torch
>>> from pdm_replay.math.support import build_support, reduce_pair
>>> s = build_support(torch.tensor([0]), torch.tensor([[1]]))
>>> lg = lambda *p: torch.tensor([p], dtype=torch.float64).log()
>>> sums = pair_sums(reduce_pair(s, lg(0.5, 0.3), lg(0.4, 0.4)))
>>> round(sums.pi_diff_others.item(), 12), round(sums.tv_head.item(), 12)
(0.04, 0.2)
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

import torch
from torch import Tensor

from pdm_replay.math.support import Reduced, ReducedPair, kl_terms, mass_overflow


@dataclass(frozen=True)
class SideSums:
    """One distribution's per-token values, every field ``(N,)`` float64 (as :class:`Reduced`)."""

    p_k: Tensor
    logp_k: Tensor
    tail: Tensor
    log_tail: Tensor
    mass: Tensor

    @classmethod
    def of(cls, r: Reduced) -> "SideSums":
        return cls(p_k=r.p_k.contiguous(), logp_k=r.logp_k.contiguous(), tail=r.tail,
                   log_tail=r.log_tail, mass=r.mass)


@dataclass(frozen=True)
class PairSums:
    """µ and π reduced to per-token values and sums over S; every tensor ``(N,)``."""

    mu: SideSums
    pi: SideSums
    m: Tensor  # |S|, int64
    sigma_k: Tensor  # sign(π_k − µ_k)
    kl_head: Tensor  # Σ_{i∈S} µ_i (log µ_i − log π_i), logs floored at 1e-12
    tv_head: Tensor  # Σ_{i∈S} |π_i − µ_i|
    pi_diff_others: Tensor  # Σ_{i∈S, i≠k} π_i (π_i − µ_i): the KL slopes' head sum
    pi_sq_others: Tensor  # Σ_{i∈S, i≠k} π_i²
    sigma_pi_others: Tensor  # Σ_{i∈S, i≠k} σ_i π_i, σ_i = sign(π_i − µ_i)
    sigma_pi_sq_others: Tensor  # Σ_{i∈S, i≠k} σ_i π_i²

    @property
    def overflow(self) -> Tensor:
        """``(N,)`` bool: the logged µ mass on S exceeds 1 beyond rounding."""
        return mass_overflow(self.mu.mass)

    @staticmethod
    def cat(parts: Sequence["PairSums"]) -> "PairSums":
        """The sums of consecutive token chunks, concatenated in order."""
        def side(name: str) -> SideSums:
            return SideSums(**{f.name: torch.cat([getattr(getattr(p, name), f.name)
                                                  for p in parts]) for f in fields(SideSums)})
        rest = {f.name: torch.cat([getattr(p, f.name) for p in parts])
                for f in fields(PairSums) if f.name not in ("mu", "pi")}
        return PairSums(mu=side("mu"), pi=side("pi"), **rest)


def _without_k(x: Tensor) -> Tensor:
    """The temporary ``x`` ``(N, M)`` with column 0 (k) zeroed in place, for sums over i ≠ k.

    A contiguous (N, M) row sum plus an (N,) write is several times faster than summing
    the strided slice ``x[:, 1:]``.
    """
    x[:, 0] = 0.0
    return x


def pair_sums(pair: ReducedPair) -> PairSums:
    """Reduce ``pair`` (tensors ``(N, M)``) to the ``(N,)`` values of :class:`PairSums`."""
    mu, pi = pair.mu, pair.pi
    diff = pi.p - mu.p  # (N, M), 0 where invalid
    sigma = torch.sign(diff)
    sigma_pi = _without_k(sigma * pi.p)
    return PairSums(
        mu=SideSums.of(mu), pi=SideSums.of(pi), m=pair.m, sigma_k=sigma[:, 0].contiguous(),
        kl_head=kl_terms(mu.p, mu.logp, pi.logp).sum(-1), tv_head=diff.abs().sum(-1),
        pi_diff_others=_without_k(pi.p * diff).sum(-1),
        pi_sq_others=_without_k(pi.p * pi.p).sum(-1),
        sigma_pi_others=sigma_pi.sum(-1), sigma_pi_sq_others=sigma_pi.mul_(pi.p).sum(-1))


Pair = ReducedPair | PairSums  # every criterion takes either; a pair reduces to its sums once


def as_sums(pair: Pair) -> PairSums:
    """``pair`` as :class:`PairSums`; a :class:`ReducedPair`'s are computed once and kept on
    it (in its ``__dict__``, as ``functools.cached_property`` would: the pair is frozen)."""
    if isinstance(pair, PairSums):
        return pair
    cached = pair.__dict__.get("_sums")
    if cached is None:
        cached = pair.__dict__["_sums"] = pair_sums(pair)
    return cached
