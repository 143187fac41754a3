"""accept_rows: the one row-acceptance pipeline of ingest and RolloutLogger."""

from __future__ import annotations

import numpy as np

from pdm_replay.ingest.accept import accept_rows
from pdm_replay.ingest.padded import PaddedRollouts
from pdm_replay.io.rollouts import rows_to_table
from pdm_replay.schema import RolloutMeta

META = RolloutMeta(vocab_size=10, top_k=1)


def _row(sid: str, ids: list[int], adv: list[float] | None = None) -> dict:
    adv = [1.0] * len(ids) if adv is None else adv
    return {"sample_id": sid, "step": 0, "response_ids": ids, "advantages": adv,
            "behavior_logprobs": [-0.5] * len(ids), "topk_ids": [[i] for i in ids],
            "topk_logprobs": [[-0.5] for _ in ids]}


def test_ragged_rows_keep_their_first_reason_and_order() -> None:
    rows = [_row("a", [1, 2]), _row("b", [1, 2], adv=[1.0]), _row("c", [1, 42]),
            _row("a", [3]), _row("d", [4])]
    seen: set[str] = set()
    out = accept_rows(rows_to_table(rows, META), META, zero_padded=False, seen=seen)
    assert out.kept == (0, 4)
    assert out.table.column("sample_id").to_pylist() == ["a", "d"]
    assert out.rows.num_rows == 5
    assert out.problems == {1: "advantages has 1 entries but response_ids has 2",
                            2: "pos 1: token-id-range: response token id outside [0, 10)",
                            3: "sample_id 'a' is used by an earlier record"}
    assert seen == {"a", "c", "d"}  # b failed before the checks: its id stays free


def test_padded_and_ragged_inputs_agree() -> None:
    rows = [_row("a", [1, 2]), _row("b", [3, 11])]
    ragged = accept_rows(rows_to_table(rows, META), META, zero_padded=False, seen=set())
    batch = PaddedRollouts(sample_id=["a", "b"], step=np.zeros(2, np.int64),
                           response_ids=np.array([[1, 2], [3, 11]]), lengths=np.array([2, 2]),
                           advantages=np.ones(2), behavior_logprobs=np.full((2, 2), -0.5),
                           topk_ids=np.array([[[1], [2]], [[3], [11]]]),
                           topk_logprobs=np.full((2, 2, 1), -0.5))
    padded = accept_rows(batch, META, zero_padded=False, seen=set())
    assert padded.kept == ragged.kept == (0,)
    assert padded.problems == ragged.problems
    assert padded.table.equals(ragged.table)


def test_max_topk_bounds_the_rows() -> None:
    row = _row("a", [1])
    row["topk_ids"], row["topk_logprobs"] = [[1, 2, 3]], [[-0.5, -1.5, -2.5]]
    table = rows_to_table([row], META)
    assert accept_rows(table, META, zero_padded=False, seen=set()).kept == (0,)
    out = accept_rows(table, META, zero_padded=False, seen=set(), max_topk=2)
    assert out.kept == () and "more than 2 entries" in out.problems[0]


def test_ragged_rows_keep_their_lists_and_only_the_top_k_slots_are_compacted() -> None:
    """No padded round trip: the top-K slots go through the padding rule (a repeated id
    keeps its first slot, a -inf slot is padding), every other list stays as given; a
    chunk whose responses are all empty is accepted as it is (it used to crash)."""
    row = _row("a", [1, 2])
    row.update(topk_ids=[[1, 7, 1], [2, 5]], topk_logprobs=[[-0.5, -2.0, -0.5],
                                                            [-0.5, float("-inf")]],
               prompt_ids=[4, 0, 4], loss_mask=[True, False])
    out = accept_rows(rows_to_table([row], META), META, zero_padded=True, seen=set())
    got = out.table.to_pylist()[0]
    assert (got["topk_ids"], got["topk_logprobs"]) == ([[1, 7], [2]], [[-0.5, -2.0], [-0.5]])
    assert (got["prompt_ids"], got["loss_mask"]) == ([4, 0, 4], [True, False])
    empty = accept_rows(rows_to_table([_row("e", []), _row("f", [])], META), META,
                        zero_padded=True, seen=set())
    assert empty.kept == (0, 1) and empty.table.column("response_ids").to_pylist() == [[], []]
