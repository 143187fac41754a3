"""The Ray engine of ``pdm-replay masks``: the same per-batch work on a Ray cluster.

``ray.data.read_parquet`` reads the log's files (local paths or any pyarrow filesystem
URI) with ``include_paths``; ``map_batches`` hands each block to :func:`process_block`,
which calls :func:`pdm_replay.commands.masks.batch_tokens` (the local command's one
per-batch function) on the block cut as the local command cuts (``token_slices``), and
writes the block's tokens/v1 rows, one part file per step
(``step=<t>/part-<file key>-<block key>.parquet``, the local command's schema and footer,
written to a temp name then renamed). Part names depend only on the input file and the
block's first sample id, so a task that Ray retries after its worker died overwrites its
own parts: no row is written twice. The driver counts each file's rows as blocks finish
and marks the file done; output is staged and committed atomically
(:mod:`pdm_replay.io.staged`), and ``resume`` redoes only the files not marked done.

Where this follows Ray Data: ``ray.data.read_parquet(..., include_paths=True)`` and
``Dataset.map_batches(fn, batch_size=None, batch_format="pyarrow", fn_kwargs=...)``
(ray/data/read_api.py, ray/data/dataset.py, ray 2.60); a block is one read task's output,
re-read whole when a task is retried.
"""

from __future__ import annotations

import hashlib
import pickle
from contextlib import closing
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pdm_replay.commands.masks import (MASK_INPUT_COLUMNS, WORK_TOKENS, MasksConfig,
                                       MasksSummary, _raise_first, batch_tokens, open_logs,
                                       output_schema, pair_regions, summary_of, token_slices)
from pdm_replay.commands.sample_ids import check_unique, id_hashes, save_ids
from pdm_replay.io.atomic import AtomicParquetWriter
from pdm_replay.io.log import RolloutLog, is_uri
from pdm_replay.io.reader import read_table
from pdm_replay.masks import (MaskPair, Thresholds, build_masks, load_mask_module, mask_pairs,
                              resolve_names)
from pdm_replay.run_summary import SUMMARY_SCHEMA, step_counts
from pdm_replay.schema import RolloutMeta
from pdm_replay.threads import torch_threads
from pdm_replay.checks import ValidationReport, check_sample_ids

RESULT_SCHEMA = pa.schema([("file", pa.string()), ("rows", pa.int64()),
                           ("parts", pa.list_(pa.string())),
                           ("part_rows", pa.list_(pa.int64())), ("summary", pa.binary()),
                           ("ids", pa.binary()), ("error", pa.binary())])


@dataclass(frozen=True)
class BlockContext:
    """What every map task needs, shipped once per task by Ray (picklable)."""

    stage: str
    schema: pa.Schema
    names: tuple[str, ...]
    thresholds: Thresholds
    vocab: int
    meta: RolloutMeta
    pairs: tuple[MaskPair, ...]
    regions: dict[str, tuple[str, float, float]]
    keys: dict[str, str]  # input file (as Ray names it) -> file key
    threads: int = 1  # torch intra-op threads per task
    mask_modules: tuple[str, ...] = ()  # --mask-module files, loaded in every task


@dataclass
class RayPlan:
    """The driver's view of the job: input files with their footer row counts, the
    columns read, and the most rows per ``map_batches`` batch (``batch_rows``)."""

    files: list[str]
    rows: dict[str, int]
    ctx: BlockContext
    keys: dict[str, str] = field(default_factory=dict)
    columns: list[str] = field(default_factory=lambda: list(MASK_INPUT_COLUMNS))
    batch_rows: int | None = None  # None: whole blocks


def file_key(path: str) -> str:
    """A short stable key of an input file: its name and a hash of its full path."""
    digest = hashlib.sha1(path.encode()).hexdigest()[:10]
    return f"{Path(path).stem[:40]}-{digest}"


def _block_key(sample_id: str) -> str:
    return hashlib.sha1(sample_id.encode()).hexdigest()[:16]


def row_of(path: str, sample_id: str) -> int:
    """Row index of ``sample_id``'s first occurrence in file ``path`` (for messages)."""
    ids = read_table(path, ["sample_id"]).column("sample_id")
    hits = np.flatnonzero(pc.equal(ids, sample_id).to_numpy(zero_copy_only=False))
    return int(hits[0]) if hits.size else 0


def _block_tables(path: str, first: int, batch: pa.RecordBatch, ctx: BlockContext
                  ) -> list[pa.Table]:
    """The local command's checks and work on one file's rows of a block."""
    report = ValidationReport(path, max_errors=1)
    check_sample_ids(batch, path, first, report, set())
    _raise_first(report)
    for module in ctx.mask_modules:  # a worker process has only the built-in masks
        load_mask_module(module)
    masks = build_masks(ctx.names, ctx.thresholds)
    out = []
    for row, piece in token_slices(batch, WORK_TOKENS):
        _, table = batch_tokens((Path(path), first + row, piece), ctx.vocab, ctx.meta, masks)
        if table is not None:
            out.append(table)
    return out


def _checked_tables(path: str, batch: pa.RecordBatch, ctx: BlockContext) -> list[pa.Table]:
    """:func:`_block_tables`; on a problem, again with the rows' true positions in the
    file, so that the message is the local command's (row numbers included)."""
    try:
        return _block_tables(path, 0, batch, ctx)
    except ValueError:
        first = row_of(path, batch.column("sample_id")[0].as_py())
        return _block_tables(path, first, batch, ctx)


def _write_parts(tables: list[pa.Table], key: str, ctx: BlockContext
                 ) -> list[tuple[str, int]]:
    """One part per step of the block's tokens/v1 rows: ``(name relative to the stage,
    rows)`` of each."""
    table = pa.concat_tables(tables)
    steps = table.column("step").to_numpy()
    parts = []
    for step in np.unique(steps):
        rel = f"step={int(step)}/part-{key}.parquet"
        target = Path(ctx.stage) / rel
        target.parent.mkdir(exist_ok=True)  # the stage itself must exist: no parents
        with AtomicParquetWriter(target, ctx.schema) as writer:
            writer.write(table.filter(pa.array(steps == step)))
        parts.append((rel, writer.rows))
    return parts


def _file_result(path: str, batch: pa.RecordBatch, ctx: BlockContext) -> dict[str, Any]:
    """One result row of one file's rows of a block: parts written, summary, or error."""
    try:
        tables = _checked_tables(path, batch, ctx)
    except ValueError as exc:
        return {"file": path, "rows": batch.num_rows, "parts": [], "part_rows": [],
                "summary": None, "ids": None, "error": pickle.dumps(exc)}
    sid = batch.column("sample_id")[0].as_py()
    key = f"{ctx.keys[path]}-{_block_key(str(sid))}"
    parts = _write_parts(tables, key, ctx) if tables else []
    counts = (step_counts(pa.concat_tables(tables), ctx.names, ctx.pairs, ctx.regions)
              if tables else SUMMARY_SCHEMA.empty_table())
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, SUMMARY_SCHEMA) as writer:
        writer.write_table(counts)
    return {"file": path, "rows": batch.num_rows, "parts": [p for p, _ in parts],
            "part_rows": [n for _, n in parts], "summary": sink.getvalue().to_pybytes(),
            "ids": id_hashes(batch.column("sample_id")), "error": None}


def process_block(block: pa.Table, ctx: BlockContext) -> pa.Table:
    """The ``map_batches`` function: a block of rollout rows (with Ray's ``path``
    column) -> one result row per input file in it (``RESULT_SCHEMA``)."""
    if block.num_rows == 0:
        return RESULT_SCHEMA.empty_table()
    paths = block.column("path").to_numpy(zero_copy_only=False)
    rows = block.drop_columns(["path"])
    cuts = np.flatnonzero(paths[1:] != paths[:-1]) + 1
    results = []
    with torch_threads(ctx.threads):
        for start, stop in zip([0, *cuts], [*cuts, len(paths)]):
            batch = rows.slice(start, stop - start).combine_chunks().to_batches()[0]
            results.append(_file_result(str(paths[start]), batch, ctx))
    return pa.Table.from_pylist(results, schema=RESULT_SCHEMA)


def _ray_name(path: str) -> str:
    """The path as Ray's ``path`` column spells it (a URI without its scheme)."""
    return path.split("://", 1)[1] if is_uri(path) else path


def _ray_file(file: Path | str) -> str:
    """A log's file as Ray reads it: a local path made absolute, a URI as it is."""
    return str(file) if is_uri(file) else str(Path(file).resolve())


def plan_job(cfg: MasksConfig, stage: Path, logs: list[RolloutLog] | None = None
             ) -> RayPlan:
    """The local command's file-level checks on every log (local paths and URIs alike:
    :func:`~pdm_replay.commands.masks.open_logs`, unless ``logs`` are given opened),
    then the job's plan."""
    names = resolve_names(cfg.masks)
    logs = logs or open_logs(cfg)
    meta = logs[0].meta
    vocab = cfg.vocab_size or meta.vocab_size
    source = ",".join(str(log) for log in cfg.logs)
    pairs = tuple(mask_pairs(names))
    rows = {_ray_file(part.path): part.rows for log in logs for part in log.parts}
    files = list(rows)
    keys = {_ray_name(f): file_key(f) for f in files}
    ctx = BlockContext(str(stage), output_schema(names, cfg.thresholds, vocab, meta, source),
                       tuple(names), cfg.thresholds, vocab, meta, pairs,
                       pair_regions(list(pairs), cfg.thresholds), keys, cfg.threads,
                       tuple(str(Path(m).resolve()) for m in cfg.mask_modules or ()))
    columns = frozenset.intersection(*(log.columns for log in logs))
    return RayPlan(files, rows, ctx, {f: file_key(f) for f in files},
                   [c for c in MASK_INPUT_COLUMNS if c in columns], cfg.batch_rows)


@dataclass
class Progress:
    """Per input file: rows done so far, parts and summary tables of its finished blocks."""

    rows: Counter = field(default_factory=Counter)
    parts: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # (part, rows)
    summaries: dict[str, list[pa.Table]] = field(default_factory=dict)
    ids: dict[str, list[bytes]] = field(default_factory=dict)  # sample_id hashes


def _summary_table(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(data).read_all()


def _file_done(plan: RayPlan, stage: Path, file: str, progress: Progress) -> None:
    from pdm_replay.io.staged import write_marker
    from pdm_replay.run_summary import combine
    summary = combine(progress.summaries.pop(file, []))
    save_ids(stage, plan.keys[file], progress.ids.pop(file, []))  # before the marker
    write_marker(stage, plan.keys[file], {
        "file": file, "rows": progress.rows[file], "parts": progress.parts.pop(file, []),
        "summary": summary.to_pylist()})


def _take(plan: RayPlan, stage: Path, result: dict[str, Any], progress: Progress) -> None:
    """Book one result row; the file's marker is written once all its rows are in."""
    if result["error"] is not None:
        raise pickle.loads(result["error"])
    file = next(f for f in plan.files if _ray_name(f) == result["file"])
    progress.rows[file] += result["rows"]
    progress.parts.setdefault(file, []).extend(zip(result["parts"], result["part_rows"]))
    progress.summaries.setdefault(file, []).append(_summary_table(result["summary"]))
    progress.ids.setdefault(file, []).append(result["ids"])
    if progress.rows[file] == plan.rows[file]:
        _file_done(plan, stage, file, progress)


def execute(plan: RayPlan, todo: list[str], stage: Path, workers: int | None,
            on_progress: Callable[[int], None] | None = None) -> None:
    """Run the job on the connected cluster over the files ``todo``; each finished file
    gets its progress marker. The first input problem raises (the local command's error)."""
    import ray.data
    progress = Progress()
    for file in todo:
        if plan.rows[file] == 0:  # nothing to read: no block will name it
            _file_done(plan, stage, file, progress)
    todo = [f for f in todo if plan.rows[f]]
    if not todo:
        return
    ds = ray.data.read_parquet(todo, columns=plan.columns, include_paths=True)
    # batch_size: a task's blocks cut into batches of at most batch_rows rows, each
    # processed (and its parts written) alone, as the local command's record batches
    results = ds.map_batches(process_block, batch_size=plan.batch_rows, batch_format="pyarrow",
                             zero_copy_batch=True, fn_kwargs={"ctx": plan.ctx},
                             concurrency=workers)
    # closed before the connection ends (see commands.recompute_ray.ray_tables)
    with closing(iter(results.iter_batches(batch_size=None, batch_format="pyarrow"))) as batches:
        for batch in batches:
            for result in batch.to_pylist():
                _take(plan, stage, result, progress)
            if on_progress:
                on_progress(sum(progress.rows.values()))


def _clear_unfinished(stage: Path, done: set[str]) -> None:
    """Remove the parts (and temp files) of every input file not marked done: a resumed
    run redoes those files whole, whatever blocks a killed run had finished."""
    for path in stage.glob("step=*/*"):
        name = path.name
        key = name[len("part-"):-len(".parquet")].rpartition("-")[0]
        if not (name.startswith("part-") and name.endswith(".parquet") and key in done):
            path.unlink(missing_ok=True)


def _commit(plan: RayPlan, stage: Path, cfg: MasksConfig) -> pa.Table:
    """Summary, then the manifest, then the rename: the output appears whole."""
    from pdm_replay.io.atomic import write_table_atomic
    from pdm_replay.io.staged import commit_staging, read_markers
    from pdm_replay.run_summary import SUMMARY_FILE, combine
    markers = [m for m in read_markers(stage).values() if m["file"] in plan.rows]
    summary = combine([pa.Table.from_pylist(m["summary"], schema=SUMMARY_SCHEMA)
                       for m in markers])
    write_table_atomic(stage / SUMMARY_FILE, summary)
    parts = dict(sorted((p, n) for m in markers for p, n in m["parts"]))
    commit_staging(stage, cfg.out, {
        "pdm_replay.schema": "tokens/v1", "kind": "masks", "engine": "ray",
        "logs": [str(log) for log in cfg.logs], "inputs": plan.files,
        "rows": sum(m["rows"] for m in markers), "tokens": sum(parts.values()),
        "parts": parts, "summary": SUMMARY_FILE,
        "masks": list(plan.ctx.names), "vocab_size": plan.ctx.vocab})
    return summary


def run_masks_ray(cfg: MasksConfig, on_progress: Callable[[int], None] | None = None,
                  logs: list[RolloutLog] | None = None) -> MasksSummary:
    """``pdm-replay masks --engine ray``: write ``cfg.out`` (a directory) atomically and
    return the summary. An input problem raises the local command's error and leaves
    nothing; any other failure (a killed driver) leaves the staging directory that
    ``resume`` continues. ``on_progress(rows_done)`` is called as blocks finish;
    ``logs``: ``cfg.log`` already opened (:func:`~pdm_replay.commands.masks.open_logs`)."""
    from pdm_replay.cluster.ray_engine import connected
    from pdm_replay.io.staged import discard_staging, open_staging, read_markers
    stage = open_staging(cfg.out, cfg.resume)
    try:
        plan = plan_job(cfg, stage, logs)
        done = {m for m in read_markers(stage)} & set(plan.keys.values())
        _clear_unfinished(stage, done)
        todo = [f for f in plan.files if plan.keys[f] not in done]
        with connected(cfg.ray_address):
            execute(plan, todo, stage, cfg.workers, on_progress)
        check_unique(stage, plan.files, plan.keys)  # ids repeated across blocks
    except (ValueError, FileNotFoundError):
        discard_staging(cfg.out)
        raise
    return summary_of(cfg.out, _commit(plan, stage, cfg))
