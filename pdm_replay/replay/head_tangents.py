"""log π at the support and its tangent from one LM-head chunk (pure torch, no model).

With π = softmax(z) over the vocabulary and a logit tangent dz:

    d log π_i = dz_i − E_π[dz],    d log π_tail = E_π[dz | tail] − E_π[dz],

where the tail average is summed over the tail entries themselves (support entries zeroed),
so a tiny tail keeps its relative precision, as in :mod:`pdm_replay.replay.recompute`.

- :func:`chunk_logprobs`: log π at S and at the tail, differentiable in both AD modes
  (the reverse-mode per-token gradients use it);
- :func:`chunk_tangents`: the tangents from logits ``z`` and a materialised ``dz`` (any
  head: ``dz`` from ``jvp``), in place;
- :func:`linear_chunk_tangents`: the same for a plain linear head ``z = h Wᵀ + b`` without
  writing ``dz`` out: ``E_π[dz] = dh·(πW) + h·(π dW) + π·db`` needs two ``(C, V) × (V, H)``
  products instead of a ``(C, V)`` tangent buffer and its passes.

Examples
--------
>>> import torch
>>> g = torch.Generator().manual_seed(0)
>>> C, V, H = 3, 11, 4
>>> w, dw = torch.randn(V, H, generator=g), torch.randn(V, H, generator=g)
>>> h, dh = torch.randn(C, H, generator=g), torch.randn(C, H, generator=g)
>>> ids = torch.tensor([[0, 1, 0], [2, 2, 5], [6, 3, 4]])
>>> valid = torch.tensor([[True, True, False], [True, False, True], [True, True, True]])
>>> a = chunk_tangents(h @ w.T, dh @ w.T + h @ dw.T, ids)
>>> b = linear_chunk_tangents(h, dh, w, dw, None, None, ids, valid)
>>> all(torch.allclose(x[valid] if x.dim() == 2 else x, y[valid] if y.dim() == 2 else y,
...                    atol=1e-5) for x, y in zip(a, b))
True
"""

from __future__ import annotations

import torch
from torch import Tensor


def chunk_logprobs(z: Tensor, ids: Tensor) -> tuple[Tensor, Tensor]:
    """log π at ``ids`` ``(C, M)`` and log π_tail ``(C,)`` from logits ``z`` ``(C, V)``."""
    top = z.detach().amax(-1, keepdim=True)  # logZ does not depend on the shift: no tangent
    z_s = z.gather(1, ids)
    e = torch.exp(z - top)
    log_sum = torch.log(e.sum(-1))
    tail = e.scatter(1, ids, 0.0).sum(-1)
    return z_s - top - log_sum[:, None], torch.log(tail) - log_sum


def chunk_tangents(z: Tensor, dz: Tensor, ids: Tensor) -> tuple[Tensor, Tensor]:
    """Tangents of log π at ``ids`` ``(C, M)`` and of log π_tail ``(C,)`` from logits ``z``
    and their tangent ``dz`` (both ``(C, V)``, overwritten: no other chunk-sized buffer).

    >>> import torch
    >>> z, dz = torch.randn(3, 7, dtype=torch.float64), torch.randn(3, 7, dtype=torch.float64)
    >>> ids = torch.tensor([[0, 1], [2, 2], [6, 3]])
    >>> f = lambda t: chunk_logprobs(z + t * dz, ids)
    >>> d_s, d_tail = chunk_tangents(z.clone(), dz.clone(), ids)
    >>> ref_s, ref_tail = torch.func.jvp(f, (torch.tensor(0.0, dtype=torch.float64),),
    ...                                  (torch.tensor(1.0, dtype=torch.float64),))[1]
    >>> bool(torch.allclose(d_s, ref_s) and torch.allclose(d_tail, ref_tail))
    True
    """
    dz_s = dz.gather(1, ids)
    e = z.sub_(z.amax(-1, keepdim=True)).exp_()  # unnormalized π, in place
    sum_e = e.sum(-1)
    e_dz = dz.mul_(e)  # π_j dz_j (unnormalized), in place
    mean = e_dz.sum(-1) / sum_e
    e.scatter_(1, ids, 0.0)
    e_dz.scatter_(1, ids, 0.0)
    tail_mean = e_dz.sum(-1) / e.sum(-1)  # NaN for an empty tail: its KL weight is 0
    return dz_s - mean[:, None], tail_mean - mean


def linear_chunk_tangents(h: Tensor, dh: Tensor, w: Tensor, dw: Tensor, b: Tensor | None,
                          db: Tensor | None, ids: Tensor, valid: Tensor,
                          temperature: float = 1.0) -> tuple[Tensor, Tensor]:
    """:func:`chunk_tangents` for ``z = (h Wᵀ + b)/T``, ``dz = (dh Wᵀ + h dWᵀ + db)/T``.

    ``h``, ``dh`` ``(C, H)``; ``w``, ``dw`` ``(V, H)``; ``b``, ``db`` ``(V,)`` or None;
    ``ids``/``valid`` ``(C, M)`` (invalid slots may repeat a valid id). Returns float32
    ``(C, M)`` (meaningful at valid slots) and ``(C,)``; one ``(C, V)`` buffer.
    """
    z = h @ w.T
    if b is not None:
        z.add_(b)
    e = z.float().div_(temperature) if temperature != 1.0 else z.float()
    e = e.sub_(e.amax(-1, keepdim=True)).exp_()  # unnormalized π at the chunk
    keep = valid.to(e.dtype)
    e_s = e.gather(1, ids) * keep  # each support id once
    e.scatter_(1, ids, 0.0)  # tail entries only
    tail_e = e.sum(-1)
    e = e.to(w.dtype)
    tail_dot = (dh * (e @ w)).sum(-1) + (h * (e @ dw)).sum(-1)  # Σ_tail e_j (dz_j · T)
    dz_s = (torch.einsum("ch,cmh->cm", dh, w[ids]) + torch.einsum("ch,cmh->cm", h, dw[ids]))
    if db is not None:
        tail_dot = tail_dot + e @ db
        dz_s = dz_s + db[ids]
    tail_dot, dz_s = tail_dot.float() / temperature, dz_s.float() / temperature
    mean = (tail_dot + (e_s * dz_s).sum(-1)) / (tail_e + e_s.sum(-1))
    return dz_s - mean[:, None], tail_dot / tail_e - mean  # NaN tail for an empty tail
