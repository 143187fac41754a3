"""Log-only mode: every token's divergences and every mask's decision, streamed to tokens/v1.

Examples
--------
>>> import tempfile, pathlib
>>> from pdm_replay.testing.fixtures import write_synthetic_log
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> log = write_synthetic_log(d / "log.parquet", n_samples=8)
>>> summary = run_masks(MasksConfig(log=log, out=d / "tokens.parquet"))
>>> summary.tokens, summary.keep_fraction["none"]
(128, 1.0)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pdm_replay.errors import FieldError
from pdm_replay.names import ENGINES
from pdm_replay.io.atomic import AtomicParquetWriter
from pdm_replay.io.background import BackgroundSink, ordered_map, prefetch
from pdm_replay.io.memory import threaded_arrow_pool
from pdm_replay.io.log import RolloutLog, check_logs_agree, is_uri
from pdm_replay.io.reader import BATCH_TOKENS
from pdm_replay.masks import (Mask, MaskPair, Thresholds, build_masks, mask_pairs,
                              resolve_names, token_region)
from pdm_replay.run_summary import combine, step_counts, totals
from pdm_replay.schema import (PER_TOKEN_COLUMNS, THRESHOLDS_KEY,  # noqa: F401 (re-export)
                               RolloutMeta, tokens_schema)
from pdm_replay.threads import cpu_budget, torch_threads  # noqa: F401 (re-export)
from pdm_replay.tokens import TRAIN_COLUMNS, log_stats, token_table
from pdm_replay.checks import ValidationReport, check_batch, check_sample_ids

BATCH_ROWS = 512  # the local engine's default rows per record batch read
WORK_TOKENS = 1 << 16  # tokens per work item: bounds each worker's arrays (~50 MB)
MASK_INPUT_COLUMNS = ("sample_id", "step") + PER_TOKEN_COLUMNS


@dataclass(frozen=True)
class MasksConfig:
    """Options of ``pdm-replay masks`` (1:1 with the CLI)."""

    log: Path  # the Ray engine also takes a tuple of logs (files, directories or URIs)
    out: Path  # local: one Parquet file; ray: a directory (step=<t>/part-*.parquet)
    masks: Sequence[str] | None = None  # None = every registered mask
    thresholds: Thresholds = Thresholds()
    vocab_size: int | None = None  # None = from the log's footer
    # rows per record batch read; None: BATCH_ROWS locally, whole blocks under ray
    batch_rows: int | None = None
    workers: int | None = None  # work items computed in parallel; None = default_workers()
    threads: int = 1  # torch intra-op threads per worker
    engine: str = "local"  # "local" (threads in this process) | "ray" (commands.masks_ray)
    ray_address: str | None = None  # ray: a cluster to join; None = RAY_ADDRESS or local
    resume: bool = False  # ray: keep the finished input files of a killed run
    # --mask-module files: loaded by the caller before the run; the Ray engine's tasks,
    # in other processes, load them again before they build the masks
    mask_modules: tuple[Path, ...] | None = None

    @property
    def logs(self) -> list[Path | str]:
        """The logs of the run: ``log``, or each of a tuple of them."""
        return list(self.log) if isinstance(self.log, (list, tuple)) else [self.log]


@dataclass
class MasksSummary:
    """What a ``masks`` run found; printed by the CLI."""

    out: Path
    tokens: int = 0
    keep_fraction: dict[str, float] = field(default_factory=dict)
    # pair label -> tokens outside the pair's region (its predictive mask's criterion)
    out_of_region: dict[str, int] = field(default_factory=dict)
    disagreements: dict[str, int] = field(default_factory=dict)  # pair label -> count
    mass_overflow: int = 0


def default_workers() -> int:
    """The CPUs this process may use (affinity capped by the cgroup CPU quota, as the
    replay's threads: :func:`pdm_replay.threads.cpu_budget`), at most 8 (past that the
    single reader and writer threads limit)."""
    return max(1, min(cpu_budget().cpus, 8))


def check_engine_logs(logs: Sequence[str | Path], engine: str
                      ) -> Path | tuple[Path | str, ...]:
    """``MasksConfig.log`` from the command's logs: the local engine reads one (a file
    or a directory), the Ray engine any number (a pyarrow filesystem URI stays a
    string: ``s3://b/x``)."""
    if engine not in ENGINES:
        raise FieldError("{engine} {got}: expected local or ray", got=engine)
    if engine == "ray":
        return tuple(str(log) if is_uri(log) else Path(log) for log in logs)
    if len(logs) != 1:
        raise FieldError("{engine} local reads one log (a file or a directory of files), "
                         "got {got}; put the files in one directory or use {engine} ray",
                         got=len(logs))
    return Path(logs[0])


def check_train_columns(log: RolloutLog) -> None:
    """Log-only ``masks`` needs the train log-probs columns in every file of ``log``."""
    missing = [c for c in TRAIN_COLUMNS if c not in log.columns]
    if missing:
        raise ValueError(f"{log.source}: log-only `masks` needs {', '.join(missing)} (the training "
                         "policy's log-probs); log them in the trainer, or run `pdm-replay "
                         "replay` with the checkpoint to recompute them")


def _check_batch_has_train(batch: pa.RecordBatch, file: Path, first: int) -> None:
    for name in TRAIN_COLUMNS:
        if batch.column(name).null_count == 0:
            continue
        nulls = batch.column(name).is_null().to_numpy(zero_copy_only=False)
        if nulls.any():
            i = int(np.flatnonzero(nulls)[0])
            sid = batch.column("sample_id")[i].as_py()
            raise ValueError(f"{file}: sample {sid!r} (row {first + i}) has no {name}; "
                             "every row needs train log-probs in log-only mode")


def _raise_first(report: ValidationReport) -> None:
    if not report.ok:
        raise ValueError(f"{report.errors[0]}; run `pdm-replay validate` for every problem")


def token_slices(batch: pa.RecordBatch, budget: int) -> Iterator[tuple[int, pa.RecordBatch]]:
    """``(first row, zero-copy slice)`` of ``batch``, each of at most ``budget`` response
    tokens (a single longer row alone), so long responses do not inflate a worker's arrays.

    >>> b = pa.record_batch({"response_ids": [[1] * 3, [1] * 3, [1] * 9, [1]]})
    >>> [(first, s.num_rows) for first, s in token_slices(b, 6)]
    [(0, 2), (2, 1), (3, 1)]
    """
    lengths = pc.fill_null(pc.list_value_length(batch.column("response_ids")), 0)
    ends = np.cumsum(lengths.to_numpy(zero_copy_only=False).astype(np.int64))
    start = 0
    while start < batch.num_rows:
        base = int(ends[start - 1]) if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, base + budget, side="right")))
        yield start, batch.slice(start, stop - start)
        start = stop


def _record_batches(log: RolloutLog, batch_rows: int
                    ) -> Iterator[tuple[Path, int, pa.RecordBatch]]:
    """The log's work items in order, after the checks that span batches: record batches
    (at most ``batch_rows`` rows) cut to at most ``WORK_TOKENS`` tokens each."""
    seen: set[str] = set()
    for file, first, batch in log.iter_batches(MASK_INPUT_COLUMNS, batch_rows,
                                               max_tokens=BATCH_TOKENS):
        report = ValidationReport(str(file), max_errors=1)
        check_sample_ids(batch, str(file), first, report, seen)
        _raise_first(report)
        for row, part in token_slices(batch, WORK_TOKENS):
            yield file, first + row, part


def batch_tokens(item: tuple[Path, int, pa.RecordBatch], vocab: int, meta: RolloutMeta,
                 masks: dict[str, Mask]) -> tuple[int, pa.Table | None]:
    """``(rows, tokens/v1 rows)`` of one work item ``(file, first row in file, batch)``
    after the row checks (train log-probs present, then ``validate``'s checks); the
    batch's first problem raises. The one per-batch function of both engines: the local
    command's worker threads and the Ray engine's ``map_batches``
    (:mod:`pdm_replay.commands.masks_ray`) call it."""
    file, first, batch = item
    _check_batch_has_train(batch, file, first)
    report = ValidationReport(str(file), max_errors=1)
    flat = check_batch(batch, str(file), first, vocab, report, set(), summarize=False,
                       max_topk=meta.max_topk_entries)
    _raise_first(report)
    if flat is None:
        return batch.num_rows, None
    stats = log_stats(flat, vocab, meta, validated=True)  # check_batch passed: no repeats
    return batch.num_rows, token_table(flat, stats, masks)


def pair_regions(pairs: list[MaskPair], thresholds: Thresholds
                 ) -> dict[str, tuple[str, float, float]]:
    """``(stat, low, high)`` of each pair's region, read from its predictive mask as the
    registry builds it (token-level criteria only: a sequence region has no per-token
    count)."""
    return {pair.label: region for pair in pairs
            if (region := token_region(pair.other, thresholds)) is not None}


def summary_of(out: Path, counts: pa.Table) -> MasksSummary:
    """The CLI's :class:`MasksSummary` from a run's per-step counts
    (:mod:`pdm_replay.run_summary`), which both engines compute with ``step_counts``."""
    tokens = totals(counts, "tokens").get("", 0)
    return MasksSummary(
        out=out, tokens=tokens,
        keep_fraction={n: k / max(tokens, 1) for n, k in totals(counts, "kept").items()},
        out_of_region=totals(counts, "out_of_region"),
        disagreements=totals(counts, "disagreements"),
        mass_overflow=totals(counts, "mass_overflow").get("", 0))


def output_schema(names: Sequence[str], thresholds: Thresholds, vocab: int,
                  meta: RolloutMeta, source_log: str) -> pa.Schema:
    """The tokens/v1 schema and footer both engines write (every part file of the Ray
    engine carries the same footer as the local command's one file)."""
    return tokens_schema(names).with_metadata({
        "pdm_replay.schema": "tokens/v1", THRESHOLDS_KEY: json.dumps(asdict(thresholds)),
        "vocab_size": str(vocab), "source_log": source_log,
        **({"tokenizer": meta.tokenizer} if meta.tokenizer else {})})


def open_logs(cfg: MasksConfig) -> list[RolloutLog]:
    """Each log of ``cfg.log`` opened (:meth:`RolloutLog.open`: ``validate``'s file-level
    checks) with its train columns checked; several logs must agree on their footers'
    conventions (:func:`~pdm_replay.io.log.check_logs_agree`). No row is read."""
    logs = [RolloutLog.open(log) for log in cfg.logs]
    for log in logs:
        check_train_columns(log)
    check_logs_agree(logs)
    return logs


def run_masks(cfg: MasksConfig, on_progress: Callable[[int, int], None] | None = None,
              log: RolloutLog | None = None) -> MasksSummary:
    """Stream the log, write tokens/v1 to ``cfg.out`` atomically, return the summary.
    ``log``: ``cfg.log`` already opened (:func:`open_logs`), else opened here.

    One thread reads ahead, ``cfg.workers`` threads validate and compute batches, one
    writes behind (:mod:`pdm_replay.io.background`); results keep the log's order.
    ``on_progress(rows_done, tokens_done)`` is called after each record batch.
    """
    names = resolve_names(cfg.masks)
    log = log or open_logs(cfg)[0]  # validate's file-level checks before any row is read
    meta = log.meta
    vocab = cfg.vocab_size or meta.vocab_size
    masks = build_masks(names, cfg.thresholds)
    schema = output_schema(names, cfg.thresholds, vocab, meta, str(cfg.log))
    pairs = mask_pairs(names)
    regions = pair_regions(pairs, cfg.thresholds)  # the thresholds hold for every batch
    counts: list[pa.Table] = []  # per-step counts of each batch (run_summary)
    rows = tokens = 0
    work = partial(batch_tokens, vocab=vocab, meta=meta, masks=masks)
    items = prefetch(_record_batches(log, cfg.batch_rows or BATCH_ROWS))
    with (torch_threads(cfg.threads), threaded_arrow_pool(),
          AtomicParquetWriter(cfg.out, schema) as writer, BackgroundSink(writer.write) as sink):
        for n_rows, table in ordered_map(work, items, workers=cfg.workers or default_workers()):
            if table is not None:
                sink.put(table)
                counts.append(step_counts(table, names, pairs, regions))
                tokens += table.num_rows
            rows += n_rows
            if on_progress:
                on_progress(rows, tokens)
    return summary_of(cfg.out, combine(counts))
