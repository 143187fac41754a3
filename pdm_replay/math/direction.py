"""Direction criteria (SPEC §3): Ḋ = dD(µ‖softmax(z + ηv))/dη at η = 0, v = e_k − π.

The ratio criterion is ``sign(Â)·(r − 1)``; the predictive criterion is ``sign(Â)·Ḋ``.
Estimators of the global term from the reduced support: aggregated tail (one atom) and
uniform tail (n − m atoms of equal mass); exact forms take full-vocabulary quantities.

Examples
--------
Hand-worked KL case, S = {k, j} plus tail, µ = (0.5, 0.3, 0.2), π = (0.4, 0.4, 0.2):
local = 0.4 − 0.5 = −0.1; global = 0.4·(−0.1) + 0.4·0.1 + 0.2·0 = 0, so Ḋ_agg = −0.1.

>>> import torch
>>> from pdm_replay.math.support import build_support, reduce_pair
>>> s = build_support(torch.tensor([0]), torch.tensor([[1]]))
>>> lg = lambda *p: torch.tensor([p], dtype=torch.float64).log()
>>> pair = reduce_pair(s, lg(0.5, 0.3), lg(0.4, 0.4))
>>> round(dkl_agg(pair).item(), 12)
-0.1
"""

from __future__ import annotations

import torch
from torch import Tensor

from pdm_replay.math.support import ReducedPair


def _unseen(pair: ReducedPair, vocab_size: int) -> Tensor:
    """n − m per token, (N,) float64 (0 when the support covers the vocabulary)."""
    return (vocab_size - pair.m).double().clamp(min=0.0)


def _safe_div(x: Tensor, d: Tensor) -> Tensor:
    """``x / d`` with 0 where ``d == 0`` (uniform tail over no unseen tokens contributes 0)."""
    return torch.where(d > 0, x / d.clamp(min=1.0), torch.zeros_like(x))


def dkl_local(pair: ReducedPair) -> Tensor:
    """Local term ``π_k − µ_k`` (N,): sign equals sign(r − 1)."""
    return pair.pi.p_k - pair.mu.p_k


def dkl_global_head(pair: ReducedPair) -> Tensor:
    """``Σ_{i∈S} π_i (π_i − µ_i)`` (N,)."""
    return (pair.pi.p * pair.diff).sum(-1)


def dkl_tail_term(pair: ReducedPair) -> Tensor:
    """``π_tail (π_tail − µ_tail)`` (N,): the tail as one atom."""
    return pair.pi.tail * (pair.pi.tail - pair.mu.tail)


def dkl_agg(pair: ReducedPair) -> Tensor:
    """Ḋ_kl with the aggregated tail; exactly Ḋ of the reduced softmax over S ∪ {tail}. (N,)"""
    return dkl_local(pair) - dkl_global_head(pair) - dkl_tail_term(pair)


def dkl_uniform(pair: ReducedPair, vocab_size: int) -> Tensor:
    """Ḋ_kl with the tail spread evenly over the n − m unseen tokens. (N,)"""
    tail = _safe_div(dkl_tail_term(pair), _unseen(pair, vocab_size))
    return dkl_local(pair) - dkl_global_head(pair) - tail


def dkl_from_sums(pi_k: Tensor, mu_k: Tensor, sum_pi2: Tensor, sum_pi_mu: Tensor) -> Tensor:
    """Exact Ḋ_kl = ``(π_k − µ_k) − (Σπ² − Σπµ)`` from full-vocabulary sums (N,)."""
    return (pi_k - mu_k) - (sum_pi2 - sum_pi_mu)


def dkl_exact(logp_mu: Tensor, logp_pi: Tensor, token_id: Tensor) -> Tensor:
    """Exact Ḋ_kl from full-vocabulary log-probs ``(N, V)`` and sampled ids ``(N,)``."""
    mu, pi = torch.exp(logp_mu.double()), torch.exp(logp_pi.double())
    idx = token_id.long()[:, None]
    return dkl_from_sums(pi.gather(1, idx)[:, 0], mu.gather(1, idx)[:, 0],
                         (pi * pi).sum(-1), (pi * mu).sum(-1))


def _tv_core(pi: Tensor, sigma: Tensor, pi_k: Tensor, sigma_k: Tensor, c: Tensor) -> Tensor:
    """``½ [σ_k π_k + Σ_i σ_i π_i (c − π_i − π_k)]`` over atoms ``(N, A)``."""
    return 0.5 * (sigma_k * pi_k + (sigma * pi * (c[:, None] - pi - pi_k[:, None])).sum(-1))


def dtv_agg(pair: ReducedPair) -> Tensor:
    """Ḋ_tv on S ∪ {tail}, the tail one atom. (N,)"""
    pi_t = pair.pi.tail
    c = pair.pi_sq_head + pi_t * pi_t
    sigma_t = torch.sign(pi_t - pair.mu.tail)
    head = _tv_core(pair.pi.p, pair.sigma, pair.pi.p_k, pair.sigma[:, 0], c)
    return head + 0.5 * sigma_t * pi_t * (c - pi_t - pair.pi.p_k)


def dtv_uniform(pair: ReducedPair, vocab_size: int) -> Tensor:
    """Ḋ_tv with n − m tail atoms of mass π_tail/(n − m), µ_tail/(n − m). (N,)"""
    pi_t = pair.pi.tail
    unseen = _unseen(pair, vocab_size)
    pi_atom = _safe_div(pi_t, unseen)  # mass of one unseen token
    c = pair.pi_sq_head + pi_t * pi_atom
    head = _tv_core(pair.pi.p, pair.sigma, pair.pi.p_k, pair.sigma[:, 0], c)
    sigma_t = torch.sign(pi_t - pair.mu.tail)
    tail = sigma_t * pi_t * (c - pi_atom - pair.pi.p_k)
    return head + 0.5 * torch.where(unseen > 0, tail, torch.zeros_like(tail))


def dtv_exact(logp_mu: Tensor, logp_pi: Tensor, token_id: Tensor) -> Tensor:
    """Exact Ḋ_tv from full-vocabulary log-probs ``(N, V)`` and sampled ids ``(N,)``."""
    mu, pi = torch.exp(logp_mu.double()), torch.exp(logp_pi.double())
    sigma = torch.sign(pi - mu)
    idx = token_id.long()[:, None]
    return _tv_core(pi, sigma, pi.gather(1, idx)[:, 0], sigma.gather(1, idx)[:, 0],
                    (pi * pi).sum(-1))


def ratio_slope(logp_mu_k: Tensor, logp_pi_k: Tensor) -> Tensor:
    """``r − 1`` (N,): the ratio direction's slope; ``sign(Â)·(r−1) > 0`` means away."""
    return torch.expm1(logp_pi_k.double() - logp_mu_k.double())
