"""``pdm-replay recompute``: fill a log's train columns from each row's step checkpoint.

A log that holds only the engine's top-K (µ) needs π at µ's support before ``masks`` can
run on it. This is replay's pre-update recompute (:mod:`pdm_replay.replay.train_columns`)
as batch inference over the whole log: the rows are cut into work units, each the
consecutive rows (log order) of one logged step, ``task_rows`` of them rounded up to whole
micro-batches, so a unit's micro-batches are those of a replay of that step group
(:mod:`.recompute_plan`). The units run in step order; whoever runs them (this process,
``engine="local"``, or Ray actors, ``engine="ray"``: :mod:`.recompute_ray`) keeps one
step's checkpoint loaded and loads the next when the step changes, so each step's
checkpoint is loaded once per worker. Both engines compute the same units with the same
code: their outputs are equal.

Everything that can be checked before a model runs is checked first (footer, columns,
prompt ids and token ranges, every step's checkpoint directory, the output path). Each
finished unit's rows are kept under a staging directory beside the output
(``.<out>.pdm-partial``, :mod:`pdm_replay.io.staged`: the unit's part file, then its
progress marker); when every unit is done, the parts are written, in unit order, to the
output (a temp file renamed on success), with the checkpoint template and dtype in its
footer (``schema.RECOMPUTE_CHECKPOINT_KEY`` / ``_DTYPE_KEY``), and the staging directory
is removed. An input error removes it too; a crash leaves it, and ``resume`` redoes only
the units without a marker: the output is the one an uninterrupted run writes.

Examples
--------
>>> import numpy as np
>>> unit_key(3, '["settings"]', Unit(8, np.array([0, 1])))
'000003-8-...'
"""

from __future__ import annotations

import hashlib
import json
import time
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from pdm_replay.commands.recompute_plan import (  # noqa: F401 (the command's API)
    Plan, RecomputeConfig, StepRecomputer, Unit, check_checkpoints, local_tables, plan,
    plan_units)
from pdm_replay.io.atomic import write_table_atomic
from pdm_replay.io.reader import read_table
from pdm_replay.io.rollouts import RolloutWriter
from pdm_replay.io.staged import discard_staging, open_staging, read_markers, write_marker
from pdm_replay.schema import RECOMPUTE_CHECKPOINT_KEY, RECOMPUTE_DTYPE_KEY, RolloutMeta

Progress = Callable[[int, int], None]  # (rows done, tokens done)
UNITS_DIR = "units"  # the staged part file of each finished unit: units/<key>.parquet


@dataclass
class RecomputeSummary:
    """What a ``recompute`` run wrote; printed by the CLI."""

    out: Path
    engine: str
    rows: int = 0
    tokens: int = 0
    steps: int = 0
    units: int = 0
    seconds: float = 0.0


def output_meta(cfg: RecomputeConfig, meta: RolloutMeta) -> RolloutMeta:
    """The input footer plus the checkpoint (template, as given) and dtype of π."""
    return replace(meta, extra={**meta.extra, RECOMPUTE_CHECKPOINT_KEY: str(cfg.checkpoint),
                                RECOMPUTE_DTYPE_KEY: cfg.dtype})


def settings_text(cfg: RecomputeConfig, p: Plan) -> str:
    """What a unit's output depends on besides its rows: the log's files and row counts,
    the checkpoint template, dtype, micro-batches, LM-head chunks (JSON)."""
    return json.dumps([[str(f) for f in p.index.files], list(p.index.rows),
                       str(cfg.checkpoint), cfg.dtype, cfg.micro_batch_size,
                       cfg.chunk_tokens])


def unit_key(number: int, settings: str, unit: Unit) -> str:
    """A unit's staging key: its place in the run, its step, and a digest of its rows and
    ``settings``, so that a resumed run keeps only a unit it would compute the same."""
    digest = hashlib.sha1(f"{settings}|{unit.rows.tolist()}".encode()).hexdigest()[:16]
    return f"{number:06d}-{unit.step}-{digest}"


@dataclass
class UnitSink:
    """Books the engine's tables (the units' rows, in unit order, cut anyhow) into one
    staged part per unit; a unit's marker is written once all its rows are in."""

    stage: Path
    units: list[tuple[str, Unit]]  # (key, unit) still to do, in order
    on_done: Callable[[int, int], None]  # (rows, tokens) of each finished unit
    _pending: list[pa.Table] | None = None

    def add(self, table: pa.Table) -> None:
        self._pending = (self._pending or []) + [table]
        rows = sum(t.num_rows for t in self._pending)
        while self.units and rows >= len(self.units[0][1].rows):
            key, unit = self.units.pop(0)
            whole = pa.concat_tables(self._pending, promote_options="default")
            n = len(unit.rows)
            self._pending, rows = [whole.slice(n)], rows - n
            self._finish(key, whole.slice(0, n).combine_chunks())

    def _finish(self, key: str, table: pa.Table) -> None:
        write_table_atomic(self.stage / UNITS_DIR / f"{key}.parquet", table)  # then the marker
        tokens = int(pc.sum(pc.list_value_length(table["response_ids"])).as_py() or 0)
        write_marker(self.stage, key, {"rows": table.num_rows, "tokens": tokens})
        self.on_done(table.num_rows, tokens)


def _engine_tables(cfg: RecomputeConfig, p: Plan) -> Iterator[pa.Table]:
    """The units of ``p`` computed by ``cfg.engine``, in unit order."""
    if cfg.engine == "ray":
        from pdm_replay.commands.recompute_ray import ray_tables
        return ray_tables(cfg, p)
    return local_tables(cfg, p)


def _compute(cfg: RecomputeConfig, p: Plan, todo: list[tuple[str, Unit]], stage: Path,
             on_done: Callable[[int, int], None]) -> None:
    """Stage every unit of ``todo`` (none: the engine does not start)."""
    if not todo:
        return
    (stage / UNITS_DIR).mkdir(exist_ok=True)
    sink = UnitSink(stage, list(todo), on_done)
    # closing: a failed write stops the engine now (a Ray session this run started ends)
    with closing(_engine_tables(cfg, replace(p, units=[u for _, u in todo]))) as tables:
        for table in tables:
            sink.add(table)


def _write_output(cfg: RecomputeConfig, p: Plan, keys: Iterable[str], stage: Path) -> None:
    """Every unit's staged rows, in unit order, to ``cfg.out`` (atomic)."""
    with RolloutWriter(cfg.out, output_meta(cfg, p.meta)) as writer:
        for key in keys:
            writer.append(read_table(stage / UNITS_DIR / f"{key}.parquet"))


def run_recompute(cfg: RecomputeConfig, on_progress: Progress | None = None
                  ) -> RecomputeSummary:
    """Recompute the train columns of ``cfg.log`` into ``cfg.out`` (rollout/v1, atomic);
    ``cfg.resume`` keeps the units a killed run finished."""
    t0 = time.perf_counter()
    p = plan(cfg)
    summary = RecomputeSummary(cfg.out, cfg.engine, steps=len({u.step for u in p.units}),
                               units=len(p.units))
    settings = settings_text(cfg, p)
    keys = [unit_key(i, settings, u) for i, u in enumerate(p.units)]

    def done(rows: int, tokens: int) -> None:
        summary.rows, summary.tokens = summary.rows + rows, summary.tokens + tokens
        if on_progress is not None:
            on_progress(summary.rows, summary.tokens)

    stage = open_staging(cfg.out, cfg.resume)
    try:
        markers = read_markers(stage)
        for key in keys:
            if key in markers:
                done(markers[key]["rows"], markers[key]["tokens"])
        _compute(cfg, p, [(k, u) for k, u in zip(keys, p.units) if k not in markers],
                 stage, done)
        _write_output(cfg, p, keys, stage)
    except (ValueError, FileNotFoundError):  # bad input: nothing is left behind
        discard_staging(cfg.out)
        raise
    discard_staging(cfg.out)
    summary.seconds = time.perf_counter() - t0
    return summary
