"""Write rollout/v1 logs: rows (dicts or Arrow) + footer metadata, atomically.

Examples
--------
>>> import tempfile, pathlib
>>> from pdm_replay.schema import RolloutMeta
>>> row = {"sample_id": "s0", "step": 0, "response_ids": [5], "advantages": [1.0],
...        "behavior_logprobs": [-0.1], "topk_ids": [[5, 2]], "topk_logprobs": [[-0.1, -2.5]]}
>>> p = write_rollouts(pathlib.Path(tempfile.mkdtemp()) / "log.parquet", [row],
...                    RolloutMeta(vocab_size=10, top_k=2))
>>> import pyarrow.parquet as pq; pq.read_table(p).num_rows
1
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping, Sequence

import pyarrow as pa

from pdm_replay.io.atomic import AtomicParquetWriter
from pdm_replay.schema import ROLLOUT_V1, RolloutMeta


def rollout_schema(meta: RolloutMeta) -> pa.Schema:
    """rollout/v1 with ``meta`` as footer metadata."""
    return ROLLOUT_V1.with_metadata(meta.to_metadata())


def rows_to_table(rows: Sequence[Mapping] | pa.Table, meta: RolloutMeta) -> pa.Table:
    """Conform rows to rollout/v1: missing optional columns become nulls, types are cast."""
    schema = rollout_schema(meta)
    if isinstance(rows, pa.Table):
        cols = {f.name: (rows.column(f.name).cast(f.type) if f.name in rows.column_names
                         else pa.nulls(rows.num_rows, f.type)) for f in schema}
        return pa.table(cols, schema=schema)
    return pa.Table.from_pylist([dict(r) for r in rows], schema=schema)


class RolloutWriter(AtomicParquetWriter):
    """Streaming rollout/v1 writer: ``append(rows)`` many times, renamed into place on close."""

    def __init__(self, target: Path | str, meta: RolloutMeta, *,
                 row_group_size: int = 4096) -> None:
        self.meta = meta
        super().__init__(target, rollout_schema(meta), row_group_size=row_group_size)

    def append(self, rows: Sequence[Mapping] | pa.Table) -> None:
        if len(rows):
            self.write(rows_to_table(rows, self.meta))


def write_rollouts(target: Path | str, rows: Sequence[Mapping] | pa.Table | Iterable,
                   meta: RolloutMeta) -> Path:
    """Write ``rows`` (a table, a list of dicts, or an iterable of such chunks) to ``target``."""
    with RolloutWriter(target, meta) as writer:
        if isinstance(rows, (pa.Table, list, tuple)):
            writer.append(rows)
        else:
            for chunk in rows:
                writer.append(chunk)
    return Path(target)
