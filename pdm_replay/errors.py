"""Errors that mean "the input is bad", and the file context every one of them carries.

A user-facing failure is one or two lines: what is wrong, the file, the sample and
position where known, and how to fix it. Library code raises :class:`InputError` (a
``ValueError``, so existing ``except ValueError`` callers keep working); readers wrap
their file access in :func:`reading`, which turns pyarrow's, the OS's and JSON's errors
about a file's *content* (corrupt page headers, truncated footers, bad JSON) into an
:class:`InputError` that names the file. The CLI (:mod:`pdm_replay.cli.errors`) prints
these without a traceback and exits 2.

Examples
--------
>>> str(InputError("top-K row has 30 entries, the footer's top_k is 20", file="log.parquet",
...                sample="s1", pos=3, fix="re-log with K = 20"))
"log.parquet: sample 's1' pos 3: top-K row has 30 entries, the footer's top_k is 20; re-log with K = 20"
>>> import tempfile, pathlib
>>> bad = pathlib.Path(tempfile.mkdtemp()) / "x.parquet"
>>> _ = bad.write_bytes(b"not parquet")
>>> import pyarrow.parquet as pq
>>> try:
...     with reading(bad):
...         pq.read_schema(bad)
... except InputError as exc:
...     print(str(exc).startswith(str(bad)))
True
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pyarrow as pa

CORRUPT_FIX = "the file is corrupt or truncated: write it again (or restore it from a copy)"


class InputError(ValueError):
    """Bad user input, with where it is (file, sample, position) and how to fix it."""

    def __init__(self, message: str, *, file: Path | str | None = None,
                 sample: str | None = None, pos: int | None = None,
                 fix: str | None = None) -> None:
        self.message, self.file, self.sample, self.pos, self.fix = message, file, sample, pos, fix
        super().__init__(self._text())

    def _text(self) -> str:
        where = [] if self.file is None else [str(self.file)]
        if self.sample is not None:
            where.append(f"sample {self.sample!r}" + ("" if self.pos is None
                                                       else f" pos {self.pos}"))
        text = ": ".join([*where, self.message])
        return f"{text}; {self.fix}" if self.fix else text


def printable(text: str) -> str:
    """``text`` with control characters (a corrupt file's bytes echoed back) shown as ?.

    >>> printable("type: \x0f")
    'type: ?'
    """
    return "".join(c if c.isprintable() else "?" for c in text)


def _names(exc: BaseException, path: Path | str) -> bool:
    return str(path) in str(exc)


@contextmanager
def reading(path: Path | str, what: str = "Parquet file") -> Iterator[None]:
    """Turn errors about ``path``'s content into an :class:`InputError` naming it.

    ``FileNotFoundError`` and ``PermissionError`` pass through unchanged (their message
    already names the file); so do errors that are already :class:`InputError`.
    """
    try:
        yield
    except (InputError, FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except (pa.ArrowException, OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        detail = printable(str(exc).strip().splitlines()[0] if str(exc).strip()
                           else type(exc).__name__)
        if _names(exc, path):
            raise InputError(f"cannot read this {what}: {detail}", fix=CORRUPT_FIX) from exc
        raise InputError(f"cannot read this {what}: {detail}", file=path,
                         fix=CORRUPT_FIX) from exc
