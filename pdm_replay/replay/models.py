"""The models one logged step is replayed with: θ_t, µ's checkpoint, θ_{t+1}, the trainer's
optimizer state; loaded once per step (``{step}`` path templates, :mod:`.templates`).

The run keeps one step's models at a time (``run.Context.use_step``): seeds are replayed
step group by step group, so under ``--seed-by step`` every step's checkpoints are loaded
once; a ``by="sample"`` seed spanning several steps loads each of them in turn.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from pdm_replay.errors import FieldError
from pdm_replay.replay.actual import actual_norm, check_pair
from pdm_replay.replay.checkpoint import (DTYPES, CheckpointError, CheckpointFieldError,
                                          Policy, check_checkpoint_dir, check_compatible,
                                          load_policy)
from pdm_replay.replay.config import STEP_PATHS, ReplayConfig
from pdm_replay.replay.data import LogIndex, check_replayable, check_seed_rows, log_steps
from pdm_replay.replay.distributed import LOCAL, Dist, check_world
from pdm_replay.replay.fsdp import shard_policy
from pdm_replay.replay.manifest import content_hashes
from pdm_replay.replay.optimizer_state import TrainerOptimizer, load_trainer_optimizer
from pdm_replay.replay.seeds import SeedPlan
from pdm_replay.replay.step import OptimizerFactory, ParamSnapshot, TargetNorm
from pdm_replay.replay.templates import is_template, resolve
from pdm_replay.schema import RolloutMeta
from pdm_replay.checks import check_schema

CHECKPOINTS = STEP_PATHS[:3]  # directories; the fourth is the optimizer.pt file


def behavior_dtype(cfg: ReplayConfig, meta: RolloutMeta) -> str:
    """dtype for the behavior model: ``--behavior-dtype``, else the footer's
    ``behavior_dtype`` (the engine's precision: exact µ must be the distribution sampled
    from; a bf16 engine and a float32 reload differ by far more than the top-K interval
    widths), else ``--dtype``."""
    footer = meta.extra.get("behavior_dtype")
    return cfg.behavior_dtype or (footer if footer in DTYPES else cfg.dtype)


def templated(cfg: ReplayConfig) -> bool:
    """True when any per-step path option holds ``{step}`` / ``{next_step}``."""
    return any(is_template(getattr(cfg, k)) for k in STEP_PATHS)


def at_step(cfg: ReplayConfig, step: int | None) -> ReplayConfig:
    """``cfg`` with every path template filled for logged step ``step``."""
    return replace(cfg, **{k: resolve(getattr(cfg, k), step) for k in STEP_PATHS
                           if getattr(cfg, k) is not None})


def check_step_inputs(cfg: ReplayConfig, steps: list[int | None]) -> None:
    """Check every checkpoint directory and optimizer file the run will read, per step,
    before anything is loaded; a missing step's error names it."""
    for step in steps:
        c = at_step(cfg, step)
        where = f" (logged step {step})" if step is not None and templated(cfg) else ""
        for key in CHECKPOINTS:
            path = getattr(c, key)
            if path is None:
                continue
            try:
                check_checkpoint_dir(path, allow_pickle=cfg.allow_pickle,
                                     trust_remote_code=cfg.trust_remote_code)
            except ValueError as exc:
                if not where:
                    raise
                error = CheckpointFieldError if isinstance(exc, CheckpointError) else FieldError
                raise error("{" + key + "}{where}: {cause}", where=where, cause=exc) from exc
        if c.optimizer_state is not None and not Path(c.optimizer_state).is_file():
            raise FieldError("{optimizer_state}{where} {path}: no such file; pass the "
                             "trainer's optimizer.pt", where=where, path=c.optimizer_state)


@dataclass
class StepModels:
    """Everything one logged step (``None``: every step) is replayed with."""

    step: int | None
    policy: Policy
    behavior: Policy | None
    next_policy: Policy | None
    snapshot: ParamSnapshot
    trainer_optimizer: TrainerOptimizer | None = None
    target_norm: float | None = None  # ‖θ_{t+1} − θ_t‖₂ (``--lr auto``)

    def optimizer(self, name: str) -> str | OptimizerFactory:
        """What :func:`~pdm_replay.replay.step.simulated_step` steps with."""
        return self.trainer_optimizer.make if self.trainer_optimizer is not None else name

    def lr(self, lr: float | str) -> float | TargetNorm:
        if lr == "auto":
            assert self.target_norm is not None  # ReplayConfig requires --next-checkpoint
            return TargetNorm(self.target_norm)
        return float(lr)


def _load(cfg: ReplayConfig, meta: RolloutMeta, path: Path, dtype: str, device: str,
          frozen: bool) -> Policy:
    policy = load_policy(path, dtype=dtype, device=device, allow_pickle=cfg.allow_pickle,
                         trust_remote_code=cfg.trust_remote_code)
    check_compatible(policy, meta, cfg.log, cfg.tokenizer_check)
    if frozen:
        policy.model.requires_grad_(False)
    return policy


def load_step_models(cfg: ReplayConfig, meta: RolloutMeta, step: int | None,
                     dist: Dist = LOCAL) -> StepModels:
    """Load and check step ``step``'s models; under FSDP load on the host, then shard."""
    c = at_step(cfg, step)
    device = "cpu" if dist.fsdp else cfg.device
    policy = _load(cfg, meta, c.checkpoint, cfg.dtype, device, False)
    behavior = nxt = None
    if c.behavior_checkpoint is not None:
        behavior = _load(cfg, meta, c.behavior_checkpoint, behavior_dtype(cfg, meta),
                         device, True)
    if c.next_checkpoint is not None:
        nxt = _load(cfg, meta, c.next_checkpoint, cfg.dtype, device, True)
        check_pair(policy, nxt)
    target = actual_norm(policy, nxt) if nxt is not None and cfg.lr == "auto" else None
    state = (load_trainer_optimizer(c.optimizer_state, policy.model)
             if c.optimizer_state is not None else None)
    if dist.fsdp:
        for model in (policy, behavior, nxt):
            if model is not None:
                shard_policy(model, cfg.device, dist.device_mesh())
    return StepModels(step, policy, behavior, nxt, ParamSnapshot(list(policy.model.parameters())),
                      state, target)


def seed_groups(cfg: ReplayConfig, plan: SeedPlan, seed: int
                ) -> list[tuple[int | None, np.ndarray]]:
    """``seed``'s rows, split by logged step when the paths are per step (else one group,
    step ``None``)."""
    rows = plan.rows(seed)
    return plan.groups(rows) if templated(cfg) else [(None, rows)]


def steps_needed(cfg: ReplayConfig, plan: SeedPlan, seeds: int) -> list[int | None]:
    """The logged steps whose models seeds ``0..seeds-1`` need (``[None]``: one set)."""
    return sorted({step for s in range(seeds) for step, _ in seed_groups(cfg, plan, s)},
                  key=lambda step: -1 if step is None else step)


def input_hashes(cfg: ReplayConfig, steps: list[int | None]) -> dict:
    """sha256 of every input file: per step (``{"step=<s>": ...}``) for a template."""
    out = {"log": content_hashes(cfg.log)}
    for key in STEP_PATHS:
        path = getattr(cfg, key)
        if path is None:
            continue
        out[key] = ({f"step={s}": content_hashes(resolve(path, s)) for s in steps}
                    if is_template(path) else content_hashes(path))
    return out


def load_run_inputs(cfg: ReplayConfig, dist: Dist = LOCAL
                    ) -> tuple[RolloutMeta, LogIndex, SeedPlan, StepModels, list[int | None]]:
    """Check the inputs and load the first step's models, before any run directory
    exists: the log's footer, the seed plan (how many seeds fit), every checkpoint
    directory the seeds need, the models' compatibility with the log, every row's ids."""
    if not templated(cfg):
        check_step_inputs(cfg, [None])  # directories first: the cheapest, clearest errors
    meta = check_schema(cfg.log)  # validate's file-level checks before any row is read
    if meta.temperature is not None and meta.temperature <= 0:
        raise ValueError(f"{cfg.log}: footer temperature={meta.temperature}; replay needs the "
                         "sampling temperature (> 0) that µ was sampled at")
    layout = LogIndex.of(cfg.log)
    plan = SeedPlan(layout.n_rows, cfg.batch_size, cfg.seed_by, cfg.allow_overlap,
                    log_steps(layout))
    plan.check(cfg.seeds)
    steps = steps_needed(cfg, plan, cfg.seeds)
    if templated(cfg):
        check_step_inputs(cfg, steps)
    first = load_step_models(cfg, meta, steps[0], dist)
    index = check_replayable(cfg.log, first.policy.vocab_size)
    check_seed_rows(index, [rows for s in range(cfg.seeds) for _, rows in
                            seed_groups(cfg, plan, s)],
                    first.policy.vocab_size, meta.max_topk_entries)
    # Every rank needs a sample of every step group of every seed (a step's batch may be
    # below --batch-size).
    smallest = min(len(rows) for s in range(cfg.seeds) for _, rows in seed_groups(cfg, plan, s))
    check_world(dist, smallest, index.n_rows)
    return meta, index, plan, first, steps
