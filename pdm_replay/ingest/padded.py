"""Padded trainer batches (B samples x T positions x K top-K slots) -> rollout/v1 rows.

Used by the ``verl`` ingest format and :class:`RolloutLogger`'s padded inputs; ragged
rows (the JSON formats, ``columns``) keep their lists and put only their top-K slots
through the same rule, :func:`slot_columns` (:mod:`pdm_replay.ingest.ragged`).
Pure numpy + Arrow, vectorized; no torch import.

**Padding rule** (top-K slots of position t of sample b):

1. positions ``t >= lengths[b]`` (right padding of the response) are dropped whole;
2. a slot is padding when its id is negative (``-1`` padding), or its log-prob is
   ``-inf`` (zero mass: it adds nothing to any sum), or — when an explicit
   ``topk_valid`` mask is given — the mask is False;
3. without a valid mask and with ``zero_padded=True`` (the DPPO fork's zero-padded
   ``(B, T, K)`` tensors), a slot is padding when its id is 0 AND its log-prob is exactly
   ``0.0``. A genuine token 0 has a log-prob below 0 and survives. A genuine token 0
   with log-prob exactly 0.0 had probability 1, so it is the sampled token, and the
   sampled token is always in the support (``response_ids``): nothing is lost;
4. a token id listed twice (the sampled token next to its own top-K entry) keeps its
   first slot; two different log-probs for one id reject the sample.

**Slot order** is kept as given. ``plus_sampled`` logs must list the genuine top-K first
and the sampled token (when outside them) last: the sign certificates trust the first
``top_k`` slots as real top-K entries. ``replace_last`` logs (sail-sg/Stable-RL's
``rollout_topk_*`` tensors, vLLM's OpenAI server) hold K slots in rank order whose last
slot is the sampled token when it is outside the top-K; the certificates never trust
that slot.

Examples
--------
>>> import numpy as np
>>> b = PaddedRollouts(sample_id=["a"], step=np.array([0]),
...                    response_ids=np.array([[0, 4, 9]]),
...                    lengths=np.array([2]), advantages=np.array([1.0]),
...                    behavior_logprobs=np.array([[-0.5, -0.2, 0.0]]),
...                    topk_ids=np.array([[[0, 3, 0], [4, 0, 0], [0, 0, 0]]]),
...                    topk_logprobs=np.array([[[-0.5, -1.5, 0.0], [-0.2, 0.0, 0.0],
...                                             [0.0, 0.0, 0.0]]]))
>>> table, problems = padded_to_table(b)
>>> table.column("topk_ids").to_pylist(), problems
([[[0, 3], [4]]], {})
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

CONFLICT_ATOL = 1e-3  # two log-probs of one token id that differ by more are a conflict
PER_POSITION = ("advantages", "behavior_logprobs", "loss_mask", "train_logprobs")
PER_SLOT = ("topk_logprobs", "topk_valid", "train_topk_logprobs")


@dataclass
class PaddedRollouts:
    """B samples of one trainer batch as padded numpy arrays (see the module docstring)."""

    sample_id: Sequence[str]  # (B,)
    step: np.ndarray  # (B,) int
    response_ids: np.ndarray  # (B, T) int
    lengths: np.ndarray  # (B,) int, response length of each sample (<= T)
    advantages: np.ndarray  # (B, T), or (B,) for one advantage per sample
    behavior_logprobs: np.ndarray  # (B, T)
    topk_ids: np.ndarray | None = None  # (B, T, K) int
    topk_logprobs: np.ndarray | None = None  # (B, T, K)
    topk_valid: np.ndarray | None = None  # (B, T, K) bool, authoritative when given
    loss_mask: np.ndarray | None = None  # (B, T) bool
    train_logprobs: np.ndarray | None = None  # (B, T)
    train_topk_logprobs: np.ndarray | None = None  # (B, T, K) at topk_ids
    prompt_ids: np.ndarray | None = None  # (B, P)
    prompt_mask: np.ndarray | None = None  # (B, P) bool: which prompt entries are tokens
    group_id: Sequence[str] | None = None  # (B,)
    reward: np.ndarray | None = None  # (B,)
    # Optional fields some samples lack: name -> (B,) bool, True where the sample has it.
    present: dict[str, np.ndarray] = field(default_factory=dict)

    def has(self, name: str) -> np.ndarray:
        """(B,) bool: which samples carry optional field ``name``."""
        default = np.full(len(self.sample_id), getattr(self, name) is not None)
        return np.asarray(self.present.get(name, default), dtype=bool)


def check_shapes(batch: PaddedRollouts, names: Mapping[str, str] | None = None) -> None:
    """Raise ``ValueError`` naming the first array whose shape does not fit the batch.

    ``names`` maps field names to the names the caller's input uses, for the message.
    """
    names = names or {}
    ids = np.asarray(batch.response_ids)
    if ids.ndim != 2:
        raise ValueError(f"{names.get('response_ids', 'response_ids')} has shape "
                         f"{ids.shape}; expected (B, T)")
    b, t = ids.shape
    want: dict[str, tuple[int, ...]] = {"lengths": (b,), "step": (b,)}
    want.update({k: (b, t) for k in PER_POSITION})
    if np.ndim(batch.advantages) == 1:
        want["advantages"] = (b,)
    if batch.topk_ids is not None:
        k = np.shape(batch.topk_ids)[-1] if np.ndim(batch.topk_ids) == 3 else -1
        want.update({"topk_ids": (b, t, k)} | {name: (b, t, k) for name in PER_SLOT})
    elif batch.topk_logprobs is not None:
        raise ValueError("topk_logprobs given without topk_ids")
    if batch.prompt_ids is not None:
        p = np.shape(batch.prompt_ids)[-1] if np.ndim(batch.prompt_ids) == 2 else -1
        want["prompt_ids"] = want["prompt_mask"] = (b, p)
    want["reward"] = (b,)
    for name, shape in want.items():
        value = getattr(batch, name)
        if value is not None and np.shape(value) != shape:
            raise ValueError(f"{names.get(name, name)} has shape {np.shape(value)}, "
                             f"expected {shape} "
                             f"(B={b} samples, T={t} response positions"
                             f"{', K top-K slots' if len(shape) == 3 else ''})")
    if len(batch.sample_id) != b or (batch.group_id is not None and len(batch.group_id) != b):
        raise ValueError(f"sample_id/group_id need {b} entries, one per sample")
    if np.any(np.asarray(batch.lengths) > t) or np.any(np.asarray(batch.lengths) < 0):
        raise ValueError(f"lengths must lie in [0, {t}]")


def topk_keep(ids: np.ndarray, lps: np.ndarray, valid: np.ndarray | None = None,
              zero_padded: bool = True) -> np.ndarray:
    """Padding rule 2-3: which top-K slots ``(N, K)`` hold real entries.

    >>> topk_keep(np.array([[0, 0, 7, -1]]), np.array([[-0.3, 0.0, -1.0, -2.0]])).tolist()
    [[True, False, True, False]]
    """
    keep = (ids >= 0) & ~np.isneginf(lps)
    if valid is not None:
        return keep & valid.astype(bool)
    if zero_padded:
        keep &= ~((ids == 0) & (lps == 0.0))
    return keep


def first_occurrences(ids: np.ndarray, keep: np.ndarray, lps: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Padding rule 4 on ``(N, K)`` slots: (repeat (N, K) bool, conflict (N, K) bool).

    ``repeat`` marks kept slots whose id occurred in an earlier kept slot of the same
    row; ``conflict`` marks repeats whose log-prob differs from the first (or is NaN).
    """
    n, k = ids.shape
    marked = np.where(keep, ids.astype(np.int64), -1 - np.arange(k, dtype=np.int64))
    order = np.argsort(marked, axis=1, kind="stable")  # equal ids: original order kept
    srt = np.take_along_axis(marked, order, 1)
    rep_sorted = np.zeros((n, k), dtype=bool)
    rep_sorted[:, 1:] = srt[:, 1:] == srt[:, :-1]
    first = np.maximum.accumulate(np.where(rep_sorted, 0, np.arange(k)[None, :]), axis=1)
    lp_sorted = np.take_along_axis(lps, order, 1)
    lp_first = np.take_along_axis(lp_sorted, first, 1)
    with np.errstate(invalid="ignore"):  # NaN or inf - inf: not close, so a conflict
        close = np.abs(lp_sorted - lp_first) <= CONFLICT_ATOL * (1.0 + np.abs(lp_first))
    repeat, conflict = np.zeros((n, k), dtype=bool), np.zeros((n, k), dtype=bool)
    np.put_along_axis(repeat, order, rep_sorted, 1)
    np.put_along_axis(conflict, order, rep_sorted & ~close, 1)
    return repeat, conflict


def _offsets(counts: np.ndarray) -> pa.Array:
    return pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))


def _lists(counts: np.ndarray, values: np.ndarray, typ: pa.DataType,
           has: np.ndarray | None = None) -> pa.Array:
    """``list<typ>`` of len(counts) rows; rows where ``has`` is False are null (count 0)."""
    mask = None if has is None or has.all() else pa.array(~has)
    return pa.ListArray.from_arrays(_offsets(counts), pa.array(values, type=typ), mask=mask)


class Layout:
    """Which (sample, position) pairs are real: ``b``/``t`` index the N kept positions."""

    def __init__(self, lengths: np.ndarray, width: int) -> None:
        self.lengths, self.width = lengths.astype(np.int64), width
        self.b, self.t = np.nonzero(np.arange(width)[None, :] < self.lengths[:, None])

    def per_token(self, value: Any, typ: pa.DataType, dtype: Any,
                  has: np.ndarray) -> pa.Array:
        """(B, T) or (B,) broadcast -> ``list<typ>`` over real positions of present rows."""
        arr = np.asarray(value).astype(dtype)
        if arr.ndim == 1:
            arr = np.broadcast_to(arr[:, None], (len(self.lengths), self.width))
        sel = has[self.b]
        return _lists(np.where(has, self.lengths, 0), arr[self.b[sel], self.t[sel]], typ, has)

    def nested(self, inner: np.ndarray, values: np.ndarray, typ: pa.DataType,
               has: np.ndarray) -> pa.Array:
        """``list<list<typ>>``: ``inner`` (N,) entries per position, ``values`` of present rows."""
        sel = has[self.b]
        positions = _lists(inner[sel], values, typ)
        mask = None if has.all() else pa.array(~has)
        return pa.ListArray.from_arrays(_offsets(np.where(has, self.lengths, 0)), positions,
                                        mask=mask)


def slot_columns(lay: Layout, ids: np.ndarray, lps: np.ndarray, zero_padded: bool,
                 valid: np.ndarray | None = None, train: np.ndarray | None = None,
                 train_has: np.ndarray | None = None
                 ) -> tuple[dict[str, pa.Array], dict[int, str]]:
    """The padding rule (2-4) on the top-K slots of ``lay``'s N positions, compacted.

    ``ids``, ``lps`` (log-probs), ``valid`` and ``train`` (log pi at the slots) are
    (N, K), one row per position in ``lay``'s order; ``train_has`` (B,) says which samples
    carry ``train``. Returns the ``topk_ids`` / ``topk_logprobs`` (/ ``train_topk_logprobs``)
    columns of the B samples and ``{sample: reason}`` for samples listing one id twice with
    different log-probs.
    """
    keep = topk_keep(ids, lps, valid, zero_padded)
    repeat, conflict = first_occurrences(ids, keep, lps)
    keep &= ~repeat
    inner, every = keep.sum(1), np.ones(len(lay.lengths), dtype=bool)
    cols = {"topk_ids": lay.nested(inner, ids[keep].astype(np.int32), pa.int32(), every),
            "topk_logprobs": lay.nested(inner, lps[keep].astype(np.float32), pa.float32(),
                                        every)}
    if train is not None and train_has is not None:
        tr = train.astype(np.float32, copy=False)
        cols["train_topk_logprobs"] = lay.nested(inner, tr[keep & train_has[lay.b][:, None]],
                                                 pa.float32(), train_has)
    problems: dict[int, str] = {}
    for i, j in zip(*np.nonzero(conflict)):
        problems.setdefault(int(lay.b[i]), f"pos {int(lay.t[i])}: top-K lists token id "
                            f"{int(ids[i, j])} twice with different log-probs")
    return cols, problems


def _topk_columns(batch: PaddedRollouts, lay: Layout, zero_padded: bool
                  ) -> tuple[dict[str, pa.Array], dict[int, str]]:
    """The batch's top-K slots at ``lay``'s positions through :func:`slot_columns`."""
    n = len(lay.b)
    if batch.topk_ids is None:
        return slot_columns(lay, np.zeros((n, 0), np.int64), np.zeros((n, 0)), zero_padded)
    valid = None if batch.topk_valid is None else np.asarray(batch.topk_valid)[lay.b, lay.t]
    train = (None if batch.train_topk_logprobs is None else
             np.asarray(batch.train_topk_logprobs, dtype=np.float32)[lay.b, lay.t])
    return slot_columns(lay, np.asarray(batch.topk_ids)[lay.b, lay.t],
                        np.asarray(batch.topk_logprobs, dtype=np.float64)[lay.b, lay.t],
                        zero_padded, valid, train, batch.has("train_topk_logprobs"))


def _optional_columns(batch: PaddedRollouts, lay: Layout) -> dict[str, Any]:
    cols: dict[str, Any] = {}
    for name, typ, dtype in (("loss_mask", pa.bool_(), bool),
                             ("train_logprobs", pa.float32(), np.float32)):
        if getattr(batch, name) is not None:
            cols[name] = lay.per_token(getattr(batch, name), typ, dtype, batch.has(name))
    if batch.prompt_ids is not None:
        has = batch.has("prompt_ids")
        prompts = np.asarray(batch.prompt_ids)
        mask = (np.ones(prompts.shape, dtype=bool) if batch.prompt_mask is None
                else np.asarray(batch.prompt_mask).astype(bool)) & has[:, None]
        cols["prompt_ids"] = _lists(mask.sum(1), prompts[mask].astype(np.int32), pa.int32(),
                                    has)
    if batch.reward is not None:
        cols["reward"] = pa.array(np.asarray(batch.reward, dtype=np.float32),
                                  mask=~batch.has("reward"))
    if batch.group_id is not None:
        cols["group_id"] = pa.array([None if g is None else str(g) for g in batch.group_id],
                                    pa.string())
    return cols


def padded_to_table(batch: PaddedRollouts, zero_padded: bool = True
                    ) -> tuple[pa.Table, dict[int, str]]:
    """All B samples as rollout/v1 columns, and ``{row: reason}`` for samples to reject.

    Shapes must fit (:func:`check_shapes` raises otherwise). Values are not range-checked
    here: ``pdm_replay.checks.check_batch`` does that on the result.
    """
    check_shapes(batch)
    lay = Layout(np.asarray(batch.lengths), np.shape(batch.response_ids)[1])
    every = np.ones(len(lay.lengths), dtype=bool)
    cols: dict[str, Any] = {
        "sample_id": pa.array([str(s) for s in batch.sample_id], pa.string()),
        "step": pa.array(np.asarray(batch.step).astype(np.int64)),
        "response_ids": lay.per_token(batch.response_ids, pa.int32(), np.int32, every),
        "advantages": lay.per_token(batch.advantages, pa.float32(), np.float32, every),
        "behavior_logprobs": lay.per_token(batch.behavior_logprobs, pa.float32(), np.float32,
                                           every),
    }
    cols.update(_optional_columns(batch, lay))
    topk, problems = _topk_columns(batch, lay, zero_padded)
    cols.update(topk)
    return pa.table(cols), problems


def topk_widths(table: pa.Table) -> tuple[int, int]:
    """(longest top-K row, most entries before an appended sampled token) of ``table``.

    Under plus_sampled a row ending in the sampled token k counts one entry less: that is
    k appended after the top-K (or k as the K-th entry, which only this row can't tell).
    """
    rows = pc.list_flatten(table["topk_ids"].combine_chunks())
    widths = pc.fill_null(pc.list_value_length(rows), 0).to_numpy(zero_copy_only=False)
    if widths.size == 0 or widths.max() == 0:
        return 0, 0
    values = pc.list_flatten(rows).to_numpy(zero_copy_only=False)
    last = values[np.maximum(np.cumsum(widths) - 1, 0)]
    tokens = pc.list_flatten(table["response_ids"].combine_chunks()).to_numpy(
        zero_copy_only=False)
    genuine = widths - ((widths > 0) & (last == tokens))
    return int(widths.max()), int(genuine.max())


def lengths_from_mask(mask: np.ndarray) -> np.ndarray:
    """Response length per row ``(B,)``: one past the last nonzero entry of ``mask`` (B, T).

    Zeros inside the response (e.g. tool-output tokens with ``response_mask`` 0) are kept
    as positions; only the right padding after the last real token is dropped.

    >>> lengths_from_mask(np.array([[1, 0, 1, 0], [0, 0, 0, 0]])).tolist()
    [3, 0]
    """
    mask = np.asarray(mask).astype(bool)
    t = mask.shape[1]
    last = t - np.argmax(mask[:, ::-1], axis=1)
    return np.where(mask.any(1), last, 0).astype(np.int64)


def as_numpy(value: Any) -> np.ndarray:
    """A torch tensor (any device, bf16 included), numpy array or nested list as numpy."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        try:
            return value.numpy()
        except TypeError:  # bfloat16 and friends have no numpy dtype
            return value.float().numpy()
    return np.asarray(value)


def mapping_get(mapping: Mapping, *names: str) -> Any:
    """The first of ``names`` present in ``mapping`` (None when none is)."""
    for name in names:
        if name in mapping and mapping[name] is not None:
            return mapping[name]
    return None
