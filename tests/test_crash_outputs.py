"""SIGKILL while `masks` and `ingest` write: the temp files the kill leaves are removed by
the next run to the same output, whose result equals an uninterrupted run bit for bit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.testing.fixtures import SyntheticLogConfig, write_synthetic_log

DRIVER = Path(__file__).resolve().parent / "proc_driver.py"


def killed(hook: str, tmp: Path, args: list[str]) -> None:
    (tmp / "signals").mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, str(DRIVER), hook, str(tmp / "signals"), "--",
                           *args], capture_output=True, text=True, env=dict(os.environ),
                          timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr


def temps(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".pdm.tmp"))


def run_ok(args: list[str]) -> None:
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return write_synthetic_log(tmp_path / "log.parquet", SyntheticLogConfig(
        n_samples=16, response_len=6, vocab_size=60, top_k=5))


def test_masks_kill_then_rerun(tmp_path: Path, log: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    args = ["masks", str(log), "--out", str(out_dir / "tokens.parquet"), "--batch-rows", "2",
            "--workers", "1"]
    killed("kill-masks-writing", tmp_path, args)
    assert temps(out_dir) and not (out_dir / "tokens.parquet").exists()
    run_ok(args)
    assert temps(out_dir) == []
    run_ok(["masks", str(log), "--out", str(tmp_path / "reference.parquet"),
            "--batch-rows", "2", "--workers", "1"])
    # the footer names nothing run-specific: the files are equal byte for byte
    assert (out_dir / "tokens.parquet").read_bytes() == \
        (tmp_path / "reference.parquet").read_bytes()


def test_ingest_kill_then_rerun(tmp_path: Path, log: Path) -> None:
    import pyarrow.parquet as pq
    rows = pq.read_table(log).to_pylist()
    src = tmp_path / "gen.jsonl"
    with src.open("w") as fh:
        for r in rows:
            fh.write(json.dumps({"request_id": r["sample_id"], "advantage": r["advantages"][0],
                                 "prompt_token_ids": r["prompt_ids"], "outputs": [{
                                     "index": 0, "token_ids": r["response_ids"],
                                     "logprobs": [{str(i): {"logprob": lp, "rank": j + 1}
                                                   for j, (i, lp) in enumerate(zip(ids, lps))}
                                                  | {str(k): {"logprob": b, "rank": 99}}
                                                  for ids, lps, k, b in zip(
                                                      r["topk_ids"], r["topk_logprobs"],
                                                      r["response_ids"],
                                                      r["behavior_logprobs"])]}]}) + "\n")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "log.parquet"
    args = ["ingest", "--from", "vllm", str(src), "--vocab-size", "60", "--out", str(out),
            "--chunk-rows", "2", "--on-error", "skip"]
    killed("kill-ingest-writing", tmp_path, args)
    assert len(temps(out_dir)) >= 2 and not out.exists()  # staging file and rejects
    run_ok(args)
    assert temps(out_dir) == []
    ref = tmp_path / "reference.parquet"
    run_ok([*args[:-6], "--out", str(ref), "--chunk-rows", "2", "--on-error", "skip"])
    assert pq.read_table(out).equals(pq.read_table(ref))
    assert out.read_bytes() == ref.read_bytes()
