"""Log-only token metrics: flattened rollout tokens -> tokens/v1 rows (no model needed).

Examples
--------
>>> import tempfile, pathlib
>>> from pdm_replay.testing.fixtures import write_synthetic_log
>>> from pdm_replay.io.reader import iter_flat_tokens
>>> from pdm_replay.masks import Thresholds, build_masks
>>> p = write_synthetic_log(pathlib.Path(tempfile.mkdtemp()) / "l.parquet", n_samples=2,
...                         response_len=3, vocab_size=40, top_k=4)
>>> flat = next(iter_flat_tokens(p))
>>> stats = log_stats(flat, 40, None)  # None: no footer read, no genuine-top-K cap
>>> table = token_table(flat, stats, build_masks(["none"], Thresholds()))
>>> table.num_rows, table.column("keep_none").to_pylist()
(6, [True, True, True, True, True, True])
"""

from __future__ import annotations

from functools import cache
from typing import Mapping

import numpy as np
import pyarrow as pa
import torch

from pdm_replay.io.reader import FlatTokens
from pdm_replay.masks import Mask, weight_masks
from pdm_replay.math.metrics import TokenStats
from pdm_replay.math.segments import Segments
from pdm_replay.math.sums import Pair, PairSums, pair_sums
from pdm_replay.math.support import Support, build_support, reduce_logged_pair
from pdm_replay.math.certificates import CERT_LABELS
from pdm_replay.math.token_builder import LoggedTopK, build_token_stats
from pdm_replay.schema import RolloutMeta, keep_column, tokens_schema, weight_column

TRAIN_COLUMNS = ("train_logprobs", "train_topk_logprobs")
SUPPORT_CHUNK = 1 << 12  # tokens per support pass: (N, K+1) float64 temporaries of 0.7 MB


@cache
def cert_names() -> pa.Array:
    """Certificate labels indexed by code + 1. Built on first use: any ``pa.array`` of
    Python objects imports pandas (~0.2 s), which a replay need not pay before its first
    seed (issue 20)."""
    return pa.array([CERT_LABELS[c] for c in (-1, 0, 1)], type=pa.string())


def log_stats(flat: FlatTokens, vocab_size: int, meta: RolloutMeta | None, *,
              validated: bool = False) -> TokenStats:
    """Token statistics from logged µ and logged π (log-only mode). N = ``len(flat)``.

    ``meta`` (top-K size and convention) lets the sign certificate use the smallest genuine
    top-K probability as a bound on unseen tokens (:func:`flat_stats`); ``None`` only for a
    log with no footer: then only µ_tail bounds them.
    ``validated=True`` says ``flat`` passed ``validate``'s checks
    (:func:`~pdm_replay.checks.check_batch`), so no top-K row repeats an id.
    The ``(N, K + 1)`` support math runs ``SUPPORT_CHUNK`` tokens at a time, so each
    temporary stays in L2; the per-token math then runs once on the ``(N,)`` sums.
    """
    if flat.train_logprobs is None or flat.train_topk_logprobs is None:
        raise ValueError("log-only metrics need train_logprobs and train_topk_logprobs")
    parts = [log_pair_sums(flat.take(slice(s, s + SUPPORT_CHUNK)), known_unique=validated)
             for s in range(0, max(len(flat), 1), SUPPORT_CHUNK)]
    sums = parts[0] if len(parts) == 1 else PairSums.cat(parts)
    return flat_stats(flat, sums, vocab_size, meta)


def flat_stats(flat: FlatTokens, pair: Pair, vocab_size: int, meta: RolloutMeta | None
               ) -> TokenStats:
    """Statistics ``(N,)`` of the tokens of ``flat`` from µ and π on their supports
    (``pair``, π logged or recomputed): :func:`~pdm_replay.math.token_builder.build_token_stats`
    with the log's top-K (:func:`logged_topk`), shared by ``masks`` and ``replay``."""
    t = torch.from_numpy
    return build_token_stats(pair, t(flat.token_id), t(flat.advantage), vocab_size,
                             logged_topk(flat, meta))


def logged_topk(flat: FlatTokens, meta: RolloutMeta | None) -> LoggedTopK | None:
    """µ's logged top-K of ``flat`` ``(N, W)`` under the footer's ``top_k`` and
    ``topk_convention`` (None without a footer)."""
    if meta is None:
        return None
    t = torch.from_numpy
    return LoggedTopK(t(flat.topk_ids), t(flat.topk_logprobs), meta.top_k,
                      meta.topk_convention)


def log_pair_sums(flat: FlatTokens, *, known_unique: bool = False) -> PairSums:
    """:class:`PairSums` ``(N,)`` of logged µ and π on each token's support
    (``known_unique``: see :func:`~pdm_replay.math.support.build_support`)."""
    t = torch.from_numpy
    support = build_support(t(flat.token_id), t(flat.topk_ids), known_unique=known_unique)
    return pair_sums(reduce_logged_pair(
        support, (t(flat.logp_behavior), t(flat.topk_logprobs)),
        (t(flat.train_logprobs), t(flat.train_topk_logprobs))))


def support_list(values: np.ndarray, valid: np.ndarray, type_: pa.DataType) -> pa.ListArray:
    """Arrow list array ``(N,)`` of ``values`` ``(N, M)`` at the ``valid`` slots, in order.

    >>> support_list(np.array([[1, 2, 0], [3, 0, 0]]), np.array([[1, 1, 0], [1, 0, 0]], bool),
    ...              pa.int32()).to_pylist()
    [[1, 2], [3]]
    """
    offsets = np.zeros(len(valid) + 1, dtype=np.int32)
    np.cumsum(valid.sum(1), out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values[valid], type=type_))


def support_logp_list(logp_s: torch.Tensor, valid: np.ndarray) -> pa.ListArray:
    """:func:`support_list` of log-probs on S ``(N, M)`` (any device), as float32: K+1
    floats per token are plenty for the dashboard's per-token view."""
    return support_list(logp_s.cpu().float().numpy(), valid, pa.float32())


def support_lists(support: Support, logp_behavior_s: torch.Tensor, logp_train_s: torch.Tensor
                  ) -> dict[str, pa.ListArray]:
    """tokens/v1's ``support_ids``, ``support_logp_behavior`` and ``support_logp_pre`` ``(N,)``:
    the support and log µ, log π_pre on it ``(N, M)``, invalid slots dropped."""
    valid = support.valid.cpu().numpy()
    return {"support_ids": support_list(support.ids.cpu().numpy(), valid, pa.int32()),
            "support_logp_behavior": support_logp_list(logp_behavior_s, valid),
            "support_logp_pre": support_logp_list(logp_train_s, valid)}


def runs_to_arrow(values: np.ndarray, run_key: np.ndarray) -> pa.Array:
    """Arrow strings of ``values`` ``(N,)`` (object), constant along runs of equal
    ``run_key`` ``(N,)``: converted once per run, since per-element conversion of Python
    strings cost as much as all the masks.

    >>> runs_to_arrow(np.array(["a", "a", "b"], dtype=object), np.array([0, 0, 1])).to_pylist()
    ['a', 'a', 'b']
    """
    if not len(values):
        return pa.array([], type=pa.string())
    starts = np.empty(len(run_key), dtype=bool)
    starts[0] = True
    np.not_equal(run_key[1:], run_key[:-1], out=starts[1:])
    return pa.array(values[starts], type=pa.string()).take(pa.array(np.cumsum(starts) - 1))


def token_table(flat: FlatTokens, stats: TokenStats, masks: Mapping[str, Mask], *,
                extra: Mapping[str, np.ndarray] | None = None, seed: int | None = None,
                lists: Mapping[str, pa.Array] | None = None) -> pa.Table:
    """tokens/v1 rows for the loss tokens of ``flat`` (``loss_mask`` True).

    ``extra`` adds columns (e.g. ``kl_exact``); ``seed`` adds the replay ``seed`` column
    and the per-support list columns, from ``lists`` (one entry per token of ``flat``,
    see :func:`support_list`) or null where absent.
    """
    masks = dict(masks)
    seqs = Segments.of(flat.row, flat.loss_mask)
    weights = {n: masks[n].weight(stats, seqs) for n in weight_masks(masks)}
    keep = {n: weights[n] > 0 if n in weights else mask.keep(stats, seqs)
            for n, mask in masks.items()}  # a weight mask keeps where w > 0: one pass
    sel = flat.loss_mask
    every = bool(sel.all())  # usually: then nothing is copied
    def pick(v):
        return v if every else v[sel]
    cols: dict[str, np.ndarray] = {"step": pick(flat.step), "pos": pick(flat.pos),
                                   "token_id": pick(flat.token_id)}
    cols.update({k: pick(v.numpy()) for k, v in stats.as_dict().items()})
    cols.update({k: pick(v) for k, v in (extra or {}).items()})
    cols.update({keep_column(k): pick(v.numpy()) for k, v in keep.items()})
    cols.update({weight_column(k): pick(v.numpy()) for k, v in weights.items()})
    n = len(cols["pos"])
    if seed is not None:
        cols["seed"] = np.full(n, seed, dtype=np.int64)
    schema = tokens_schema(masks, replay=seed is not None,
                           exact=bool(extra and "kl_exact" in extra))
    sel_arr = None if every else pa.array(sel)
    arrays = {k: (v if every else v.filter(sel_arr)).cast(schema.field(k).type)
              for k, v in (lists or {}).items()}
    arrays["sample_id"] = runs_to_arrow(pick(flat.sample_id), pick(flat.row))
    arrays["direction_certified"] = cert_names().take(pa.array(cols["direction_certified"] + 1))
    arrays.update({f.name: pa.nulls(n, f.type) for f in schema
                   if f.name not in cols and f.name not in arrays and f.nullable})
    return pa.table({f.name: arrays[f.name] if f.name in arrays
                     else pa.array(cols[f.name], type=f.type) for f in schema}, schema=schema)
