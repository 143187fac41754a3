"""Derivatives of log π at the logged supports along parameter directions (torch.func).

Two passes, both over the same differentiable, LM-head-chunked function of the parameters
(:func:`support_logprobs`: log π at S ``(N, M)`` and log π_tail ``(N,)``):

- :meth:`TangentPass.directional_logprobs`: forward mode (``torch.func.jvp`` over
  ``functional_call``) along one direction for every token at once: one forward-mode pass
  through the decoder giving hidden states and their tangents ``(N_b, H)``, then per LM-head
  chunk the logits' tangent, reduced to the tangents of log π at S and at the tail
  (:mod:`~pdm_replay.replay.head_tangents`). A plain linear head (checked numerically)
  contracts ``dz = dh Wᵀ + h dWᵀ`` without writing it out (one ``(C, V)`` buffer per
  chunk); any other head gets ``dz`` from one more ``jvp`` per chunk (two buffers). Never
  ``(N, V)``.
- :meth:`TangentPass.gradient_dots`: reverse mode per token: ``⟨∇_θ a_t, ∇_θ b_t⟩`` for
  two scalar outputs of each selected token (e.g. D_t and log π_k,t), one sequence at a
  time; the per-token gradients come from ``torch.func.vmap`` over the sequence's ``vjp``
  in groups that fit ``memory_bytes``, from a loop (one pair of gradients at a time)
  otherwise.

Attention runs on PyTorch's math SDPA backend here: the fused CPU/CUDA kernels have no
forward-mode derivative (and no vmap rule for their backward).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call, jvp, vjp, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from pdm_replay.replay.batching import MicroBatch
from pdm_replay.replay.checkpoint import Policy
from pdm_replay.replay.head_tangents import (chunk_logprobs, chunk_tangents,
                                             linear_chunk_tangents)
from pdm_replay.replay.recompute import _scaled_logits

Params = dict[str, Tensor]
# (log π at S (n, M), log π_tail (n,), token indices (n,) into the batch) -> (n,) scalars
TokenScalar = Callable[[Tensor, Tensor, Tensor], Tensor]


def support_logprobs(policy: Policy, batch: MicroBatch, ids: Tensor, *,
                     temperature: float = 1.0, chunk_tokens: int = 1024,
                     select: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """log π at the support ``ids`` ``(n, M)`` (invalid slots pointing at a valid id) and
    log π_tail ``(n,)`` for the response tokens of ``batch`` (float32, differentiable).

    ``select`` (indices into the batch's tokens, n of them) restricts the LM head to those
    tokens; ``ids`` holds their supports. Without it n is every token of the batch.
    """
    hidden = policy.hidden(batch)
    if select is not None:
        hidden = hidden[select]
    parts_s, parts_tail = [], []
    for i in range(0, hidden.shape[0], chunk_tokens):
        z = _scaled_logits(policy.head, hidden[i:i + chunk_tokens], temperature)
        lp_s, lp_tail = chunk_logprobs(z, ids[i:i + chunk_tokens])
        del z  # one chunk of logits (and its tangent) alive at a time
        parts_s.append(lp_s)
        parts_tail.append(lp_tail)
    if not parts_s:
        empty = hidden.new_zeros(0)
        return hidden.new_zeros(0, ids.shape[1]), empty
    return torch.cat(parts_s), torch.cat(parts_tail)


class _Head(nn.Module):
    """``functional_call`` target: the policy's (temperature-scaled) LM head."""

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.model = policy.model
        self.policy = policy

    def forward(self, hidden: Tensor, temperature: float) -> Tensor:
        return _scaled_logits(self.policy.head, hidden, temperature)


class _Body(nn.Module):
    """``functional_call`` target: the decoder's hidden states at the response tokens."""

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.model = policy.model
        self.policy = policy

    def forward(self, batch: MicroBatch) -> Tensor:
        return self.policy.hidden(batch)


class _Pass(nn.Module):
    """``functional_call`` target: the policy's model as a submodule (so its parameters,
    tied ones included, are swapped in), :func:`support_logprobs` as ``forward``."""

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.model = policy.model
        self.policy = policy

    def forward(self, batch: MicroBatch, ids: Tensor, temperature: float, chunk_tokens: int,
                select: Tensor | None) -> tuple[Tensor, Tensor]:
        return support_logprobs(self.policy, batch, ids, temperature=temperature,
                                chunk_tokens=chunk_tokens, select=select)


def parameter_names(policy: Policy, params: list[nn.Parameter]) -> list[str]:
    """``functional_call`` names (``model.<name>``) of ``params``, in their order."""
    by_id = {id(p): name for name, p in policy.model.named_parameters()}
    missing = [i for i, p in enumerate(params) if id(p) not in by_id]
    if missing:
        raise ValueError(f"parameter {missing[0]} of the snapshot is not a parameter of the "
                         "policy's model; attribution needs the unwrapped model")
    return [f"model.{by_id[id(p)]}" for p in params]


def current_params(policy: Policy) -> Params:
    """θ as a ``functional_call`` dict (detached: the passes never build autograd state)."""
    return {f"model.{n}": p.detach() for n, p in policy.model.named_parameters()}


@dataclass(frozen=True)
class TangentPass:
    """What both passes share: the policy, its LM-head settings and the support ids."""

    policy: Policy
    ids: Tensor  # (N, M) int64, invalid slots already pointing at k
    valid: Tensor  # (N, M) bool
    temperature: float = 1.0
    chunk_tokens: int = 1024

    def _call(self, params: Params, batch: MicroBatch, ids: Tensor,
              select: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return functional_call(_Pass(self.policy), params,
                               (batch, ids, self.temperature, self.chunk_tokens, select))

    def directional_logprobs(self, batch: MicroBatch, rows: slice, primals: Params,
                             tangents: Params) -> tuple[Tensor, Tensor]:
        """Tangents of (log π at S ``(N_b, M)``, log π_tail ``(N_b,)``) at θ = ``primals``
        along ``tangents``, for the tokens ``rows`` of the seed's flat order."""
        dev = self.policy.device
        ids, valid = self.ids[rows].to(dev), self.valid[rows].to(dev)
        body = _Body(self.policy)
        parts_s, parts_tail = [], []
        with sdpa_kernel(SDPBackend.MATH), torch.no_grad():
            h, dh = jvp(lambda p: functional_call(body, p, (batch,)), (primals,), (tangents,))
            linear = self._linear_head(h[:1])
            for i in range(0, h.shape[0], self.chunk_tokens):
                sl = slice(i, i + self.chunk_tokens)
                if linear:
                    w, b = linear
                    d_s, d_tail = linear_chunk_tangents(
                        h[sl], dh[sl], primals[w], tangents[w], primals.get(b),
                        tangents.get(b), ids[sl], valid[sl], self.temperature)
                else:
                    d_s, d_tail = chunk_tangents(*self._head_jvp(primals, tangents, h[sl],
                                                                 dh[sl]), ids[sl])
                parts_s.append(d_s)
                parts_tail.append(d_tail)
        if not parts_s:
            return h.new_zeros(0, ids.shape[1]), h.new_zeros(0)
        return torch.cat(parts_s), torch.cat(parts_tail)

    def _head_jvp(self, primals: Params, tangents: Params, h: Tensor, dh: Tensor
                  ) -> tuple[Tensor, Tensor]:
        """Any head: float32 logits ``(C, V)`` and their tangent by ``jvp``."""
        head = _Head(self.policy)
        z, dz = jvp(lambda p, x: functional_call(head, p, (x, self.temperature)),
                    (primals, h), (tangents, dh))
        return z.float(), dz.float()

    def _linear_head(self, probe: Tensor) -> tuple[str, str] | None:
        """Names of (weight, bias) when the head is exactly the output embedding (no logit
        scaling or soft-capping: checked on ``probe`` hidden states), else None. A missing
        bias gets a name that no parameter has."""
        lin = self.policy.model.get_output_embeddings()
        if not isinstance(lin, nn.Linear) or probe.shape[0] == 0 or not torch.equal(
                self.policy.head(probe), lin(probe)):
            return None
        by_id = {id(p): f"model.{n}" for n, p in self.policy.model.named_parameters()}
        bias = by_id.get(id(lin.bias)) if lin.bias is not None else None
        return by_id[id(lin.weight)], bias or "(no bias)"

    def gradient_dots(self, row: MicroBatch, rows: Tensor, select: Tensor, a: TokenScalar,
                      b: TokenScalar, primals: Params, memory_bytes: int) -> Tensor:
        """``⟨∇_θ a_t, ∇_θ b_t⟩`` ``(n,)`` float64 for the tokens ``select`` of one sequence
        ``row`` (``rows`` their flat indices, passed on to ``a`` and ``b``)."""
        ids = self.ids[rows].to(self.policy.device)
        n = int(select.numel())

        def outputs(p: Params) -> Tensor:
            lp_s, lp_tail = self._call(p, row, ids, select.to(self.policy.device))
            return torch.cat([a(lp_s, lp_tail, rows), b(lp_s, lp_tail, rows)])

        with sdpa_kernel(SDPBackend.MATH):
            out, pullback = vjp(outputs, primals)
            per_param = sum(t.numel() * t.element_size() for t in primals.values())
            group = max(1, min(n, memory_bytes // max(2 * per_param, 1)))
            dots = [_group_dots(pullback, out, list(range(i, min(i + group, n))), n)
                    for i in range(0, n, group)]
        return torch.cat(dots) if dots else torch.zeros(0, dtype=torch.float64)


def _group_dots(pullback: Callable, out: Tensor, tokens: list[int], n: int) -> Tensor:
    """Dots for ``tokens``: rows ``t`` (a_t) and ``n + t`` (b_t) of the Jacobian of ``out``."""
    basis = torch.zeros(2 * len(tokens), out.numel(), dtype=out.dtype, device=out.device)
    for j, t in enumerate(tokens):
        basis[j, t] = 1.0
        basis[len(tokens) + j, n + t] = 1.0
    if len(tokens) == 1:  # loop mode: two plain pullbacks, no batched gradient storage
        ga, gb = (pullback(basis[0])[0], pullback(basis[1])[0])
        return _dot(ga, gb, None)[None]
    (grads,) = vmap(pullback)(basis)
    half = len(tokens)
    return _dot({k: g[:half] for k, g in grads.items()},
                {k: g[half:] for k, g in grads.items()}, half)


def _dot(ga: Mapping[str, Tensor], gb: Mapping[str, Tensor], batch: int | None) -> Tensor:
    total: Tensor | float = 0.0
    for name, g in ga.items():
        h = gb[name]
        if batch is None:
            total = total + torch.dot(g.flatten().double(), h.flatten().double())
        else:
            total = total + (g.reshape(batch, -1).double() * h.reshape(batch, -1).double()
                             ).sum(-1)
    return torch.as_tensor(total, dtype=torch.float64).cpu()


def sequence_batches(batch: MicroBatch) -> list[tuple[MicroBatch, np.ndarray]]:
    """Each sequence of a right-padded batch on its own, unpadded, with the positions (in
    the batch's token order) of its response tokens.

    >>> from pdm_replay.replay.batching import pad_batch
    >>> rows = sequence_batches(pad_batch([[5, 6], [7]], [[1, 2, 3], [4]]))
    >>> [(r.input_ids.tolist(), r.target_index.tolist(), pos.tolist()) for r, pos in rows]
    [([[5, 6, 1, 2, 3]], [1, 2, 3], [0, 1, 2]), ([[7, 4]], [0], [3])]
    """
    width = batch.input_ids.shape[1]
    row_of = batch.target_index // max(width, 1)
    out = []
    for b in range(batch.input_ids.shape[0]):
        length = int(batch.attention_mask[b].sum())
        positions = torch.nonzero(row_of == b)[:, 0]
        single = MicroBatch(input_ids=batch.input_ids[b:b + 1, :length],
                            attention_mask=batch.attention_mask[b:b + 1, :length],
                            position_ids=batch.position_ids[b:b + 1, :length],
                            target_index=batch.target_index[positions] - b * width)
        out.append((single, positions.numpy()))
    return out
