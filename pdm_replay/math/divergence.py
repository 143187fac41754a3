"""Proximity criteria (SPEC §2): top-K, binary and exact KL / TV. Pure torch, float64.

Examples
--------
Binary KL of µ_k = 0.5 against π_k = 0.25:
0.5·log(0.5/0.25) + 0.5·log(0.5/0.75) = 0.5·0.693147 − 0.5·0.405465 = 0.143841

>>> import torch
>>> lmu, lpi = torch.tensor([0.5]).log().double(), torch.tensor([0.25]).log().double()
>>> round(kl_binary(lmu, lpi).item(), 6), round(tv_binary(lmu, lpi).item(), 6)
(0.143841, 0.25)
"""

from __future__ import annotations

import torch
from torch import Tensor

from pdm_replay.math.support import ReducedPair, floored_log, log1mexp


def _kl_terms(p: Tensor, logp: Tensor, logq: Tensor) -> Tensor:
    """Elementwise ``p · (log p − log q)`` with logs floored at 1e-12 (0 where p = 0)."""
    return p * (floored_log(logp) - floored_log(logq))


def kl_topk(pair: ReducedPair) -> Tensor:
    """``Σ_{i∈S} µ_i log(µ_i/π_i) + µ_tail log(µ_tail/π_tail)``, (N,). Lower bound of full KL."""
    head = _kl_terms(pair.mu.p, pair.mu.logp, pair.pi.logp).sum(-1)
    return head + _kl_terms(pair.mu.tail, pair.mu.log_tail, pair.pi.log_tail)


def tv_topk(pair: ReducedPair) -> Tensor:
    """``½ (Σ_{i∈S} |µ_i − π_i| + |µ_tail − π_tail|)``, (N,)."""
    head = pair.diff.abs().sum(-1)
    return 0.5 * (head + (pair.mu.tail - pair.pi.tail).abs())


def kl_binary(logp_mu_k: Tensor, logp_pi_k: Tensor) -> Tensor:
    """KL over the two atoms ``{k, rest}`` from log µ_k, log π_k ``(N,)``."""
    mu_k = torch.exp(logp_mu_k.double()).clamp(max=1.0)
    # 1 − µ_k from log space, as kl_topk's tail: exact as µ_k → 1, and kl_binary equals
    # kl_topk bit for bit on a support S = {k}
    log_rest = log1mexp(logp_mu_k.double())
    rest = _kl_terms(torch.exp(log_rest), log_rest, log1mexp(logp_pi_k.double()))
    return _kl_terms(mu_k, logp_mu_k.double(), logp_pi_k.double()) + rest


def tv_binary(logp_mu_k: Tensor, logp_pi_k: Tensor) -> Tensor:
    """``|µ_k − π_k|``, (N,)."""
    return (torch.exp(logp_mu_k.double()) - torch.exp(logp_pi_k.double())).abs()


def kl_exact(logp_mu: Tensor, logp_pi: Tensor) -> Tensor:
    """Full-vocabulary ``Σ_i µ_i log(µ_i/π_i)`` from normalised log-probs ``(N, V)``."""
    return _kl_terms(torch.exp(logp_mu.double()), logp_mu.double(), logp_pi.double()).sum(-1)


def tv_exact(logp_mu: Tensor, logp_pi: Tensor) -> Tensor:
    """Full-vocabulary ``½ Σ_i |µ_i − π_i|`` from normalised log-probs ``(N, V)``."""
    return 0.5 * (torch.exp(logp_mu.double()) - torch.exp(logp_pi.double())).abs().sum(-1)
