"""The one builder of per-token statistics: every command's :class:`TokenStats` come from here.

``masks`` (:func:`pdm_replay.tokens.log_stats`), ``replay``
(:func:`pdm_replay.replay.outputs.pre_update`) and the trainer-side loss
(:func:`pdm_replay.loss.mask_stats`) each hand :func:`build_token_stats` the same things:
µ and π on each token's support (a :class:`~pdm_replay.math.sums.Pair`), Â, the
vocabulary size and µ's logged top-K with the log's ``top_k`` / ``topk_convention``
(:class:`LoggedTopK`). A mask therefore decides a token identically whichever command
computed it: before this builder, ``replay`` and the loss skipped the genuine-top-K cap
on unseen µ_j that ``masks`` applied, so ``dkl_hi`` (and with it ``direction_certified``
and ``pdm_kl_certified``) differed between them (issue 35).

Examples
--------
S = {k, j}, µ = (0.5, 0.3 | tail 0.2), π = (0.4, 0.4 | tail 0.2), n = 4, Â = +1 (the
hand-worked case of :mod:`~pdm_replay.math.certificates`). With µ_j = 0.3 logged as a
genuine top-1 entry, unseen µ ≤ 0.3 is no tighter than µ_tail = 0.2, so the cap changes
nothing; a slot the convention marks as not genuine is ignored:

>>> import torch
>>> from pdm_replay.math.support import build_support, reduce_pair
>>> s = build_support(torch.tensor([0]), torch.tensor([[1]]))
>>> lg = lambda *p: torch.tensor([p], dtype=torch.float64).log()
>>> top = LoggedTopK(torch.tensor([[1]]), torch.tensor([[0.3]]).log(), 1, "plus_sampled")
>>> st = build_token_stats(reduce_pair(s, lg(0.5, 0.3), lg(0.4, 0.4)), torch.tensor([0]),
...                        torch.tensor([1.0]), 4, top)
>>> round(st.dkl_hi.item(), 12), int(st.direction_certified.item())
(-0.08, -1)
>>> round(top.cap(torch.tensor([0])).item(), 6)  # the genuine entry's µ_j
0.3
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from pdm_replay.math.certificates import genuine_topk, unseen_cap
from pdm_replay.math.metrics import TokenStats, token_stats
from pdm_replay.math.sums import Pair


@dataclass(frozen=True)
class LoggedTopK:
    """µ's logged top-K of N tokens and how it was logged: what bounds unseen µ_j.

    ``ids`` ``(N, W)`` (padding < 0) and ``logp`` ``(N, W)`` as logged (W = K, or K + 1
    under ``plus_sampled``); ``top_k`` and ``convention`` are the log's footer ``top_k``
    and ``topk_convention`` (:class:`~pdm_replay.schema.RolloutMeta`), which say which
    slots are genuine top-K entries of µ.
    """

    ids: Tensor
    logp: Tensor
    top_k: int
    convention: str

    def cap(self, token_id: Tensor) -> Tensor:
        """Bound ``(N,)`` on every unseen µ_j: the smallest genuine logged top-K
        probability (:func:`~pdm_replay.math.certificates.unseen_cap`); ``token_id`` ``(N,)``."""
        genuine = genuine_topk(self.ids, token_id, self.top_k, self.convention)
        return unseen_cap(self.logp, genuine)


def build_token_stats(pair: Pair, token_id: Tensor, advantage: Tensor, vocab_size: int,
                      topk: LoggedTopK | None) -> TokenStats:
    """Every tokens/v1 statistic ``(N,)`` of N tokens (:func:`~pdm_replay.math.metrics.token_stats`).

    ``pair``: µ and π on the support (reduced ``(N, M)`` or its sums ``(N,)``);
    ``token_id`` and ``advantage`` ``(N,)``; ``topk``: µ's logged top-K, whose genuine
    entries cap unseen µ_j in the sign certificate. ``None`` only where no top-K was
    logged at all (a binary support): then µ_tail alone bounds them.
    """
    cap = None if topk is None else topk.cap(token_id)
    return token_stats(pair, advantage, vocab_size, cap)
