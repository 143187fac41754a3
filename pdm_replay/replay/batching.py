"""Prompt + response micro-batches with right padding, and where each response token's
predicting hidden state sits.

Response token t of a sample with prompt length P is predicted by the hidden state at
sequence position ``P + t − 1``; ``target_index`` holds those positions flattened over
``(B, L)``, in sample order then position order (the order of ``FlatTokens``). Right
padding keeps positions ``0..L_b−1`` of every sample identical to its unpadded forward:
with a causal mask no real token attends to padding that comes after it.

Examples
--------
>>> b = pad_batch([[5, 6], [7]], [[1, 2, 3], [4]])
>>> b.input_ids.tolist()
[[5, 6, 1, 2, 3], [7, 4, 0, 0, 0]]
>>> b.attention_mask.tolist()
[[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
>>> b.target_index.tolist()  # sample 0: positions 1, 2, 3; sample 1: position 0 of row 1
[1, 2, 3, 5]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor


@dataclass(frozen=True)
class MicroBatch:
    """B right-padded sequences of length L and the N_b response positions they predict."""

    input_ids: Tensor  # (B, L) int64, 0 at padding
    attention_mask: Tensor  # (B, L) int64
    position_ids: Tensor  # (B, L) int64
    target_index: Tensor  # (N_b,) int64 into the flattened (B*L) hidden states

    @property
    def n_tokens(self) -> int:
        return int(self.target_index.numel())


def pad_batch(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]
              ) -> MicroBatch:
    """Right-pad ``prompt + response`` for each sample (every prompt must be non-empty)."""
    seqs = [list(p) + list(r) for p, r in zip(prompts, responses)]
    width = max((len(s) for s in seqs), default=0)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    targets = []
    for b, (p, r, s) in enumerate(zip(prompts, responses, seqs)):
        if len(p) == 0 and len(r) > 0:
            raise ValueError(f"sample {b} of the batch has an empty prompt; its first "
                             "response token has no hidden state that predicts it")
        ids[b, :len(s)] = torch.as_tensor(s, dtype=torch.long)
        mask[b, :len(s)] = 1
        targets.append(b * width + len(p) - 1 + torch.arange(len(r)))
    pos = torch.arange(width).expand(len(seqs), width).contiguous()
    index = torch.cat(targets) if targets else torch.zeros(0, dtype=torch.long)
    return MicroBatch(input_ids=ids, attention_mask=mask, position_ids=pos,
                      target_index=index.long())


def micro_batches(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                  size: int) -> list[MicroBatch]:
    """Consecutive groups of ``size`` samples, each padded on its own.

    Concatenating the batches' response positions gives the samples' tokens in order.
    """
    if size < 1:
        raise ValueError(f"micro-batch size must be >= 1, got {size}")
    return [pad_batch(prompts[i:i + size], responses[i:i + size])
            for i in range(0, len(prompts), size)]

