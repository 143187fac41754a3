"""What ``pdm-replay recompute`` checks and plans, and the work unit every engine runs.

The driver (:mod:`pdm_replay.commands.recompute`) calls :func:`plan`: every check that
needs no model (footer and columns through :class:`~pdm_replay.io.log.RolloutLog`, prompt
ids and token ranges, every step's checkpoint directory, the output path), then the work
units, each the consecutive rows (log order) of one logged step. A worker, in this process
or a Ray actor (:mod:`pdm_replay.commands.recompute_ray`), runs units with
:class:`StepRecomputer`, keeping one step's checkpoint loaded. Both the driver and the Ray
engine import this module; neither imports the other's caller.

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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa

from pdm_replay.errors import FieldError
from pdm_replay.io.atomic import stale_temps
from pdm_replay.io.log import RolloutLog
from pdm_replay.names import DTYPES, ENGINES
from pdm_replay.replay.checkpoint import (CheckpointError, CheckpointFieldError, Policy,
                                          check_checkpoint_dir, check_compatible, load_policy)
from pdm_replay.replay.data import check_replayable, read_rows
from pdm_replay.replay.log_index import LogIndex, log_steps
from pdm_replay.replay.forward import PassConfig
from pdm_replay.replay.templates import check_template, resolve
from pdm_replay.replay.train_columns import recompute_train
from pdm_replay.schema import RolloutMeta
from pdm_replay.threads import torch_threads

# Fixed, not sized from free memory like replay's default: LM-head chunks change the float32
# bits (tests/tolerances.py CHUNKING_ATOL), and nodes of a cluster differ in free memory.
CHUNK_TOKENS = 1024


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
    resume: bool = False  # keep the finished work units of a killed run (its staging dir)

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
    """What the driver checked: the log's footer, its index, the units, and µ's sampling
    temperature (which π is recomputed at)."""

    meta: RolloutMeta
    index: LogIndex
    units: list[Unit]
    temperature: float


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
    log = RolloutLog.open(cfg.log)  # validate's file-level checks
    temperature = log.sampling_temperature()
    index = check_replayable(log, log.meta.vocab_size)
    units = plan_units(log_steps(index), cfg.task_rows, cfg.micro_batch_size)
    check_checkpoints(cfg.checkpoint, sorted({u.step for u in units}))
    return Plan(log.meta, index, units, temperature)


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
