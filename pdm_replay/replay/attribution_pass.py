"""First-order attribution of the realized top-K KL change of every simulated update.

For an update with actual parameter step Δθ (``snapshot.delta()``), per loss token t:

- ``delta_kl_lin = ⟨∇_θ D_t(θ), Δθ⟩``: one forward-mode pass along Δθ for every token
  (:meth:`~pdm_replay.replay.tangent.TangentPass.directional_logprobs`), contracted with
  the first-order functional of ``kl_topk`` (:mod:`pdm_replay.math.attribution`);
- ``delta_kl_curv = delta_kl_topk − delta_kl_lin``: second and higher order;
- SGD only, on a sample of tokens: ``delta_kl_self = (lr/N)·keep_t·Â_t·r_t·⟨∇D_t, ∇log π_k,t⟩``,
  the token's own gradient's share, and ``delta_kl_cross = lin − self``, every other kept
  token's. Adam's first step is ``−lr·g/(|g| + ε)`` per coordinate (fresh state): not
  linear in the per-token gradients, so it has no per-token split; self and cross stay null.

The sample (per seed, drawn once, shared by every SGD update) is every KL disagreement token
(out of region, the two masks of some KL pair of the registry,
:func:`~pdm_replay.masks.mask_pairs`, deciding differently) plus ``sample_size`` other
loss tokens with Â ≠ 0, drawn with a generator seeded by ``rng_seed`` (the replay seed).
The inner products do not depend on the update, so they are computed once per seed, at θ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from pdm_replay.masks import Thresholds, apply_masks, build_masks, mask_pairs
from pdm_replay.math.attribution import KLWeights, kl_topk_weights, self_term
from pdm_replay.math.metrics import TokenStats
from pdm_replay.replay.batching import MicroBatch
from pdm_replay.replay.checkpoint import Policy
from pdm_replay.replay.distributed import LOCAL, Dist
from pdm_replay.replay.outputs import PreUpdate
from pdm_replay.replay.tangent import (TangentPass, current_params, parameter_names,
                                       sequence_batches)

SAMPLE_STREAM = 0xA77  # second seed word: the sample's stream differs from the batch draw
# Per-token gradients held at once on CUDA (2 per token): beyond this the group shrinks,
# down to a loop over tokens (one pair of gradients at a time). On CPU the loop was as fast
# or faster than vmap groups (benchmarks/README.md, attribution), so CPU always loops.
GRADIENT_MEMORY_BYTES = 1024 ** 3


def gradient_memory(device: torch.device) -> int:
    """Bytes of per-token gradients :func:`sample_dots` may group on ``device``."""
    return GRADIENT_MEMORY_BYTES if device.type == "cuda" else 0


def disagreement_tokens(stats: TokenStats, thresholds: Thresholds) -> np.ndarray:
    """``(N,)`` bool: the two masks of some KL pair of the registry (:func:`mask_pairs`,
    every registered pair whose predictive mask declares family ``kl``) decide differently.

    Both share the proximity test, so such a token is always out of region.
    """
    pairs = [p for p in mask_pairs() if p.family == "kl"]
    names = list(dict.fromkeys(n for p in pairs for n in (p.base, p.other)))
    keep = apply_masks(build_masks(names, thresholds), stats)
    differ = torch.zeros_like(stats.advantage, dtype=torch.bool)
    for p in pairs:
        differ |= keep[p.base] != keep[p.other]
    return differ.numpy()


def attribution_sample(stats: TokenStats, loss_mask: np.ndarray, thresholds: Thresholds,
                       sample_size: int, rng_seed: int, dist: Dist = LOCAL) -> np.ndarray:
    """Sorted flat indices: every disagreement loss token plus ``sample_size`` other loss
    tokens with Â ≠ 0 (all of them when fewer), drawn deterministically from ``rng_seed``.

    Under torchrun the draw is over the whole seed batch (this rank's tokens are a
    contiguous share of it), so every world size samples the same tokens.
    """
    dis = disagreement_tokens(stats, thresholds) & loss_mask
    rest = np.flatnonzero(loss_mask & ~dis & (stats.advantage.numpy() != 0))
    counts = dist.all_gather_int(rest.size)
    mine = shard_sample(counts, dist.rank, sample_size, rng_seed)
    return np.sort(np.concatenate([np.flatnonzero(dis), rest[mine]])).astype(np.int64)


def shard_sample(counts: list[int], rank: int, sample_size: int, rng_seed: int
                 ) -> np.ndarray:
    """Positions in rank ``rank``'s candidates of a draw of ``sample_size`` among all ranks'
    candidates (``counts`` per rank, concatenated in rank order), without replacement.

    One process with 10 candidates, and the same 10 split 4 + 6 over two ranks:

    >>> shard_sample([10], 0, 3, rng_seed=0).tolist()
    [1, 3, 5]
    >>> shard_sample([4, 6], 0, 3, 0).tolist(), shard_sample([4, 6], 1, 3, 0).tolist()
    ([1, 3], [1])
    """
    rng = np.random.default_rng([rng_seed, SAMPLE_STREAM])
    total, start = sum(counts), sum(counts[:rank])
    picks = rng.choice(total, size=min(sample_size, total), replace=False)
    return np.sort(picks[(picks >= start) & (picks < start + counts[rank])] - start)


def _offsets(batches: list[MicroBatch]) -> list[int]:
    return np.cumsum([0] + [b.n_tokens for b in batches]).tolist()


@dataclass
class SeedAttribution:
    """One seed's attribution state: the KL functional of every token, and (SGD) the sample
    with its gradient inner products ``dots`` at θ."""

    tangent: TangentPass
    batches: list[MicroBatch]
    weights: KLWeights  # (N,)
    names: list[str]  # functional_call names of the snapshot's parameters, in order
    advantage: Tensor  # (N,) float64
    ratio: Tensor  # (N,) float64, r = π_k/µ_k at θ as in the surrogate loss
    lr: float
    sample: np.ndarray | None = None  # (n,) flat token indices
    dots: Tensor | None = None  # (n,) ⟨∇D_t, ∇log π_k,t⟩

    def linear(self, delta: list[Tensor]) -> Tensor:
        """``⟨∇D_t(θ), Δθ⟩`` ``(N,)`` float64; call with θ in place (after the restore)."""
        primals = current_params(self.tangent.policy)
        tangents = dict(zip(self.names, delta))
        out = []
        bounds = _offsets(self.batches)
        for batch, lo, hi in zip(self.batches, bounds[:-1], bounds[1:]):
            d_s, d_tail = self.tangent.directional_logprobs(batch, slice(lo, hi), primals,
                                                            tangents)
            out.append(self.weights.take(slice(lo, hi)).apply(d_s.double().cpu(),
                                                              d_tail.double().cpu()))
        return torch.cat(out) if out else torch.zeros(0, dtype=torch.float64)

    def columns(self, delta: list[Tensor], realized: Tensor, weight: Tensor,
                n_tokens: int, lr: float | None = None) -> dict[str, Tensor]:
        """updates/v1 attribution columns ``(N,)``; NaN (written as null) off the sample.

        ``realized`` is ``delta_kl_topk``, ``weight`` the update's keep (0/1),
        ``n_tokens`` the loss normalizer N of the simulated step and ``lr`` the step's
        learning rate (default ``self.lr``; ``--lr auto`` chooses one per update).
        """
        lin = self.linear(delta)
        cols = {"delta_kl_lin": lin, "delta_kl_curv": realized.double() - lin}
        if self.dots is not None and self.sample is not None:
            s = torch.from_numpy(self.sample)
            own = torch.full_like(lin, float("nan"))
            own[s] = self_term(self.lr if lr is None else lr, n_tokens, weight[s],
                               self.advantage[s],
                               self.ratio[s], self.dots)
            cols.update(delta_kl_self=own, delta_kl_cross=lin - own)
        return cols


def sample_dots(tangent: TangentPass, batches: list[MicroBatch], weights: KLWeights,
                sample: np.ndarray, advantage: Tensor,
                memory_bytes: int = GRADIENT_MEMORY_BYTES) -> Tensor:
    """``⟨∇D_t, ∇log π_k,t⟩`` at θ ``(n,)`` for the ``sample`` tokens (0 where Â = 0: the
    self term vanishes there whatever the inner product). Per-token gradients are grouped
    with ``vmap`` up to ``memory_bytes`` (0: a loop, one pair at a time)."""
    primals = current_params(tangent.policy)
    dots = torch.zeros(sample.size, dtype=torch.float64)
    wanted = {int(t): j for j, t in enumerate(sample) if advantage[int(t)] != 0}
    bounds = _offsets(batches)
    def d_fn(lp_s, lp_tail, rows):
        return weights.take(rows).apply(lp_s, lp_tail)
    def k_fn(lp_s, lp_tail, rows):
        return lp_s[:, 0]
    for batch, lo in zip(batches, bounds[:-1]):
        for row, positions in sequence_batches(batch):
            local = [i for i, p in enumerate(positions) if lo + int(p) in wanted]
            if not local:
                continue
            rows = torch.as_tensor([lo + int(positions[i]) for i in local])
            got = tangent.gradient_dots(row, rows, torch.as_tensor(local), d_fn, k_fn,
                                        primals, memory_bytes)
            dots[[wanted[int(r)] for r in rows]] = got
    return dots


def seed_attribution(policy: Policy, params: list[torch.nn.Parameter],
                     batches: list[MicroBatch], pre: PreUpdate, loss_mask: np.ndarray,
                     logp_behavior: Tensor, *, rng_seed: int, optimizer: str, lr: float,
                     sample_size: int, thresholds: Thresholds, temperature: float,
                     chunk_tokens: int, dist: Dist = LOCAL) -> SeedAttribution:
    """Set up one seed's attribution; for SGD also draw the sample (from ``rng_seed``) and
    compute its dots.

    ``params`` are the snapshot's parameters (the order of ``snapshot.delta()``).
    """
    ids = torch.where(pre.support.valid, pre.support.ids, pre.support.ids[:, :1])
    tangent = TangentPass(policy, ids, pre.support.valid, temperature=temperature,
                          chunk_tokens=chunk_tokens)
    weights = kl_topk_weights(pre.mu, pre.pi.logp_s, pre.pi.log_tail)
    advantage = pre.stats.advantage.double()
    ratio = torch.exp(pre.pi.logp_k.double() - logp_behavior.double())
    attr = SeedAttribution(tangent, batches, weights, parameter_names(policy, params),
                           advantage, ratio, lr)
    if optimizer == "sgd":
        attr.sample = attribution_sample(pre.stats, loss_mask, thresholds, sample_size,
                                         rng_seed, dist)
        attr.dots = sample_dots(tangent, batches, weights, attr.sample, advantage,
                                gradient_memory(policy.device))
    return attr
