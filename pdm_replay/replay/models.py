"""The models one logged step is replayed with: θ_t, µ's checkpoint, θ_{t+1}, the trainer's
optimizer state; loaded once per step (``{step}`` path templates, :mod:`.templates`).

The run keeps one step's models at a time (:class:`ModelSlot`): seeds are replayed step
group by step group, so under ``--seed-by step`` every step's checkpoints are loaded once;
a ``by="sample"`` seed spanning several steps loads each of them in turn. Where the files
are is a :class:`StepPaths`, how they are loaded a :class:`ModelOptions`, both explicit:
nothing here reads the replay's configuration.

Examples
--------
>>> from pathlib import Path
>>> paths = StepPaths(Path("ckpt/global_step_{step}"), next_checkpoint=Path("ckpt/n"))
>>> paths.templated, paths.at(7).checkpoint.as_posix(), sorted(paths.named())
(True, 'ckpt/global_step_7', ['checkpoint', 'next_checkpoint'])
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, fields, replace
from pathlib import Path

from pdm_replay.errors import FieldError
from pdm_replay.replay.actual import actual_norm, check_pair
from pdm_replay.replay.checkpoint import (DTYPES, CheckpointError, CheckpointFieldError,
                                          Policy, check_checkpoint_dir, check_compatible,
                                          load_policy)
from pdm_replay.replay.distributed import LOCAL, Dist
from pdm_replay.replay.fsdp import shard_policy
from pdm_replay.replay.optimizer_state import TrainerOptimizer, load_trainer_optimizer
from pdm_replay.replay.step import OptimizerFactory, ParamSnapshot, TargetNorm
from pdm_replay.replay.templates import is_template, resolve
from pdm_replay.schema import RolloutMeta


@dataclass(frozen=True)
class StepPaths:
    """The files of a step's models, each a plain path or a ``{step}`` / ``{next_step}``
    template; the field names are the settings an error names."""

    checkpoint: Path
    behavior_checkpoint: Path | None = None
    next_checkpoint: Path | None = None
    optimizer_state: Path | None = None  # a file; the others are checkpoint directories

    def named(self) -> dict[str, Path]:
        """The given paths by field name."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}

    @property
    def templated(self) -> bool:
        """True when any path holds ``{step}`` / ``{next_step}``: the models are per step."""
        return any(is_template(p) for p in self.named().values())

    def at(self, step: int | None) -> StepPaths:
        """Every template filled for logged step ``step``."""
        return replace(self, **{k: resolve(p, step) for k, p in self.named().items()})


@dataclass(frozen=True)
class ModelOptions:
    """How a step's models are loaded and checked against the log."""

    dtype: str = "float32"  # θ_t and θ_{t+1}
    behavior_dtype: str = "float32"  # µ's model (:func:`behavior_dtype`)
    device: str = "cpu"
    allow_pickle: bool = False
    trust_remote_code: bool = False
    tokenizer_check: bool = True
    target_norm: bool = False  # measure ‖θ_{t+1} − θ_t‖₂ (``lr`` auto)


def behavior_dtype(meta: RolloutMeta, option: str | None, dtype: str) -> str:
    """dtype for the behavior model: ``option``, else the footer's ``behavior_dtype`` (the
    engine's precision: exact µ must be the distribution sampled from; a bf16 engine and a
    float32 reload differ by far more than the top-K interval widths), else ``dtype``."""
    footer = meta.extra.get("behavior_dtype")
    return option or (footer if footer in DTYPES else dtype)


def check_step_files(paths: StepPaths, steps: list[int | None], *, allow_pickle: bool,
                     trust_remote_code: bool) -> None:
    """Check every checkpoint directory and optimizer file the run will read, per step,
    before anything is loaded; a missing step's error names it."""
    for step in steps:
        at = paths.at(step)
        where = f" (logged step {step})" if step is not None and paths.templated else ""
        for key, path in at.named().items():
            if key == "optimizer_state":
                continue
            try:
                check_checkpoint_dir(path, allow_pickle=allow_pickle,
                                     trust_remote_code=trust_remote_code)
            except ValueError as exc:
                if not where:
                    raise
                error = CheckpointFieldError if isinstance(exc, CheckpointError) else FieldError
                raise error("{" + key + "}{where}: {cause}", where=where, cause=exc) from exc
        if at.optimizer_state is not None and not Path(at.optimizer_state).is_file():
            raise FieldError("{optimizer_state}{where} {path}: no such file; pass the "
                             "trainer's optimizer.pt", where=where, path=at.optimizer_state)


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
            assert self.target_norm is not None  # lr auto requires a next checkpoint
            return TargetNorm(self.target_norm)
        return float(lr)


@dataclass(frozen=True)
class ModelSource:
    """Where (``paths``) and how (``options``) every step's models are loaded, and the log
    (``meta`` of ``log``) they are checked against; ``dist``: FSDP loads on the host, then
    shards."""

    paths: StepPaths
    options: ModelOptions
    meta: RolloutMeta
    log: Path
    dist: Dist = LOCAL

    def _load(self, path: Path, dtype: str, device: str, frozen: bool) -> Policy:
        o = self.options
        policy = load_policy(path, dtype=dtype, device=device, allow_pickle=o.allow_pickle,
                             trust_remote_code=o.trust_remote_code)
        check_compatible(policy, self.meta, self.log, o.tokenizer_check)
        if frozen:
            policy.model.requires_grad_(False)
        return policy

    def load(self, step: int | None) -> StepModels:
        """Load and check step ``step``'s models; under FSDP load on the host, then shard."""
        at, o, dist = self.paths.at(step), self.options, self.dist
        device = "cpu" if dist.fsdp else o.device
        policy = self._load(at.checkpoint, o.dtype, device, False)
        behavior = nxt = None
        if at.behavior_checkpoint is not None:
            behavior = self._load(at.behavior_checkpoint, o.behavior_dtype, device, True)
        if at.next_checkpoint is not None:
            nxt = self._load(at.next_checkpoint, o.dtype, device, True)
            check_pair(policy, nxt)
        target = actual_norm(policy, nxt) if nxt is not None and o.target_norm else None
        state = (load_trainer_optimizer(at.optimizer_state, policy.model)
                 if at.optimizer_state is not None else None)
        if dist.fsdp:
            for model in (policy, behavior, nxt):
                if model is not None:
                    shard_policy(model, o.device, dist.device_mesh())
        return StepModels(step, policy, behavior, nxt,
                          ParamSnapshot(list(policy.model.parameters())), state, target)


class ModelSlot:
    """The models of the logged step being replayed: the run's one mutable cache.
    :meth:`use` switches steps, dropping the current models first, so one step's models
    are alive at once."""

    def __init__(self, source: ModelSource, first: StepModels) -> None:
        self.source = source
        self.current = first

    def use(self, step: int | None) -> StepModels:
        key = step if self.source.paths.templated else None
        if self.current.step != key:
            self.current = None  # type: ignore[assignment]
            gc.collect()
            self.current = self.source.load(key)
        return self.current
