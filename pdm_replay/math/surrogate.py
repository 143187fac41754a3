"""The surrogate loss whose gradient every update applies (pure torch): the replay's
simulated steps (:mod:`pdm_replay.replay.forward`) and a trainer's
(:func:`pdm_replay.loss.policy_loss`) take the same one.

Examples
--------
>>> import torch
>>> lp = torch.log(torch.tensor([0.5, 0.25]))
>>> float(surrogate_loss(lp, lp, torch.tensor([1.0, -2.0]), torch.tensor([1.0, 1.0]), 4))
0.25
"""

from __future__ import annotations

import torch
from torch import Tensor


def surrogate_loss(logp_k: Tensor, logp_behavior: Tensor, advantage: Tensor, weight: Tensor,
                   n_tokens: int) -> Tensor:
    """``−Σ_t w_t · r_t · Â_t / n_tokens`` with ``r = exp(log π(k) − log µ(k))``; all ``(N,)``.

    ``n_tokens`` counts every loss token of the (global) batch, so a mask that drops tokens
    does not change the normalization of the ones it keeps.
    """
    r = torch.exp(logp_k.double() - logp_behavior.double())
    return -(weight.double() * r * advantage.double()).sum() / max(n_tokens, 1)
