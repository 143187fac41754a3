"""Validate a rollout/v1 log: schema, footer, per-token consistency, value ranges.

Every problem names the file, ``sample_id`` and position. Checks run vectorised per
record batch, so memory stays bounded whatever the log size.

Examples
--------
>>> import tempfile, pathlib
>>> from pdm_replay.fixtures import write_synthetic_log
>>> p = write_synthetic_log(pathlib.Path(tempfile.mkdtemp()) / "l.parquet", n_samples=4)
>>> report = validate_log(p)
>>> report.ok, report.samples, report.tokens
(True, 4, 64)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pdm_replay.io.reader import (PAD_ID, FlatTokens, flatten_batch, iter_record_batches,
                                  list_parquet_files)
from pdm_replay.math.support import MASS_TOLERANCE
from pdm_replay.schema import PER_TOKEN_COLUMNS, ROLLOUT_COLUMNS, RolloutMeta

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


def _check_columns(schema: pa.Schema, source: str, report: ValidationReport) -> bool:
    ok = True
    for col in ROLLOUT_COLUMNS:
        if col.name not in schema.names:
            if col.required == "yes":
                report.add(Problem(source, None, None, "missing-column",
                                   f"required column {col.name!r} ({col.type}) is absent"))
                ok = False
            continue
        actual = schema.field(col.name).type
        if not _compatible(actual, col.type):
            report.add(Problem(source, None, None, "column-type",
                               f"column {col.name!r} is {actual}, expected {col.type}"))
            ok = False
    return ok


def _compatible(actual: pa.DataType, expected: pa.DataType) -> bool:
    """Same nesting, and numeric leaves of the same kind (int/float/bool/string)."""
    if pa.types.is_list(expected) or pa.types.is_large_list(expected):
        return ((pa.types.is_list(actual) or pa.types.is_large_list(actual))
                and _compatible(actual.value_type, expected.value_type))
    kinds = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean,
             lambda t: pa.types.is_string(t) or pa.types.is_large_string(t))
    return any(k(expected) and k(actual) for k in kinds)


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


def _token_checks(batch: pa.RecordBatch, flat: FlatTokens, vocab: int
                  ) -> dict[str, tuple[np.ndarray, str]]:
    """Per-token error masks ``(N,)`` with a message, for one batch of length-clean rows."""
    ids, lp = flat.topk_ids, flat.topk_logprobs
    pad = ids == PAD_ID
    real_lp = np.where(pad, 0.0, lp)
    checks = {
        "topk-length": (_inner_lengths(batch, "topk_ids") != _inner_lengths(batch, "topk_logprobs"),
                        "topk_ids and topk_logprobs rows differ in length"),
        "token-id-range": ((flat.token_id < 0) | (flat.token_id >= vocab),
                           f"response token id outside [0, {vocab})"),
        "topk-id-range": (((ids < 0) & ~pad).any(1) | (ids >= vocab).any(1),
                          f"top-K id outside [0, {vocab})"),
        "non-finite": (~np.isfinite(flat.advantage) | ~np.isfinite(flat.logp_behavior)
                       | ~np.isfinite(real_lp).all(1), "NaN or inf in advantages/log-probs"),
        "positive-logprob": ((flat.logp_behavior > LOGPROB_TOLERANCE)
                             | (real_lp > LOGPROB_TOLERANCE).any(1),
                             f"log-prob above 0 (+{LOGPROB_TOLERANCE:g})"),
        "duplicate-topk-id": (_has_duplicates(ids), "duplicate id in a top-K row"),
    }
    hit = (ids == flat.token_id[:, None]) & ~pad
    gap = np.abs(np.where(hit, lp, -np.inf).max(1, initial=-np.inf) - flat.logp_behavior)
    tol = MATCH_ATOL * (1.0 + np.abs(flat.logp_behavior))
    checks["behavior-mismatch"] = (hit.any(1) & (gap > tol), "behavior_logprobs differs from "
                                   "the top-K entry of the sampled token")
    if flat.train_logprobs is not None:
        tr = np.concatenate([flat.train_logprobs[:, None],
                             np.where(pad, 0.0, flat.train_topk_logprobs)
                             if flat.train_topk_logprobs is not None else
                             np.zeros((len(flat), 0))], 1)
        checks["train-logprob"] = (~np.isfinite(tr).all(1) | (tr > LOGPROB_TOLERANCE).any(1),
                                   "train log-prob NaN/inf or above 0")
    return checks


def _has_duplicates(ids: np.ndarray) -> np.ndarray:
    srt = np.sort(ids, axis=1)
    return ((srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] != PAD_ID)).any(1)


def check_batch(batch: pa.RecordBatch, file: str, first_row: int, vocab: int,
                report: ValidationReport, seen: set[str]) -> FlatTokens | None:
    """Check one record batch into ``report``; returns the flattened length-clean rows."""
    report.samples += batch.num_rows
    sids = batch.column("sample_id").to_pylist()
    for i, sid in enumerate(sids):
        if sid is None or sid in seen:
            report.add(Problem(file, sid, None, "sample-id",
                               f"sample_id {'missing' if sid is None else 'repeated'} "
                               f"(row {first_row + i}); sample_id must be unique per row"))
        seen.add(sid)
    good = _row_lengths(batch, file, first_row, report)
    batch = batch.filter(pa.array(good))
    if batch.num_rows == 0:
        return None
    flat = flatten_batch(batch)
    report.tokens += len(flat)
    report.steps.update(batch.column("step").to_numpy(zero_copy_only=False).tolist())
    lengths = (flat.topk_ids != PAD_ID).sum(1)
    values, counts = np.unique(lengths, return_counts=True)
    report.k_hist.update(dict(zip(values.tolist(), counts.tolist())))
    mass = np.exp(np.where(flat.topk_ids == PAD_ID, -np.inf, flat.topk_logprobs)).sum(1)
    report.masses.append(mass.astype(np.float32))
    report.warning_counts["mass-overflow"] += int((mass > 1 + MASS_TOLERANCE).sum())
    for kind, (bad, msg) in _token_checks(batch, flat, vocab).items():
        idx = np.flatnonzero(bad)
        room = max(report.max_errors - len(report.errors), 0)
        for i in idx[:room]:
            report.add(Problem(file, flat.sample_id[i], int(flat.pos[i]), kind, msg))
        if len(idx) > room:
            report.error_counts[kind] += len(idx) - room
    return flat


def validate_log(path: Path | str, *, max_errors: int = 50,
                 batch_rows: int = 1024) -> ValidationReport:
    """Check every file of the log at ``path``; never raises on bad data, reports it."""
    report = ValidationReport(str(path), max_errors=max_errors)
    try:
        files = list_parquet_files(path)
    except FileNotFoundError as exc:
        report.add(Problem(str(path), None, None, "not-found", str(exc)))
        return report
    report.files = len(files)
    seen: set[str] = set()
    for f in files:
        try:
            schema = pq.read_schema(f)
            meta = RolloutMeta.from_metadata(schema.metadata, str(f))
        except (ValueError, pa.ArrowInvalid, OSError) as exc:
            report.add(Problem(str(f), None, None, "footer", str(exc)))
            continue
        report.meta = report.meta or meta
        if not _check_columns(schema, str(f), report):
            continue
        for _, first, batch in iter_record_batches(f, batch_rows=batch_rows):
            check_batch(batch, str(f), first, meta.vocab_size, report, seen)
    if report.meta and report.meta.truncated_sampler and report.meta.logprobs_mode == "processed":
        report.warning_counts["truncated-sampler"] += 1
    return report
