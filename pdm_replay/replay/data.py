"""The log side of replay: check a log can be replayed, draw each seed's samples, read them.

Which global rows (:class:`~pdm_replay.replay.log_index.LogIndex`) a seed reads is
:mod:`pdm_replay.replay.seeds`' business; here they are read in log order: the same seed
always reads the same rows, whatever ran before it.

Examples
--------
>>> draw_rows(10, 4, seed=3).tolist() == draw_rows(10, 4, seed=3).tolist()
True
>>> draw_rows(3, 8, seed=0).tolist()  # a batch larger than the log takes every row
[0, 1, 2]
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pdm_replay.errors import InputError, reading
from pdm_replay.io.log import RolloutLog
from pdm_replay.io.reader import FlatTokens, open_parquet, rows_for_tokens
from pdm_replay.replay.log_index import LogIndex
from pdm_replay.replay.seeds import draw_rows
from pdm_replay.schema import ROLLOUT_V1
from pdm_replay.checks import ValidationReport, check_batch

REPLAY_COLUMNS = ("sample_id", "prompt_ids", "response_ids")
SCAN_TOKENS = 1 << 22  # response tokens per batch of the id scan (int32 ids: ~16 MB)
CHECK_ROWS = 1024  # rows per batch of the up-front value check


def read_rows(index: LogIndex, rows: np.ndarray) -> pa.Table:
    """The rollout rows at sorted global indices ``rows`` (only their row groups are read)."""
    names = [f.name for f in ROLLOUT_V1]
    tables, start = [], 0
    for file, count in zip(index.files, index.rows):
        local = rows[(rows >= start) & (rows < start + count)] - start
        start += count
        if local.size == 0:
            continue
        with reading(file):
            tables.extend(_read_local(file, local, names))
    return pa.concat_tables(tables, promote_options="default")


def _read_local(file: Path, local: np.ndarray, names: list[str]) -> list[pa.Table]:
    """The rows at sorted in-file indices ``local`` of ``file``, typed as rollout/v1."""
    tables = []
    pf = open_parquet(file)
    cols = [c for c in names if c in pf.schema_arrow.names]
    bounds = np.cumsum([0] + [pf.metadata.row_group(g).num_rows
                              for g in range(pf.num_row_groups)])
    groups = np.unique(np.searchsorted(bounds, local, side="right") - 1)
    for g in groups:
        in_g = local[(local >= bounds[g]) & (local < bounds[g + 1])] - bounds[g]
        t = pf.read_row_group(int(g), columns=cols).take(pa.array(in_g))
        tables.append(t.select(cols).cast(pa.schema([ROLLOUT_V1.field(c) for c in cols])))
    return tables


@dataclass(frozen=True)
class SeedBatch:
    """One seed's samples: per-token arrays plus the token sequences the model reads."""

    flat: FlatTokens
    prompts: list[list[int]]
    responses: list[list[int]]
    sample_ids: list[str]


def seed_batch(index: LogIndex, batch_size: int, seed: int, vocab_size: int,
               rows: np.ndarray | None = None, max_topk: int | None = None
               ) -> SeedBatch:
    """Read seed ``seed``'s batch (``rows``; default the ``by="sample"`` draw of
    ``batch_size``) and flatten it after the ``validate`` checks (per-token lengths, ids,
    log-probs, top-K widths up to ``max_topk``); the first problem raises ``InputError``
    naming the sample and position."""
    if rows is None:
        rows = draw_rows(index.n_rows, batch_size, seed)
    table = read_rows(index, rows).combine_chunks()
    flat = _checked(index, table, vocab_size, max_topk, f"seed {seed}: ")
    return SeedBatch(flat=flat, prompts=table["prompt_ids"].to_pylist(),
                     responses=table["response_ids"].to_pylist(),
                     sample_ids=table["sample_id"].to_pylist())


def _first_bad(table: pa.Table, vocab_size: int) -> str | None:
    """Describe the first sample whose prompt is missing or whose ids leave [0, V)."""
    lengths = pc.fill_null(pc.list_value_length(table["prompt_ids"]), 0)
    empty = pc.equal(lengths, 0).combine_chunks()
    if pc.any(empty).as_py():
        i = int(np.flatnonzero(empty.to_numpy(zero_copy_only=False))[0])
        return (f"sample {table['sample_id'][i].as_py()!r} has no prompt_ids; replay "
                "needs the prompt tokens: log prompt_ids (rollout/v1 'replay' column)")
    for col in ("prompt_ids", "response_ids"):
        values = pc.list_flatten(table[col])
        if len(values) and (pc.min(values).as_py() < 0 or pc.max(values).as_py() >= vocab_size):
            for sid, row in zip(table["sample_id"].to_pylist(), table[col].to_pylist()):
                bad = [j for j, t in enumerate(row or []) if not 0 <= t < vocab_size]
                if bad:
                    return (f"sample {sid!r} {col}[{bad[0]}] = {row[bad[0]]} is outside the "
                            f"vocabulary [0, {vocab_size}); the log does not belong to "
                            "this checkpoint")
    return None


def check_replayable(log: RolloutLog, vocab_size: int) -> LogIndex:
    """Scan prompt and response ids of the whole (opened) log; raise ``ValueError`` naming
    the file and sample of the first row replay cannot use. Returns its :class:`LogIndex`."""
    index = LogIndex.of(log)
    for file, part in zip(index.files, log.parts):
        if "prompt_ids" not in part.schema.names:
            raise ValueError(f"{file}: no prompt_ids column; replay needs the prompt tokens "
                             "of every sample: log prompt_ids (rollout/v1 'replay' column)")
        pf = open_parquet(file)
        rows = rows_for_tokens(pf, 65536, max_tokens=SCAN_TOKENS)
        with reading(file):
            for batch in pf.iter_batches(columns=list(REPLAY_COLUMNS), batch_size=rows):
                problem = _first_bad(pa.Table.from_batches([batch]), vocab_size)
                if problem:
                    raise InputError(problem, file=file)
    if index.n_rows == 0:
        raise ValueError(f"{log.source}: the log holds no rows")
    return index


def _checked(index: LogIndex, table: pa.Table, vocab_size: int, max_topk: int | None,
             label: str = "") -> FlatTokens:
    """``table``'s rows flattened after ``validate``'s checks; the first problem raises."""
    batch = pa.RecordBatch.from_struct_array(table.to_struct_array().combine_chunks())
    source = index.files[0].parent if len(index.files) > 1 else index.files[0]
    report = ValidationReport(str(source), max_errors=1)
    with np.errstate(over="ignore", invalid="ignore"):  # non-finite values are reported
        flat = check_batch(batch, str(source), 0, vocab_size, report, set(),
                           summarize=False, max_topk=max_topk)
    if not report.ok or flat is None:
        problem = report.errors[0] if report.errors else "no usable rows"
        raise InputError(f"{label}{problem}", fix="run `pdm-replay validate` on the log for "
                         "every problem")
    return flat


def check_seed_rows(index: LogIndex, seeds: list[np.ndarray], vocab_size: int,
                    max_topk: int) -> None:
    """Run :func:`seed_batch`'s checks on every row the seeds will read, before the run
    directory exists, so that a bad value (NaN, inf, a too-long top-K row) in seed 7 is
    an error up front, not a half-written run. ``seeds``: each seed's global rows."""
    rows = np.unique(np.concatenate(seeds)) if seeds else np.zeros(0, np.int64)
    for start in range(0, len(rows), CHECK_ROWS):
        table = read_rows(index, rows[start:start + CHECK_ROWS]).combine_chunks()
        _checked(index, table, vocab_size, max_topk)
