"""The checks of a rollout/v1 log: schema, footer, per-token consistency, value ranges.

Every problem names the file, ``sample_id`` and position. Checks run vectorized per
record batch, so memory stays bounded whatever the log size. ``validate`` runs them over
a whole log (:func:`pdm_replay.commands.validate.validate_log`); ``masks``, ``replay``,
``recompute`` and ``ingest`` run :func:`check_batch` on every batch they read or write.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pdm_replay.io.reader import PAD_ID, FlatTokens, flatten_batch
from pdm_replay.math.support import mass_overflow
from pdm_replay.schema import PER_TOKEN_COLUMNS, RolloutMeta, column_problems

LOGPROB_TOLERANCE = 1e-4  # log-probs up to this far above 0 are rounding, not errors
MATCH_ATOL = 1e-3  # behavior_logprobs[t] vs the top-K entry of k_t


@dataclass(frozen=True)
class Problem:
    """One finding; ``pos`` is None for row- or file-level problems."""

    file: str
    sample_id: str | None
    pos: int | None
    kind: str
    message: str

    def __str__(self) -> str:
        where = self.file
        if self.sample_id is not None:
            where += f": sample {self.sample_id!r}"
        if self.pos is not None:
            where += f" pos {self.pos}"
        return f"{where}: {self.kind}: {self.message}"


@dataclass
class ValidationReport:
    """Summary and problems of one log; ``errors`` holds at most ``max_errors`` entries."""

    path: str
    max_errors: int = 50
    files: int = 0
    samples: int = 0
    tokens: int = 0
    meta: RolloutMeta | None = None
    k_hist: Counter = field(default_factory=Counter)
    steps: Counter = field(default_factory=Counter)
    masses: list[np.ndarray] = field(default_factory=list)
    errors: list[Problem] = field(default_factory=list)
    error_counts: Counter = field(default_factory=Counter)
    warning_counts: Counter = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.error_counts

    @property
    def error_count(self) -> int:
        return sum(self.error_counts.values())

    def add(self, problem: Problem) -> None:
        self.error_counts[problem.kind] += 1
        if len(self.errors) < self.max_errors:
            self.errors.append(problem)

    def mass_percentiles(self, qs: tuple[float, ...] = (1, 5, 50, 95, 99)) -> dict[str, float]:
        """Percentiles of the logged top-K µ mass per token."""
        if not self.masses:
            return {}
        mass = np.concatenate(self.masses)
        return {f"p{q:g}": float(np.percentile(mass, q)) for q in qs} if mass.size else {}


def check_columns(schema: pa.Schema, source: str, report: ValidationReport) -> bool:
    """Report each missing required column and each column of another type
    (:func:`~pdm_replay.schema.column_problems`); True when there is none."""
    problems = column_problems(schema)
    for kind, message in problems:
        report.add(Problem(source, None, None, kind, message))
    return not problems


def _row_lengths(batch: pa.RecordBatch, file: str, first_row: int,
                 report: ValidationReport) -> np.ndarray:
    """Rows whose per-token columns all have length T; reports the others. (B,) bool"""
    sids = batch.column("sample_id").to_pylist()
    t = pc.list_value_length(batch.column("response_ids")).to_numpy(zero_copy_only=False)
    good = ~np.isnan(t.astype(float))
    for name in PER_TOKEN_COLUMNS[1:]:
        if name not in batch.schema.names:
            continue
        col = batch.column(name)
        n = pc.list_value_length(col).to_numpy(zero_copy_only=False).astype(float)
        null = col.is_null().to_numpy(zero_copy_only=False)
        bad = ~null & (n != t)
        for i in np.flatnonzero(bad & good):
            report.add(Problem(file, sids[i], None, "length-mismatch",
                               f"{name} has {int(n[i])} entries but response_ids has {int(t[i])}"
                               f" (row {first_row + i}); every per-token column needs length T"))
        good &= ~bad
    return good


def _inner_lengths(batch: pa.RecordBatch, name: str) -> np.ndarray:
    flat = pc.list_flatten(batch.column(name))
    return pc.fill_null(pc.list_value_length(flat), 0).to_numpy(zero_copy_only=False)


def _rows(bad: np.ndarray) -> np.ndarray | None:
    """``(N,)`` rows with a bad slot of ``bad`` ``(N,)`` or ``(N, K)``; None when clean.

    A whole-array ``any`` first: clean batches (the common case) never pay for the slow
    short-axis reduction.
    """
    if not bad.any():
        return None
    return bad.any(1) if bad.ndim == 2 else bad


def _union(*masks: np.ndarray | None) -> np.ndarray | None:
    """Element-wise OR of the masks that are not None; None if all are."""
    present = [m for m in masks if m is not None]
    return np.logical_or.reduce(present) if present else None


def _behavior_mismatch(flat: FlatTokens) -> np.ndarray | None:
    """Tokens whose ``behavior_logprobs`` differs from the top-K entry of k, ``(N,)``.

    Only k's first slot is compared (a second one is a duplicate id, reported as such):
    one ``argmax`` per row instead of a ``nonzero`` over ``(N, K)``, 40% faster.
    """
    eq = flat.topk_ids == flat.token_id[:, None]
    if eq.shape[1] == 0:  # no top-K logged: nothing to compare
        return None
    col = eq.argmax(1)  # 0 where k is absent: `found` drops those rows
    rows = np.arange(len(flat))
    found = eq[rows, col] & (flat.token_id >= 0)  # a negative k "matches" padding
    gap = np.abs(flat.topk_logprobs[rows, col] - flat.logp_behavior)
    bad = found & (gap > MATCH_ATOL * (1.0 + np.abs(flat.logp_behavior)))
    return bad if bad.any() else None


def _bad_logprobs(scalar: np.ndarray, topk: np.ndarray | None, pad: np.ndarray
                  ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(non-finite, positive)`` rows of log-probs ``(N,)`` and top-K ``(N, K)``; None: none."""
    nonfinite = _rows(~np.isfinite(scalar))
    positive = _rows(scalar > LOGPROB_TOLERANCE)
    if topk is not None:
        nonfinite = _union(nonfinite, _rows(~(np.isfinite(topk) | pad)))
        positive = _union(positive, _rows(topk > LOGPROB_TOLERANCE))  # padding is -inf
    return nonfinite, positive


def _token_checks(batch: pa.RecordBatch, flat: FlatTokens, vocab: int,
                  max_topk: int | None = None) -> dict[str, tuple[np.ndarray | None, str]]:
    """Per-token error masks ``(N,)`` (None: none) with a message, for length-clean rows;
    ``max_topk`` is the most entries a top-K row may hold (the footer's K, plus one for
    ``plus_sampled``), None: unchecked.

    Padding slots hold ``PAD_ID`` and a ``-inf`` log-prob (:func:`flatten_batch`), so the
    log-prob checks only mask padding where ``-inf`` itself is the problem.
    """
    ids = flat.topk_ids
    pad = ids == PAD_ID
    nonfinite, positive = _bad_logprobs(flat.logp_behavior, flat.topk_logprobs, pad)
    n_ids = _inner_lengths(batch, "topk_ids")
    checks = {
        "topk-length": (_rows(n_ids != _inner_lengths(batch, "topk_logprobs")),
                        "topk_ids and topk_logprobs rows differ in length"),
        "topk-too-long": (None if max_topk is None else _rows(n_ids > max_topk),
                          f"top-K row has more than {max_topk} entries, the most the "
                          "footer's top_k and topk_convention allow; re-log with the K the "
                          "engine returned, or fix the footer's top_k"),
        "token-id-range": (_rows((flat.token_id < 0) | (flat.token_id >= vocab)),
                           f"response token id outside [0, {vocab})"),
        "topk-id-range": (_rows((ids < PAD_ID) | (ids >= vocab)),
                          f"top-K id outside [0, {vocab})"),
        "non-finite": (_union(nonfinite, _rows(~np.isfinite(flat.advantage))),
                       "NaN or inf in advantages/log-probs"),
        "positive-logprob": (positive, f"log-prob above 0 (+{LOGPROB_TOLERANCE:g})"),
        "duplicate-topk-id": (_rows(_has_duplicates(ids)), "duplicate id in a top-K row"),
        "behavior-mismatch": (_behavior_mismatch(flat), "behavior_logprobs differs from "
                              "the top-K entry of the sampled token"),
    }
    if flat.train_logprobs is not None:
        checks["train-logprob"] = (_union(*_bad_logprobs(flat.train_logprobs,
                                                         flat.train_topk_logprobs, pad)),
                                   "train log-prob NaN/inf or above 0")
    return checks


def _has_duplicates(ids: np.ndarray) -> np.ndarray:
    srt = np.sort(ids, axis=1)
    return (srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] != PAD_ID)


def _summarize(report: ValidationReport, batch: pa.RecordBatch, flat: FlatTokens) -> None:
    """K histogram, top-K mass coverage and steps of one batch."""
    report.steps.update(batch.column("step").to_numpy(zero_copy_only=False).tolist())
    counts = np.bincount((flat.topk_ids != PAD_ID).sum(1))
    report.k_hist.update({k: int(c) for k, c in enumerate(counts) if c})
    # float64 whatever the logged dtype; padding slots hold -inf, so exp gives 0
    mass = np.exp(flat.topk_logprobs, dtype=np.float64).sum(1)
    report.masses.append(mass.astype(np.float32))
    report.warning_counts["mass-overflow"] += int(mass_overflow(mass).sum())


def check_sample_ids(batch: pa.RecordBatch, file: str, first_row: int,
                     report: ValidationReport, seen: set[str]) -> None:
    """Report missing ``sample_id`` values and ids already in ``seen`` (which is updated)."""
    for i, sid in enumerate(batch.column("sample_id").to_pylist()):
        if sid is None or sid in seen:
            report.add(Problem(file, sid, None, "sample-id",
                               f"sample_id {'missing' if sid is None else 'repeated'} "
                               f"(row {first_row + i}); sample_id must be unique per row"))
        seen.add(sid)


def check_batch(batch: pa.RecordBatch, file: str, first_row: int, vocab: int,
                report: ValidationReport, seen: set[str], *, summarize: bool = True,
                max_topk: int | None = None) -> FlatTokens | None:
    """Check one record batch into ``report``; returns the flattened length-clean rows.

    ``max_topk``: the most entries a top-K row may hold (:attr:`RolloutMeta.max_topk_entries`).

    ``summarize=False`` skips the statistics only ``validate`` prints (K histogram, top-K
    mass coverage, steps): callers that just need the errors save a pass over the batch.
    """
    report.samples += batch.num_rows
    check_sample_ids(batch, file, first_row, report, seen)
    good = _row_lengths(batch, file, first_row, report)
    if not good.all():  # filtering copies every nested column: only when needed
        batch = batch.filter(pa.array(good))
    if batch.num_rows == 0:
        return None
    flat = flatten_batch(batch)
    report.tokens += len(flat)
    if summarize:
        _summarize(report, batch, flat)
    for kind, (bad, msg) in _token_checks(batch, flat, vocab, max_topk).items():
        if bad is None:
            continue
        idx = np.flatnonzero(bad)
        room = max(report.max_errors - len(report.errors), 0)
        for i in idx[:room]:
            report.add(Problem(file, flat.sample_id[i], int(flat.pos[i]), kind, msg))
        if len(idx) > room:
            report.error_counts[kind] += len(idx) - room
    return flat
