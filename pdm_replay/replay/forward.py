"""Model passes over micro-batches: statistics without grad, surrogate gradients with grad.

Both walk the same :class:`~pdm_replay.replay.batching.MicroBatch` list, so token ``i``
of the seed's flat order is token ``i`` of every pass (pre-update, each mask's gradient,
post-update).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from pdm_replay.math.support import Support
from pdm_replay.math.surrogate import surrogate_loss
from pdm_replay.replay.batching import MicroBatch
from pdm_replay.replay.checkpoint import Policy
from pdm_replay.replay.gpu import to_host, wait_host
from pdm_replay.replay.recompute import SupportStats, support_stats, token_logprob


@dataclass(frozen=True)
class PassConfig:
    """How to run a pass: the log's sampling temperature and the LM-head chunk size;
    ``lockstep``: every micro-batch runs its forward and backward even when it has no
    token to learn from (FSDP: each is a collective all ranks must join)."""

    temperature: float = 1.0
    chunk_tokens: int = 1024
    lockstep: bool = False


def _slices(batches: list[MicroBatch]) -> list[slice]:
    out, start = [], 0
    for b in batches:
        out.append(slice(start, start + b.n_tokens))
        start += b.n_tokens
    return out


@torch.no_grad()
def behavior_hidden(policy: Policy, batches: list[MicroBatch]) -> list[Tensor]:
    """Hidden states of the behavior model, one ``(N_b, H)`` per micro-batch (cached: µ
    does not change across simulated updates)."""
    return [policy.hidden(b) for b in batches]


@torch.no_grad()
def forward_stats(policy: Policy, batches: list[MicroBatch], support: Support,
                  pass_cfg: PassConfig, behavior: Policy | None = None,
                  mu_hidden: list[Tensor] | None = None) -> SupportStats:
    """π's :class:`SupportStats` for every token of ``batches`` (float64, on CPU).

    With ``behavior`` and its cached ``mu_hidden`` the exact columns are filled too.
    """
    parts = []
    for i, (batch, sl) in enumerate(zip(batches, _slices(batches))):
        h_mu = mu_hidden[i] if mu_hidden is not None else None
        stats = support_stats(policy.hidden(batch), policy.head, support.take(sl),
                              temperature=pass_cfg.temperature, chunk_tokens=pass_cfg.chunk_tokens,
                              hidden_mu=h_mu, head_mu=behavior.head if behavior else None)
        parts.append(_to_cpu(stats))
    wait_host(policy.device)  # one sync per pass: the copies above are asynchronous
    return SupportStats.cat(parts)


def _to_cpu(stats: SupportStats) -> SupportStats:
    if stats.logp_s.device.type == "cpu":
        return stats
    move = to_host  # pinned, non-blocking: read only after wait_host
    exact = stats.exact.map(move) if stats.exact is not None else None
    return SupportStats(move(stats.logp_s), move(stats.log_tail), move(stats.sum_pi2), exact)


@dataclass(frozen=True)
class LossInputs:
    """Per-token data of the surrogate loss, every field ``(N,)`` in the seed's flat order."""

    token_id: Tensor  # int64
    logp_behavior: Tensor  # float64, log µ(k) from the log
    advantage: Tensor  # float64


def accumulate_gradients(policy: Policy, batches: list[MicroBatch], inputs: LossInputs,
                         weight: Tensor, n_tokens: int, pass_cfg: PassConfig) -> None:
    """Backward of ``−Σ_t w_t · r_t · Â_t / n_tokens`` into ``p.grad``, one micro-batch at a
    time (so activation memory is one micro-batch). Tokens with ``w_t = 0`` skip the head.
    """
    for batch, sl in zip(batches, _slices(batches)):
        w = weight[sl]
        use = torch.nonzero(w != 0)[:, 0]
        if use.numel() == 0:
            if pass_cfg.lockstep:  # a zero loss through the body: FSDP's collectives still run
                (policy.hidden(batch).sum() * 0.0).backward()
            continue  # no gradient from this micro-batch: skip its forward entirely
        hidden = policy.hidden(batch)[use.to(policy.device)]
        logp = token_logprob(hidden, policy.head, inputs.token_id[sl][use],
                             temperature=pass_cfg.temperature, chunk_tokens=pass_cfg.chunk_tokens)
        dev = logp.device
        loss = surrogate_loss(logp, inputs.logp_behavior[sl][use].to(dev),
                              inputs.advantage[sl][use].to(dev), w[use].to(dev), n_tokens)
        loss.backward()
