"""The replay recipe's steps below the recipe (:class:`~pdm_replay.commands.replay.ReplayRecipe`):
one step group's pre pass (:func:`pre_pass`), its updates (:class:`Updates`), the progress
count and the run's headline. Config-free: every value comes as an argument.

A step group is the rows of one seed replayed against one logged step's models (the whole
seed unless the checkpoints are ``{step}`` templates).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cached_property
from typing import Callable

import numpy as np
import pyarrow as pa
import torch

from pdm_replay.io.reader import FlatTokens
from pdm_replay.math.segments import Segments
from pdm_replay.replay import manifest as mf
from pdm_replay.replay.actual import actual_columns
from pdm_replay.replay.attribution_pass import SeedAttribution
from pdm_replay.replay.batching import MicroBatch, micro_batches
from pdm_replay.replay.data import seed_batch
from pdm_replay.replay.distributed import LOCAL, Dist, lockstep, shard_seed_batch
from pdm_replay.replay.forward import (LossInputs, PassConfig, accumulate_gradients,
                                       behavior_hidden, forward_stats)
from pdm_replay.replay.log_index import LogIndex
from pdm_replay.replay.models import StepModels
from pdm_replay.replay.outputs import PreUpdate, log_support, post_columns, pre_update
from pdm_replay.replay.step import GradReduce, StepInfo, simulated_step
from pdm_replay.schema import RolloutMeta

Progress = Callable[[int, int, float], None]  # (stages done, stages total, tokens/s)
Columns = dict[str, torch.Tensor | pa.Array]


def now() -> str:
    """The UTC time as the manifest records it."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class Group:
    """One step group of a seed after its pre pass (what every update reads); the loss
    inputs, loss mask and sequences (made once) are ``(N,)`` over this rank's tokens."""

    flat: FlatTokens
    samples: int
    batches: list[MicroBatch]
    pre: PreUpdate
    mu_hidden: list[torch.Tensor] | None

    @property
    def n(self) -> int:
        return int(self.flat.loss_mask.sum())

    @cached_property
    def loss_mask(self) -> torch.Tensor:
        return torch.from_numpy(self.flat.loss_mask)

    @cached_property
    def seqs(self) -> Segments:
        return Segments.of(self.flat.row, self.flat.loss_mask)

    @cached_property
    def inputs(self) -> LossInputs:
        f = self.flat
        return LossInputs(torch.from_numpy(f.token_id), torch.from_numpy(f.logp_behavior),
                          torch.from_numpy(f.advantage))


def pre_pass(models: StepModels, index: LogIndex, seed: int, rows: np.ndarray, *,
             batch_size: int, micro_batch_size: int, pass_cfg: PassConfig,
             meta: RolloutMeta, dist: Dist = LOCAL) -> Group:
    """Read seed ``seed``'s ``rows`` (this rank's share), recompute π at the logged supports
    with ``models`` (θ_t; µ's hidden states too, kept for every later pass) and build the
    token statistics the masks decide on."""
    sb = shard_seed_batch(seed_batch(index, batch_size, seed, models.policy.vocab_size,
                                     rows=rows), dist)
    flat = sb.flat
    batches = lockstep(micro_batches(sb.prompts, sb.responses, micro_batch_size), dist)
    support, mu = log_support(flat)
    mu_hidden = behavior_hidden(models.behavior, batches) if models.behavior else None
    pi = forward_stats(models.policy, batches, support, pass_cfg, models.behavior, mu_hidden)
    pre = pre_update(flat, support, mu, pi, models.policy.vocab_size, meta)
    return Group(flat, len(sb.sample_ids), batches, pre, mu_hidden)


@dataclass(frozen=True)
class Updates:
    """How a group's updates are measured: the simulated step's ``optimizer`` (a name of
    :data:`~pdm_replay.names.OPTIMIZERS`, unless the step's models carry the trainer's) and
    ``lr`` (a number or ``"auto"``), the passes' settings, the ranks' gradient reduction."""

    optimizer: str
    lr: float | str
    pass_cfg: PassConfig
    dist: Dist = LOCAL
    grad_reduce: GradReduce | None = None

    def actual(self, models: StepModels, g: Group, attr: SeedAttribution | None) -> Columns:
        """updates/v1 value columns of the trainer's real step (θ_{t+1} of ``models``)."""
        return actual_columns(models.policy, models.next_policy, models.snapshot.params,
                              g.batches, g.pre, self.pass_cfg, models.behavior, g.mu_hidden,
                              attr)

    def simulate(self, models: StepModels, g: Group, mask_weight: torch.Tensor,
                 attr: SeedAttribution | None, info: StepInfo) -> Columns:
        """One update mask of gradient weights ``mask_weight`` ``(N,)`` (keep as 0/1, or an
        IS weight): step, post-update statistics, restore. Returns updates columns;
        ``info`` receives the lr used and the realized ‖Δθ‖."""
        loss_mask, inputs, passes = g.loss_mask, g.inputs, self.pass_cfg
        weight = mask_weight.double() * loss_mask
        # Every loss token of the global batch (all ranks): a mask never changes the normalizer.
        n_tokens = self.dist.sum_int(int(loss_mask.sum()))
        post, delta = simulated_step(
            models.snapshot.params, models.snapshot,
            lambda: accumulate_gradients(models.policy, g.batches, inputs, weight, n_tokens,
                                         passes),
            optimizer=models.optimizer(self.optimizer), lr=models.lr(self.lr),
            grad_reduce=self.grad_reduce, info=info,
            measure=lambda snap: (forward_stats(models.policy, g.batches, g.pre.support, passes,
                                                models.behavior, g.mu_hidden),
                                  snap.delta() if attr else None))
        cols = post_columns(g.pre, post)
        if attr is not None:  # Δθ kept past the restore: the linear term is taken at θ
            cols.update(attr.columns(delta, cols["delta_kl_topk"], weight, n_tokens,
                                     lr=info.lr))
        return cols


class StageCount:
    """Progress over the run's stages: per step group its pre pass and one per update; a
    group's tokens count once, spread over its stages (the tokens/s ``on_progress`` gets)."""

    def __init__(self, total: int, per_group: int, on_progress: Progress | None) -> None:
        self.total, self.per_group, self.on_progress = total, per_group, on_progress
        self.stages, self.tokens, self.t0 = 0, 0.0, time.perf_counter()

    def tick(self, tokens: int) -> None:
        self.stages += 1
        self.tokens += tokens / self.per_group
        if self.on_progress:
            self.on_progress(self.stages, self.total,
                             self.tokens / max(time.perf_counter() - self.t0, 1e-9))


def run_summary(layout: mf.RunLayout, seeds: list[int], doc: dict) -> list[dict]:
    """The report's headline (:func:`pdm_replay.report.headline.headline`, the one
    computation of SPEC §6's alignment numbers) over the finished ``seeds`` of the run
    directory, one dict per basis and comparison; ``doc`` is the manifest being completed
    (its seed plan decides whether the seeds count as independent)."""
    if not seeds:
        return []
    # Imported here, after the seeds: DuckDB and polars cost ~0.4 s of start-up (issue 20).
    from pdm_replay.report.db import connect
    from pdm_replay.report.headline import headline
    from pdm_replay.report.run_info import discover_run
    info = dataclasses.replace(discover_run(layout.root), manifest=doc)
    with connect(info) as db:
        return headline(db).to_dicts()
