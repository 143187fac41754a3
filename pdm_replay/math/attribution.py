"""First-order attribution of a realized top-K KL change (pure torch, float64).

With µ fixed (the log) and π = softmax(z) on ``S ∪ {tail}``, the top-K KL
``D = Σ_{i∈S} µ_i log(µ_i/π_i) + µ_tail log(µ_tail/π_tail)`` changes to first order as

    dD = −Σ_{i∈S} µ_i · d log π_i − µ_tail · d log π_tail,

a fixed linear functional of the changes of log π at the support and at the tail. A
log-probability below the 1e-12 floor of ``kl_topk`` contributes nothing (the floor is
flat there). :class:`KLWeights` holds that functional per token; applied to tangents it
gives the directional derivative of D, applied to log-probabilities with gradient it gives a
scalar whose parameter gradient is ∇_θ D_t (used for per-token gradients).

For one SGD step on ``L = −Σ_s w_s r_s Â_s / N`` the parameter step is
``Δθ = (lr/N) Σ_s w_s Â_s r_s ∇_θ log π_k,s``, so the linear term of token t splits into its
own contribution (:func:`self_term`) and everyone else's (the cross term).

Examples
--------
One token, S = {k}: µ_k = 0.5, π_k = 0.25, µ_tail = 0.5, π_tail = 0.75.

>>> import torch
>>> from pdm_replay.math.support import reduce_logprobs
>>> mu = reduce_logprobs(torch.tensor([[0.5]], dtype=torch.float64).log())
>>> w = kl_topk_weights(mu, torch.tensor([[0.25]]).log(), torch.tensor([0.75]).log())
>>> w.w_s.tolist(), w.w_tail.tolist()
([[-0.5]], [-0.5])
>>> f64 = lambda *x: torch.tensor(x, dtype=torch.float64)
>>> round(w.apply(f64([0.1]), f64(-0.2)).item(), 12)  # -0.5 * 0.1 - 0.5 * (-0.2)
0.05
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pdm_replay.math.rows import take_rows
from pdm_replay.math.support import LOG_FLOOR, Reduced


@dataclass(frozen=True)
class KLWeights:
    """dD = Σ_S ``w_s`` · d log π_S + ``w_tail`` · d log π_tail, per token (float64)."""

    w_s: Tensor  # (N, M), 0 at invalid slots and where log π_i is floored
    w_tail: Tensor  # (N,), 0 where µ_tail = 0 or log π_tail is floored

    def take(self, index: slice | Tensor) -> "KLWeights":
        """The weights of some of the tokens (:func:`~pdm_replay.math.rows.take_rows`)."""
        return take_rows(self, index)

    def to(self, device: torch.device | str) -> "KLWeights":
        return KLWeights(self.w_s.to(device), self.w_tail.to(device))

    def apply(self, a_s: Tensor, a_tail: Tensor) -> Tensor:
        """``Σ_S w_s a_s + w_tail a_tail`` ``(N,)`` for ``a_s`` ``(N, M)``, ``a_tail`` ``(N,)``.

        Entries with zero weight are dropped, not multiplied: at an invalid slot or an empty
        tail ``a`` may be ``-inf`` (a log-probability) or NaN (its tangent), and 0·inf is NaN.
        Keeps the autograd graph of ``a`` (the weights are constants).
        """
        w_s, w_tail = self.w_s.to(a_s), self.w_tail.to(a_tail)  # a's dtype and device
        head = torch.where(w_s != 0, w_s * a_s, torch.zeros_like(a_s)).sum(-1)
        return head + torch.where(w_tail != 0, w_tail * a_tail, torch.zeros_like(a_tail))


def kl_topk_weights(mu: Reduced, logp_train_s: Tensor, log_pi_tail: Tensor) -> KLWeights:
    """The first-order functional of ``kl_topk`` at π (log π at S ``(N, M)``, ``-inf`` at
    invalid slots, and log π_tail ``(N,)``), µ from the log (``mu.p`` 0 at invalid slots)."""
    live_s = logp_train_s.double() > LOG_FLOOR  # floored log: flat, derivative 0
    live_tail = log_pi_tail.double() > LOG_FLOOR
    w_s = torch.where(live_s, -mu.p.double(), torch.zeros_like(mu.p, dtype=torch.float64))
    w_tail = torch.where(live_tail, -mu.tail.double(),
                         torch.zeros_like(mu.tail, dtype=torch.float64))
    return KLWeights(w_s, w_tail)


def self_term(lr: float, n_tokens: int, weight: Tensor, advantage: Tensor, ratio: Tensor,
              dot: Tensor) -> Tensor:
    """Token t's own share of the SGD linear term, ``(lr/N)·w_t·Â_t·r_t·⟨∇D_t, ∇log π_k,t⟩``.

    Every argument tensor is ``(n,)``: ``weight`` the update mask's keep (0/1), ``dot`` the
    inner product of the token's two parameter gradients at θ.

    >>> import torch
    >>> t = lambda *x: torch.tensor(x, dtype=torch.float64)
    >>> out = self_term(0.1, 4, t(1, 0), t(2, 2), t(0.5, 0.5), t(-3, -3))
    >>> round(out[0].item(), 12), out[1].item() == 0  # 0.1/4 · 2 · 0.5 · (−3); masked: 0
    (-0.075, True)
    """
    return (lr / max(n_tokens, 1)) * weight.double() * advantage.double() * ratio.double() \
        * dot.double()
