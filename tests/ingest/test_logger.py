"""RolloutLogger: same numbers as writing directly, atomic shards, clean on exceptions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from ingest_layouts import VOCAB, assert_same_tokens, make_truth, masks_frame, verl_arrays

from pdm_replay import RolloutLogger
from pdm_replay.io.reader import list_parquet_files, read_meta
from pdm_replay.commands.validate import validate_log

REPO = Path(__file__).resolve().parents[2]


def _log_truth_tensors(logger: RolloutLogger, truth, step: int) -> int:
    """The trainer call: padded torch tensors (bf16 behavior log-probs included)."""
    a = {k: (v if v.dtype == object else torch.from_numpy(v)) for k, v in
         verl_arrays(truth).items()}
    p = a["prompts"].shape[1]
    return logger.log(step, response_ids=a["responses"], response_mask=a["response_mask"],
                      advantages=a["advantages"], behavior_logprobs=a["rollout_log_probs"],
                      topk_ids=a["rollout_topk_token_ids"],
                      topk_logprobs=a["rollout_topk_logprobs"],
                      train_logprobs=a["old_log_probs"],
                      train_topk_logprobs=a["old_topk_log_probs"],
                      prompt_ids=a["prompts"], prompt_mask=a["attention_mask"][:, :p],
                      rewards=a["token_level_scores"].sum(1), group_ids=a["uid"],
                      sample_ids=[r["sample_id"] for r in truth.rows])


def test_tensor_logging_matches_direct_write(tmp_path: Path) -> None:
    truth = make_truth(n=6, convention="replace_last")
    with RolloutLogger(tmp_path / "run", vocab_size=VOCAB,
                       topk_convention="replace_last") as lg:
        assert _log_truth_tensors(lg, truth, 0) == 6
    assert len(lg.shards) == 1 and read_meta(tmp_path / "run").top_k == 4
    report = validate_log(tmp_path / "run")
    assert report.ok and report.samples == 6
    assert_same_tokens(masks_frame(tmp_path / "run", tmp_path / "a.parquet"),
                       masks_frame(truth.write(tmp_path / "d.parquet"), tmp_path / "b.parquet"))


def test_ragged_lists_and_bf16(tmp_path: Path) -> None:
    truth = make_truth(n=3)
    rows = truth.rows
    with RolloutLogger(tmp_path / "run", vocab_size=VOCAB, top_k=4) as lg:
        lg.log(1, response_ids=[r["response_ids"] for r in rows],
               advantages=[r["advantages"] for r in rows],
               behavior_logprobs=[r["behavior_logprobs"] for r in rows],
               topk_ids=[r["topk_ids"] for r in rows],
               topk_logprobs=[r["topk_logprobs"] for r in rows],
               train_logprobs=[r["train_logprobs"] for r in rows],
               train_topk_logprobs=[r["train_topk_logprobs"] for r in rows],
               loss_mask=[r["loss_mask"] for r in rows], sample_ids=[r["sample_id"] for r in rows])
        n = lg.log(2, response_ids=torch.tensor([[3, 4]]), advantages=torch.tensor([1.0]),
                   behavior_logprobs=torch.tensor([[-0.5, -1.25]], dtype=torch.bfloat16))
    assert n == 1
    t = pq.read_table(tmp_path / "run")
    assert t.num_rows == 4 and t["behavior_logprobs"].to_pylist()[-1] == [-0.5, -1.25]
    assert t["topk_ids"].to_pylist()[-1] == [[], []]  # no top-K logged: binary support
    assert validate_log(tmp_path / "run").ok


def test_buffering_and_exception_keeps_logged_samples(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="trainer crashed"):
        with RolloutLogger(tmp_path / "run", vocab_size=VOCAB, rows_per_shard=3,
                           topk_convention="replace_last") as lg:
            for step in range(3):
                truth = make_truth(n=2, seed=step, ids=[f"s{step}-{i}" for i in range(2)],
                                   convention="replace_last")
                _log_truth_tensors(lg, truth, step)
            raise RuntimeError("trainer crashed")
    # 2 + 2 samples reach the threshold at step 1; step 2's are flushed on the way out
    assert [pq.read_metadata(p).num_rows for p in lg.shards] == [4, 2]
    assert validate_log(tmp_path / "run").ok


def test_bad_samples_raise_or_skip(tmp_path: Path) -> None:
    args = dict(response_ids=np.array([[1, 2], [3, 4]]), advantages=np.ones(2),
                behavior_logprobs=np.array([[-0.1, np.nan], [-0.2, -0.3]]))
    with RolloutLogger(tmp_path / "a", vocab_size=VOCAB) as lg:
        with pytest.raises(ValueError, match="pos 1: non-finite"):
            lg.log(0, **args)
    with pytest.warns(UserWarning, match="dropped 1 sample"):
        with RolloutLogger(tmp_path / "b", vocab_size=VOCAB, on_error="skip") as lg:
            assert lg.log(0, **args) == 1
    assert lg.rejected == 1 and pq.read_table(tmp_path / "b").num_rows == 1


def test_import_is_light() -> None:
    code = "import sys, pdm_replay; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True)
    assert out.stdout.strip() == "False"


CHILD = textwrap.dedent("""
    import sys, time
    import numpy as np
    from pdm_replay import RolloutLogger
    from pdm_replay.io import atomic
    directory, marker = sys.argv[1], sys.argv[2]
    commit, calls = atomic.AtomicParquetWriter.commit, []
    def slow_commit(self):  # the 3rd shard stalls after its rows are written, unrenamed
        calls.append(1)
        if len(calls) == 3:
            open(marker, "w").close()
            time.sleep(120)
        return commit(self)
    atomic.AtomicParquetWriter.commit = slow_commit
    rng = np.random.default_rng(0)
    with RolloutLogger(directory, vocab_size=50) as lg:
        for step in range(5):
            ids = rng.integers(0, 50, (64, 32))
            lp = -rng.random((64, 32, 2)) - 0.01
            lg.log(step, response_ids=ids, advantages=rng.normal(size=64),
                   behavior_logprobs=lp[..., 0],
                   topk_ids=np.stack([ids, (ids + 1) % 50], -1), topk_logprobs=lp)
""")


def test_killed_mid_write_leaves_only_complete_shards(tmp_path: Path) -> None:
    out, marker = tmp_path / "run", tmp_path / "writing"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(out), str(marker)], cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None, "child exited before the stalled write"
            assert time.monotonic() < deadline, "child never reached the third shard"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    temps = list(out.glob(".part-*.tmp"))
    assert temps and temps[0].stat().st_size > 0  # killed with a shard half-way written
    shards = list_parquet_files(out)
    assert len(shards) == 2
    assert [pq.read_table(p).num_rows for p in shards] == [64, 64]
    report = validate_log(out)
    assert report.ok and report.samples == 128
    RolloutLogger(out, vocab_size=50).close()  # a new logger of rank 0 removes the stale temp
    assert not list(out.glob(".part-*.tmp")) and len(list_parquet_files(out)) == 2


def test_on_error_is_fail_or_skip_and_raise_is_deprecated(tmp_path: Path) -> None:
    """One on_error vocabulary with ingest (pdm_replay.names.ON_ERROR); "raise", the
    former name of "fail", still works for a release, with a DeprecationWarning."""
    args = dict(response_ids=np.array([[1, 2]]), advantages=np.ones(1),
                behavior_logprobs=np.array([[-0.1, np.nan]]))
    with RolloutLogger(tmp_path / "a", vocab_size=VOCAB, on_error="fail") as lg:
        with pytest.raises(ValueError, match="pos 1: non-finite"):
            lg.log(0, **args)
    with pytest.warns(DeprecationWarning, match="on_error='raise' is deprecated: use "
                                                "on_error='fail'"):
        lg = RolloutLogger(tmp_path / "b", vocab_size=VOCAB, on_error="raise")
    assert lg.on_error == "fail"
    with pytest.raises(ValueError, match="pos 1: non-finite"):
        lg.log(0, **args)
    with pytest.raises(ValueError, match=r"on_error must be one of \('fail', 'skip'\)"):
        RolloutLogger(tmp_path / "c", vocab_size=VOCAB, on_error="ignore")
