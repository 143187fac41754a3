"""The padding rule of zero-padded (B, T, K) top-K tensors, and first-occurrence dedup."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pdm_replay.ingest.padded import (PaddedRollouts, first_occurrences, lengths_from_mask,
                                      padded_to_table, topk_keep)

B, T, K, V = 3, 4, 5, 12


@st.composite
def zero_padded_batches(draw):
    """Real top-K lists (unique ids, genuine id 0 allowed, log-probs < 0), zero-padded to
    K slots, positions past each length filled with garbage (NaN, zeros, repeats)."""
    lengths = draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    ids = np.zeros((B, T, K), np.int64)
    lps = np.zeros((B, T, K), np.float32)
    truth = []
    for b in range(B):
        row = []
        for t in range(T):
            n = draw(st.integers(0, K))
            tok = draw(st.lists(st.integers(0, V - 1), min_size=n, max_size=n, unique=True))
            val = draw(st.lists(st.floats(-20.0, -0.0009765625, width=32), min_size=n, max_size=n))
            if t < lengths[b]:
                ids[b, t, :n], lps[b, t, :n] = tok, val
                row.append(list(zip(tok, val)))
            else:
                ids[b, t] = draw(st.integers(0, V - 1))
                lps[b, t] = np.nan
        truth.append(row)
    return lengths, ids, lps, truth


@settings(max_examples=40, deadline=None)
@given(zero_padded_batches())
def test_zero_padding_rule_recovers_real_entries(case) -> None:
    lengths, ids, lps, truth = case
    batch = PaddedRollouts(sample_id=[f"s{b}" for b in range(B)], step=np.zeros(B),
                           response_ids=np.ones((B, T), np.int64), lengths=np.array(lengths),
                           advantages=np.zeros(B), behavior_logprobs=np.full((B, T), -0.5),
                           topk_ids=ids, topk_logprobs=lps)
    table, problems = padded_to_table(batch, zero_padded=True)
    assert problems == {}
    got_ids, got_lps = table["topk_ids"].to_pylist(), table["topk_logprobs"].to_pylist()
    for b in range(B):
        assert len(got_ids[b]) == lengths[b]
        for t in range(lengths[b]):
            assert got_ids[b][t] == [i for i, _ in truth[b][t]]
            np.testing.assert_array_equal(np.float32(got_lps[b][t]),
                                          np.float32([v for _, v in truth[b][t]]))


def test_valid_mask_is_authoritative_and_slot_order_kept() -> None:
    ids = np.array([[[5, 0, 5, 0], [2, 0, 7, 0]]])
    lps = np.array([[[-0.3, 0.0, -0.3, 0.0], [-0.1, -1.0, -2.0, 0.0]]])
    valid = np.array([[[True, True, True, False], [True, True, True, False]]])
    b = PaddedRollouts(sample_id=["a"], step=np.zeros(1), response_ids=np.array([[5, 7]]),
                       lengths=np.array([2]), advantages=np.ones(1),
                       behavior_logprobs=np.array([[-0.3, -2.0]]), topk_ids=ids,
                       topk_logprobs=lps, topk_valid=valid)
    table, problems = padded_to_table(b)
    # the valid mask keeps (0, 0.0) at pos 0; the repeated 5 keeps its first slot; the
    # slots keep their order (the last-slot sampled 7 stays last)
    assert table["topk_ids"].to_pylist() == [[[5, 0], [2, 0, 7]]] and problems == {}


def test_repeats_keep_first_and_flag_conflicts() -> None:
    ids = np.array([[3, 3, 1, 3], [4, 1, 4, -1]])
    lps = np.array([[-1.0, -1.0, -2.0, -1.5], [-0.5, -0.7, np.nan, -1.0]])
    keep = topk_keep(ids, lps, zero_padded=False)
    repeat, conflict = first_occurrences(ids, keep, lps)
    assert repeat.tolist() == [[False, True, False, True], [False, False, True, False]]
    assert conflict.tolist() == [[False, False, False, True], [False, False, True, False]]


def test_lengths_from_mask_keeps_inner_zeros() -> None:
    assert lengths_from_mask(np.array([[1, 1, 0, 1, 0, 0], [0] * 6])).tolist() == [4, 0]


def test_shape_errors_name_the_array() -> None:
    import pytest
    b = PaddedRollouts(sample_id=["a"], step=np.zeros(1), response_ids=np.zeros((1, 3)),
                       lengths=np.array([3]), advantages=np.zeros((1, 2)),
                       behavior_logprobs=np.zeros((1, 3)))
    with pytest.raises(ValueError, match=r"advantages has shape \(1, 2\), expected \(1, 3\)"):
        padded_to_table(b)
