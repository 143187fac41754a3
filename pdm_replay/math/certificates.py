"""Sign certificates: the interval the full-vocabulary Ḋ_kl must lie in, from the log alone.

With ``A = (π_k − µ_k) − Σ_{i∈S} π_i(π_i − µ_i)`` and the unseen tail term
``τ = Σ_{j∉S} π_j² − Σ_{j∉S} π_j µ_j``, Ḋ_kl = A − τ. Over the n − m unseen tokens,
``Σ π_j² ∈ [π_tail²/(n−m), π_tail²]`` and ``Σ π_j µ_j ∈ [0, π_tail·min(cap, µ_tail)]``,
where ``cap`` bounds every unseen µ_j: the smallest genuine logged top-K probability.
So ``Ḋ_kl ∈ [A − π_tail², A − π_tail²/(n−m) + π_tail·min(cap, µ_tail)]``.

Examples
--------
Hand-worked: S = {k, j}, µ = (0.5, 0.3 | tail 0.2), π = (0.4, 0.4 | tail 0.2), n = 4, no
cap. A = −0.1 − (0.4·−0.1 + 0.4·0.1) = −0.1; lo = −0.1 − 0.04 = −0.14;
hi = −0.1 − 0.04/2 + 0.2·0.2 = −0.08. With Â > 0 the whole interval has sign(Â)·Ḋ < 0:

>>> import torch
>>> from pdm_replay.math.support import build_support, reduce_pair
>>> s = build_support(torch.tensor([0]), torch.tensor([[1]]))
>>> lg = lambda *p: torch.tensor([p], dtype=torch.float64).log()
>>> lo, hi = dkl_interval(reduce_pair(s, lg(0.5, 0.3), lg(0.4, 0.4)), 4)
>>> round(lo.item(), 12), round(hi.item(), 12)
(-0.14, -0.08)
>>> CERT_LABELS[int(certify(lo, hi, torch.tensor([1.0])).item())]
'toward'
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from pdm_replay.math.direction import _safe_div, _unseen, dkl_head
from pdm_replay.math.sums import Pair, as_sums

AWAY, UNCERTAIN, TOWARD = 1, 0, -1
CERT_LABELS = {AWAY: "away", UNCERTAIN: "uncertain", TOWARD: "toward"}


def genuine_topk(topk_ids: Tensor, token_id: Tensor, top_k: int, convention: str) -> Tensor:
    """``(N, W)`` bool: logged top-K slots that are real top-K entries of µ.

    plus_sampled: the first ``top_k`` slots (an appended sampled token sits beyond them).
    replace_last: every slot except slot ``top_k − 1`` when it holds k (it may have been
    swapped in, so it bounds nothing).
    """
    col = torch.arange(topk_ids.shape[1], device=topk_ids.device)[None, :]
    valid = topk_ids >= 0
    if convention == "plus_sampled":
        return valid & (col < top_k)
    if convention == "replace_last":
        return valid & ~((col == top_k - 1) & (topk_ids == token_id[:, None]))
    raise ValueError(f"unknown top-K convention {convention!r}")


def unseen_cap(topk_logprobs: Tensor, genuine: Tensor) -> Tensor:
    """Upper bound ``(N,)`` on any unseen µ_j: min genuine top-K probability (inf if none)."""
    if topk_logprobs.shape[-1] == 0:  # nothing logged: nothing bounds the unseen tokens
        return torch.full(topk_logprobs.shape[:1], math.inf, dtype=torch.float64)
    # the min is exact in the logged dtype (float32): convert the (N,) result, not (N, K)
    lp = topk_logprobs.masked_fill(~genuine, math.inf)
    return torch.exp(lp.amin(-1).double())


def dkl_interval(pair: Pair, vocab_size: int, cap: Tensor | None = None
                 ) -> tuple[Tensor, Tensor]:
    """``(lo, hi)``, each ``(N,)``: the feasible range of the full-vocabulary Ḋ_kl."""
    pair = as_sums(pair)
    a = dkl_head(pair)  # (π_k − µ_k) − Σ_S π(π − µ), kept exact as π_k → 1
    pi_t, mu_t = pair.pi.tail, pair.mu.tail
    bound = mu_t if cap is None else torch.minimum(cap.double(), mu_t)
    sq_min = _safe_div(pi_t * pi_t, _unseen(pair, vocab_size))
    return a - pi_t * pi_t, a - sq_min + pi_t * bound


def certify(lo: Tensor, hi: Tensor, advantage: Tensor) -> Tensor:
    """``(N,)`` int8: AWAY if sign(Â)·Ḋ > 0 over all of [lo, hi], TOWARD if < 0, else
    UNCERTAIN (also for Â = 0, whose step moves nothing)."""
    s = torch.sign(advantage.double())
    away = ((s > 0) & (lo > 0)) | ((s < 0) & (hi < 0))
    toward = ((s > 0) & (hi < 0)) | ((s < 0) & (lo > 0))
    out = torch.zeros_like(s, dtype=torch.int8)
    return out.masked_fill(away, AWAY).masked_fill(toward, TOWARD)
