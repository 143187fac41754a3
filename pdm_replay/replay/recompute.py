"""Full-vocabulary statistics of π from hidden states, in token chunks (pure torch).

Never materialises an ``(N, V)`` logits tensor: the LM head runs on ``chunk_tokens``
hidden states at a time, giving float32 logits ``(C, V)``; every statistic leaves the
chunk as float64 ``(C,)`` or ``(C, M)``. Per chunk, with ``e = exp(z − max z)``:

- ``log π`` at the support S: ``z_S − logZ``, ``logZ = max z + log Σ e``;
- ``π_tail`` as the sum of the tail entries themselves (support entries zeroed, then
  summed), so a tiny tail keeps full relative precision instead of coming out
  of ``1 − Σ_S π`` or ``log1mexp(LSE_S − logZ)``, which cancel when the tail is < 1e-7;
- ``Σπ² = Σe² / (Σe)²`` (SPEC §7: ``exp(LSE(2z) − 2 LSE(z))``);
- with a behavior head (full µ): ``kl_exact``, the reloaded ``log µ`` at S and
  ``Σπµ = exp(LSE(z + z_µ) − LSE(z) − LSE(z_µ))``, in float64 on the chunk.

Examples
--------
>>> import torch
>>> from pdm_replay.math.support import build_support
>>> torch.manual_seed(0); w = torch.randn(50, 8); h = torch.randn(6, 8)
<torch._C.Generator object at ...>
>>> head = lambda x: x @ w.T
>>> sup = build_support(torch.tensor([1, 2, 3, 4, 5, 6]), torch.randint(0, 50, (6, 4)))
>>> st = support_stats(h, head, sup, chunk_tokens=4)
>>> naive = torch.log_softmax((h @ w.T).double(), -1)
>>> bool(torch.allclose(st.logp_s[:, 0], naive.gather(1, sup.ids[:, :1])[:, 0]))
True
>>> bool(torch.allclose(st.sum_pi2, naive.exp().pow(2).sum(-1)))
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Callable

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from pdm_replay.math import divergence as dv
from pdm_replay.math.direction import dkl_from_sums
from pdm_replay.math.support import Reduced, Support, reduce_logprobs

Head = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class ExactStats:
    """Full-vocabulary quantities that need the behavior policy's logits (float64)."""

    kl_exact: Tensor  # (N,)
    logp_behavior_s: Tensor  # (N, M) reloaded log µ at S, -inf where the support slot is invalid
    sum_pi_mu: Tensor  # (N,)

    @property
    def logp_mu_k(self) -> Tensor:
        """Reloaded log µ(k) ``(N,)`` (column 0 of S is k)."""
        return self.logp_behavior_s[:, 0]

    def map(self, fn: Callable[[Tensor], Tensor]) -> "ExactStats":
        """Every field through ``fn`` (e.g. a device move)."""
        return ExactStats(*(fn(getattr(self, f.name)) for f in fields(self)))

    @staticmethod
    def cat(parts: list["ExactStats"]) -> "ExactStats":
        return ExactStats(*(torch.cat([getattr(p, f.name) for p in parts])
                            for f in fields(ExactStats)))


@dataclass(frozen=True)
class SupportStats:
    """π at the support plus full-vocabulary sums for N tokens (float64)."""

    logp_s: Tensor  # (N, M) log π at S, -inf where the support slot is invalid
    log_tail: Tensor  # (N,) log π_tail, -inf when the support holds all mass
    sum_pi2: Tensor  # (N,) Σ_i π_i²
    exact: ExactStats | None = None

    @property
    def logp_k(self) -> Tensor:
        return self.logp_s[:, 0]

    def reduced(self) -> Reduced:
        """π over ``S ∪ {tail}`` with the directly summed tail."""
        red = reduce_logprobs(self.logp_s)
        return replace(red, tail=torch.exp(self.log_tail), log_tail=self.log_tail)

    def dkl_exact(self) -> Tensor:
        """Exact Ḋ_kl (N,) from the full sums; needs ``exact``."""
        if self.exact is None:
            raise ValueError("dkl_exact needs a behavior checkpoint")
        return dkl_from_sums(torch.exp(self.logp_k), torch.exp(self.exact.logp_mu_k),
                             self.sum_pi2, self.exact.sum_pi_mu)

    @staticmethod
    def cat(parts: list["SupportStats"]) -> "SupportStats":
        """Concatenate per-chunk (or per-micro-batch) statistics along N."""
        exact = None
        if parts and parts[0].exact is not None:
            exact = ExactStats.cat([p.exact for p in parts])
        return SupportStats(torch.cat([p.logp_s for p in parts]),
                            torch.cat([p.log_tail for p in parts]),
                            torch.cat([p.sum_pi2 for p in parts]), exact)


def _scaled_logits(head: Head, h: Tensor, temperature: float) -> Tensor:
    z = head(h).float()
    return z / temperature if temperature != 1.0 else z


def _support_chunk(z: Tensor, ids: Tensor, valid: Tensor) -> SupportStats:
    """Statistics of one chunk of logits ``z`` (C, V) float32; ``z`` is overwritten."""
    z_s = z.gather(1, ids).double()  # (C, M)
    top = z.amax(-1, keepdim=True)  # (C, 1)
    e = z.sub_(top).exp_()  # (C, V), in place: the chunk is the only large buffer
    e_s = e.gather(1, ids).double().masked_fill(~valid, 0.0)  # (C, M)
    e.scatter_(1, ids, 0.0)  # leave only the tail entries
    # Row sums in float32 (cascade summation: relative error ~1e-7 for positive terms);
    # ``sum(dtype=float64)`` would first copy the whole chunk to float64 (2x its memory).
    tail = e.sum(-1).double()  # (C,)
    sum_e = tail + e_s.sum(-1)
    # One read pass (a square-then-sum would write the chunk once more).
    sum_e2 = torch.linalg.vector_norm(e, 2, dim=-1).double().square() + e_s.square().sum(-1)
    log_z = top[:, 0].double() + torch.log(sum_e)
    logp_s = (z_s - log_z[:, None]).masked_fill(~valid, -math.inf)
    return SupportStats(logp_s=logp_s, log_tail=torch.log(tail) - torch.log(sum_e),
                        sum_pi2=sum_e2 / sum_e.square())


def _exact_rows(z: Tensor, z_mu: Tensor, ids: Tensor, valid: Tensor) -> ExactStats:
    logp_train = torch.log_softmax(z.double(), -1)
    logp_behavior = torch.log_softmax(z_mu.double(), -1)
    return ExactStats(kl_exact=dv.kl_exact(logp_behavior, logp_train),
                      logp_behavior_s=logp_behavior.gather(1, ids).masked_fill(~valid, -math.inf),
                      sum_pi_mu=torch.exp(torch.logsumexp(logp_train + logp_behavior, -1)))


def _exact_chunk(z: Tensor, z_mu: Tensor, ids: Tensor, valid: Tensor) -> ExactStats:
    """kl_exact, log µ at S ``(C, M)``, Σπµ of one chunk from π's and µ's logits (C, V),
    in float64.

    Float64 temporaries (~5 of them) are made for an eighth of the chunk at a time, so the
    exact path needs about 3 chunks of float32 memory, not 10.
    """
    rows = max(1, z.shape[0] // 8)
    return ExactStats.cat([_exact_rows(z[i:i + rows], z_mu[i:i + rows], ids[i:i + rows],
                                       valid[i:i + rows])
                           for i in range(0, z.shape[0], rows)])


@torch.no_grad()
def support_stats(hidden: Tensor, head: Head, support: Support, *, temperature: float = 1.0,
                  chunk_tokens: int = 1024, hidden_mu: Tensor | None = None,
                  head_mu: Head | None = None) -> SupportStats:
    """π's statistics for N tokens from hidden states ``(N, H)`` at ``support`` ``(N, M)``.

    ``hidden_mu`` ``(N, H_µ)`` and ``head_mu`` (the behavior model) add :class:`ExactStats`.
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    dev = hidden.device
    # Invalid slots point at k (column 0): gathers stay in range, zeroing k twice is harmless.
    ids = torch.where(support.valid, support.ids, support.ids[:, :1]).to(dev)
    valid = support.valid.to(dev)
    parts = []
    for i in range(0, hidden.shape[0], chunk_tokens):
        sl = slice(i, i + chunk_tokens)
        z = _scaled_logits(head, hidden[sl], temperature)
        exact = None
        if hidden_mu is not None and head_mu is not None:
            exact = _exact_chunk(z, _scaled_logits(head_mu, hidden_mu[sl], temperature),
                                 ids[sl], valid[sl])
        parts.append(replace(_support_chunk(z, ids[sl], valid[sl]), exact=exact))
        del z  # free this chunk before the next one is allocated: one chunk alive at a time
    if not parts:
        empty = torch.zeros(0, dtype=torch.float64, device=dev)
        empty_s = torch.zeros(0, support.ids.shape[1], dtype=torch.float64, device=dev)
        exact = ExactStats(empty, empty_s, empty) if hidden_mu is not None else None
        return SupportStats(empty_s, empty, empty, exact)
    return SupportStats.cat(parts)


def _logp_k_chunk(h: Tensor, k: Tensor, head: Head, temperature: float) -> Tensor:
    z = _scaled_logits(head, h, temperature)
    # logZ written out: torch.logsumexp on CPU is ~5x slower than these three passes.
    top = z.detach().amax(-1, keepdim=True)
    log_z = torch.log(torch.exp(z - top).sum(-1)) + top[:, 0]
    return z.gather(1, k[:, None])[:, 0] - log_z


def token_logprob(hidden: Tensor, head: Head, token_id: Tensor, *, temperature: float = 1.0,
                  chunk_tokens: int = 1024) -> Tensor:
    """``log π(k) = z_k − logZ`` ``(N,)`` float32 with autograd through ``hidden`` and the head.

    Each chunk is activation-checkpointed: the backward recomputes its ``(C, V)`` logits
    instead of keeping every chunk's softmax alive, so memory stays at one chunk. A single
    chunk (``N <= chunk_tokens``) is not: its saved ``exp(z - max)`` is the one chunk the
    checkpointed backward would rebuild anyway, so checkpointing it saves no memory and
    costs one more LM-head forward (a quarter of Qwen3-0.6B's forward at 128 tokens).
    """
    k = token_id.to(hidden.device)
    if hidden.shape[0] <= chunk_tokens:
        return _logp_k_chunk(hidden, k, head, temperature)
    outs = [checkpoint(_logp_k_chunk, hidden[i:i + chunk_tokens], k[i:i + chunk_tokens],
                       head, temperature, use_reentrant=False)
            for i in range(0, hidden.shape[0], chunk_tokens)]
    return torch.cat(outs) if outs else hidden.new_zeros(0)
