"""Sequences of flat tokens and the per-sequence reductions sequence masks use (pure torch).

Tokens are flat ``(N,)``; ``Segments.index`` gives each token's sequence (response) number
and ``valid`` its loss mask: a sequence statistic runs over the valid tokens of the
sequence only (as verl's ``masked_sum`` / ``masked_mean`` over ``response_mask``) and is
broadcast back to every token of the sequence.

Examples
--------
>>> import torch
>>> seqs = Segments(torch.tensor([0, 0, 1, 1, 1]), torch.tensor([1, 1, 1, 0, 1]).bool())
>>> x = torch.tensor([1.0, 2.0, 3.0, 100.0, 5.0], dtype=torch.float64)
>>> seqs.reduce(x, "sum").tolist(), seqs.reduce(x, "mean").tolist()
([3.0, 3.0, 8.0, 8.0, 8.0], [1.5, 1.5, 4.0, 4.0, 4.0])
>>> seqs.reduce(x, "max").tolist()
[2.0, 2.0, 5.0, 5.0, 5.0]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

REDUCTIONS = ("sum", "mean", "max")


@dataclass(frozen=True)
class Segments:
    """``index`` ``(N,)`` int64 sequence of each token (any integers; equal = same
    sequence), ``valid`` ``(N,)`` bool loss mask.

    The dense sequence number of every token (``inverse``, ``(N,)``) and the valid-token
    count per sequence are computed once here, so the dozen sequence masks of a batch
    share them: in O(N) when ``index`` is non-decreasing (FlatTokens' rows), by a sort
    otherwise.
    """

    index: Tensor
    valid: Tensor
    inverse: Tensor = field(init=False, repr=False)
    count: Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        idx = self.index
        if idx.numel() < 2 or bool((idx[1:] >= idx[:-1]).all()):
            _, inverse = torch.unique_consecutive(idx, return_inverse=True)
        else:
            _, inverse = torch.unique(idx, return_inverse=True)
        s = int(inverse.max()) + 1 if inverse.numel() else 0
        count = torch.zeros(s, dtype=torch.float64).index_add_(0, inverse,
                                                              self.valid.double())
        object.__setattr__(self, "inverse", inverse)
        object.__setattr__(self, "count", count)

    @classmethod
    def of(cls, row: np.ndarray, loss_mask: np.ndarray) -> "Segments":
        """From :class:`~pdm_replay.io.reader.FlatTokens` ``row`` and ``loss_mask``."""
        return cls(torch.from_numpy(np.asarray(row, dtype=np.int64)),
                   torch.from_numpy(np.asarray(loss_mask, dtype=bool)))

    def reduce(self, values: Tensor, how: str) -> Tensor:
        """Per-sequence ``how`` (sum | mean | max) of ``values`` ``(N,)`` over the valid
        tokens, broadcast back to ``(N,)``. A sequence without valid tokens gets 0 (verl's
        ``_sequence_max`` convention; its sum and mean are 0 too)."""
        v = values.double()
        inverse, valid = self.inverse.to(v.device), self.valid.to(v.device)
        s = self.count.shape[0]
        if how == "max":
            filled = torch.where(valid, v, torch.full_like(v, -torch.inf))
            out = torch.full((s,), -torch.inf, dtype=v.dtype, device=v.device)
            out = out.scatter_reduce(0, inverse, filled, "amax")
            out = torch.where(torch.isinf(out) & (out < 0), torch.zeros_like(out), out)
            return out[inverse]
        total = torch.zeros(s, dtype=v.dtype, device=v.device).index_add_(
            0, inverse, torch.where(valid, v, torch.zeros_like(v)))
        if how == "sum":
            return total[inverse]
        if how == "mean":
            return (total / self.count.to(v.device).clamp(min=1.0))[inverse]
        raise ValueError(f"reduction {how!r}: expected one of {', '.join(REDUCTIONS)}")
