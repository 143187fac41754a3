"""Read rollout/v1 logs in bounded-memory record batches and flatten them to per-token arrays.

A log is one Parquet file or a directory of them (hidden files and temp files skipped).

Examples
--------
>>> from pdm_replay.testing.fixtures import SyntheticLogConfig, write_synthetic_log
>>> import tempfile, pathlib
>>> path = write_synthetic_log(pathlib.Path(tempfile.mkdtemp()) / "log.parquet",
...                            SyntheticLogConfig(n_samples=3, response_len=5))
>>> meta = read_meta(path)
>>> flat = next(iter_flat_tokens(path))
>>> flat.topk_ids.shape[0], flat.topk_ids.shape[1] in (meta.top_k, meta.top_k + 1)
(15, True)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pdm_replay.errors import reading
from pdm_replay.math.rows import take_rows
from pdm_replay.schema import FILE_AGREEING, RolloutMeta, check_agree

PAD_ID = -1
DEFAULT_BATCH_ROWS = 2048
BATCH_TOKENS = 1 << 17  # response tokens per record batch the checks and masks read (~37 MB)

# FlatTokens' arrays may be read-only views of Arrow buffers (no copy); the package only
# reads them, so torch.from_numpy's warning about non-writable arrays is noise. The filter
# is limited to that message raised from pdm_replay's own modules.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable",
                        category=UserWarning, module=r"pdm_replay\.")


def list_parquet_files(path: Path | str) -> list[Path]:
    """The Parquet files of a log: ``path`` itself, or every ``*.parquet`` below it, sorted."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    files = sorted(p for p in path.rglob("*.parquet")
                   if not any(part.startswith(".") for part in p.relative_to(path).parts))
    if not files:
        raise FileNotFoundError(f"{path}: directory holds no .parquet files")
    return files


def open_parquet(path: Path | str, filesystem: pafs.FileSystem | None = None
                 ) -> pq.ParquetFile:
    """A ParquetFile for streaming: ``pre_buffer`` off, since pyarrow would otherwise buffer
    every column chunk of the file up front (RSS grew with the log: 1.8 GB for 8M tokens).
    ``filesystem``: where ``path`` (a URI, ``scheme://location``) is read from
    (:class:`pdm_replay.io.log.RolloutLog` opens a URI log's files so).

    Page checksums are verified where the file has them (every file this package writes:
    :mod:`pdm_replay.io.atomic`), so a flipped byte is an error, not a plausible number.
    An unreadable file raises :class:`~pdm_replay.errors.InputError` naming it; reading
    its pages can still fail later, so iterate inside :func:`pdm_replay.errors.reading`.
    """
    source = path if filesystem is None else str(path).split("://", 1)[-1]
    with reading(path):
        return pq.ParquetFile(source, filesystem=filesystem, pre_buffer=False,
                              page_checksum_verification=True)


def read_schema(path: Path | str) -> pa.Schema:
    """The Arrow schema of one Parquet file; an unreadable footer names the file."""
    with reading(path):
        return pq.read_schema(path)


def read_table(path: Path | str, columns: Sequence[str] | None = None) -> pa.Table:
    """One whole Parquet file (``columns`` only), page checksums verified."""
    with reading(path):
        return pq.read_table(path, columns=columns, page_checksum_verification=True)


def read_meta(path: Path | str) -> RolloutMeta:
    """Footer metadata of a log; every file of a directory must agree on vocab and K
    convention (:data:`~pdm_replay.schema.FILE_AGREEING`)."""
    files = list_parquet_files(path)
    metas = [(str(f), RolloutMeta.from_metadata(read_schema(f).metadata, str(f)))
             for f in files]
    check_agree(metas, FILE_AGREEING, "split the log")
    return metas[0][1]


def mean_response_length(pf: pq.ParquetFile) -> float:
    """Mean response tokens per row of a rollout/v1 file, from its footer alone (the
    column chunks' value counts of ``response_ids``); 0 when unknown or empty."""
    md = pf.metadata
    if md.num_rows == 0:
        return 0.0
    leaf = "response_ids.list.element"
    tokens = 0
    for g in range(md.num_row_groups):
        group = md.row_group(g)
        cols = [group.column(j) for j in range(group.num_columns)]
        tokens += sum(c.num_values for c in cols if c.path_in_schema == leaf)
    return tokens / md.num_rows


def rows_for_tokens(pf: pq.ParquetFile, max_rows: int, max_tokens: int | None) -> int:
    """Rows per record batch: ``max_rows``, fewer when rows are so long that a batch
    would hold more than about ``max_tokens`` response tokens (None: no token bound)."""
    mean = mean_response_length(pf) if max_tokens else 0.0
    if mean <= 0:
        return max_rows
    return max(1, min(max_rows, int(max_tokens / mean)))


def file_batches(file: Path | str, columns: Sequence[str] | None = None,
                 batch_rows: int = DEFAULT_BATCH_ROWS, max_tokens: int | None = None,
                 filesystem: pafs.FileSystem | None = None
                 ) -> Iterator[tuple[Path | str, int, pa.RecordBatch]]:
    """Yield ``(file, first_row_index_in_file, batch)`` of one file (``columns`` that it
    holds); memory is bounded by ``batch_rows`` and, given ``max_tokens``, by about that
    many response tokens per batch (long responses get fewer rows per batch)."""
    with reading(file):  # a corrupt page fails mid-file: still an error naming it
        pf = open_parquet(file, filesystem)
        cols = [c for c in columns if c in pf.schema_arrow.names] if columns else None
        row = 0
        for batch in pf.iter_batches(batch_size=rows_for_tokens(pf, batch_rows, max_tokens),
                                     columns=cols):
            yield file, row, batch
            row += batch.num_rows


def iter_record_batches(path: Path | str, columns: Sequence[str] | None = None,
                        batch_rows: int = DEFAULT_BATCH_ROWS, max_tokens: int | None = None
                        ) -> Iterator[tuple[Path, int, pa.RecordBatch]]:
    """:func:`file_batches` of every file of the log at ``path``, in order."""
    for f in list_parquet_files(path):
        yield from file_batches(f, columns, batch_rows, max_tokens)


@dataclass(frozen=True)
class RaggedIndex:
    """Where each value of a ``list<x>`` array of N rows lands in an ``(N, width)`` grid."""

    offsets: np.ndarray  # (N + 1,) int64, from 0
    lengths: np.ndarray  # (N,) int64
    width: int

    @classmethod
    def of(cls, lists: pa.Array, width: int | None = None) -> "RaggedIndex":
        lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
        lengths = lengths.astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        return cls(offsets, lengths, int(lengths.max(initial=0)) if width is None else width)

    @cached_property
    def filled(self) -> np.ndarray:
        """``(N, width)`` bool: the grid slots that receive a value."""
        return np.arange(self.width) < self.lengths[:, None]

    def pad(self, values: np.ndarray, fill: float | int, dtype: np.dtype) -> np.ndarray:
        """Scatter the flat ``values`` into an ``(N, width)`` array filled with ``fill``."""
        n = len(self.lengths)
        if (self.lengths == self.width).all():  # rectangular: the common case, no scatter
            return values.astype(dtype, copy=False).reshape(n, self.width)
        out = np.full((n, self.width), fill, dtype=dtype)
        if self.lengths.max(initial=0) <= self.width:
            # A boolean mask fills in row-major order, i.e. in the flat values' order, and
            # costs a third of an integer-index scatter.
            out[self.filled] = values
            return out
        cols = np.arange(len(values)) - np.repeat(self.offsets[:-1], self.lengths)
        out[self.filled] = values[cols < self.width]  # rows longer than width: cut
        return out


def pad_ragged(lists: pa.Array | pa.ChunkedArray, fill: float | int, dtype: np.dtype,
               width: int | None = None, index: RaggedIndex | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Pad a ``list<x>`` array of N rows to ``(N, width)``; returns (padded, lengths).

    Null rows count as empty. ``width`` defaults to the longest row. ``index`` reuses the
    layout of another column with the same offsets (checked).
    """
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks()
    if index is None or not _same_offsets(lists, index):
        index = RaggedIndex.of(lists, width)
    return index.pad(flat_values(lists, dtype), fill, dtype), index.lengths


def _same_offsets(lists: pa.Array, index: RaggedIndex) -> bool:
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    return len(lengths) == len(index.lengths) and np.array_equal(lengths, index.lengths)


def flat_values(lists: pa.Array | pa.ChunkedArray, dtype: np.dtype | None) -> np.ndarray:
    """Concatenate a ``list<x>`` column's values into one 1-D array (``None``: as stored)."""
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks()
    values = pc.list_flatten(lists).to_numpy(zero_copy_only=False)
    return values if dtype is None else values.astype(dtype, copy=False)


def as_logged(values: np.ndarray, kept: tuple[type, ...], other: type) -> np.ndarray:
    """``values`` unchanged if their dtype is one of ``kept``, else cast to ``other``.

    The (N, K) top-K arrays stay as logged (float32, int32): converting them here cost a
    full extra pass, and the math converts each L2-sized chunk to float64 anyway.
    """
    return values if values.dtype in kept else values.astype(other)


@dataclass
class FlatTokens:
    """Every response position of a record batch as flat arrays; N tokens, K top-K slots.

    ``topk_*`` are padded with ``PAD_ID`` / ``-inf``; ``row`` indexes the batch's rows.
    """

    sample_id: np.ndarray  # (N,) object
    step: np.ndarray  # (N,) int64
    row: np.ndarray  # (N,) int64, the batch row of each token: sample_id is a function of it
    pos: np.ndarray  # (N,) int32
    token_id: np.ndarray  # (N,) int64
    advantage: np.ndarray  # (N,) float64
    logp_behavior: np.ndarray  # (N,) float64
    loss_mask: np.ndarray  # (N,) bool
    topk_ids: np.ndarray  # (N, K) int32 or int64, as logged
    topk_logprobs: np.ndarray  # (N, K) float32 or float64, as logged
    train_logprobs: np.ndarray | None  # (N,) float64
    train_topk_logprobs: np.ndarray | None  # (N, K) float32 or float64, as logged

    def __len__(self) -> int:
        return len(self.token_id)

    def take(self, index: np.ndarray | slice) -> "FlatTokens":
        """The tokens ``index`` ((N,) bool, positions or a slice) selects
        (:func:`~pdm_replay.math.rows.take_rows`)."""
        return take_rows(self, index)


def _topk_values(col: pa.Array, index: RaggedIndex, logged_pad: np.ndarray | None
                 ) -> np.ndarray:
    """A ``list<list<float>>`` top-K column padded like the ids ``(N, W)``, ``-inf`` at every
    padding slot (ragged, or a logged ``PAD_ID``)."""
    lists = pc.list_flatten(col)
    if not _same_offsets(lists, index):  # misaligned with the ids: validate reports it
        return pad_ragged(lists, -np.inf, np.float64, width=index.width)[0]
    values = as_logged(flat_values(lists, None), (np.float32, np.float64), np.float64)
    if logged_pad is not None:
        values = np.where(logged_pad, values.dtype.type(-np.inf), values)
    return index.pad(values, -np.inf, values.dtype)


def _loss_mask(batch: pa.RecordBatch, lengths: np.ndarray, row: np.ndarray,
               pos: np.ndarray) -> np.ndarray:
    """(N,) bool loss mask of the N tokens at (``row``, ``pos``); all True without one."""
    n = len(row)
    if "loss_mask" not in batch.schema.names or not n:
        return np.ones(n, dtype=bool)
    col = batch.column("loss_mask")
    if col.null_count == 0 and np.array_equal(
            pc.list_value_length(col).to_numpy(zero_copy_only=False), lengths):
        return flat_values(col, np.bool_)  # one entry per token already
    # a null loss_mask row means "all positions are loss tokens"
    padded, _ = pad_ragged(col, True, np.bool_, width=int(lengths.max()))
    return padded[row, pos]


def flatten_batch(batch: pa.RecordBatch) -> FlatTokens:
    """Flatten one record batch of rollout/v1 rows into :class:`FlatTokens`.

    Assumes per-token lengths agree (``validate`` checks that); ragged top-K rows are padded.
    """
    lengths = pc.list_value_length(batch.column("response_ids")).to_numpy(zero_copy_only=False)
    lengths = np.nan_to_num(lengths.astype(float)).astype(np.int64)
    n = int(lengths.sum())
    row = np.repeat(np.arange(batch.num_rows), lengths)
    pos = (np.arange(n) - np.repeat(np.cumsum(lengths) - lengths, lengths)).astype(np.int32)
    names = batch.schema.names

    def per_token(name: str, dtype: np.dtype) -> np.ndarray:
        return flat_values(batch.column(name), dtype)

    inner = pc.list_flatten(batch.column("topk_ids"))
    index = RaggedIndex.of(inner)
    ids = as_logged(flat_values(inner, None), (np.int32, np.int64), np.int64)
    logged_pad = ids == PAD_ID
    logged_pad = logged_pad if logged_pad.any() else None
    topk_lp = _topk_values(batch.column("topk_logprobs"), index, logged_pad)
    train_topk = None
    if "train_topk_logprobs" in names and batch.column("train_topk_logprobs").null_count == 0:
        train_topk = _topk_values(batch.column("train_topk_logprobs"), index, logged_pad)
    has_train = "train_logprobs" in names and batch.column("train_logprobs").null_count == 0
    loss_mask = _loss_mask(batch, lengths, row, pos)
    sample_ids = np.asarray(batch.column("sample_id").to_pylist(), dtype=object)
    steps = batch.column("step").to_numpy(zero_copy_only=False).astype(np.int64)
    return FlatTokens(
        sample_id=sample_ids[row], step=steps[row], row=row, pos=pos,
        token_id=per_token("response_ids", np.int64),
        advantage=per_token("advantages", np.float64),
        logp_behavior=per_token("behavior_logprobs", np.float64),
        loss_mask=loss_mask, topk_ids=index.pad(ids, PAD_ID, ids.dtype), topk_logprobs=topk_lp,
        train_logprobs=per_token("train_logprobs", np.float64) if has_train else None,
        train_topk_logprobs=train_topk)


def iter_flat_tokens(path: Path | str, columns: Sequence[str] | None = None,
                     batch_rows: int = DEFAULT_BATCH_ROWS) -> Iterator[FlatTokens]:
    """Flattened tokens of every record batch of a log, in file order."""
    for _, _, batch in iter_record_batches(path, columns, batch_rows):
        yield flatten_batch(batch)
