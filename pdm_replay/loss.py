"""Any registered mask as a training loss: the replay's surrogate, in a trainer.

:func:`policy_loss` returns ``−Σ_t w_t · r_t · Â_t / N`` with ``r_t = π(k_t)/µ(k_t)``
carrying the gradient through ``logp`` and ``w_t`` the mask's weight (0/1 keep, or an IS
weight) computed from detached statistics: exactly the loss whose gradient the replay's
:func:`~pdm_replay.replay.step.simulated_step` applies
(:func:`~pdm_replay.math.surrogate.surrogate_loss`, called here), so a mask studied offline
trains the same way online. ``N`` is every loss token (``loss_mask.sum()``), as in the
replay: a mask never changes the normalizer. See ``docs/loss.md`` for TRL and verl use.

Examples
--------
PDM-KL (aggregated tail) on 1 response of 2 tokens with a top-1 log, ``Â = +1``:

>>> import torch
>>> logp = torch.log(torch.tensor([[0.5, 0.2]], dtype=torch.float64)).requires_grad_()
>>> mu = torch.log(torch.tensor([[0.4, 0.25]], dtype=torch.float64))
>>> loss = policy_loss("pdm_kl_agg", logp, mu, torch.ones(1, 2), torch.ones(1, 2, dtype=torch.bool),
...                    token_ids=torch.tensor([[3, 4]]), vocab_size=10)
>>> round(float(loss.detach()), 6)  # −(0.5/0.4 + 0.2/0.25)/2: both tokens inside δ = 0.15
-1.025
"""

from __future__ import annotations

import torch
from torch import Tensor

from pdm_replay.masks import MASK_SPECS, Mask, Thresholds
from pdm_replay.math.metrics import TokenStats
from pdm_replay.math.segments import Segments
from pdm_replay.math.sums import pair_sums
from pdm_replay.math.support import build_support, reduce_logged_pair
from pdm_replay.math.surrogate import surrogate_loss
from pdm_replay.math.token_builder import LoggedTopK, build_token_stats


def mask_stats(logp: Tensor, logp_behavior: Tensor, advantages: Tensor,
               token_ids: Tensor | None, topk_ids: Tensor | None,
               topk_logp_behavior: Tensor | None, topk_logp_train: Tensor | None,
               vocab_size: int | None, top_k: int | None = None,
               topk_convention: str = "plus_sampled") -> TokenStats:
    """TokenStats ``(N,)`` of flat loss tokens, detached: ``logp``, ``logp_behavior``,
    ``advantages``, ``token_ids`` ``(N,)``; top-K ids and log-probs ``(N, K)`` (None: the
    binary support {k} + tail, so only ratio / binary masks are meaningful, and the token
    ids are not needed). ``vocab_size`` None: the uniform-tail estimators see no unseen
    token (they then equal the aggregated ones). ``top_k`` / ``topk_convention``: as the
    rollout/v1 footer's, they say which logged slots are genuine top-K entries of µ
    (:class:`~pdm_replay.math.token_builder.LoggedTopK`), whose smallest probability caps
    unseen µ_j in the sign certificate, as ``masks`` and ``replay`` do (the same builder);
    ``top_k`` None: no cap, µ_tail alone bounds them (valid whatever the slots hold, but
    looser, so ``pdm_kl_certified`` may certify fewer tokens than ``masks``)."""
    n = logp.shape[0]
    if token_ids is None:
        if topk_ids is not None:
            raise ValueError("policy_loss: topk_ids needs token_ids (the sampled tokens)")
        token_ids = torch.zeros(n, dtype=torch.long, device=logp.device)
    if topk_ids is None:
        topk_ids = torch.zeros(n, 0, dtype=torch.long, device=logp.device)
        topk_logp_behavior = topk_logp_train = torch.zeros(n, 0, dtype=torch.float64,
                                                           device=logp.device)
    elif topk_logp_behavior is None or topk_logp_train is None:
        raise ValueError("policy_loss: topk_ids needs topk_logp_behavior and topk_logp_train")
    # statistics carry no gradient
    def d(x):
        return x.detach().double()
    support = build_support(token_ids.long(), topk_ids.long())
    sums = pair_sums(reduce_logged_pair(support, (d(logp_behavior), d(topk_logp_behavior)),
                                        (d(logp), d(topk_logp_train))))
    topk = (None if top_k is None else
            LoggedTopK(topk_ids.long(), topk_logp_behavior.detach(), top_k, topk_convention))
    return build_token_stats(sums, token_ids.long(), d(advantages),
                             vocab_size if vocab_size is not None else support.ids.shape[1],
                             topk)


def policy_loss(mask: str | Mask, logp: Tensor, logp_behavior: Tensor, advantages: Tensor,
                loss_mask: Tensor, *, token_ids: Tensor | None = None,
                topk_ids: Tensor | None = None, topk_logp_behavior: Tensor | None = None,
                topk_logp_train: Tensor | None = None, vocab_size: int | None = None,
                top_k: int | None = None, topk_convention: str = "plus_sampled",
                thresholds: Thresholds = Thresholds(), n_tokens: int | None = None) -> Tensor:
    """The scalar surrogate of ``mask`` (a registered name or a built mask).

    ``logp`` ``(B, T)`` is log π(k_t) with gradient; ``logp_behavior``, ``advantages``,
    ``loss_mask``, ``token_ids`` ``(B, T)``; ``topk_ids`` and both top-K log-probs
    ``(B, T, K)`` (padding ids < 0; omit them and ``token_ids`` for ratio / binary masks).
    ``top_k`` / ``topk_convention``: the log's K and convention (see :func:`mask_stats`).
    ``advantages`` may be ``(B, 1)`` (one per response, as TRL's). Each row of ``(B, T)``
    is one response (sequence masks reduce over its loss tokens). ``n_tokens``: the
    normalizer (default: the loss tokens here; pass the global count under data
    parallelism).
    """
    sel = loss_mask.bool()
    advantages = advantages.expand_as(logp)
    def pick(x):
        return None if x is None else x[sel]
    stats = mask_stats(logp[sel], logp_behavior[sel], advantages[sel], pick(token_ids),
                       pick(topk_ids), pick(topk_logp_behavior), pick(topk_logp_train),
                       vocab_size, top_k, topk_convention)
    rows = torch.arange(sel.shape[0], device=sel.device)[:, None].expand_as(sel)[sel]
    seqs = Segments(rows, torch.ones_like(rows, dtype=torch.bool))
    built = MASK_SPECS[mask].build(thresholds) if isinstance(mask, str) else mask
    weight = built.weight(stats, seqs).to(logp.device)
    n = int(sel.sum()) if n_tokens is None else n_tokens
    return surrogate_loss(logp[sel], logp_behavior[sel].detach(), advantages[sel].detach(),
                          weight, n)
