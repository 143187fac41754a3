"""``pdm-replay ingest`` through Typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from ingest_layouts import VOCAB, make_truth, verl_arrays, vllm_record, write_jsonl
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.io.reader import read_meta

runner = CliRunner()


def test_ingest_vllm_then_validate(tmp_path: Path) -> None:
    truth = make_truth()
    src = write_jsonl(tmp_path / "gen.jsonl", [vllm_record(truth, i) for i in range(6)])
    out = tmp_path / "log.parquet"
    res = runner.invoke(app, ["ingest", "--from", "vllm", str(src), "--out", str(out),
                              "--vocab-size", str(VOCAB), "--temperature", "0.8"])
    assert res.exit_code == 0, res.output
    assert "wrote 6 samples" in res.output and "top_k=4" in res.output
    assert read_meta(out).temperature == 0.8  # the CLI overrides the records' 1.0
    assert runner.invoke(app, ["validate", str(out)]).exit_code == 0


def test_ingest_directory_of_verl_dumps(tmp_path: Path) -> None:
    (tmp_path / "dumps").mkdir()
    for step in range(2):
        truth = make_truth(n=3, seed=step, convention="replace_last")
        arrays = verl_arrays(truth)
        np.savez(tmp_path / "dumps" / f"step{step}.npz", **{**arrays,
                                                           "uid": arrays["uid"].astype(str)})
    out = tmp_path / "log.parquet"
    res = runner.invoke(app, ["ingest", "--from", "verl", str(tmp_path / "dumps"),
                              "-o", str(out), "--vocab-size", str(VOCAB)])
    assert res.exit_code == 0, res.output
    assert "wrote 6 samples" in res.output and "from 2 file(s)" in res.output


def test_fail_exit_code_and_message(tmp_path: Path) -> None:
    truth = make_truth(n=2)
    src = tmp_path / "gen.jsonl"
    src.write_text(json.dumps(vllm_record(truth, 0)) + "\n{\"outputs\": [\n")
    out = tmp_path / "log.parquet"
    res = runner.invoke(app, ["ingest", "--from", "vllm", str(src), "--out", str(out),
                              "--vocab-size", str(VOCAB)])
    assert res.exit_code == 2
    assert "line 2" in res.output and "invalid JSON" in res.output
    assert not out.exists()


def test_skip_reports_rejects(tmp_path: Path) -> None:
    truth = make_truth(n=2)
    src = tmp_path / "gen.jsonl"
    src.write_text(json.dumps(vllm_record(truth, 0)) + "\n{\"outputs\": [\n")
    out = tmp_path / "log.parquet"
    res = runner.invoke(app, ["ingest", "--from", "vllm", str(src), "--out", str(out),
                              "--vocab-size", str(VOCAB), "--on-error", "skip",
                              "--rejects", str(tmp_path / "bad.jsonl")])
    assert res.exit_code == 0, res.output
    assert "rejected 1 record(s)" in res.output and "invalid JSON" in res.output
    assert json.loads((tmp_path / "bad.jsonl").read_text())["line"] == 2


def test_columns_needs_mapping_and_vocab_needed(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "x.jsonl", [{"a": 1}])
    res = runner.invoke(app, ["ingest", "--from", "columns", str(src), "--out",
                              str(tmp_path / "o.parquet"), "--vocab-size", "5"])
    assert res.exit_code == 2 and "--mapping" in res.output
    res = runner.invoke(app, ["ingest", "--from", "vllm", str(src), "--out",
                              str(tmp_path / "o.parquet")])
    assert res.exit_code == 2 and "--vocab-size" in res.output


def test_truncation_warning_printed(tmp_path: Path) -> None:
    truth = make_truth(n=2)
    src = write_jsonl(tmp_path / "gen.jsonl", [vllm_record(truth, i) for i in range(2)])
    res = runner.invoke(app, ["ingest", "--from", "vllm", str(src), "--out",
                              str(tmp_path / "o.parquet"), "--vocab-size", str(VOCAB),
                              "--top-p", "0.95", "--logprobs-mode", "processed"])
    assert res.exit_code == 0, res.output
    assert "renormalized" in res.output
