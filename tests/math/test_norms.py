"""math.norms: the blocked float64 distance against a whole-tensor float64 sum."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pdm_replay.math.norms import distance, squared_distance


def _whole(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).square().sum())


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), block=st.integers(1, 64), seed=st.integers(0, 2**31 - 1),
       dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]))
def test_blocked_sum_is_the_whole_tensor_sum(n, block, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, generator=g).to(dtype)
    b = (a.float() + 1e-3 * torch.randn(n, generator=g)).to(dtype)
    got, want = float(squared_distance(a, b, block)), _whole(a, b)
    # Both square the same float64 differences (exact here: nearby values of a narrower
    # format) and add n non-negative terms in different orders; each order's error is at
    # most (n + 1)·u of the exact sum (u = 2⁻⁵³: n − 1 additions and the square's rounding),
    # so the two differ by at most 2·(n + 1)·u·sum.
    assert abs(got - want) <= 2 * (n + 1) * 2.0**-53 * want


def test_hand_worked_and_shapes():
    # (3, 4) − (0, 0): 9 + 16 = 25, √25 = 5; a (2, 2) matrix blocks across its rows.
    assert distance([torch.tensor([3.0, 4.0])], [torch.zeros(2)]) == 5.0
    a, b = torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.zeros(2, 2)
    assert float(squared_distance(a, b, block=3)) == 30.0  # 1 + 4 + 9 + 16
    assert distance([a, torch.ones(3)], [b, torch.zeros(3)], block=3) == math.sqrt(33.0)


def test_lists_of_different_lengths_are_refused():
    with pytest.raises(ValueError):
        distance([torch.ones(2)], [torch.ones(2), torch.ones(2)])
