"""Atomic Parquet writing: write to a temp file beside the target, rename on success.

A crash, an exception or SIGKILL never leaves a partial file under the final name.

Examples
--------
>>> import pyarrow as pa, tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> schema = pa.schema([("x", pa.int64())])
>>> with AtomicParquetWriter(d / "a.parquet", schema) as w:
...     w.write(pa.table({"x": [1, 2]}))
>>> sorted(p.name for p in d.iterdir())
['a.parquet']
"""

from __future__ import annotations

import glob
import os
import tempfile
from pathlib import Path
from types import TracebackType

import pyarrow as pa
import pyarrow.parquet as pq

ZSTD_LEVEL = -1  # zstd's fast mode: 17% less write CPU than the default for 1.7% more bytes


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


TEMP_SUFFIX = ".pdm.tmp"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def stale_temps(target: Path) -> list[Path]:
    """Temp files of ``target`` left by a writer that no longer runs (SIGKILL, power loss).

    Temp names are ``.<target name>.<pid>-<random>.pdm.tmp``: only files of that exact
    form, for this target, whose writer PID is gone on this machine, are listed.
    """
    out = []
    for p in target.parent.glob(f".{glob.escape(target.name)}.*{TEMP_SUFFIX}"):
        pid = p.name[len(target.name) + 2:-len(TEMP_SUFFIX)].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            out += [p, *stale_temps(p)]  # a temp's own temp (ingest stages through one)
    return out


def temp_path_for(target: Path) -> Path:
    """A unique hidden temp path in ``target``'s directory (same filesystem, so rename is atomic).

    Named ``.<target name>.<pid>-<random>.pdm.tmp``, so that the next writer of the same
    target removes the temps a killed writer left (:func:`stale_temps`) and nothing else.
    mkstemp creates it 0600; it gets the mode a plain ``open`` would give (0666 & ~umask),
    so the renamed result is readable like any other output.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in stale_temps(target):
        stale.unlink(missing_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}-", suffix=TEMP_SUFFIX,
                                dir=target.parent)
    os.fchmod(fd, 0o666 & ~_umask())
    os.close(fd)
    return Path(name)


def _leaf_paths(name: str, type_: pa.DataType) -> list[tuple[str, pa.DataType]]:
    """Parquet column paths under one Arrow field, with their leaf types."""
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        return _leaf_paths(f"{name}.list.element", type_.value_type)
    if pa.types.is_struct(type_):
        return [leaf for f in type_ for leaf in _leaf_paths(f"{name}.{f.name}", f.type)]
    return [(name, type_)]


def _leaves(schema: pa.Schema) -> list[tuple[str, pa.DataType]]:
    return [leaf for f in schema for leaf in _leaf_paths(f.name, f.type)]


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """Parquet column paths worth dictionary-encoding: every leaf that is not a float.

    Ids, steps and labels repeat; measured float columns (log-probs, divergences) almost
    never do, and a dictionary attempt on them costs 2.5x the write time for a larger file
    (benchmarks/README.md).
    """
    return [path for path, leaf in _leaves(schema) if not pa.types.is_floating(leaf)]


def float_columns(schema: pa.Schema) -> list[str]:
    """Parquet column paths of the float leaves (every leaf :func:`dictionary_columns` skips).

    >>> float_columns(pa.schema([("x", pa.float64()), ("ids", pa.list_(pa.int32())),
    ...                          ("lp", pa.list_(pa.list_(pa.float32())))]))
    ['x', 'lp.list.element.list.element']
    """
    return [path for path, leaf in _leaves(schema) if pa.types.is_floating(leaf)]


def writer_options(schema: pa.Schema) -> dict:
    """``pq.ParquetWriter`` options per column of ``schema``.

    Float leaves get BYTE_STREAM_SPLIT (their exponent bytes then compress: files 7-9%
    smaller) and no min/max statistics (random-looking values prune no row group, and the
    statistics cost 9% of the write); every other leaf gets a dictionary and statistics.
    Every page gets a CRC32 checksum, which readers verify (``open_parquet``), so silent
    corruption (a flipped bit in a float page) is an error naming the file; its cost is
    in benchmarks/README.md.
    """
    others = dictionary_columns(schema)
    return {"use_dictionary": others, "write_statistics": others, "write_page_checksum": True,
            "column_encoding": {path: "BYTE_STREAM_SPLIT" for path in float_columns(schema)}}


def atomic_write_bytes(target: Path, data: bytes) -> None:
    tmp = temp_path_for(target)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class AtomicParquetWriter:
    """Stream record batches into ``target`` atomically; a context manager.

    On a clean exit the temp file is renamed to ``target``; on an exception it is removed.
    """

    def __init__(self, target: Path | str, schema: pa.Schema, *,
                 compression: str = "zstd", row_group_size: int = 1 << 20) -> None:
        self.target = Path(target)
        self.schema = schema
        self.row_group_size = row_group_size
        self._tmp = temp_path_for(self.target)
        level = ZSTD_LEVEL if compression == "zstd" else None
        self._writer = pq.ParquetWriter(self._tmp, schema, compression=compression,
                                        compression_level=level, **writer_options(schema))
        self.rows = 0

    def write(self, data: pa.Table | pa.RecordBatch) -> None:
        table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
        self._writer.write_table(table.cast(self.schema), row_group_size=self.row_group_size)
        self.rows += table.num_rows

    def commit(self) -> Path:
        self._writer.close()
        os.replace(self._tmp, self.target)
        return self.target

    def abort(self) -> None:
        try:
            self._writer.close()
        finally:
            self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> "AtomicParquetWriter":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def write_table_atomic(target: Path | str, table: pa.Table) -> Path:
    """Write a whole table to ``target`` atomically."""
    with AtomicParquetWriter(target, table.schema) as writer:
        writer.write(table)
    return Path(target)
