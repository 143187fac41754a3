"""``pdm-replay recompute``: fill a log's train columns from each row's step checkpoint.

A log that holds only the engine's top-K (µ) needs π at µ's support before ``masks`` can
run on it. This is replay's pre-update recompute (:mod:`pdm_replay.replay.train_columns`)
as batch inference over the whole log: the rows are cut into work units, each the
consecutive rows (log order) of one logged step, ``task_rows`` of them rounded up to whole
micro-batches, so a unit's micro-batches are those of a replay of that step group. The
units run in step order; whoever runs them (this process, ``engine="local"``, or Ray
actors, ``engine="ray"``: :mod:`.recompute_ray`) keeps one step's checkpoint loaded and
loads the next when the step changes, so each step's checkpoint is loaded once per
worker. Both engines compute the same units with the same code: their outputs are equal.

Everything that can be checked before a model runs is checked first (footer, columns,
prompt ids and token ranges, every step's checkpoint directory, the output path); the
output is written atomically (a temp file renamed on success), with the checkpoint
template and dtype in its footer (``schema.RECOMPUTE_CHECKPOINT_KEY`` / ``_DTYPE_KEY``).

Examples
--------
>>> import pathlib, tempfile
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> try:
...     RecomputeConfig(log=d / "log.parquet", checkpoint=d, out=d / "o.parquet", engine="spark")
... except ValueError as exc:
...     print(exc)
engine 'spark': expected one of local, ray
"""

from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pdm_replay.errors import FieldError, InputError
from pdm_replay.io.atomic import stale_temps
from pdm_replay.io.rollouts import RolloutWriter
from pdm_replay.replay.checkpoint import (CheckpointError, CheckpointFieldError, Policy,
                                          check_checkpoint_dir, check_compatible, load_policy)
from pdm_replay.names import DTYPES, ENGINES
from pdm_replay.replay.data import check_replayable, read_rows
from pdm_replay.replay.log_index import LogIndex, log_steps
from pdm_replay.replay.forward import PassConfig
from pdm_replay.replay.templates import check_template, resolve
from pdm_replay.replay.train_columns import recompute_train
from pdm_replay.schema import RECOMPUTE_CHECKPOINT_KEY, RECOMPUTE_DTYPE_KEY, RolloutMeta
from pdm_replay.threads import torch_threads
from pdm_replay.checks import check_schema

# Fixed, not sized from free memory like replay's default: LM-head chunks change the float32
# bits (tests/tolerances.py CHUNKING_ATOL), and nodes of a cluster differ in free memory.
CHUNK_TOKENS = 1024
Progress = Callable[[int, int], None]  # (rows done, tokens done)


@dataclass(frozen=True)
class RecomputeConfig:
    """Options of ``pdm-replay recompute`` (1:1 with the CLI)."""

    log: Path
    checkpoint: Path  # a directory, or a template with {step} / {next_step}
    out: Path
    engine: str = "local"
    dtype: str = "float32"
    device: str = "cpu"  # local engine; Ray actors use cuda when given GPUs
    micro_batch_size: int = 8
    chunk_tokens: int = CHUNK_TOKENS
    task_rows: int = 256
    threads: int = 1  # torch intra-op threads per worker
    workers: int | None = None  # Ray model actors; None: what the cluster holds
    num_gpus: float | None = None  # GPUs per Ray actor; None: 1 if the cluster has GPUs
    ray_address: str | None = None  # None: RAY_ADDRESS, else a local instance

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise FieldError("{engine} {got!r}: expected one of {known}", got=self.engine,
                             known=", ".join(ENGINES))
        if self.dtype not in DTYPES:
            raise FieldError("{dtype} {got!r}: expected one of {known}", got=self.dtype,
                             known=", ".join(DTYPES))
        for name in ("micro_batch_size", "chunk_tokens", "task_rows", "threads", "workers"):
            got = getattr(self, name)
            if got is not None and got < 1:
                raise FieldError("{" + name + "} {got}: expected at least 1", got=got)
        if self.num_gpus is not None and self.num_gpus < 0:
            raise FieldError("{num_gpus} {got}: expected at least 0", got=self.num_gpus)


@dataclass(frozen=True)
class Unit:
    """One work unit: consecutive rows of one logged step."""

    step: int
    rows: np.ndarray  # (R,) int64 global row indices (every file in sorted order), ascending


def plan_units(steps: np.ndarray, task_rows: int, micro_batch_size: int) -> list[Unit]:
    """Units of every step ``(n_rows,)``, in step order, ``task_rows`` rounded up to whole
    micro-batches.

    >>> [(u.step, u.rows.tolist()) for u in plan_units(np.array([5, 4, 5, 5]), 1, 2)]
    [(4, [1]), (5, [0, 2]), (5, [3])]
    """
    size = -(-task_rows // micro_batch_size) * micro_batch_size
    out = []
    for step in np.unique(steps):
        rows = np.flatnonzero(steps == step)
        out.extend(Unit(int(step), rows[i:i + size]) for i in range(0, len(rows), size))
    return out


@dataclass(frozen=True)
class Plan:
    """What the driver checked: the log's footer, its index, the units."""

    meta: RolloutMeta
    index: LogIndex
    units: list[Unit]

    @property
    def temperature(self) -> float:
        return 1.0 if self.meta.temperature is None else self.meta.temperature


def _check_out(cfg: RecomputeConfig) -> None:
    if cfg.out.exists():
        raise FieldError("{out} {path} exists; choose a new {out} or remove it",
                         path=cfg.out)
    if not cfg.out.parent.is_dir():
        raise FieldError("{out} {path}: its directory does not exist", path=cfg.out)
    for stale in stale_temps(cfg.out):  # a crashed earlier run's temp file
        stale.unlink(missing_ok=True)


def check_checkpoints(template: Path, steps: list[int]) -> None:
    """Check the checkpoint directory of every step; a missing one names step and path."""
    for step in steps:
        path = resolve(template, step)
        try:
            check_checkpoint_dir(path)
        except CheckpointError as exc:
            error = CheckpointFieldError if isinstance(exc, FieldError) else FieldError
            raise error("{checkpoint} {template} for logged step {step}: {cause}",
                        template=template, step=step, cause=exc) from exc


def plan(cfg: RecomputeConfig) -> Plan:
    """Every check that needs no model, then the units (before any output exists)."""
    check_template(cfg.checkpoint, "checkpoint")
    _check_out(cfg)
    meta = check_schema(cfg.log)
    if meta.temperature is not None and meta.temperature <= 0:
        raise InputError(f"footer temperature={meta.temperature}; π is recomputed at the "
                         "sampling temperature (> 0) µ was sampled at", file=cfg.log)
    index = check_replayable(cfg.log, meta.vocab_size)
    units = plan_units(log_steps(index), cfg.task_rows, cfg.micro_batch_size)
    check_checkpoints(cfg.checkpoint, sorted({u.step for u in units}))
    return Plan(meta, index, units)


def _source(index: LogIndex, rows: np.ndarray) -> str:
    """The file holding global row ``rows[0]`` (what a bad row's message names)."""
    bounds = np.cumsum(index.rows)
    return str(index.files[int(np.searchsorted(bounds, rows[0], side="right"))])


@dataclass
class StepRecomputer:
    """Computes units, keeping the current step's policy loaded (one step at a time)."""

    cfg: RecomputeConfig
    plan: Plan
    device: str
    loads: list[int] = field(default_factory=list)  # the steps loaded, in order
    _policy: Policy | None = None

    def policy(self, step: int) -> Policy:
        if not self.loads or self.loads[-1] != step:
            self._policy = None  # free the previous step's weights first
            policy = load_policy(resolve(self.cfg.checkpoint, step), dtype=self.cfg.dtype,
                                 device=self.device)
            check_compatible(policy, self.plan.meta, self.cfg.log)
            self._policy = policy
            self.loads.append(step)
        assert self._policy is not None
        return self._policy

    def __call__(self, unit: Unit) -> pa.Table:
        """The unit's rows with their train columns recomputed."""
        pass_cfg = PassConfig(temperature=self.plan.temperature,
                              chunk_tokens=self.cfg.chunk_tokens)
        with torch_threads(self.cfg.threads):
            table = read_rows(self.plan.index, unit.rows)
            return recompute_train(self.policy(unit.step), table, pass_cfg,
                                   self.cfg.micro_batch_size, _source(self.plan.index,
                                                                      unit.rows),
                                   self.plan.meta.max_topk_entries)


def local_tables(cfg: RecomputeConfig, plan: Plan) -> Iterator[pa.Table]:
    """``engine="local"``: every unit in this process, in order."""
    work = StepRecomputer(cfg, plan, cfg.device)
    for unit in plan.units:
        yield work(unit)


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


def run_recompute(cfg: RecomputeConfig, on_progress: Progress | None = None
                  ) -> RecomputeSummary:
    """Recompute the train columns of ``cfg.log`` into ``cfg.out`` (rollout/v1, atomic)."""
    t0 = time.perf_counter()
    p = plan(cfg)
    summary = RecomputeSummary(cfg.out, cfg.engine, steps=len({u.step for u in p.units}),
                               units=len(p.units))
    if cfg.engine == "ray":
        from pdm_replay.commands.recompute_ray import ray_tables
        tables = ray_tables(cfg, p)
    else:
        tables = local_tables(cfg, p)
    # closing: a failed write stops the engine now (a Ray session this run started ends)
    with closing(tables), RolloutWriter(cfg.out, output_meta(cfg, p.meta)) as writer:
        for table in tables:
            writer.append(table)
            summary.rows += table.num_rows
            summary.tokens += int(pc.sum(pc.list_value_length(table["response_ids"])
                                         ).as_py() or 0)
            if on_progress is not None:
                on_progress(summary.rows, summary.tokens)
    summary.seconds = time.perf_counter() - t0
    return summary
