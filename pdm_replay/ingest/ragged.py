"""rollout/v1-typed Arrow rows (ragged lists): which are malformed, and their top-K slots
through the one padding rule, without padding the rows.

JSON formats, ``columns`` and :class:`RolloutLogger`'s ragged inputs produce ragged rows.
:func:`structural_problems` names the samples whose per-token lists disagree in length
(read from the lists' lengths); :func:`compact_topk` lays the top-K slots of the other
samples' positions out as (N positions, K slots) and applies
:func:`pdm_replay.ingest.padded.slot_columns`, the padding rule padded batches go through
too; every other column stays as it is.

Examples
--------
>>> import pyarrow as pa
>>> t = pa.table({"sample_id": ["a", "b"], "step": [0, 0], "response_ids": [[4, 2], [3]],
...               "advantages": [[1.0, 1.0], [0.5, 0.5]], "behavior_logprobs": [[-1.0, -2.0],
...               [-0.1]], "topk_ids": [[[4], [2, 4, 2]], [[3]]],
...               "topk_logprobs": [[[-1.0], [-2.0, -0.5, -2.0]], [[-0.1]]]})
>>> structural_problems(t)
{1: 'advantages has 2 entries but response_ids has 1'}
>>> table, conflicts = compact_topk(t.slice(0, 1), zero_padded=False)
>>> table.column("topk_ids").to_pylist(), conflicts
([[[4], [2, 4]]], {})
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pdm_replay.checks import ValidationReport, check_batch
from pdm_replay.ingest.padded import Layout, slot_columns
from pdm_replay.io.reader import pad_ragged

REQUIRED = ("sample_id", "step", "response_ids", "advantages", "behavior_logprobs",
            "topk_ids", "topk_logprobs")
PER_POSITION = ("advantages", "behavior_logprobs", "loss_mask", "train_logprobs")
# A null inside a per-token (or prompt) list reads as the value a padded batch's NumPy
# array holds there: token id 0, loss_mask False, NaN (which the checks reject). The top-K
# slots go through pad_ragged, which reads them the same way.
NULL_VALUE = {"response_ids": 0, "prompt_ids": 0, "loss_mask": False,
              "advantages": float("nan"), "behavior_logprobs": float("nan"),
              "train_logprobs": float("nan")}


class _Reader:
    """Column access over one table, collecting the first problem of each row."""

    def __init__(self, table: pa.Table) -> None:
        self.table, self.rows = table, table.num_rows
        self.problems: dict[int, str] = {}

    def col(self, name: str) -> pa.Array | None:
        if name not in self.table.column_names:
            return None
        return self.table.column(name).combine_chunks()

    def has(self, name: str) -> np.ndarray:
        c = self.col(name)
        if c is None:
            return np.zeros(self.rows, dtype=bool)
        return ~c.is_null().to_numpy(zero_copy_only=False)

    def lengths(self, name: str) -> np.ndarray:
        """(B,) entries of each row's list (0 where the row has none)."""
        c = self.col(name)
        if c is None:
            return np.zeros(self.rows, dtype=np.int64)
        return pc.fill_null(pc.list_value_length(c), 0).to_numpy(
            zero_copy_only=False).astype(np.int64)

    def flag(self, bad: np.ndarray, message: Callable[[int], str]) -> None:
        for i in np.flatnonzero(bad):
            self.problems.setdefault(int(i), message(int(i)))


def _flag_length(rd: _Reader, name: str, lengths: np.ndarray, unit: str) -> np.ndarray:
    """Flag rows whose ``name`` list is not one entry per response position; (B,) rows
    that have ``name`` with the right length."""
    has, n = rd.has(name), rd.lengths(name)
    rd.flag(has & (n != lengths),
            lambda i: f"{name} has {n[i]} {unit} but response_ids has {lengths[i]}")
    return has & (n == lengths)


def _flag_inner(rd: _Reader, rows: np.ndarray, names: tuple[str, str]) -> None:
    """Flag ``rows`` where the two top-K columns ``names`` (one entry per position each)
    list different numbers of entries at a position: the first such position."""
    if not rows.any():
        return
    index = np.flatnonzero(rows)
    sel = _Reader(rd.table.take(pa.array(index, pa.int64())))
    a, b = (_Reader(pa.table({n: pc.list_flatten(sel.col(n))})).lengths(n) for n in names)
    outer = sel.lengths(names[0])
    row = np.repeat(index, outer)
    pos = np.arange(len(row)) - np.repeat(np.cumsum(outer) - outer, outer)
    for k in np.flatnonzero(a != b):  # in order: a row's first bad position first
        rd.problems.setdefault(int(row[k]), f"pos {pos[k]}: {names[0]} has {a[k]} entries "
                                            f"but {names[1]} has {b[k]}")


def structural_problems(table: pa.Table) -> dict[int, str]:
    """``{row: reason}`` for rows that are malformed: a required column missing, a
    per-token list whose length is not the response's, top-K columns that disagree in
    entries at a position. A row keeps its first reason, in the order checked here."""
    rd = _Reader(table)
    for name in REQUIRED:
        rd.flag(~rd.has(name), lambda i, n=name: f"missing {n}")
    lengths = rd.lengths("response_ids")
    for name in PER_POSITION[:2]:
        _flag_length(rd, name, lengths, "entries")
    ids_ok = _flag_length(rd, "topk_ids", lengths, "positions")
    lps_ok = _flag_length(rd, "topk_logprobs", lengths, "positions")
    _flag_inner(rd, ids_ok & lps_ok, ("topk_ids", "topk_logprobs"))
    for name in PER_POSITION[2:]:
        _flag_length(rd, name, lengths, "entries")
    if rd.has("topk_ids").any() and rd.has("train_topk_logprobs").any():
        train_ok = _flag_length(rd, "train_topk_logprobs", lengths, "positions")
        _flag_inner(rd, ids_ok & train_ok, ("topk_ids", "train_topk_logprobs"))
    return rd.problems


def _null_values_filled(table: pa.Table) -> pa.Table:
    """``table`` with each null inside a list of :data:`NULL_VALUE`'s columns filled."""
    for name, fill in NULL_VALUE.items():
        if name not in table.column_names:
            continue
        col = table.column(name).combine_chunks()
        if not pa.types.is_list(col.type) or pc.list_flatten(col).null_count == 0:
            continue
        values = pc.fill_null(col.values, pa.scalar(fill, col.type.value_type))
        filled = pa.ListArray.from_arrays(col.offsets, values, mask=col.is_null())
        table = table.set_column(table.column_names.index(name), name, filled)
    return table


def compact_topk(table: pa.Table, zero_padded: bool) -> tuple[pa.Table, dict[int, str]]:
    """``table`` (rows without :func:`structural_problems`) with its top-K columns through
    the padding rule (:func:`~pdm_replay.ingest.padded.slot_columns`), and ``{row:
    reason}`` for rows that list one token id twice with different log-probs."""
    table = _null_values_filled(table)
    rd = _Reader(table)
    lengths = rd.lengths("response_ids")
    lay = Layout(lengths, int(lengths.max(initial=0)))
    ids, _ = pad_ragged(pc.list_flatten(rd.col("topk_ids")), -1, np.int64)
    lps, _ = pad_ragged(pc.list_flatten(rd.col("topk_logprobs")), -np.inf, np.float64,
                        width=ids.shape[1])
    train, train_has = None, rd.has("train_topk_logprobs")
    if train_has.any():  # its rows' positions, in lay's order; the other rows' unused
        flat, _ = pad_ragged(pc.list_flatten(rd.col("train_topk_logprobs")), 0.0, np.float64,
                             width=ids.shape[1])
        train = np.zeros(ids.shape)
        train[train_has[lay.b]] = flat
    cols, conflicts = slot_columns(lay, ids, lps, zero_padded, train=train,
                                   train_has=train_has if train is not None else None)
    for name, column in cols.items():
        table = (table.set_column(table.column_names.index(name), name, column)
                 if name in table.column_names else table.append_column(name, column))
    return table, conflicts


def row_problems(table: pa.Table, vocab: int, seen: set[str],
                 max_topk: int | None = None) -> dict[int, str]:
    """``{row: reason}``: a ``sample_id`` already in ``seen`` (which is updated), then the
    first finding of ``pdm_replay.checks.check_batch`` (the checks of ``validate``;
    top-K rows of more than ``max_topk`` entries included)."""
    problems: dict[int, str] = {}
    ids = table.column("sample_id").to_pylist()
    for i, sid in enumerate(ids):
        if sid in seen:
            problems[i] = f"sample_id {sid!r} is used by an earlier record"
        seen.add(sid)
    if table.num_rows == 0:
        return problems
    report = ValidationReport("", max_errors=1 << 40)
    check_batch(table.combine_chunks().to_batches()[0], "", 0, vocab, report, set(),
                summarize=False, max_topk=max_topk)
    row_of = {sid: i for i, sid in enumerate(ids)}
    for p in report.errors:
        at = f"pos {p.pos}: " if p.pos is not None else ""
        problems.setdefault(row_of[p.sample_id], f"{at}{p.kind}: {p.message}")
    return problems
