"""take_rows: the one way to cut a per-token record (Support, Reduced, KLWeights, FlatTokens)."""

from __future__ import annotations

import numpy as np
import torch

from pdm_replay.io.reader import FlatTokens
from pdm_replay.math.attribution import KLWeights
from pdm_replay.math.rows import take_rows
from pdm_replay.math.support import reduce_logprobs


def _flat(n: int) -> FlatTokens:
    ar = np.arange(n)
    return FlatTokens(sample_id=np.array([f"s{i // 2}" for i in ar], dtype=object), step=ar,
                      row=ar // 2, pos=(ar % 2).astype(np.int32), token_id=ar + 10,
                      advantage=ar * 0.5, logp_behavior=-ar * 0.1, loss_mask=ar % 3 > 0,
                      topk_ids=np.stack([ar, ar + 1], 1).astype(np.int32),
                      topk_logprobs=np.stack([-ar * 0.1, -ar - 1.0], 1).astype(np.float32),
                      train_logprobs=None, train_topk_logprobs=None)


def test_every_field_is_cut_and_none_stays_none() -> None:
    flat, keep = _flat(5), np.array([True, False, True, False, True])
    cut = flat.take(keep)
    assert len(cut) == 3 and cut.train_logprobs is None and cut.train_topk_logprobs is None
    for name, value in vars(flat).items():
        if value is not None:
            assert np.array_equal(getattr(cut, name), value[keep]), name
    assert np.array_equal(flat.take(slice(1, 3)).token_id, [11, 12])


def test_slices_are_views_and_masks_agree() -> None:
    logp = torch.log_softmax(torch.randn(4, 3, dtype=torch.float64), -1)
    red = reduce_logprobs(logp[:, :2])
    part = red.take(slice(1, 3))
    assert part.p.data_ptr() == red.p[1:].data_ptr()  # a view: no copy
    by_mask = red.take(torch.tensor([False, True, True, False]))
    for name in ("p", "logp", "tail", "log_tail", "mass"):
        assert torch.equal(getattr(part, name), getattr(by_mask, name)), name
    w = KLWeights(w_s=torch.arange(8.0).reshape(4, 2), w_tail=torch.arange(4.0))
    assert take_rows(w, slice(2, 4)).w_tail.tolist() == [2.0, 3.0]
    assert w.take(torch.tensor([3, 0])).w_s.tolist() == [[6.0, 7.0], [0.0, 1.0]]
