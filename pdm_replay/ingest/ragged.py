"""rollout/v1-typed Arrow rows (ragged lists) -> :class:`PaddedRollouts`, naming bad samples.

JSON formats and ``columns`` produce ragged rows; this pads them so that every format
goes through the one padding rule of :func:`pdm_replay.ingest.padded.padded_to_table`.
A sample whose per-token lists disagree in length is reported, not padded into shape.

Examples
--------
>>> import pyarrow as pa
>>> t = pa.table({"sample_id": ["a", "b"], "step": [0, 0], "response_ids": [[4, 2], [3]],
...               "advantages": [[1.0, 1.0], [0.5, 0.5]], "behavior_logprobs": [[-1.0, -2.0],
...               [-0.1]], "topk_ids": [[[4], [2, 4]], [[3]]],
...               "topk_logprobs": [[[-1.0], [-2.0, -0.5]], [[-0.1]]]})
>>> batch, problems = table_to_padded(t)
>>> batch.topk_ids.shape, problems
((2, 2, 2), {1: 'advantages has 2 entries but response_ids has 1'})
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pdm_replay.ingest.padded import PaddedRollouts
from pdm_replay.io.reader import pad_ragged
from pdm_replay.checks import ValidationReport, check_batch

REQUIRED = ("sample_id", "step", "response_ids", "advantages", "behavior_logprobs",
            "topk_ids", "topk_logprobs")


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

    def flag(self, bad: np.ndarray, message: Callable[[int], str]) -> None:
        for i in np.flatnonzero(bad):
            self.problems.setdefault(int(i), message(int(i)))


def _per_position(rd: _Reader, name: str, lengths: np.ndarray, fill: object,
                  dtype: object) -> tuple[np.ndarray | None, np.ndarray]:
    """(B, T) padded column and (B,) rows having it; rows of the wrong length are flagged."""
    has = rd.has(name)
    if not has.any():
        return None, has
    arr, n = pad_ragged(rd.col(name), fill, dtype, width=int(lengths.max(initial=0)))
    rd.flag(has & (n != lengths),
            lambda i: f"{name} has {n[i]} entries but response_ids has {lengths[i]}")
    return arr, has


def _nested(rd: _Reader, name: str, lengths: np.ndarray, fill: object, dtype: object,
            width: int | None = None) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """(B, T, K) padded ``list<list<x>>`` column, (B, T) entries per position, (B,) has."""
    has = rd.has(name)
    t = int(lengths.max(initial=0))
    if not has.any():
        return None, np.zeros((rd.rows, t), dtype=np.int64), has
    col = rd.col(name)
    outer = pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False)
    inner_pad, inner_len = pad_ragged(pc.list_flatten(col), fill, dtype, width=width)
    row = np.repeat(np.arange(rd.rows), outer)
    pos = np.arange(len(row)) - np.repeat(np.cumsum(outer) - outer, outer)
    ok = pos < t
    out = np.full((rd.rows, t, inner_pad.shape[1]), fill, dtype=dtype)
    counts = np.full((rd.rows, t), -1, dtype=np.int64)
    out[row[ok], pos[ok]] = inner_pad[ok]
    counts[row[ok], pos[ok]] = inner_len[ok]
    rd.flag(has & (outer != lengths),
            lambda i: f"{name} has {outer[i]} positions but response_ids has {lengths[i]}")
    return out, counts, has


def _flag_inner(rd: _Reader, lengths: np.ndarray, a: np.ndarray, b: np.ndarray,
                names: tuple[str, str], rows: np.ndarray) -> None:
    """Flag rows where two top-K columns list different numbers of entries at a position."""
    real = np.arange(a.shape[1])[None, :] < lengths[:, None]
    bad = (a != b) & real & rows[:, None]
    first = np.argmax(bad, axis=1)
    rd.flag(bad.any(1), lambda i: f"pos {first[i]}: {names[0]} has {a[i, first[i]]} entries "
            f"but {names[1]} has {b[i, first[i]]}")


def table_to_padded(table: pa.Table) -> tuple[PaddedRollouts, dict[int, str]]:
    """Pad rollout/v1-typed rows; ``{row: reason}`` names rows that must be rejected."""
    rd = _Reader(table)
    for name in REQUIRED:
        rd.flag(~rd.has(name), lambda i, n=name: f"missing {n}")
    resp, lengths = pad_ragged(rd.col("response_ids"), 0, np.int64)
    adv, _ = _per_position(rd, "advantages", lengths, 0.0, np.float64)
    beh, _ = _per_position(rd, "behavior_logprobs", lengths, 0.0, np.float64)
    ids, n_ids, has_topk = _nested(rd, "topk_ids", lengths, -1, np.int64)
    width = None if ids is None else ids.shape[2]
    lps, n_lps, _ = _nested(rd, "topk_logprobs", lengths, -np.inf, np.float64, width)
    _flag_inner(rd, lengths, n_ids, n_lps, ("topk_ids", "topk_logprobs"), has_topk)
    batch = PaddedRollouts(
        sample_id=[s if s is not None else "" for s in rd.col("sample_id").to_pylist()],
        step=pc.fill_null(rd.col("step"), 0).to_numpy(zero_copy_only=False),
        response_ids=resp, lengths=lengths,
        advantages=adv if adv is not None else np.zeros(resp.shape),
        behavior_logprobs=beh if beh is not None else np.zeros(resp.shape),
        topk_ids=ids, topk_logprobs=lps)
    _optional(rd, batch, lengths, n_ids, width)
    return batch, rd.problems


def _optional(rd: _Reader, batch: PaddedRollouts, lengths: np.ndarray, n_ids: np.ndarray,
              width: int | None) -> None:
    """Fill the optional fields of ``batch`` (and ``batch.present``) from ``rd``."""
    for name, fill, dtype in (("loss_mask", True, np.bool_),
                              ("train_logprobs", 0.0, np.float64)):
        arr, has = _per_position(rd, name, lengths, fill, dtype)
        setattr(batch, name, arr)
        batch.present[name] = has
    if width is not None and rd.has("train_topk_logprobs").any():
        tr, n_tr, has = _nested(rd, "train_topk_logprobs", lengths, 0.0, np.float64, width)
        _flag_inner(rd, lengths, n_ids, n_tr, ("topk_ids", "train_topk_logprobs"), has)
        batch.train_topk_logprobs, batch.present["train_topk_logprobs"] = tr, has
    if rd.has("prompt_ids").any():
        prompts, n = pad_ragged(rd.col("prompt_ids"), 0, np.int64)
        batch.prompt_ids = prompts
        batch.prompt_mask = np.arange(prompts.shape[1])[None, :] < n[:, None]
        batch.present["prompt_ids"] = rd.has("prompt_ids")
    if rd.has("reward").any():
        batch.reward = pc.fill_null(rd.col("reward"), 0.0).to_numpy(zero_copy_only=False)
        batch.present["reward"] = rd.has("reward")
    if rd.has("group_id").any():
        batch.group_id = rd.col("group_id").to_pylist()


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
                summarise=False, max_topk=max_topk)
    row_of = {sid: i for i, sid in enumerate(ids)}
    for p in report.errors:
        at = f"pos {p.pos}: " if p.pos is not None else ""
        problems.setdefault(row_of[p.sample_id], f"{at}{p.kind}: {p.message}")
    return problems
