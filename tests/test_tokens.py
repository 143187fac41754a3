"""Log-only token statistics (pdm_replay.tokens): chunking of the support math is invisible."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import pdm_replay.tokens as tk
from pdm_replay.io.reader import iter_flat_tokens, read_meta
from pdm_replay.math.metrics import token_stats
from pdm_replay.math.support import build_support, gather_support_logprobs, reduce_pair


@pytest.mark.parametrize("chunk", [1, 7, 48, 4096])
def test_support_chunks_change_no_bit(small_log: Path, chunk: int,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """log_stats reduces SUPPORT_CHUNK tokens at a time and runs the per-token math once;
    the result equals token_stats on the whole (N, M) pair, for any chunk size."""
    meta = read_meta(small_log)
    flat = next(iter_flat_tokens(small_log))  # 48 tokens
    t = torch.from_numpy
    s = build_support(t(flat.token_id), t(flat.topk_ids))
    pair = reduce_pair(s, gather_support_logprobs(s, t(flat.logp_behavior), t(flat.topk_logprobs)),
                       gather_support_logprobs(s, t(flat.train_logprobs),
                                               t(flat.train_topk_logprobs)))
    want = token_stats(pair, t(flat.advantage), meta.vocab_size,
                       tk.logged_topk(flat, meta).cap(t(flat.token_id)))
    monkeypatch.setattr(tk, "SUPPORT_CHUNK", chunk)
    for validated in (False, True):  # a validated log skips only the repeated-id search
        got = tk.log_stats(flat, meta.vocab_size, meta, validated=validated)
        for name, value in want.as_dict().items():
            assert torch.equal(got.as_dict()[name], value), (name, validated)
