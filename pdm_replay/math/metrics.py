"""All per-token statistics of tokens/v1 from one :class:`ReducedPair` or its sums (pure torch).

Examples
--------
>>> import torch
>>> from pdm_replay.math.support import build_support, reduce_pair
>>> s = build_support(torch.tensor([0]), torch.tensor([[1]]))
>>> lg = lambda *p: torch.tensor([p], dtype=torch.float64).log()
>>> st = token_stats(reduce_pair(s, lg(0.5, 0.3), lg(0.4, 0.4)), torch.tensor([1.0]), 10)
>>> round(st.ratio.item(), 12), round(st.tv_topk.item(), 12)
(0.8, 0.1)
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor

from pdm_replay.math import direction as dr
from pdm_replay.math import divergence as dv
from pdm_replay.math.certificates import certify, dkl_interval
from pdm_replay.math.sums import Pair, as_sums


@dataclass(frozen=True)
class TokenStats:
    """Per-token statistics, every field ``(N,)``; the inputs of every mask."""

    advantage: Tensor
    logp_behavior: Tensor
    logp_train: Tensor
    ratio: Tensor
    support_size: Tensor
    mu_tail: Tensor
    pi_tail: Tensor
    kl_topk: Tensor
    tv_topk: Tensor
    kl_binary: Tensor
    tv_binary: Tensor
    dkl_local: Tensor
    dkl_agg: Tensor
    dkl_uniform: Tensor
    dtv_agg: Tensor
    dtv_uniform: Tensor
    dkl_lo: Tensor
    dkl_hi: Tensor
    direction_certified: Tensor  # int8: certificates.AWAY / UNCERTAIN / TOWARD
    mass_overflow: Tensor

    def as_dict(self) -> dict[str, Tensor]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def token_stats(pair: Pair, advantage: Tensor, vocab_size: int,
                cap: Tensor | None = None) -> TokenStats:
    """Divergences, direction slopes and sign certificates of every token.

    ``advantage`` is ``(N,)``; ``cap`` ``(N,)`` bounds unseen µ_j (see
    :func:`~pdm_replay.math.certificates.unseen_cap`; None: only µ_tail bounds them).
    """
    pair = as_sums(pair)  # every criterion below runs on (N,) tensors
    logp_behavior, logp_train = pair.mu.logp_k, pair.pi.logp_k
    lo, hi = dkl_interval(pair, vocab_size, cap)
    return TokenStats(
        advantage=advantage.double(), logp_behavior=logp_behavior, logp_train=logp_train,
        ratio=torch.exp(logp_train - logp_behavior), support_size=pair.m,
        mu_tail=pair.mu.tail, pi_tail=pair.pi.tail,
        kl_topk=dv.kl_topk(pair), tv_topk=dv.tv_topk(pair),
        kl_binary=dv.kl_binary(logp_behavior, logp_train),
        tv_binary=dv.tv_binary(logp_behavior, logp_train),
        dkl_local=dr.dkl_local(pair), dkl_agg=dr.dkl_agg(pair),
        dkl_uniform=dr.dkl_uniform(pair, vocab_size), dtv_agg=dr.dtv_agg(pair),
        dtv_uniform=dr.dtv_uniform(pair, vocab_size), dkl_lo=lo, dkl_hi=hi,
        direction_certified=certify(lo, hi, advantage), mass_overflow=pair.overflow)
