"""What every seed of a replay shares (:class:`ReplayContext`, fixed when the run starts)
and the one mutable piece, the slot holding the logged step's models (:class:`ModelSlot`)."""

from __future__ import annotations

import gc
from dataclasses import dataclass, field

import numpy as np

from pdm_replay.masks import Mask
from pdm_replay.replay import manifest as mf
from pdm_replay.replay.checkpoint import Policy
from pdm_replay.replay.config import ReplayConfig
from pdm_replay.replay.data import LogIndex
from pdm_replay.replay.distributed import LOCAL, Dist
from pdm_replay.replay.forward import PassConfig
from pdm_replay.replay.models import StepModels, load_step_models, seed_groups
from pdm_replay.replay.seeds import SeedPlan
from pdm_replay.replay.step import GradReduce, ParamSnapshot
from pdm_replay.schema import RolloutMeta


class ModelSlot:
    """The models of the logged step being replayed: the run's one mutable cache.
    :meth:`use` switches steps, dropping the current models first, so one step's models
    are alive at once."""

    def __init__(self, cfg: ReplayConfig, meta: RolloutMeta, first: StepModels,
                 per_step: bool, dist: Dist) -> None:
        self._cfg, self._meta, self._per_step, self._dist = cfg, meta, per_step, dist
        self.current = first

    def use(self, step: int | None) -> StepModels:
        key = step if self._per_step else None
        if self.current.step != key:
            self.current = None  # type: ignore[assignment]
            gc.collect()
            self.current = load_step_models(self._cfg, self._meta, key, self._dist)
        return self.current


@dataclass(frozen=True)
class ReplayContext:
    """What every seed shares, fixed at the start: config, the log index and seed plan,
    the masks, the gradient reduction, and the slot holding the step's models."""

    cfg: ReplayConfig
    meta: RolloutMeta
    index: LogIndex
    plan: SeedPlan
    layout: mf.RunLayout
    record_masks: dict[str, Mask]
    update_masks: dict[str, Mask]
    slot: ModelSlot
    trainer_mask: Mask | None = None  # decides `kept` under the actual update
    grad_reduce: GradReduce | None = None
    pass_cfg: PassConfig = field(default_factory=PassConfig)
    dist: Dist = LOCAL  # this process's rank under torchrun (replay.distributed)

    @property
    def models(self) -> StepModels:
        return self.slot.current

    @property
    def policy(self) -> Policy:
        return self.models.policy

    @property
    def behavior(self) -> Policy | None:
        return self.models.behavior

    @property
    def snapshot(self) -> ParamSnapshot:
        return self.models.snapshot

    def use_step(self, step: int | None) -> None:
        """Switch the slot to logged step ``step``'s models (:meth:`ModelSlot.use`)."""
        self.slot.use(step)

    def groups(self, seed: int) -> list[tuple[int | None, np.ndarray]]:
        """``seed``'s rows, split by logged step when the checkpoints are per step."""
        return seed_groups(self.cfg, self.plan, seed)
