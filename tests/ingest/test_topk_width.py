"""A top-K row longer than the K the footer will carry is a rejected record, in every
format: K from --top-k, or from the records' own sampler settings (vLLM's `logprobs`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ingest_layouts import (VOCAB, make_truth, openai_record, sglang_record, verl_arrays,
                            vllm_record, write_jsonl)

from pdm_replay.commands.ingest import IngestConfig, IngestError, ingest

SMALL_K = 2  # the truth logs K = 4 (+ the sampled token): every row is too long


def _openai(d: Path) -> tuple[Path, str]:
    truth = make_truth(n=3, convention="replace_last")
    return write_jsonl(d / "chat.jsonl", [openai_record(truth, i) for i in range(3)]), "line 1"


def _vllm(d: Path) -> tuple[Path, str]:
    truth = make_truth(n=3)
    return write_jsonl(d / "gen.jsonl", [vllm_record(truth, i) for i in range(3)]), "line 1"


def _sglang(d: Path) -> tuple[Path, str]:
    truth = make_truth(n=3)
    return write_jsonl(d / "sgl.jsonl", [sglang_record(truth, i) for i in range(3)]), "line 1"


def _verl(d: Path) -> tuple[Path, str]:
    arrays = verl_arrays(make_truth(n=3, convention="replace_last"))
    np.savez(d / "batch.npz", **{**arrays, "uid": arrays["uid"].astype(str)})
    return d / "batch.npz", "row 0"


def _columns(d: Path) -> tuple[Path, str]:
    rows = make_truth(n=3).rows
    names = ("sample_id", "step", "response_ids", "advantages", "behavior_logprobs",
             "topk_ids", "topk_logprobs")
    pq.write_table(pa.table({n: [r[n] for r in rows] for n in names}), d / "mine.parquet")
    return d / "mine.parquet", "row 0"


FORMATS = {"openai": _openai, "vllm": _vllm, "sglang": _sglang, "verl": _verl,
           "columns": _columns}


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_row_wider_than_top_k_is_rejected(tmp_path: Path, fmt: str) -> None:
    src, where = FORMATS[fmt](tmp_path)
    mapping = None
    if fmt == "columns":
        mapping = tmp_path / "map.toml"
        mapping.write_text("[columns]\n" + "".join(f'{c} = "{c}"\n' for c in pq.read_schema(
            src).names))
    out = tmp_path / "log.parquet"
    with pytest.raises(IngestError, match=f"{src}: {where}: pos \\d+: topk-too-long") as err:
        ingest(IngestConfig(fmt, (src,), out, vocab_size=VOCAB, top_k=SMALL_K,
                            mapping=mapping))
    assert "more than" in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    assert not out.exists()
    # with --on-error skip every record is listed in the rejects file, none is written
    with pytest.raises(IngestError, match="no usable records"):
        ingest(IngestConfig(fmt, (src,), out, vocab_size=VOCAB, top_k=SMALL_K,
                            mapping=mapping, on_error="skip"))
    reasons = (tmp_path / "log.rejects.jsonl").read_text().splitlines()
    assert len(reasons) == 3 and all("topk-too-long" in r for r in reasons)


def test_k_stated_by_the_records(tmp_path: Path) -> None:
    """vLLM's sampling_params.logprobs is K: a record listing more is rejected without
    --top-k."""
    truth = make_truth(n=2)
    recs = [vllm_record(truth, i) for i in range(2)]
    for rec in recs:
        rec["sampling_params"]["logprobs"] = SMALL_K
    src = write_jsonl(tmp_path / "gen.jsonl", recs)
    with pytest.raises(IngestError, match=r"gen\.jsonl: line 1: pos \d+: topk-too-long"):
        ingest(IngestConfig("vllm", (src,), tmp_path / "log.parquet", vocab_size=VOCAB))
