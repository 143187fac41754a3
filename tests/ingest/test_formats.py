"""Per format: ingest -> validate -> masks gives the numbers of the same data built directly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from pdm_replay.commands.ingest import IngestConfig, ingest
from pdm_replay.io.reader import read_meta
from pdm_replay.commands.validate import validate_log
from ingest_layouts import (K, VOCAB, Truth, assert_same_tokens, make_truth, masks_frame,
                                   openai_record, sglang_record, verl_arrays, vllm_record,
                                   write_jsonl)


def _roundtrip(tmp_path: Path, truth: Truth, cfg: IngestConfig) -> None:
    summary = ingest(cfg)
    assert summary.rejected == 0 and summary.rows == len(truth.rows)
    report = validate_log(cfg.out)
    assert report.ok, [str(e) for e in report.errors]
    assert report.tokens == sum(len(r["response_ids"]) for r in truth.rows) == summary.tokens
    direct = truth.write(tmp_path / "direct.parquet")
    assert_same_tokens(masks_frame(cfg.out, tmp_path / "t_ingest.parquet"),
                       masks_frame(direct, tmp_path / "t_direct.parquet"))
    got = pq.read_table(cfg.out).sort_by("sample_id").to_pylist()
    want = sorted(truth.rows, key=lambda r: r["sample_id"])
    for g, w in zip(got, want):
        for key in ("sample_id", "step", "group_id", "prompt_ids", "response_ids",
                    "loss_mask"):
            assert g[key] == w.get(key), key
        assert g["reward"] == pytest.approx(w["reward"])


def test_openai_chat_token_ids(tmp_path: Path) -> None:
    truth = make_truth(convention="replace_last")
    lines = [openai_record(truth, i) for i in range(len(truth.rows))]
    src = write_jsonl(tmp_path / "chat.jsonl", lines)
    _roundtrip(tmp_path, truth, IngestConfig("openai", (src,), tmp_path / "log.parquet",
                                             vocab_size=VOCAB))
    meta = read_meta(tmp_path / "log.parquet")
    assert (meta.topk_convention, meta.top_k) == ("replace_last", K)


def test_openai_text_tokens_with_tokenizer(tmp_path: Path, word_tokenizer: Path) -> None:
    truth = make_truth(convention="replace_last")
    lines = [openai_record(truth, i, token=lambda j: f"w{j}") for i in range(len(truth.rows))]
    src = write_jsonl(tmp_path / "chat.jsonl", lines)
    cfg = IngestConfig("openai", (src,), tmp_path / "log.parquet", tokenizer=word_tokenizer)
    _roundtrip(tmp_path, truth, cfg)
    assert read_meta(cfg.out).vocab_size == VOCAB  # from the tokenizer


def test_openai_completions_multi_choice_per_sample(tmp_path: Path) -> None:
    """Legacy completions layout, two choices per line, per-choice fields in per_sample."""
    truth = make_truth(n=4, loss_mask=False, convention="replace_last")
    lines = []
    for a, b in zip(truth.rows[::2], truth.rows[1::2]):
        def choice(row: dict, index: int) -> dict:
            return {"index": index, "text": "", "logprobs": {
                "tokens": [f"token_id:{k}" for k in row["response_ids"]],
                "token_logprobs": row["behavior_logprobs"],
                "top_logprobs": [{f"token_id:{i}": v for i, v in zip(ids, lps)}
                                 for ids, lps in zip(row["topk_ids"], row["topk_logprobs"])]}}
        keys = ("sample_id", "group_id", "prompt_ids", "advantages", "reward",
                "train_logprobs", "train_topk_logprobs")
        lines.append({"id": "cmpl-1", "object": "text_completion", "step": 0,
                      "choices": [choice(a, 0), choice(b, 1)],
                      "per_sample": [{k: r[k] for k in keys} for r in (a, b)]})
    src = write_jsonl(tmp_path / "cmpl.jsonl", lines)
    _roundtrip(tmp_path, truth, IngestConfig("openai", (src,), tmp_path / "log.parquet",
                                             vocab_size=VOCAB))


def test_vllm_offline(tmp_path: Path, truth: Truth) -> None:
    src = write_jsonl(tmp_path / "gen.jsonl", [vllm_record(truth, i)
                                               for i in range(len(truth.rows))])
    cfg = IngestConfig("vllm", (src,), tmp_path / "log.parquet", vocab_size=VOCAB)
    _roundtrip(tmp_path, truth, cfg)
    meta = read_meta(cfg.out)
    assert (meta.top_k, meta.temperature, meta.logprobs_mode) == (K, 1.0, "raw")
    assert not meta.truncated_sampler


def test_sglang(tmp_path: Path, truth: Truth) -> None:
    src = write_jsonl(tmp_path / "sgl.jsonl", [sglang_record(truth, i)
                                               for i in range(len(truth.rows))])
    cfg = IngestConfig("sglang", (src,), tmp_path / "log.parquet", vocab_size=VOCAB)
    _roundtrip(tmp_path, truth, cfg)
    meta = read_meta(cfg.out)
    assert meta.logprobs_mode == "processed" and meta.top_k_sampling == 0
    # SGLang's top-K excludes the sampled token: rows are exactly K wide.
    widths = {len(p) for r in pq.read_table(cfg.out)["topk_ids"].to_pylist() for p in r}
    assert widths == {K}


@pytest.mark.parametrize("suffix", [".npz", ".pt"])
def test_verl_dump_stable_rl_topk(tmp_path: Path, suffix: str) -> None:
    """Stable-RL's (B, T, K) replace_last tensors come out as logged, in rank order."""
    ids = [f"batch{suffix}#{i}" for i in range(6)]
    truth = make_truth(ids=ids, step=7, convention="replace_last")
    arrays = verl_arrays(truth)
    arrays["global_steps"] = np.array(7)
    # genuine token id 0 with a real log-prob must survive the zero-padding rule
    assert (arrays["rollout_topk_token_ids"][arrays["rollout_topk_logprobs"] < 0] == 0).any()
    path = tmp_path / f"batch{suffix}"
    if suffix == ".npz":  # the documented npz recipe: strings as a str array
        np.savez(path, **{**arrays, "uid": arrays["uid"].astype(str)})
    else:  # tensors next to the object-array uid verl keeps in non_tensor_batch
        torch.save({k: v if v.dtype == object else torch.from_numpy(v)
                    for k, v in arrays.items()}, path)
    _roundtrip(tmp_path, truth, IngestConfig("verl", (path,), tmp_path / "log.parquet",
                                             vocab_size=VOCAB))
    got = pq.read_table(tmp_path / "log.parquet")
    meta = read_meta(tmp_path / "log.parquet")
    assert (meta.topk_convention, meta.top_k, meta.logprobs_mode) == (
        "replace_last", K, "processed")
    # zero padding past the response dropped; the K slots of each position kept in order,
    # the sampled token in the last slot where it is outside the top-K
    assert got["topk_ids"].to_pylist() == [row["topk_ids"] for row in truth.rows]
    replaced = [(p.k not in p.top, r[-1] == p.k) for row, pos in
                zip(got["topk_ids"].to_pylist(), truth.positions) for r, p in zip(row, pos)]
    assert any(out for out, _ in replaced) and all(last for out, last in replaced if out)


def test_columns_parquet_scalar_advantage(tmp_path: Path) -> None:
    truth = make_truth(per_token_adv=False)
    rename = {"sample_id": "id", "response_ids": "completion", "behavior_logprobs": "logp",
              "topk_ids": "cand", "topk_logprobs": "cand_logp", "advantages": "adv",
              "train_logprobs": "pi_logp", "train_topk_logprobs": "cand_pi_logp",
              "group_id": "prompt_uid", "prompt_ids": "prompt", "reward": "score",
              "loss_mask": "mask"}
    cols = {theirs: [r[ours] for r in truth.rows] for ours, theirs in rename.items()}
    cols["adv"] = [r["advantages"][0] for r in truth.rows]  # one number per sample
    pq.write_table(pa.table(cols), tmp_path / "mine.parquet")
    mapping = tmp_path / "map.toml"
    mapping.write_text("[columns]\n" + "".join(f'{o} = "{t}"\n' for o, t in rename.items())
                       + "[defaults]\nstep = 0\n[meta]\ntopk_convention = \"plus_sampled\"\n"
                       "temperature = 0.7\n")
    cfg = IngestConfig("columns", (tmp_path / "mine.parquet",), tmp_path / "log.parquet",
                       vocab_size=VOCAB, mapping=mapping, chunk_rows=4)
    _roundtrip(tmp_path, truth, cfg)
    assert read_meta(cfg.out).temperature == 0.7


def test_truncated_processed_sampler_warns(tmp_path: Path, truth: Truth) -> None:
    recs = [vllm_record(truth, i) for i in range(len(truth.rows))]
    for r in recs:
        r["sampling_params"].update(top_p=0.9, logprobs_mode="processed_logprobs")
    src = write_jsonl(tmp_path / "gen.jsonl", recs)
    s = ingest(IngestConfig("vllm", (src,), tmp_path / "log.parquet", vocab_size=VOCAB))
    assert any("renormalized" in w for w in s.warnings)
    meta = read_meta(tmp_path / "log.parquet")
    assert (meta.top_p, meta.logprobs_mode) == (0.9, "processed")
    # a CLI-style override wins over the records
    s = ingest(IngestConfig("vllm", (src,), tmp_path / "log2.parquet", vocab_size=VOCAB,
                            logprobs_mode="raw", top_p=1.0))
    assert not any("renormalized" in w for w in s.warnings)
    assert read_meta(tmp_path / "log2.parquet").logprobs_mode == "raw"


def test_conflicting_sampler_settings_warn(tmp_path: Path, truth: Truth) -> None:
    recs = [vllm_record(truth, i) for i in range(2)]
    recs[1]["sampling_params"]["temperature"] = 0.5
    s = ingest(IngestConfig("vllm", (write_jsonl(tmp_path / "g.jsonl", recs),),
                            tmp_path / "log.parquet", vocab_size=VOCAB))
    assert any("temperature differs" in w and "line 2" in w for w in s.warnings)


def test_vocab_size_required(tmp_path: Path, truth: Truth) -> None:
    from pdm_replay.commands.ingest import IngestError
    src = write_jsonl(tmp_path / "g.jsonl", [vllm_record(truth, 0)])
    with pytest.raises(IngestError, match="pass vocab_size N or tokenizer PATH") as info:
        ingest(IngestConfig("vllm", (src,), tmp_path / "log.parquet"))
    assert info.value.fields == ("vocab_size", "tokenizer")  # the CLI: --vocab-size ...


def test_no_top_k_warns_and_stays_valid(tmp_path: Path) -> None:
    truth = make_truth(n=2, convention="replace_last")
    lines = [openai_record(truth, i) for i in range(2)]
    for line in lines:
        for entry in line["response"]["choices"][0]["logprobs"]["content"]:
            entry["top_logprobs"] = []
        line.pop("train_topk_logprobs")
    src = write_jsonl(tmp_path / "chat.jsonl", lines)
    s = ingest(IngestConfig("openai", (src,), tmp_path / "log.parquet", vocab_size=VOCAB))
    assert any("no top-K" in w for w in s.warnings) and s.meta.top_k == 0
    assert validate_log(tmp_path / "log.parquet").ok
