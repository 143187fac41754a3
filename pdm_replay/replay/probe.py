"""One seed's simulated SGD step, kept in memory for inspection (notebooks, tests,
benchmarks).

:func:`~pdm_replay.commands.replay.run_replay` streams every seed to disk and keeps nothing;
:func:`probe_step` builds the same pieces for one seed and returns them: the micro-batches,
θ's pre-update statistics, the Δθ of one SGD step of the ``none`` update (every loss token
kept) and the attribution state at θ. θ is left in place (the step is undone bit-exactly);
``ProbedStep.snap`` can apply Δθ again.

Examples
--------
On the sample checkpoint and log of a clone of the repository:

>>> from pathlib import Path
>>> import pdm_replay
>>> sample = Path(pdm_replay.__file__).resolve().parents[1] / "sample_data"
>>> step = probe_step(sample / "checkpoints" / "step_8", sample / "rollouts", samples=2)
>>> step.attr.linear(step.delta).shape == (step.n,), step.snap.matches()
(True, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from pdm_replay.io.reader import FlatTokens
from pdm_replay.masks import Thresholds
from pdm_replay.replay.attribution_pass import SeedAttribution, seed_attribution
from pdm_replay.replay.batching import MicroBatch, micro_batches
from pdm_replay.replay.checkpoint import Policy, load_policy
from pdm_replay.replay.data import seed_batch
from pdm_replay.io.log import RolloutLog
from pdm_replay.replay.log_index import LogIndex
from pdm_replay.replay.forward import LossInputs, PassConfig, accumulate_gradients, forward_stats
from pdm_replay.replay.step import ParamSnapshot, simulated_step
from pdm_replay.replay.outputs import PreUpdate, log_support, pre_update


@dataclass
class ProbedStep:
    """Everything one seed's SGD step is made of; N = ``n`` tokens."""

    policy: Policy
    flat: FlatTokens
    batches: list[MicroBatch]
    cfg: PassConfig
    pre: PreUpdate  # θ's statistics at the logged supports (``pre.support``)
    inputs: LossInputs
    snap: ParamSnapshot  # θ; ``snap.params`` in the order of ``delta``
    delta: list[Tensor]  # Δθ of one SGD step on every loss token
    attr: SeedAttribution  # at θ; no self-term sample (``sample_size`` 0)

    @property
    def n(self) -> int:
        return len(self.flat)


def probe_step(checkpoint: Path | str, log: Path | str, *, samples: int, seed: int = 0,
               micro_batch: int = 2, chunk_tokens: int = 16, lr: float = 1e-2
               ) -> ProbedStep:
    """Seed ``seed``'s batch of ``samples`` samples from ``log``, θ from ``checkpoint``,
    and one SGD step of learning rate ``lr`` (token-mean loss over every loss token)."""
    policy = load_policy(Path(checkpoint))
    opened = RolloutLog.open(log)
    sb = seed_batch(LogIndex.of(opened), samples, seed, policy.vocab_size)
    flat = sb.flat
    batches = micro_batches(sb.prompts, sb.responses, micro_batch)
    meta = opened.meta
    cfg = PassConfig(temperature=opened.sampling_temperature(), chunk_tokens=chunk_tokens)
    support, mu = log_support(flat)
    pre = pre_update(flat, support, mu, forward_stats(policy, batches, support, cfg),
                     policy.vocab_size, meta)
    inputs = LossInputs(*(torch.from_numpy(a) for a in (flat.token_id, flat.logp_behavior,
                                                         flat.advantage)))
    snap = ParamSnapshot(list(policy.model.parameters()))
    n = len(flat)
    delta = simulated_step(snap.params, snap, lambda: accumulate_gradients(
        policy, batches, inputs, torch.ones(n, dtype=torch.float64), n, cfg),
        optimizer="sgd", lr=lr, measure=lambda s: s.delta())
    attr = seed_attribution(policy, snap.params, batches, pre, flat.loss_mask,
                            inputs.logp_behavior, rng_seed=seed, optimizer="adam", lr=lr,
                            sample_size=0, thresholds=Thresholds(),
                            temperature=cfg.temperature, chunk_tokens=chunk_tokens)
    return ProbedStep(policy, flat, batches, cfg, pre, inputs, snap, delta, attr)
