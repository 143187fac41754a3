"""Bad records are named (file + line/row + reason); skip lists them, fail leaves nothing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from ingest_layouts import (VOCAB, make_truth, openai_record, sglang_record, verl_arrays,
                            vllm_record, write_jsonl)

from pdm_replay.commands.ingest import IngestConfig, IngestError, ingest
from pdm_replay.commands.validate import validate_log


def _truncated(rec: dict) -> str:
    text = json.dumps(rec)
    return text[: len(text) // 2]


def _missing_logprobs(rec: dict) -> dict:
    rec["response"]["choices"][0]["logprobs"] = None
    return rec


def _unmappable(rec: dict) -> dict:
    rec["response"]["choices"][0]["logprobs"]["content"][1]["top_logprobs"][0]["token"] = "zzz"
    return rec


def _nan(rec: dict) -> dict:
    rec["response"]["choices"][0]["logprobs"]["content"][0]["logprob"] = math.nan
    return rec


BAD = {"truncated": (_truncated, "invalid JSON"), "missing": (_missing_logprobs,
                                                             "missing logprobs"),
       "unmappable": (_unmappable, "'zzz' matches no token"), "nan": (_nan, "NaN")}


def _openai_lines(bad: list[str]) -> list[str]:
    """A good line, then one line per entry of ``bad``, then a good line (text tokens)."""
    truth = make_truth(n=len(bad) + 2, convention="replace_last")
    lines = []
    for i in range(len(truth.rows)):
        rec = openai_record(truth, i, token=lambda j: f"w{j}")
        kind = bad[i - 1] if 0 < i <= len(bad) else None
        out = BAD[kind][0](rec) if kind else rec
        lines.append(out if isinstance(out, str) else json.dumps(out))
    return lines


def _leftovers(directory: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name not in keep)


@pytest.mark.parametrize("kind", list(BAD))
def test_fail_names_line_and_leaves_nothing(tmp_path: Path, word_tokenizer: Path,
                                            kind: str) -> None:
    src = tmp_path / "chat.jsonl"
    src.write_text("\n".join(_openai_lines([kind])) + "\n")
    with pytest.raises(IngestError) as err:
        ingest(IngestConfig("openai", (src,), tmp_path / "log.parquet", tokenizer=word_tokenizer))
    assert f"{src}: line 2" in str(err.value) and BAD[kind][1] in str(err.value)
    assert _leftovers(tmp_path, {"chat.jsonl", "tok"}) == []


def test_skip_writes_rejects_and_the_good_rows(tmp_path: Path, word_tokenizer: Path) -> None:
    src = tmp_path / "chat.jsonl"
    src.write_text("\n".join(_openai_lines(list(BAD))) + "\n")
    out = tmp_path / "log.parquet"
    s = ingest(IngestConfig("openai", (src,), out, tokenizer=word_tokenizer, on_error="skip"))
    assert (s.rows, s.rejected) == (2, 4)
    assert s.rejects_path == tmp_path / "log.rejects.jsonl"
    rejects = [json.loads(x) for x in s.rejects_path.read_text().splitlines()]
    assert [r["line"] for r in rejects] == [2, 3, 4, 5]
    assert all(r["file"] == str(src) for r in rejects)
    for r, kind in zip(rejects, BAD):
        assert BAD[kind][1] in r["reason"], (kind, r)
    assert validate_log(out).ok
    assert pq.read_table(out)["sample_id"].to_pylist() == ["s0", "s5"]
    assert _leftovers(tmp_path, {"chat.jsonl", "tok", "log.parquet", "log.rejects.jsonl"}) == []


def test_skip_with_nothing_usable_keeps_only_rejects(tmp_path: Path) -> None:
    src = tmp_path / "x.jsonl"
    src.write_text("{not json\n")
    with pytest.raises(IngestError, match="no usable records"):
        ingest(IngestConfig("vllm", (src,), tmp_path / "log.parquet", vocab_size=VOCAB,
                            on_error="skip"))
    assert _leftovers(tmp_path, {"x.jsonl"}) == ["log.rejects.jsonl"]


def _npz(tmp_path: Path, edit) -> Path:
    arrays = verl_arrays(make_truth(loss_mask=False, convention="replace_last"))
    arrays["uid"] = arrays["uid"].astype(str)
    edit(arrays)
    np.savez(tmp_path / "batch.npz", **arrays)
    return tmp_path / "batch.npz"


def test_verl_wrong_shape_names_file_and_key(tmp_path: Path) -> None:
    path = _npz(tmp_path, lambda a: a.update(rollout_log_probs=a["rollout_log_probs"][:, :-1]))
    with pytest.raises(IngestError, match=r"batch\.npz.*rollout_log_probs has shape \(6, 7\)"):
        ingest(IngestConfig("verl", (path,), tmp_path / "log.parquet", vocab_size=VOCAB))
    assert _leftovers(tmp_path, {"batch.npz"}) == []
    path = _npz(tmp_path, lambda a: a.update(
        rollout_topk_logprobs=a["rollout_topk_logprobs"][:, :, :3]))
    with pytest.raises(IngestError, match="rollout_topk_logprobs|topk_logprobs has shape"):
        ingest(IngestConfig("verl", (path,), tmp_path / "log.parquet", vocab_size=VOCAB))


def test_verl_missing_logprobs(tmp_path: Path) -> None:
    path = _npz(tmp_path, lambda a: a.pop("rollout_log_probs"))
    with pytest.raises(IngestError, match="missing logprobs.*calculate_log_probs"):
        ingest(IngestConfig("verl", (path,), tmp_path / "log.parquet", vocab_size=VOCAB))


def test_verl_nan_row_and_conflict_named_by_row(tmp_path: Path) -> None:
    def edit(a: dict) -> None:
        a["rollout_log_probs"][2, 1] = np.nan
        a["rollout_topk_token_ids"][4, 0, 2] = a["rollout_topk_token_ids"][4, 0, 1]
        a["rollout_topk_logprobs"][4, 0, 2] = a["rollout_topk_logprobs"][4, 0, 1] - 1.0
    path = _npz(tmp_path, edit)
    with pytest.raises(IngestError, match=r"batch\.npz: row 2: pos 1: non-finite"):
        ingest(IngestConfig("verl", (path,), tmp_path / "log.parquet", vocab_size=VOCAB))
    s = ingest(IngestConfig("verl", (path,), tmp_path / "log.parquet", vocab_size=VOCAB,
                            on_error="skip"))
    rejects = [json.loads(x) for x in s.rejects_path.read_text().splitlines()]
    assert [(r["row"], r["reason"].split(":")[0]) for r in rejects] == [(2, "pos 1"),
                                                                        (4, "pos 0")]
    assert "twice with different log-probs" in rejects[1]["reason"]
    assert s.rows == 4 and validate_log(tmp_path / "log.parquet").ok


def test_vllm_and_sglang_bad_records(tmp_path: Path) -> None:
    truth = make_truth(n=3)
    recs = [vllm_record(truth, i) for i in range(3)]
    recs[1]["outputs"][0]["logprobs"][0] = {"999": {"logprob": -1.0, "rank": 1}}
    recs[2]["outputs"][0]["logprobs"][0][str(truth.rows[2]["response_ids"][0])]["logprob"] = \
        float("nan")
    src = write_jsonl(tmp_path / "gen.jsonl", recs)
    s = ingest(IngestConfig("vllm", (src,), tmp_path / "a.parquet", vocab_size=VOCAB,
                            on_error="skip"))
    reasons = [json.loads(x) for x in s.rejects_path.read_text().splitlines()]
    assert [r["line"] for r in reasons] == [2, 3]
    assert "sampled token" in reasons[0]["reason"] and "NaN" in reasons[1]["reason"]

    sg = [sglang_record(truth, i) for i in range(2)]
    del sg[1]["meta_info"]["output_token_logprobs"]
    src = write_jsonl(tmp_path / "sgl.jsonl", sg)
    with pytest.raises(IngestError, match=r"sgl\.jsonl: line 2: missing logprobs"):
        ingest(IngestConfig("sglang", (src,), tmp_path / "b.parquet", vocab_size=VOCAB))


def test_repeated_sample_id_across_files(tmp_path: Path) -> None:
    truth = make_truth(n=2)
    a = write_jsonl(tmp_path / "a.jsonl", [vllm_record(truth, 0)])
    b = write_jsonl(tmp_path / "b.jsonl", [vllm_record(truth, 0), vllm_record(truth, 1)])
    with pytest.raises(IngestError, match=r"b\.jsonl: line 1: sample_id 's0' is used"):
        ingest(IngestConfig("vllm", (a, b), tmp_path / "log.parquet", vocab_size=VOCAB))


def test_token_id_outside_vocab(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "g.jsonl", [vllm_record(make_truth(n=1), 0)])
    with pytest.raises(IngestError, match="token-id-range|topk-id-range"):
        ingest(IngestConfig("vllm", (src,), tmp_path / "log.parquet", vocab_size=3))


def test_logits_mode_is_rejected(tmp_path: Path) -> None:
    rec = vllm_record(make_truth(n=1), 0)
    rec["sampling_params"]["logprobs_mode"] = "raw_logits"
    src = write_jsonl(tmp_path / "g.jsonl", [rec])
    with pytest.raises(IngestError, match=r"g\.jsonl: line 1: logprobs_mode='raw_logits'"):
        ingest(IngestConfig("vllm", (src,), tmp_path / "log.parquet", vocab_size=VOCAB))


def test_verl_dump_refuses_arbitrary_objects_by_name(tmp_path: Path) -> None:
    """Plain numpy arrays load under weights_only; a class inside an object array does not."""
    from fractions import Fraction

    import torch
    arrays = verl_arrays(make_truth(n=2, convention="replace_last"))
    tensors = {k: v if v.dtype == object else torch.from_numpy(v) for k, v in arrays.items()}
    extra = np.empty(2, dtype=object)
    extra[:] = [Fraction(1, 2), Fraction(1, 3)]
    torch.save({**tensors, "extra_info": extra}, tmp_path / "a.pt")
    with pytest.raises(IngestError, match=r"a\.pt.*safe load refuses \(fractions\.Fraction\)"):
        ingest(IngestConfig("verl", (tmp_path / "a.pt",), tmp_path / "log.parquet",
                            vocab_size=VOCAB))


def test_verl_npz_object_uid_names_the_key(tmp_path: Path) -> None:
    np.savez(tmp_path / "b.npz", **verl_arrays(make_truth(n=2, convention="replace_last")))
    with pytest.raises(IngestError, match=r"b\.npz.*'uid' is an object array.*astype\(str\)"):
        ingest(IngestConfig("verl", (tmp_path / "b.npz",), tmp_path / "log.parquet",
                            vocab_size=VOCAB))
