"""The trainer's actual update (``--next-checkpoint``): the ``actual`` rows of updates/v1.

Nothing is simulated: π_post at every logged support comes from the trainer's checkpoint
after its real step on this data, θ_{t+1}, with one more pass over the seed's micro-batches
(the same :func:`~pdm_replay.replay.forward.forward_stats` as the pre pass, so the
``actual`` columns mean what every simulated update's do, exact ones included when a
behavior checkpoint is given). ``kept`` is the decision of the mask the trainer used
(``--trainer-mask``) on θ's statistics.

Attribution along the real step: ``delta_kl_lin = ⟨∇_θ D_t(θ), θ_{t+1} − θ_t⟩`` (one
forward-mode pass, as for a simulated update) and ``delta_kl_curv`` the rest. The
trainer's step is not a known function of the seed's tokens (it saw its whole batch, maybe
several optimizer steps), so ``delta_kl_self`` / ``_cross`` stay null. ``‖θ_{t+1} − θ_t‖₂``
is the target of ``--lr auto``.
"""

from __future__ import annotations

import pyarrow as pa
import torch
from torch import Tensor, nn

from pdm_replay.errors import FieldError
from pdm_replay.math.norms import distance
from pdm_replay.replay.attribution_pass import SeedAttribution
from pdm_replay.replay.batching import MicroBatch
from pdm_replay.replay.checkpoint import Policy
from pdm_replay.replay.forward import PassConfig, forward_stats
from pdm_replay.replay.outputs import PreUpdate, post_columns


def _named(policy: Policy) -> dict[str, nn.Parameter]:
    return dict(policy.model.named_parameters())


def check_pair(policy: Policy, next_policy: Policy) -> None:
    """Raise ``ValueError`` unless both checkpoints have the same parameter names and
    shapes (the next one must be the same model one step later)."""
    mine, theirs = _named(policy), _named(next_policy)
    missing = sorted(set(mine) - set(theirs))
    extra = sorted(set(theirs) - set(mine))
    shapes = [f"{n} {tuple(p.shape)} vs {tuple(theirs[n].shape)}" for n, p in mine.items()
              if n in theirs and p.shape != theirs[n].shape]
    problems = ([f"missing {', '.join(missing[:5])}"] if missing else []) + \
        ([f"unexpected {', '.join(extra[:5])}"] if extra else []) + \
        ([f"shapes differ: {'; '.join(shapes[:5])}"] if shapes else [])
    if problems:
        raise FieldError("{next_checkpoint} {next} is not {this} one step later: "
                         "{problems}; pass the trainer's checkpoint saved after the update "
                         "on this data", next=next_policy.source, this=policy.source,
                         problems="; ".join(problems))


@torch.no_grad()
def actual_delta(policy: Policy, next_policy: Policy, params: list[nn.Parameter]
                 ) -> list[Tensor]:
    """``θ_{t+1} − θ_t`` for each of ``params`` (the policy's, in snapshot order)."""
    name = {id(p): n for n, p in policy.model.named_parameters()}
    theirs = _named(next_policy)
    return [theirs[name[id(p)]].detach().to(p.device, p.dtype) - p.detach() for p in params]


@torch.no_grad()
def actual_norm(policy: Policy, next_policy: Policy) -> float:
    """``‖θ_{t+1} − θ_t‖₂`` over every parameter, in float64."""
    theirs = _named(next_policy)
    named = list(policy.model.named_parameters())
    return distance([p for _, p in named], [theirs[n] for n, _ in named])  # on θ_t's device


def actual_columns(policy: Policy, next_policy: Policy, params: list[nn.Parameter],
                   batches: list[MicroBatch], pre: PreUpdate, pass_cfg: PassConfig,
                   behavior: Policy | None = None, mu_hidden: list[Tensor] | None = None,
                   attr: SeedAttribution | None = None) -> dict[str, Tensor | pa.Array]:
    """updates/v1 value columns ``(N,)`` of the actual update: one pass of θ_{t+1} over
    ``batches`` at ``pre``'s supports; with ``attr`` the linear term along θ_{t+1} − θ_t
    (``params``: the snapshot's, in its order)."""
    post = forward_stats(next_policy, batches, pre.support, pass_cfg, behavior, mu_hidden)
    cols = post_columns(pre, post)
    if attr is not None:
        lin = attr.linear(actual_delta(policy, next_policy, params))
        cols.update(delta_kl_lin=lin, delta_kl_curv=cols["delta_kl_topk"].double() - lin)
    return cols
