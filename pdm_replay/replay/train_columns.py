"""A rollout/v1 table's train columns from a checkpoint: replay's pre-update recompute.

``train_logprobs`` is log π(k_t) and ``train_topk_logprobs`` is log π at µ's logged top-K
ids (SPEC §5), so the support is the logged one, ``S = unique(topk_ids ∪ {k})``. The rows
go through exactly what a replay's pre pass runs on a step group
(``commands.replay_steps.pre_pass``): ``validate.check_batch`` and flattening,
:func:`~pdm_replay.replay.outputs.log_support`, right-padded
:func:`~pdm_replay.replay.batching.micro_batches` and
:func:`~pdm_replay.replay.forward.forward_stats` (chunked LM head, never an ``(N, V)``
logits tensor). Given the same rows in the same micro-batches and LM-head chunks, the
result is bit for bit the replay's ``logp_train`` / ``support_logp_pre`` (float32 here).

Examples
--------
>>> import numpy as np, pyarrow as pa
>>> topk = pa.array([[[3, 7], [7, 1, 2]]], pa.list_(pa.list_(pa.int32())))
>>> lp = np.array([[-1.0, -2.0, -np.inf], [-0.5, -0.25, -3.0]], np.float32)  # (N, W)
>>> like_topk(topk, lp).to_pylist()
[[[-1.0, -2.0], [-0.5, -0.25, -3.0]]]
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch import Tensor

from pdm_replay.errors import InputError
from pdm_replay.io.reader import FlatTokens, RaggedIndex
from pdm_replay.replay.batching import micro_batches
from pdm_replay.replay.checkpoint import Policy
from pdm_replay.replay.forward import PassConfig, forward_stats
from pdm_replay.replay.outputs import log_support
from pdm_replay.schema import ROLLOUT_V1
from pdm_replay.checks import ValidationReport, check_batch

TRAIN_K = "train_logprobs"
TRAIN_TOPK = "train_topk_logprobs"


def checked_flat(table: pa.Table, vocab_size: int, max_topk: int | None, source: str
                 ) -> FlatTokens:
    """``table``'s rows flattened after ``validate``'s checks (as replay's seed batches);
    the first problem raises :class:`InputError` naming ``source``, the sample and the
    position."""
    batch = pa.RecordBatch.from_struct_array(table.to_struct_array().combine_chunks())
    report = ValidationReport(source, max_errors=1)
    with np.errstate(over="ignore", invalid="ignore"):  # non-finite values are reported
        flat = check_batch(batch, source, 0, vocab_size, report, set(), summarize=False,
                           max_topk=max_topk)
    if not report.ok or flat is None:
        problem = report.errors[0] if report.errors else "no usable rows"
        raise InputError(str(problem), fix="run `pdm-replay validate` on the log for every "
                         "problem")
    return flat


def topk_logprobs(logp_s: Tensor, token_id: Tensor, topk_ids: Tensor) -> Tensor:
    """log π at the logged top-K slots ``(N, W)`` from log π on the support ``(N, W + 1)``.

    Support column ``j + 1`` is top-K slot ``j``; a slot holding k itself (``plus_sampled``
    and ``replace_last`` both log it) is invalid in the support and takes column 0, k's
    value; padding slots stay ``-inf``.
    """
    out = logp_s[:, 1:].clone()
    is_k = topk_ids.long() == token_id.long()[:, None]
    return torch.where(is_k, logp_s[:, :1].expand_as(out), out)


def like_topk(topk_ids: pa.Array | pa.ChunkedArray, padded: np.ndarray) -> pa.ListArray:
    """A ``list<list<float32>>`` column shaped like ``topk_ids`` from its values padded to
    ``(N, W)`` (the layout :func:`~pdm_replay.io.reader.flatten_batch` gives the ids)."""
    if isinstance(topk_ids, pa.ChunkedArray):
        topk_ids = topk_ids.combine_chunks()
    index = RaggedIndex.of(pc.list_flatten(topk_ids), padded.shape[1])
    inner = pa.ListArray.from_arrays(pa.array(index.offsets, pa.int32()),
                                     pa.array(padded[index.filled], pa.float32()))
    return pa.ListArray.from_arrays(_offsets(topk_ids), inner)


def _offsets(lists: pa.Array) -> pa.Array:
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    return pa.array(np.concatenate([[0], np.cumsum(lengths)]), pa.int32())


def _set(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    field = ROLLOUT_V1.field(name)
    if name in table.column_names:
        return table.set_column(table.column_names.index(name), field, values)
    return table.append_column(field, values)


def recompute_train(policy: Policy, table: pa.Table, cfg: PassConfig, micro_batch_size: int,
                    source: str, max_topk: int | None = None) -> pa.Table:
    """``table`` (rollout/v1 rows of one logged step, replay's row order) with
    ``train_logprobs`` and ``train_topk_logprobs`` recomputed from ``policy``."""
    table = table.combine_chunks()
    flat = checked_flat(table, policy.vocab_size, max_topk, source)
    support, _ = log_support(flat)
    batches = micro_batches(table["prompt_ids"].to_pylist(), table["response_ids"].to_pylist(),
                            micro_batch_size)
    pi = forward_stats(policy, batches, support, cfg)
    t = torch.from_numpy
    topk = topk_logprobs(pi.logp_s, t(flat.token_id), t(flat.topk_ids)).float().numpy()
    k = pa.ListArray.from_arrays(_offsets(table["response_ids"].combine_chunks()),
                                 pa.array(pi.logp_k.float().numpy(), pa.float32()))
    return _set(_set(table, TRAIN_K, k), TRAIN_TOPK, like_topk(table["topk_ids"], topk))
