"""SGLang's nested (with null rows) and flat top-logprob layouts give the same log.

SGLang itself cannot be imported on a CPU machine with torch 2.13 (its ``io_struct`` /
``tokenizer_manager`` import chain needs triton, a CUDA torchvision and apache-tvm-ffi), so
the records follow its 0.5.23 source: ``TokenizerManager.detokenize_top_logprobs_tokens``
(a ``None`` row where the value list is empty) and ``_build_flat_top_logprobs_fields`` /
``_build_flat_top_logprobs_fields_from_arrays`` (``sglang/srt/managers/
tokenizer_manager.py``) with ``flat_top_logprobs_layout`` (``io_struct.py``).
"""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from ingest_layouts import VOCAB, assert_same_tokens, make_truth, masks_frame, sglang_record, \
    write_jsonl

from pdm_replay.commands.ingest import IngestConfig, IngestError, ingest
from pdm_replay.commands.validate import validate_log


def _flat(rec: dict, null_prefix: int = 0, b64: bool = False) -> dict:
    """``rec`` as SGLang answers ``return_flat_raw_output_top_logprobs=true``: the nested
    rows replaced by the flat fields (the first ``null_prefix`` rows had no values)."""
    meta = dict(rec["meta_info"])
    rows = meta.pop("output_top_logprobs")[null_prefix:]
    k = len(rows[0])
    val = np.array([[e[0] for e in r] for r in rows], np.float64)
    idx = np.array([[e[1] for e in r] for r in rows], np.int64)
    if b64:
        meta.update({"output_top_logprobs_val_flat_b64": base64.b64encode(
            val.astype("<f4").tobytes()).decode(), "output_top_logprobs_idx_flat_b64":
            base64.b64encode(idx.astype("<i4").tobytes()).decode(),
            "output_top_logprobs_val_flat_b64_dtype": "float32",
            "output_top_logprobs_idx_flat_b64_dtype": "int32"})
    else:
        meta.update({"output_top_logprobs_val_flat": val.reshape(-1).tolist(),
                     "output_top_logprobs_idx_flat": idx.reshape(-1).tolist()})
    meta.update({"output_top_logprobs_shape": [len(rows), k],
                 "output_top_logprobs_null_prefix": null_prefix})
    return {**rec, "meta_info": meta}


@pytest.mark.parametrize("b64", [False, True])
def test_flat_layout_equals_nested(tmp_path: Path, b64: bool) -> None:
    truth = make_truth(n=6, seed=4)
    nested = [sglang_record(truth, i) for i in range(6)]
    ingest(IngestConfig("sglang", (write_jsonl(tmp_path / "n.jsonl", nested),),
                        tmp_path / "n.parquet", vocab_size=VOCAB))
    s = ingest(IngestConfig("sglang", (write_jsonl(tmp_path / "f.jsonl", [
        _flat(r, b64=b64) for r in nested]),), tmp_path / "f.parquet", vocab_size=VOCAB))
    assert s.rows == 6 and not any("no top-K" in w for w in s.warnings)
    a, b = pq.read_table(tmp_path / "n.parquet"), pq.read_table(tmp_path / "f.parquet")
    assert a["topk_ids"].to_pylist() == b["topk_ids"].to_pylist()
    tol = 0 if not b64 else 1e-7  # b64 is float32 on the wire; the log is float32 anyway
    for x, y in zip(a["topk_logprobs"].to_pylist(), b["topk_logprobs"].to_pylist()):
        np.testing.assert_allclose(np.concatenate(x), np.concatenate(y), rtol=tol)
    assert_same_tokens(masks_frame(tmp_path / "f.parquet", tmp_path / "tf.parquet"),
                       masks_frame(truth.write(tmp_path / "d.parquet"), tmp_path / "td.parquet"))


def test_null_rows_and_null_prefix_are_empty_supports_counted(tmp_path: Path) -> None:
    truth = make_truth(n=4, seed=5)
    recs = [sglang_record(truth, i) for i in range(4)]
    for i, pos in ((1, 0), (2, 1), (3, 0)):  # the trainer's π at the top-K: none there
        recs[i]["train_topk_logprobs"][pos] = []
    recs[1]["meta_info"]["output_top_logprobs"][0] = None  # detokenize_*: empty values
    recs[2]["meta_info"]["output_top_logprobs"][1] = None
    recs[3] = _flat(recs[3], null_prefix=1)
    s = ingest(IngestConfig("sglang", (write_jsonl(tmp_path / "s.jsonl", recs),),
                            tmp_path / "s.parquet", vocab_size=VOCAB))
    assert s.rows == 4 and s.rejected == 0
    assert "2 positions without a top-logprob row (SGLang null rows)" in s.warnings
    got = pq.read_table(tmp_path / "s.parquet")["topk_ids"].to_pylist()
    assert got[1][0] == [] and got[2][1] == [] and got[3][0] == []
    assert got[0] == [p.top for p in truth.positions[0]]
    assert validate_log(tmp_path / "s.parquet").ok


def test_flat_shape_that_does_not_fit_is_named(tmp_path: Path) -> None:
    rec = _flat(sglang_record(make_truth(n=1), 0))
    rec["meta_info"]["output_top_logprobs_null_prefix"] = 2
    with pytest.raises(IngestError, match=r"line 1.*flat top logprobs: shape .* null_prefix 2"):
        ingest(IngestConfig("sglang", (write_jsonl(tmp_path / "x.jsonl", [rec]),),
                            tmp_path / "x.parquet", vocab_size=VOCAB))
