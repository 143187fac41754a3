"""Shared hypothesis data for the math tests: random full µ, π and top-K layouts."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st
from torch import Tensor

from pdm_replay.math.support import ReducedPair, build_support, reduce_pair

F64 = torch.float64
# Logits in [-6, 6] over <= 40 tokens: every probability >= e^-12/40 ≈ 1.5e-7, so the
# 1e-12 floors never act: D is smooth in η and the floors never bend inequalities.
LOGIT = st.floats(-6.0, 6.0, allow_nan=False, allow_infinity=False)


@dataclass(frozen=True)
class Batch:
    """N tokens over one vocabulary of n: full µ, π log-probs and padded top-K ids."""

    n: int
    k: Tensor  # (N,)
    topk: Tensor  # (N, W), -1 padded
    logp_behavior: Tensor  # (N, n)
    logp_train: Tensor  # (N, n)

    def pair(self) -> ReducedPair:
        s = build_support(self.k, self.topk)
        ids = s.ids.clamp(min=0)
        return reduce_pair(s, self.logp_behavior.gather(1, ids), self.logp_train.gather(1, ids))

    def support_list(self, i: int) -> list[int]:
        """S of token i with k first, from the raw ids (not from build_support)."""
        out = [int(self.k[i])]
        for t in self.topk[i].tolist():
            if t >= 0 and t not in out:
                out.append(t)
        return out


@st.composite
def batches(draw: st.DrawFn, full: bool = False) -> Batch:
    """Random logits (vocab 3..40), k and K (0..n, or K = n when ``full``), 1..4 tokens."""
    n, rows = draw(st.integers(3, 40)), draw(st.integers(1, 4))
    z, ks, tops = [], [], []
    for _ in range(rows):
        z.append(draw(st.lists(LOGIT, min_size=2 * n, max_size=2 * n)))
        ks.append(draw(st.integers(0, n - 1)))
        order = draw(st.permutations(range(n)))
        tops.append(list(order[: n if full else draw(st.integers(0, n))]))
    width = max(len(t) for t in tops)
    topk = torch.tensor([t + [-1] * (width - len(t)) for t in tops], dtype=torch.long)
    zz = torch.tensor(z, dtype=F64).reshape(rows, 2, n)
    return Batch(n, torch.tensor(ks), topk.reshape(rows, width),
                 torch.log_softmax(zz[:, 0], -1), torch.log_softmax(zz[:, 1], -1))
