from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdm_replay.testing.fixtures import SyntheticLogConfig, write_synthetic_log
from pdm_replay.io.reader import (flatten_batch, iter_flat_tokens, iter_record_batches,
                                  list_parquet_files, mean_response_length, open_parquet,
                                  pad_ragged, read_meta)
from pdm_replay.io.rollouts import write_rollouts
from pdm_replay.schema import RolloutMeta


def test_pad_ragged_handles_nulls_and_width() -> None:
    arr = pa.array([[1, 2, 3], None, [4]], type=pa.list_(pa.int32()))
    out, lengths = pad_ragged(arr, -1, np.int64)
    assert out.tolist() == [[1, 2, 3], [-1, -1, -1], [4, -1, -1]]
    assert lengths.tolist() == [3, 0, 1]
    out, _ = pad_ragged(arr, -1, np.int64, width=2)
    assert out.tolist() == [[1, 2], [-1, -1], [4, -1]]


def test_ragged_and_padded_topk_give_same_tokens(tmp_path: Path) -> None:
    meta = RolloutMeta(vocab_size=10, top_k=3)
    base = {"sample_id": "a", "step": 1, "response_ids": [4, 5], "advantages": [1.0, -1.0],
            "behavior_logprobs": [-0.5, -1.0]}
    ragged = dict(base, topk_ids=[[4, 1, 2], [5]], topk_logprobs=[[-0.5, -1.5, -2.0], [-1.0]])
    padded = dict(base, topk_ids=[[4, 1, 2], [5, -1, -1]],
                  topk_logprobs=[[-0.5, -1.5, -2.0], [-1.0, float("-inf"), float("-inf")]])
    a = flatten_batch(next(iter_record_batches(write_rollouts(tmp_path / "a.parquet",
                                                              [ragged], meta)))[2])
    b = flatten_batch(next(iter_record_batches(write_rollouts(tmp_path / "b.parquet",
                                                              [padded], meta)))[2])
    np.testing.assert_array_equal(a.topk_ids, b.topk_ids)
    np.testing.assert_array_equal(a.topk_logprobs, b.topk_logprobs)
    assert a.pos.tolist() == [0, 1] and a.sample_id.tolist() == ["a", "a"]


def test_directory_log_is_read_in_bounded_batches(tmp_path: Path) -> None:
    cfg = SyntheticLogConfig(n_samples=10, response_len=3, vocab_size=30, top_k=4)
    write_synthetic_log(tmp_path / "log" / "part-0.parquet", cfg)
    write_synthetic_log(tmp_path / "log" / "part-1.parquet", cfg, rng_seed=1)
    (tmp_path / "log" / ".part-2.parquet.123.tmp").write_bytes(b"half-written")
    assert [p.name for p in list_parquet_files(tmp_path / "log")] == ["part-0.parquet",
                                                                     "part-1.parquet"]
    batches = list(iter_record_batches(tmp_path / "log", batch_rows=4))
    assert [b.num_rows for _, _, b in batches] == [4, 4, 2, 4, 4, 2]
    assert [first for _, first, _ in batches] == [0, 4, 8, 0, 4, 8]
    assert sum(len(f) for f in iter_flat_tokens(tmp_path / "log", batch_rows=4)) == 60
    assert read_meta(tmp_path / "log").vocab_size == 30


def test_long_responses_get_fewer_rows_per_batch(tmp_path: Path) -> None:
    cfg = SyntheticLogConfig(n_samples=12, response_len=40, vocab_size=30, top_k=4,
                             chunk_samples=5)  # three row groups
    log = write_synthetic_log(tmp_path / "log.parquet", cfg)
    assert mean_response_length(open_parquet(log)) == 40.0  # footer alone: 480 / 12
    batches = [b for _, _, b in iter_record_batches(log, batch_rows=8, max_tokens=100)]
    assert [b.num_rows for b in batches] == [2] * 6  # 100 tokens / 40 per row -> 2 rows
    batches = [b for _, _, b in iter_record_batches(log, batch_rows=8, max_tokens=10)]
    assert [b.num_rows for b in batches] == [1] * 12  # never fewer than one row
    batches = [b for _, _, b in iter_record_batches(log, batch_rows=8, max_tokens=10_000)]
    assert [b.num_rows for b in batches] == [8, 4]  # short enough: batch_rows rules


def test_loss_mask_null_row_means_all_true(tmp_path: Path) -> None:
    meta = RolloutMeta(vocab_size=10, top_k=1)
    row = {"step": 0, "response_ids": [1, 2], "advantages": [1.0, 1.0],
           "behavior_logprobs": [-1.0, -1.0], "topk_ids": [[1], [2]],
           "topk_logprobs": [[-1.0], [-1.0]]}
    p = write_rollouts(tmp_path / "l.parquet", [dict(row, sample_id="a", loss_mask=[True, False]),
                                                dict(row, sample_id="b")], meta)
    flat = next(iter_flat_tokens(p))
    assert flat.loss_mask.tolist() == [True, False, True, True]


def test_topk_arrays_stay_as_logged_and_loss_mask_is_read_directly(tmp_path: Path) -> None:
    """float32 / int32 top-K columns are not widened (the math converts per chunk), and
    float64 logs are not narrowed; a loss_mask without nulls is taken as stored."""
    meta = RolloutMeta(vocab_size=10, top_k=2)
    row = {"step": 0, "response_ids": [1, 2], "advantages": [1.0, 1.0],
           "behavior_logprobs": [-1.0, -0.5], "topk_ids": [[1, 3], [2]],
           "topk_logprobs": [[-1.0, -2.0], [-0.5]], "loss_mask": [False, True]}
    p = write_rollouts(tmp_path / "l.parquet", [dict(row, sample_id="a")], meta)
    flat = next(iter_flat_tokens(p))
    assert flat.topk_ids.dtype == np.int32 and flat.topk_logprobs.dtype == np.float32
    assert flat.topk_ids.tolist() == [[1, 3], [2, -1]]
    assert flat.topk_logprobs.tolist() == [[-1.0, -2.0], [-0.5, -np.inf]]
    assert flat.loss_mask.tolist() == [False, True]
    table = pq.read_table(p)
    wide = table.cast(pa.schema([f.with_type(pa.list_(pa.list_(pa.float64())))
                                 if f.name == "topk_logprobs" else f for f in table.schema]))
    pq.write_table(wide, tmp_path / "w.parquet")
    assert next(iter_flat_tokens(tmp_path / "w.parquet")).topk_logprobs.dtype == np.float64


def test_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        list_parquet_files(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no .parquet"):
        list_parquet_files(tmp_path / "empty")


@given(st.lists(st.one_of(st.none(), st.lists(st.integers(0, 99), max_size=6)), max_size=12),
       st.one_of(st.none(), st.integers(0, 7)))
@settings(max_examples=200, deadline=None)
def test_pad_ragged_matches_a_row_by_row_reference(rows: list, width: int | None) -> None:
    """Rectangular, ragged, null and cut rows all land where a plain loop puts them."""
    arr = pa.array(rows, type=pa.list_(pa.int64()))
    out, lengths = pad_ragged(arr, -1, np.int64, width=width)
    w = max((len(r) for r in rows if r), default=0) if width is None else width
    expect = [((r or []) + [-1] * w)[:w] for r in rows]
    assert out.shape == (len(rows), w) and out.tolist() == expect
    assert lengths.tolist() == [len(r or []) for r in rows]
