"""Unique ``sample_id`` across a whole log read by many Ray tasks.

A map task sees one block and checks ids inside it; ids repeated across blocks are
caught on the driver: each task returns 64-bit hashes of its rows' ids, each finished
input file's hashes are kept beside its progress marker (``_progress/<key>.ids``), and
after the job :func:`check_unique` looks for a repeated hash. Only then are the files'
``sample_id`` columns read again in log order, with the local command's own check
(:func:`pdm_replay.checks.check_sample_ids`), so that the error is the local
command's message (file, row). A hash collision without a repeated id raises nothing.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa

from pdm_replay.commands.masks import _raise_first
from pdm_replay.io.atomic import atomic_write_bytes
from pdm_replay.io.reader import open_parquet
from pdm_replay.io.staged import PROGRESS_DIR
from pdm_replay.checks import ValidationReport, check_sample_ids


def id_hashes(ids: pa.Array) -> bytes:
    """Little-endian uint64 hashes (blake2b, 8 bytes) of ``ids`` (N,), as bytes."""
    out = np.fromiter((int.from_bytes(hashlib.blake2b(str(s).encode(), digest_size=8)
                                      .digest(), "little") for s in ids.to_pylist()),
                      dtype="<u8", count=len(ids))
    return out.tobytes()


def save_ids(stage: Path, key: str, chunks: Sequence[bytes]) -> None:
    """Keep a finished input file's id hashes (before its marker is written)."""
    atomic_write_bytes(stage / PROGRESS_DIR / f"{key}.ids", b"".join(chunks))


def _first_repeat(files: Sequence[str]) -> None:
    """The local command's check over every file's ``sample_id``, in log order."""
    seen: set[str] = set()
    for f in files:
        row = 0
        for batch in open_parquet(f).iter_batches(columns=["sample_id"]):
            report = ValidationReport(f, max_errors=1)
            check_sample_ids(batch, f, row, report, seen)
            _raise_first(report)
            row += batch.num_rows


def check_unique(stage: Path, files: Sequence[str], keys: dict[str, str]) -> None:
    """Raise the local command's error where a ``sample_id`` repeats across ``files``."""
    hashes = np.concatenate([np.fromfile(stage / PROGRESS_DIR / f"{keys[f]}.ids", "<u8")
                             for f in files]) if files else np.empty(0, "<u8")
    if np.unique(hashes).size < hashes.size:
        _first_repeat(files)
