"""Proximity criteria (SPEC §2): top-K, binary and exact KL / TV. Pure torch, float64.

Examples
--------
Binary KL of µ_k = 0.5 against π_k = 0.25:
0.5·log(0.5/0.25) + 0.5·log(0.5/0.75) = 0.5·0.693147 − 0.5·0.405465 = 0.143841

>>> import torch
>>> logp_behavior = torch.tensor([0.5]).log().double()
>>> logp_train = torch.tensor([0.25]).log().double()
>>> kl, tv = kl_binary(logp_behavior, logp_train), tv_binary(logp_behavior, logp_train)
>>> round(kl.item(), 6), round(tv.item(), 6)
(0.143841, 0.25)
"""

from __future__ import annotations

import torch
from torch import Tensor

from pdm_replay.math.sums import Pair, as_sums
from pdm_replay.math.support import kl_terms, log1mexp


def kl_topk(pair: Pair) -> Tensor:
    """``Σ_{i∈S} µ_i log(µ_i/π_i) + µ_tail log(µ_tail/π_tail)``, (N,). Lower bound of full KL."""
    s = as_sums(pair)
    return s.kl_head + kl_terms(s.mu.tail, s.mu.log_tail, s.pi.log_tail)


def tv_topk(pair: Pair) -> Tensor:
    """``½ (Σ_{i∈S} |µ_i − π_i| + |µ_tail − π_tail|)``, (N,)."""
    s = as_sums(pair)
    return 0.5 * (s.tv_head + (s.mu.tail - s.pi.tail).abs())


def kl_binary(logp_behavior: Tensor, logp_train: Tensor) -> Tensor:
    """KL over the two atoms ``{k, rest}`` from log µ_k, log π_k ``(N,)``."""
    mu_k = torch.exp(logp_behavior.double()).clamp(max=1.0)
    # 1 − µ_k from log space, as kl_topk's tail: exact as µ_k → 1, and kl_binary equals
    # kl_topk bit for bit on a support S = {k}
    log_rest = log1mexp(logp_behavior.double())
    rest = kl_terms(torch.exp(log_rest), log_rest, log1mexp(logp_train.double()))
    return kl_terms(mu_k, logp_behavior.double(), logp_train.double()) + rest


def tv_binary(logp_behavior: Tensor, logp_train: Tensor) -> Tensor:
    """``|µ_k − π_k|``, (N,)."""
    return (torch.exp(logp_behavior.double()) - torch.exp(logp_train.double())).abs()


def kl_exact(logp_behavior: Tensor, logp_train: Tensor) -> Tensor:
    """Full-vocabulary ``Σ_i µ_i log(µ_i/π_i)`` from normalized log-probs ``(N, V)``."""
    mu = logp_behavior.double()
    return kl_terms(torch.exp(mu), mu, logp_train.double()).sum(-1)
