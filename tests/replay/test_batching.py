"""Prompt + response batching: where each response token's predicting state sits."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pdm_replay.replay.batching import micro_batches, pad_batch

seqs = st.lists(st.tuples(st.lists(st.integers(1, 50), min_size=1, max_size=5),
                          st.lists(st.integers(1, 50), min_size=0, max_size=5)),
                min_size=1, max_size=6)


@settings(max_examples=50, deadline=None)
@given(samples=seqs, size=st.integers(1, 4))
def test_target_index_points_at_the_predecessor_of_each_response_token(samples, size):
    prompts = [p for p, _ in samples]
    responses = [r for _, r in samples]
    expected = [tok for r in responses for tok in r]
    got = []
    for b in micro_batches(prompts, responses, size):
        flat = b.input_ids.reshape(-1)
        # The state at index i predicts the token at i + 1 of the same row.
        got += flat[b.target_index + 1].tolist()
        assert b.attention_mask.reshape(-1)[b.target_index + 1].all()
        assert torch.equal(b.position_ids[:, 0], torch.zeros(b.input_ids.shape[0],
                                                             dtype=torch.long))
    assert got == expected


def test_padding_is_on_the_right_and_masked():
    b = pad_batch([[1, 2, 3], [4]], [[5], [6, 7]])
    assert b.input_ids.tolist() == [[1, 2, 3, 5], [4, 6, 7, 0]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert b.target_index.tolist() == [2, 4, 5]


def test_empty_prompt_is_an_error():
    with pytest.raises(ValueError, match="empty prompt"):
        pad_batch([[]], [[3]])
