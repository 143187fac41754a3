"""``--fsdp``: shard a replay :class:`~pdm_replay.replay.checkpoint.Policy` with FSDP2
``fully_shard``, for checkpoints whose weights, snapshot, gradients and optimizer state
do not fit one device.

Units: every decoder layer, then the decoder itself (embeddings, final norm). The LM head
stays replicated, because the chunked statistics call it directly, outside the model's
forward, a different number of times on each rank; its gradient is summed by
:func:`~pdm_replay.replay.distributed.all_reduce_grads`. Tied input embeddings stay
replicated with it. Every unit reshards after forward and reduce-scatters gradients with a
plain SUM (no averaging, no PREMUL_SUM, which gloo lacks), so the sharded gradient is the
single-process gradient of the global loss. θ's snapshot is then a copy of each rank's
local shards (DTensor copies), restored in place: bit-exact.

Every forward and backward of a unit is a collective: the replay keeps ranks in
lockstep (:func:`~pdm_replay.replay.distributed.lockstep`, ``PassConfig.lockstep``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from pdm_replay.errors import FieldError
from pdm_replay.replay.checkpoint import Policy

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


def _layers(policy: Policy) -> nn.ModuleList:
    layers = getattr(policy.model.get_decoder(), "layers", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise FieldError("{fsdp}: {source}: {model} has no decoder.layers to shard; run "
                         "without {fsdp}", source=policy.source,
                         model=type(policy.model).__name__)
    return layers


def _move_replicated(model: nn.Module, device: torch.device) -> None:
    """Move what FSDP did not take (the LM head, ignored tied weights) to ``device``;
    ``.data`` keeps each Parameter object, so ties survive."""
    from torch.distributed.tensor import DTensor
    with torch.no_grad():
        for p in model.parameters():
            if not isinstance(p, DTensor) and p.device != device:
                p.data = p.data.to(device)
        for module in model.modules():
            for name, buf in module.named_buffers(recurse=False):
                if buf.device != device:
                    module._buffers[name] = buf.to(device)


def shard_policy(policy: Policy, device: str, mesh: DeviceMesh) -> None:
    """Wrap ``policy``'s decoder layers and decoder with ``fully_shard`` on ``mesh``, the
    job's 1-D mesh (:meth:`~pdm_replay.replay.distributed.Dist.device_mesh`); weights may
    start on the host: each unit's shard moves to ``device`` as it is wrapped."""
    from torch.distributed.fsdp import fully_shard

    dev = torch.device(device)
    if dev.type == "cuda":
        dev = torch.device("cuda", torch.cuda.current_device())
    decoder = policy.model.get_decoder()
    head = {id(p) for p in policy.model.get_output_embeddings().parameters()}
    tied = {p for p in decoder.parameters() if id(p) in head}
    units = [*_layers(policy), decoder]
    for unit in units:
        fully_shard(unit, mesh=mesh, reshard_after_forward=True,
                    ignored_params=(tied or None) if unit is decoder else None)
    for unit in units:
        unit.set_gradient_divide_factor(1.0)
        unit.set_force_sum_reduction_for_comms(True)
    _move_replicated(policy.model, dev)
