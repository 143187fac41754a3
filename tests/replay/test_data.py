"""Deterministic per-seed draws from a log file or a directory of files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from replay_helpers import LOG_CFG

from pdm_replay.io.rollouts import write_rollouts
from pdm_replay.replay.data import read_rows, seed_batch
from pdm_replay.io.log import RolloutLog
from pdm_replay.replay.log_index import LogIndex
from pdm_replay.replay.seeds import draw_rows


def test_draws_are_deterministic_distinct_and_sorted():
    a, b = draw_rows(1000, 50, seed=7), draw_rows(1000, 50, seed=7)
    assert np.array_equal(a, b) and len(set(a.tolist())) == 50
    assert np.all(np.diff(a) > 0)
    assert not np.array_equal(a, draw_rows(1000, 50, seed=8))


def test_directory_log_reads_the_drawn_rows_across_files_and_row_groups(tmp_path: Path,
                                                                         replay_log: Path):
    rows = pq.read_table(replay_log).to_pylist()
    d = tmp_path / "log"
    d.mkdir()
    for i in range(0, len(rows), 5):  # four files of 5, 5, 5, 1 rows
        write_rollouts(d / f"part-{i:03d}.parquet", rows[i:i + 5], LOG_CFG.meta())
    index = LogIndex.of(RolloutLog.open(d))
    assert index.n_rows == len(rows) and len(index.files) == 4
    picked = draw_rows(index.n_rows, 7, seed=2)
    got = read_rows(index, picked)["sample_id"].to_pylist()
    assert got == [rows[i]["sample_id"] for i in picked]
    sb = seed_batch(index, 7, 2, LOG_CFG.vocab_size)
    assert sb.sample_ids == got and len(sb.flat) == sum(len(r) for r in sb.responses)
