"""The float64 distance ``‖a − b‖₂`` between two parameter lists, without float64 copies.

The replay measures ``‖Δθ‖₂ = ‖θ − θ_saved‖₂`` after every simulated step (and up to five
times per step under ``--lr auto``), and ``‖θ_{t+1} − θ_t‖₂`` once per run. Converting a
whole parameter to float64 first allocates 8 bytes per weight (1.2 GB for Qwen3-0.6B's
151,936 × 1,024 embedding) and pages it in: on a 2-core CPU that took 12 s per norm of a
0.3 B-parameter model, more than the simulated step's backward (benchmarks/README.md,
replay). Here each tensor is read in blocks of :data:`BLOCK` elements into one reused
float64 buffer (a fresh buffer per block cost an allocation and its page faults per
block: with 2 MiB blocks, 1.5 s of one 0.6 B-parameter norm inside a replay, against
0.80 s with the buffer reused and 0.47 s with blocks of 8 MiB): every difference is still
formed in float64 from the exact float64 values of both operands (as before) and
squared-summed there
(``torch.dot``), so only the summation order differs from a whole-tensor ``.double()``
sum: both are float64 sums of the same non-negative terms, within ``n · 2⁻⁵³`` relative
of the exact sum.

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

# 8 MiB of float64, one buffer reused. Each block's copy and subtraction is a parallel
# region whose idle OpenMP threads sleep under the replay's passive wait policy and must be
# woken: fewer, larger blocks, up to where the buffer leaves the cache. Measured inside a
# replay of a 0.6 B-parameter model on a 2-core CPU: 2^18 elements 0.80 s, 2^20 0.47-0.50
# s, 2^21 0.62-0.68 s, 2^22 0.81-1.02 s per norm (benchmarks/README.md, replay).
BLOCK = 1 << 20


def squared_distance(a: Tensor, b: Tensor, block: int = BLOCK,
                     scratch: Tensor | None = None) -> Tensor:
    """``Σ (a − b)²`` in float64 as a 0-dim tensor on ``a``'s device (no host sync, so a
    GPU sums every block before one transfer); ``a``, ``b`` any equal shapes and dtypes
    (``b`` is moved to ``a``'s device block by block). ``scratch``: a float64 buffer on
    ``a``'s device of at least ``min(block, a.numel())`` elements, reused for every block
    (:func:`distance` passes one to every tensor of a list)."""
    if is_dtensor(a):  # FSDP shards: DTensor arithmetic sums the ranks' shards (on float())
        d = a.detach().to(torch.float64) - b.detach().to(a.device, torch.float64)
        return (d * d).sum()
    a, b = a.detach().reshape(-1), b.detach().reshape(-1)
    n = a.numel()
    if scratch is None or scratch.numel() < min(block, n):
        scratch = torch.empty(min(block, n), dtype=torch.float64, device=a.device)
    total = torch.zeros((), dtype=torch.float64, device=a.device)
    for start in range(0, n, block):
        d = scratch[:min(block, n - start)]
        d.copy_(a[start:start + block])  # exact: every narrower float is a float64
        d.sub_(b[start:start + block].to(a.device))  # promoted to float64 per element
        total += torch.dot(d, d)
    return total


def is_dtensor(t: Tensor) -> bool:
    """Whether ``t`` is a ``torch.distributed.tensor.DTensor`` (an FSDP2 parameter shard);
    without importing torch.distributed where nothing has."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(t, module.DTensor)


def distance(a: Iterable[Tensor], b: Iterable[Tensor], block: int = BLOCK) -> float:
    """``‖a − b‖₂`` over paired tensors of two lists, in float64 (one scratch block per
    device for the whole list)."""
    scratch: dict[torch.device, Tensor] = {}
    total = 0.0
    for x, y in zip(a, b, strict=True):
        if not is_dtensor(x) and x.device not in scratch:  # one allocation per device
            scratch[x.device] = torch.empty(block, dtype=torch.float64, device=x.device)
        total += float(squared_distance(x, y, block, scratch.get(x.device)))
    return math.sqrt(total)
