"""Replay statistics -> tokens/v1 and updates/v1 Arrow tables (pure: no I/O, no model).

µ always comes from the log (top-K + tail), π from the recomputation, so the replay's
top-K columns mean exactly what the log-only ``masks`` command's do; the ``*_exact``
columns use the behavior checkpoint's full µ.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pyarrow as pa
import torch
from torch import Tensor

from pdm_replay.io.reader import FlatTokens
from pdm_replay.masks import Mask, Thresholds
from pdm_replay.math import divergence as dv
from pdm_replay.math.metrics import TokenStats
from pdm_replay.math.support import (Reduced, ReducedPair, Support, build_support,
                                     gather_support_logprobs, reduce_logprobs)
from pdm_replay.replay.recompute import SupportStats
from pdm_replay.schema import THRESHOLDS_KEY, UPDATES_V1, RolloutMeta
from pdm_replay.tokens import flat_stats, support_logp_list, support_lists, token_table

NULL_WHERE_NAN = frozenset({"delta_kl_self", "delta_kl_cross"})  # attribution sample only


@dataclass(frozen=True)
class PreUpdate:
    """Everything about θ's π that the masks and the ΔD columns need, for N tokens."""

    support: Support
    mu: Reduced
    pi: SupportStats
    stats: TokenStats

    def extra_columns(self) -> dict[str, np.ndarray]:
        """``kl_exact``/``dkl_exact`` and the µ-fidelity gaps (N,) when a behavior
        checkpoint was given."""
        if self.pi.exact is None:
            return {}
        return {"kl_exact": self.pi.exact.kl_exact.numpy(),
                "dkl_exact": self.pi.dkl_exact().numpy(), **behavior_gaps(self)}

    def support_lists(self) -> dict[str, pa.Array]:
        """The support list columns of tokens/v1 (:func:`~pdm_replay.tokens.support_lists`)."""
        return support_lists(self.support, self.mu.logp, self.pi.logp_s)


def behavior_gaps(pre: PreUpdate) -> dict[str, np.ndarray]:
    """Reloaded vs logged µ ``(N,)``: ``behavior_logp_gap`` (signed, at k) and
    ``behavior_logp_gap_max`` (largest absolute gap over the valid slots of S)."""
    exact, logged = pre.pi.exact, pre.mu.logp  # (N, M) each, -inf at invalid slots
    gap = (exact.logp_behavior_s - logged).abs().masked_fill(~pre.support.valid, 0.0)
    return {"behavior_logp_gap": (exact.logp_mu_k - pre.mu.logp_k).numpy(),
            "behavior_logp_gap_max": gap.amax(-1).numpy()}


def log_support(flat: FlatTokens) -> tuple[Support, Reduced]:
    """The support of every token and µ on it, from the log."""
    t = torch.from_numpy
    support = build_support(t(flat.token_id), t(flat.topk_ids))
    return support, reduce_logprobs(gather_support_logprobs(
        support, t(flat.logp_behavior), t(flat.topk_logprobs)))


def pre_update(flat: FlatTokens, support: Support, mu: Reduced, pi: SupportStats,
               vocab_size: int, meta: RolloutMeta) -> PreUpdate:
    """Token statistics of θ from the recomputed π and the logged µ, built as ``masks``
    builds them (:func:`~pdm_replay.tokens.flat_stats`: the log's top-K under ``meta``'s
    ``top_k`` / ``topk_convention`` caps unseen µ_j in the sign certificate)."""
    pair = ReducedPair(support, mu, pi.reduced())
    stats = flat_stats(flat, pair, vocab_size, meta)
    return PreUpdate(support, mu, pi, stats)


def tokens_part(flat: FlatTokens, pre: PreUpdate, masks: Mapping[str, Mask], seed: int,
                thresholds: Thresholds, footer: Mapping[str, str] | None = None) -> pa.Table:
    """tokens/v1 + ``seed`` for the loss tokens; thresholds (and ``footer``) in the footer,
    under the same keys as the log-only ``masks`` output."""
    table = token_table(flat, pre.stats, masks, extra=pre.extra_columns(), seed=seed,
                        lists=pre.support_lists())
    md = dict(table.schema.metadata or {})
    md[THRESHOLDS_KEY.encode()] = json.dumps(dataclasses.asdict(thresholds)).encode()
    md.update({k.encode(): v.encode() for k, v in (footer or {}).items()})
    return table.replace_schema_metadata(md)


def post_columns(pre: PreUpdate, post: SupportStats) -> dict[str, Tensor | pa.Array]:
    """updates/v1 value columns (N,) from π after one step, on the same supports;
    ``support_logp_post`` is a list array over S in the order of ``support_ids``."""
    pair = ReducedPair(pre.support, pre.mu, post.reduced())
    kl, tv = dv.kl_topk(pair), dv.tv_topk(pair)
    cols = {"logp_post": post.logp_k, "kl_topk_post": kl, "tv_topk_post": tv,
            "delta_kl_topk": kl - pre.stats.kl_topk, "delta_tv_topk": tv - pre.stats.tv_topk,
            "delta_logp": post.logp_k - pre.pi.logp_k,
            "support_logp_post": support_logp_list(post.logp_s,
                                                   pre.support.valid.cpu().numpy())}
    if post.exact is not None and pre.pi.exact is not None:
        cols["kl_exact_post"] = post.exact.kl_exact
        cols["delta_kl_exact"] = post.exact.kl_exact - pre.pi.exact.kl_exact
    return cols


def updates_part(flat: FlatTokens, seed: int, mask_name: str, kept: Tensor,
                 cols: Mapping[str, Tensor | pa.Array]) -> pa.Table:
    """updates/v1 rows of one update mask for the loss tokens of ``flat``; ``cols`` are
    tensors or Arrow arrays (N,) over every token of ``flat``."""
    sel = flat.loss_mask
    n = int(sel.sum())
    lists = {k: v.filter(pa.array(sel)) for k, v in cols.items() if isinstance(v, pa.Array)}
    data: dict[str, object] = {
        "seed": np.full(n, seed, dtype=np.int64), "update_mask": [mask_name] * n,
        "sample_id": flat.sample_id[sel], "pos": flat.pos[sel], "kept": kept.numpy()[sel]}
    data.update({k: v.numpy()[sel] for k, v in cols.items() if k not in lists})
    # NaN marks "not computed" in these sampled columns: written as null
    arrays = {k: pa.array(v, type=UPDATES_V1.field(k).type, from_pandas=k in NULL_WHERE_NAN)
              for k, v in data.items()}
    arrays.update(lists)
    return pa.table({f.name: arrays.get(f.name, pa.nulls(n, f.type)) for f in UPDATES_V1},
                    schema=UPDATES_V1)
