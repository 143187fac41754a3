"""An opened rollout/v1 log: its files listed once, each footer read and checked once.

A command opens its log with :meth:`RolloutLog.open` and passes the handle down: the file
list, every file's Arrow schema and row count, the footer metadata
(:class:`~pdm_replay.schema.RolloutMeta`: vocabulary size, top-K and its convention) and
the columns the log holds are read from the footers once, and the rows are read through
:meth:`RolloutLog.iter_batches`. A log is a local file or directory (hidden files
skipped), or the same as a pyarrow filesystem URI (``file:///...``, ``s3://bucket/...``).

Examples
--------
>>> import tempfile, pathlib
>>> from pdm_replay.testing.fixtures import write_synthetic_log
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> log = RolloutLog.open(write_synthetic_log(d / "log.parquet", n_samples=3, response_len=5))
>>> [f.name for f in log.files], log.n_rows, log.vocab_size, log.top_k, log.topk_convention
(['log.parquet'], 3, 1000, 20, 'plus_sampled')
>>> {"train_logprobs", "train_topk_logprobs"} <= log.columns
True
>>> [(first, b.num_rows) for _, first, b in log.iter_batches(["sample_id"], batch_rows=2)]
[(0, 2), (2, 1)]
>>> by_uri = RolloutLog.open(f"file://{d}")  # the same file through its filesystem
>>> by_uri.files == (f"file://{d / 'log.parquet'}",) and by_uri.meta == log.meta
True
>>> _ = (d / "other.parquet").write_bytes(b"not parquet")
>>> try:
...     RolloutLog.open(d)
... except ValueError as exc:  # an InputError naming the file
...     print(str(exc).startswith(str(d / "other.parquet")))
True
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from pdm_replay.errors import InputError
from pdm_replay.io.reader import (DEFAULT_BATCH_ROWS, file_batches, list_parquet_files,
                                  open_parquet)
from pdm_replay.schema import (FILE_AGREEING, LOG_AGREEING, RolloutMeta, check_agree,
                               column_problems)

SCHEMA_FIX = ("run `pdm-replay validate` on the log for every problem; re-create it with "
              "`pdm-replay ingest` or pdm_replay.io.write_rollouts")


def is_uri(source: Path | str) -> bool:
    """Whether ``source`` names a pyarrow filesystem URI (``scheme://...``)."""
    return "://" in str(source)


def list_log_files(source: Path | str) -> tuple[pafs.FileSystem | None, list[Path | str]]:
    """``(filesystem, files)`` of a log: local paths (filesystem None, as
    :func:`~pdm_replay.io.reader.list_parquet_files`), or for a URI the ``*.parquet``
    files below it as URIs with the same scheme, sorted, hidden ones skipped."""
    if not is_uri(source):
        return None, list(list_parquet_files(source))
    text = str(source)
    filesystem, root = pafs.FileSystem.from_uri(text)
    scheme = text.split("://", 1)[0]
    info = filesystem.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"{text}: no such file or directory")
    if info.is_file:
        return filesystem, [text]
    infos = filesystem.get_file_info(pafs.FileSelector(root, recursive=True))
    files = sorted(f"{scheme}://{i.path}" for i in infos if i.is_file
                   and i.path.endswith(".parquet") and not any(
                       part.startswith(".") for part in i.path[len(root):].split("/")))
    if not files:
        raise FileNotFoundError(f"{text}: directory holds no .parquet files")
    return filesystem, files


@dataclass(frozen=True)
class LogFile:
    """One Parquet file of a log as its footer describes it."""

    path: Path | str  # a local path, or a URI (scheme://location)
    schema: pa.Schema  # Arrow schema, footer metadata included
    rows: int


def read_footer(path: Path | str, filesystem: pafs.FileSystem | None = None
                ) -> tuple[LogFile, RolloutMeta]:
    """One file's footer, read once: ``(LogFile, RolloutMeta)``. An unreadable footer
    raises :class:`~pdm_replay.errors.InputError`, unusable footer metadata a
    ``ValueError``, each naming the file (columns are checked by
    :func:`check_file_columns`)."""
    pf = open_parquet(path, filesystem)
    schema = pf.schema_arrow
    meta = RolloutMeta.from_metadata(schema.metadata, str(path))
    return LogFile(path, schema, pf.metadata.num_rows), meta


def check_file_columns(part: LogFile) -> None:
    """Every required rollout/v1 column, each of its type; the first problem raises
    :class:`~pdm_replay.errors.InputError` (``validate``'s message, file first)."""
    problems = column_problems(part.schema)
    if problems:
        kind, message = problems[0]
        raise InputError(f"{part.path}: {kind}: {message}", fix=SCHEMA_FIX)


@dataclass(frozen=True)
class RolloutLog:
    """A rollout/v1 log opened once: its files, their footers, its conventions.

    ``meta`` is the first file's footer; every file agrees with it on
    :data:`~pdm_replay.schema.FILE_AGREEING` (checked). ``filesystem`` is None for a
    local log, else the pyarrow filesystem of its URI.
    """

    source: Path | str  # as given: a file, a directory or a URI
    parts: tuple[LogFile, ...]
    meta: RolloutMeta
    filesystem: pafs.FileSystem | None = None

    @classmethod
    def open(cls, source: Path | str) -> "RolloutLog":
        """List the log's files and run ``validate``'s file-level checks on each
        (readable footer, footer metadata, every required column with its type, the
        files' footers agreeing); the first problem raises
        :class:`~pdm_replay.errors.InputError` naming the file. No row is read."""
        source = source if is_uri(source) else Path(source)
        filesystem, files = list_log_files(source)
        footers = []
        try:
            for f in files:  # file by file, as validate reports them
                footers.append(read_footer(f, filesystem))
                check_file_columns(footers[-1][0])
            check_agree([(str(p.path), m) for p, m in footers], FILE_AGREEING,
                        "split the log")
        except InputError:
            raise
        except ValueError as exc:  # the footer metadata's own error, naming the file
            raise InputError(str(exc)) from exc
        return cls(source, tuple(p for p, _ in footers), footers[0][1], filesystem)

    @property
    def files(self) -> tuple[Path | str, ...]:
        return tuple(p.path for p in self.parts)

    @property
    def rows(self) -> tuple[int, ...]:
        """Rows of each file, from the footers."""
        return tuple(p.rows for p in self.parts)

    @property
    def n_rows(self) -> int:
        return sum(self.rows)

    @property
    def columns(self) -> frozenset[str]:
        """The columns every file of the log holds."""
        return frozenset.intersection(*(frozenset(p.schema.names) for p in self.parts))

    @property
    def vocab_size(self) -> int:
        return self.meta.vocab_size

    @property
    def top_k(self) -> int:
        return self.meta.top_k

    @property
    def topk_convention(self) -> str:
        return self.meta.topk_convention

    @property
    def max_topk_entries(self) -> int:
        """The most entries a top-K row may hold (:attr:`RolloutMeta.max_topk_entries`)."""
        return self.meta.max_topk_entries

    def sampling_temperature(self) -> float:
        """The temperature µ was sampled at, which π is recomputed at: the footer's, or 1
        where it records none; one that is not > 0 raises
        :class:`~pdm_replay.errors.InputError` naming the log."""
        t = self.meta.temperature
        if t is not None and not t > 0:
            raise InputError(f"footer temperature={t}; π is recomputed at the sampling "
                             "temperature (> 0) that µ was sampled at", file=self.source,
                             fix="re-ingest the log with the temperature it was sampled at")
        return 1.0 if t is None else t

    def iter_batches(self, columns: Sequence[str] | None = None,
                     batch_rows: int = DEFAULT_BATCH_ROWS, max_tokens: int | None = None
                     ) -> Iterator[tuple[Path | str, int, pa.RecordBatch]]:
        """``(file, first row in file, batch)`` of every file in order
        (:func:`~pdm_replay.io.reader.file_batches`: ``columns`` a file holds, at most
        ``batch_rows`` rows and about ``max_tokens`` response tokens per batch)."""
        for f in self.files:
            yield from file_batches(f, columns, batch_rows, max_tokens, self.filesystem)


def check_logs_agree(logs: Sequence[RolloutLog]) -> None:
    """Logs read in one run share one footer's conventions
    (:data:`~pdm_replay.schema.LOG_AGREEING`); the first that differs raises
    :class:`~pdm_replay.errors.InputError` naming its first file and the first log's."""
    try:
        check_agree([(str(log.files[0]), log.meta) for log in logs], LOG_AGREEING,
                    "run them separately, one output per vocabulary and top-K")
    except ValueError as exc:
        raise InputError(str(exc)) from exc
