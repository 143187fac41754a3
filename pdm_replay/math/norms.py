"""The float64 distance ``‖a − b‖₂`` between two parameter lists, without float64 copies.

The replay measures ``‖Δθ‖₂ = ‖θ − θ_saved‖₂`` after every simulated step (and up to five
times per step under ``--lr auto``), and ``‖θ_{t+1} − θ_t‖₂`` once per run. Converting a
whole parameter to float64 first allocates 8 bytes per weight (1.2 GB for Qwen3-0.6B's
151,936 × 1,024 embedding) and pages it in: on a 2-core CPU that took 12 s per norm of a
0.3 B-parameter model, more than the simulated step's backward (benchmarks/README.md,
replay). Here each tensor is read in blocks of :data:`BLOCK` elements: every difference is
still formed in float64 from the exact float64 values of both operands (as before) and
squared-summed there (``torch.dot``), so only the summation order differs from a
whole-tensor ``.double()`` sum: both are float64 sums of the same non-negative terms,
within ``n · 2⁻⁵³`` relative of the exact sum.

Examples
--------
Differences (3 − 0, 4 − 0): ‖·‖ = 5.

>>> import torch
>>> distance([torch.tensor([3.0, 4.0])], [torch.zeros(2)])
5.0
>>> distance([torch.ones(5, 3)], [torch.ones(5, 3)], block=4)
0.0
"""

from __future__ import annotations

import math
import sys
from typing import Iterable

import torch
from torch import Tensor

BLOCK = 1 << 18  # 2 MiB of float64 per operand: stays in a core's L2 cache


def squared_distance(a: Tensor, b: Tensor, block: int = BLOCK) -> Tensor:
    """``Σ (a − b)²`` in float64 as a 0-dim tensor on ``a``'s device (no host sync, so a
    GPU sums every block before one transfer); ``a``, ``b`` any equal shapes and dtypes
    (``b`` is moved to ``a``'s device block by block)."""
    if is_dtensor(a):  # FSDP shards: DTensor arithmetic sums the ranks' shards (on float())
        d = a.detach().to(torch.float64) - b.detach().to(a.device, torch.float64)
        return (d * d).sum()
    a, b = a.detach().reshape(-1), b.detach().reshape(-1)
    total = torch.zeros((), dtype=torch.float64, device=a.device)
    for start in range(0, a.numel(), block):
        d = a[start:start + block].to(torch.float64)
        d.sub_(b[start:start + block].to(a.device, torch.float64))
        total += torch.dot(d, d)
    return total


def is_dtensor(t: Tensor) -> bool:
    """Whether ``t`` is a ``torch.distributed.tensor.DTensor`` (an FSDP2 parameter shard);
    without importing torch.distributed where nothing has."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(t, module.DTensor)


def distance(a: Iterable[Tensor], b: Iterable[Tensor], block: int = BLOCK) -> float:
    """``‖a − b‖₂`` over paired tensors of two lists, in float64."""
    return math.sqrt(sum(float(squared_distance(x, y, block)) for x, y in zip(a, b,
                                                                             strict=True)))
