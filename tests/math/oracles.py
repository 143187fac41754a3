"""Test oracles: full-vocabulary quantities the package never computes, only its tests.

The package works on the logged support S (top-K ∪ {k}) with an aggregated or uniform
tail; these take whole ``(N, V)`` distributions, so the tests can check the support
estimators against the truth.
"""

from __future__ import annotations

import torch
from torch import Tensor

# The slope of |π_i − µ_i| is shared with dtv_agg / dtv_uniform: this oracle checks the
# full-vocabulary sum against their tail atoms; test_dtv_exact_hand_worked checks the
# slope itself against a hand-worked value.
from pdm_replay.math.direction import _one_minus_pi_k, _tv_slope


def tv_exact(logp_behavior: Tensor, logp_train: Tensor) -> Tensor:
    """Full-vocabulary ``½ Σ_i |µ_i − π_i|`` from normalized log-probs ``(N, V)``."""
    return 0.5 * (torch.exp(logp_behavior.double()) - torch.exp(logp_train.double())).abs().sum(-1)


def dtv_exact(logp_behavior: Tensor, logp_train: Tensor, token_id: Tensor) -> Tensor:
    """Exact Ḋ_tv from full-vocabulary log-probs ``(N, V)`` and sampled ids ``(N,)``."""
    mu, pi = torch.exp(logp_behavior.double()), torch.exp(logp_train.double())
    sigma = torch.sign(pi - mu)
    idx = token_id.long()[:, None]
    is_k = torch.zeros_like(pi, dtype=torch.bool).scatter_(1, idx, True)
    pi_o = pi.masked_fill(is_k, 0.0)
    k_term, vbar = _tv_slope(sigma.gather(1, idx)[:, 0], pi.gather(1, idx)[:, 0],
                             _one_minus_pi_k(logp_train.double().gather(1, idx)[:, 0]),
                             (pi_o * pi_o).sum(-1))
    return 0.5 * (k_term + (sigma * pi_o * (-pi_o - vbar[:, None])).sum(-1))
