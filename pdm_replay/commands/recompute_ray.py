"""``recompute --engine ray``: the work units on model-holding Ray actors (Ray Data).

The driver lists the units (:func:`pdm_replay.commands.recompute_plan.plan`: consecutive
rows of one step, in step order; under ``resume`` only the unfinished ones) as a Ray
dataset of descriptors (step, global row indices), one block each, and ``map_batches``
runs them on a pool of :class:`RecomputeActor` s (a callable class: a pool of ``workers``
actors, ``num_gpus`` each when the cluster has GPUs). Each actor reads its unit's rows
itself (the log and the checkpoints must be at the same path on every node: a shared file
system) and holds one step's checkpoint at a time, so with the units in step order it
loads each step's checkpoint once. The actor runs
:class:`~pdm_replay.commands.recompute_plan.StepRecomputer`, the local engine's code, and
the driver stages the blocks in unit order (``preserve_order``;
:mod:`pdm_replay.commands.recompute`): the output equals the local engine's row for row.

Pattern as in Ray Data's batch-inference guide (``ray.data.Dataset.map_batches`` with a
callable class and ``concurrency``; ``ray/data/dataset.py``, ``map_batches``).
"""

from __future__ import annotations

import logging
import pickle
from contextlib import closing, contextmanager
from dataclasses import replace
from typing import Any, Iterator

import numpy as np
import pyarrow as pa

from pdm_replay.commands.recompute_plan import Plan, RecomputeConfig, StepRecomputer, Unit
from pdm_replay.cluster.ray_engine import connected

ERROR_COLUMN = "__pdm_replay_error__"  # an actor's input error, pickled


class RecomputeActor:
    """A Ray Data callable class: one model-holding worker (its step's policy)."""

    def __init__(self, cfg: RecomputeConfig, plan: Plan, device: str) -> None:
        self.work = StepRecomputer(cfg, plan, device)

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Unit descriptors ``step``, ``rows`` -> the units' rows, train columns filled; a
        bad input's error comes back as a one-row :data:`ERROR_COLUMN` table (Ray Data
        replaces a raised exception by a ``UserCodeException`` without its message)."""
        units = [Unit(int(s), np.asarray(r, dtype=np.int64))
                 for s, r in zip(batch["step"].to_pylist(), batch["rows"].to_pylist())]
        try:
            return pa.concat_tables([self.work(u) for u in units])
        except (ValueError, FileNotFoundError) as exc:  # what the CLI reports as bad input
            return pa.table({ERROR_COLUMN: [pickle.dumps(exc)]})


def actor_resources(cfg: RecomputeConfig, n_units: int) -> tuple[int, float]:
    """(actors, GPUs per actor): ``num_gpus`` (default 1 when the cluster has GPUs, else
    0: CPU actors of ``threads`` CPUs); ``workers`` actors, default as many as the cluster
    holds, at most one per unit."""
    import ray
    total = ray.cluster_resources()
    gpus = cfg.num_gpus if cfg.num_gpus is not None else (1.0 if total.get("GPU") else 0.0)
    fits = (total.get("GPU", 0) / gpus) if gpus else total.get("CPU", 1) / cfg.threads
    workers = cfg.workers or max(1, int(fits))
    return max(1, min(workers, n_units)), gpus


def _raise_error(table: pa.Table) -> None:
    """Raise the input error an actor sent back (pickled by our own actor, not input)."""
    if ERROR_COLUMN in table.column_names:
        raise pickle.loads(table[ERROR_COLUMN][0].as_py())


def ray_tables(cfg: RecomputeConfig, plan: Plan) -> Iterator[pa.Table]:
    """Every unit's output table, in unit order, computed on Ray actors."""
    import ray
    with connected(cfg.ray_address), _ordered(ray.data.DataContext.get_current()):
        workers, gpus = actor_resources(cfg, len(plan.units))
        items = [{"step": u.step, "rows": u.rows.tolist()} for u in plan.units]
        ds = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
            RecomputeActor, batch_size=1, batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=workers), num_cpus=cfg.threads,
            num_gpus=gpus or None, fn_constructor_kwargs={
                "cfg": cfg, "plan": replace(plan, units=[]),  # actors get their units
                "device": "cuda" if gpus else "cpu"})
        # closed before the connection ends, whatever stops the loop (a failed write, a bad
        # row): it shuts the executor down, and disconnecting waits for Ray Data's threads
        # (cluster.ray_engine.wait_for_data_threads) before ray.shutdown.
        with closing(iter(ds.iter_batches(batch_size=None, batch_format="pyarrow"))) as batches:
            for table in batches:
                _raise_error(table)
                yield table


@contextmanager
def _ordered(ctx: Any) -> Iterator[None]:
    """Ray Data's context ``ctx`` (process-wide) with blocks kept in order, no progress
    bars and no INFO lines (the CLI shows its own progress) for the block, then as it was."""
    opts, log = ctx.execution_options, logging.getLogger("ray.data")
    before = (opts.preserve_order, ctx.enable_progress_bars, log.level)
    opts.preserve_order, ctx.enable_progress_bars = True, False
    log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        opts.preserve_order, ctx.enable_progress_bars, level = before
        log.setLevel(level)
