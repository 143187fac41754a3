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

from pdm_replay.math.sums import Pair, as_sums


def _unseen(pair: Pair, vocab_size: int) -> Tensor:
    """n − m per token, (N,) float64 (0 when the support covers the vocabulary)."""
    return (vocab_size - as_sums(pair).m).double().clamp(min=0.0)


def _safe_div(x: Tensor, d: Tensor) -> Tensor:
    """``x / d`` with 0 where ``d == 0`` (uniform tail over no unseen tokens contributes 0)."""
    return torch.where(d > 0, x / d.clamp(min=1.0), torch.zeros_like(x))


def dkl_local(pair: Pair) -> Tensor:
    """Local term ``π_k − µ_k`` (N,): sign equals sign(r − 1)."""
    s = as_sums(pair)
    return s.pi.p_k - s.mu.p_k


def _one_minus_pi_k(logp_train: Tensor) -> Tensor:
    """``1 − π_k`` (N,) from log π_k: keeps its digits when π_k → 1 (``1 − exp`` would not)."""
    return -torch.expm1(logp_train.double())


def dkl_head(pair: Pair) -> Tensor:
    """``(π_k − µ_k) − Σ_{i∈S} π_i (π_i − µ_i)`` (N,), local term minus global head.

    Evaluated as ``(π_k − µ_k)(1 − π_k) − Σ_{i∈S, i≠k} π_i (π_i − µ_i)``: the same algebra,
    but without canceling two O(1) terms when π_k → 1 (where the result is O(1 − π_k)).
    """
    s = as_sums(pair)
    return dkl_local(s) * _one_minus_pi_k(s.pi.logp_k) - s.pi_diff_others


def dkl_tail_term(pair: Pair) -> Tensor:
    """``π_tail (π_tail − µ_tail)`` (N,): the tail as one atom."""
    s = as_sums(pair)
    return s.pi.tail * (s.pi.tail - s.mu.tail)


def dkl_agg(pair: Pair) -> Tensor:
    """Ḋ_kl with the aggregated tail; exactly Ḋ of the reduced softmax over S ∪ {tail}. (N,)"""
    return dkl_head(pair) - dkl_tail_term(pair)


def dkl_uniform(pair: Pair, vocab_size: int) -> Tensor:
    """Ḋ_kl with the tail spread evenly over the n − m unseen tokens. (N,)"""
    tail = _safe_div(dkl_tail_term(pair), _unseen(pair, vocab_size))
    return dkl_head(pair) - tail


def dkl_from_sums(pi_k: Tensor, mu_k: Tensor, sum_pi2: Tensor, sum_pi_mu: Tensor) -> Tensor:
    """Exact Ḋ_kl = ``(π_k − µ_k) − (Σπ² − Σπµ)`` from full-vocabulary sums (N,).

    The two brackets cancel to O(1 − π_k) when π_k → 1, so the result is exact only to
    ~1e-16 absolute; :func:`dkl_exact` avoids that given full log-probs.
    """
    return (pi_k - mu_k) - (sum_pi2 - sum_pi_mu)


def dkl_exact(logp_behavior: Tensor, logp_train: Tensor, token_id: Tensor) -> Tensor:
    """Exact Ḋ_kl from full-vocabulary log-probs ``(N, V)`` and sampled ids ``(N,)``."""
    mu, pi = torch.exp(logp_behavior.double()), torch.exp(logp_train.double())
    idx = token_id.long()[:, None]
    pi_k, mu_k = pi.gather(1, idx)[:, 0], mu.gather(1, idx)[:, 0]
    is_k = torch.zeros_like(pi, dtype=torch.bool).scatter_(1, idx, True)
    others = (pi * (pi - mu)).masked_fill(is_k, 0.0).sum(-1)  # as in dkl_head
    return (pi_k - mu_k) * _one_minus_pi_k(logp_train.double().gather(1, idx)[:, 0]) - others


def _tv_slope(sigma_k: Tensor, pi_k: Tensor, q_k: Tensor, s2: Tensor) -> tuple[Tensor, Tensor]:
    """k's term ``σ_k π_k w_k`` and ``v̄ = Σ_j π_j v_j``, each (N,), for Ḋ_tv below.

    ``½ Σ_i σ_i π_i w_i`` with ``w_i = δ_ik − π_i − v̄`` is SPEC's
    ``½ [σ_k π_k + Σ_i σ_i π_i (c − π_i − π_k)]``. With ``q_k = 1 − π_k`` and
    ``s2 = Σ_{i≠k} π_i²``: ``v̄ = π_k − c = π_k q_k − s2`` and ``w_k = q_k² + s2``. Written so,
    nothing cancels when π_k → 1, where Ḋ_tv is O(q_k²) and ``c − 2π_k + 1`` is pure
    rounding (it flipped signs at q_k ~ 1e-8).
    """
    return sigma_k * pi_k * (q_k * q_k + s2), pi_k * q_k - s2


def _tv_tail_atoms(pair: Pair, count: Tensor) -> Tensor:
    """Ḋ_tv on S plus ``count`` (N,) tail atoms of mass π_tail/count each (none where 0)."""
    s = as_sums(pair)
    pi_atom = _safe_div(s.pi.tail, count)
    s2 = s.pi_sq_others + count * pi_atom * pi_atom
    k_term, vbar = _tv_slope(s.sigma_k, s.pi.p_k, _one_minus_pi_k(s.pi.logp_k), s2)
    head = -(s.sigma_pi_sq_others + vbar * s.sigma_pi_others)  # Σ_{i≠k} σ_i π_i (−π_i − v̄)
    sigma_t = torch.sign(s.pi.tail - s.mu.tail)
    tail = sigma_t * count * pi_atom * (-pi_atom - vbar)
    return 0.5 * (k_term + head + tail)


def dtv_agg(pair: Pair) -> Tensor:
    """Ḋ_tv on S ∪ {tail}, the tail one atom. (N,)"""
    return _tv_tail_atoms(pair, torch.ones_like(as_sums(pair).pi.tail))


def dtv_uniform(pair: Pair, vocab_size: int) -> Tensor:
    """Ḋ_tv with n − m tail atoms of mass π_tail/(n − m), µ_tail/(n − m). (N,)"""
    return _tv_tail_atoms(pair, _unseen(pair, vocab_size))


def ratio_slope(logp_behavior: Tensor, logp_train: Tensor) -> Tensor:
    """``r − 1`` (N,): the ratio direction's slope; ``sign(Â)·(r−1) > 0`` means away."""
    return torch.expm1(logp_train.double() - logp_behavior.double())
