"""Shipped ``--from columns`` mappings, on records laid out as their producers write them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ingest_layouts import VOCAB, make_truth, write_jsonl

from pdm_replay.commands.ingest import IngestConfig, IngestError, ingest
from pdm_replay.io.reader import read_meta
from pdm_replay.commands.validate import validate_log

# open_instruct/rl_utils.py RolloutRecord, in field order (open-instruct is not on PyPI).
ROLLOUT_RECORD = ("step", "sample_idx", "prompt_idx", "prompt_tokens", "response_tokens",
                  "reward", "advantage", "finish_reason", "dataset", "ground_truth",
                  "request_info", "logprobs")


def _open_instruct_records(step: int, per_prompt: int = 2) -> list[dict]:
    """One step's ``_save_rollouts`` lines: sample_idx / prompt_idx restart at 0."""
    truth = make_truth(n=4, seed=step)
    return [dict(zip(ROLLOUT_RECORD, (
        step, i, i // per_prompt, row["prompt_ids"], row["response_ids"], row["reward"],
        row["advantages"][0], "stop", "gsm8k", None, None, row["behavior_logprobs"])))
        for i, row in enumerate(truth.rows)]


def test_open_instruct_traces(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "run_rollouts_000000.jsonl",
                      _open_instruct_records(1) + _open_instruct_records(2))
    s = ingest(IngestConfig("columns", (src,), tmp_path / "log.parquet", vocab_size=VOCAB,
                            mapping=Path("open-instruct"), temperature=0.7))
    assert s.rows == 8 and s.rejected == 0
    assert any("no top-K" in w for w in s.warnings)
    t = pq.read_table(tmp_path / "log.parquet")
    assert t["sample_id"].to_pylist()[:2] == ["1/0", "1/1"] and len(set(t["sample_id"])) == 8
    assert t["group_id"].to_pylist()[:4] == ["1/0", "1/0", "1/1", "1/1"]
    assert all(p == [] for r in t["topk_ids"].to_pylist() for p in r)
    adv = t["advantages"].to_pylist()
    assert all(len(set(a)) == 1 for a in adv)  # one advantage per sample, every token
    meta = read_meta(tmp_path / "log.parquet")
    assert (meta.logprobs_mode, meta.top_k, meta.temperature) == ("processed", 0, 0.7)
    assert validate_log(tmp_path / "log.parquet").ok


def test_joined_ids_from_parquet(tmp_path: Path) -> None:
    recs = _open_instruct_records(3)
    table = pa.Table.from_pylist([{k: v for k, v in r.items() if k not in (
        "ground_truth", "request_info")} for r in recs])
    pq.write_table(table, tmp_path / "t.parquet")
    ingest(IngestConfig("columns", (tmp_path / "t.parquet",), tmp_path / "log.parquet",
                        vocab_size=VOCAB, mapping=Path("open-instruct")))
    got = pq.read_table(tmp_path / "log.parquet")
    assert got["sample_id"].to_pylist() == ["3/0", "3/1", "3/2", "3/3"]
    assert got["group_id"].to_pylist() == ["3/0", "3/0", "3/1", "3/1"]


def test_only_ids_may_join_columns(tmp_path: Path) -> None:
    bad = tmp_path / "m.toml"
    bad.write_text('[columns]\nresponse_ids = ["a", "b"]\n')
    (tmp_path / "x.jsonl").write_text("{}\n")
    with pytest.raises(IngestError, match="response_ids must name one column"):
        ingest(IngestConfig("columns", (tmp_path / "x.jsonl",), tmp_path / "o.parquet",
                            vocab_size=VOCAB, mapping=bad))
