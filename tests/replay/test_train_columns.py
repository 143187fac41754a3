"""The train columns from π on the support: log π at every logged top-K slot equals the
full log-softmax at that id (k's own slot included, padding dropped), in the log's ragged
list layout."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pdm_replay.io.reader import PAD_ID
from pdm_replay.math.support import build_support
from pdm_replay.replay.recompute import support_stats
from pdm_replay.replay.train_columns import like_topk, topk_logprobs

from tolerances import LOGPROB_ATOL


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 8), v=st.integers(2, 30), k=st.integers(1, 6),
       seed=st.integers(0, 2**16))
def test_topk_slots_equal_the_full_log_softmax(n, v, k, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, v, generator=g) * 4
    token = torch.randint(0, v, (n,), generator=g)
    # distinct ids per row (validate rejects repeats), k among them in some rows, padding
    topk = torch.stack([torch.randperm(v, generator=g)[:min(k, v)] for _ in range(n)])
    pad = torch.rand(topk.shape, generator=g) < 0.2
    topk = topk.masked_fill(pad, PAD_ID)
    stats = support_stats(logits.clone(), lambda h: h, build_support(token, topk))
    got = topk_logprobs(stats.logp_s, token, topk)  # (N, K)
    full = torch.log_softmax(logits.double(), -1)
    want = full.gather(1, topk.clamp(min=0).long()).masked_fill(pad, -math.inf)
    assert torch.equal(torch.isinf(got), pad)
    assert torch.allclose(got[~pad], want[~pad], atol=LOGPROB_ATOL)  # tolerances.py
    assert torch.equal(got[topk == token[:, None]],  # k's slot is k's value, bit for bit
                       stats.logp_k[:, None].expand_as(got)[topk == token[:, None]])


def test_like_topk_keeps_the_ragged_layout() -> None:
    ids = pa.array([[[3, 1], [2, 5, 4]], [], [[0]]], pa.list_(pa.list_(pa.int32())))
    padded = np.array([[1, 2, -np.inf], [3, 4, 5], [6, -np.inf, -np.inf]], np.float32)
    out = like_topk(ids.slice(0), padded)
    assert out.to_pylist() == [[[1, 2], [3, 4, 5]], [], [[6]]]
    sliced = ids.slice(1)  # offsets not starting at 0
    assert like_topk(sliced, padded[2:, :1]).to_pylist() == [[], [[6]]]
    assert pc.list_value_length(out).equals(pc.list_value_length(ids))
