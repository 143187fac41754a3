"""Logs spanning several steps: {step} templates replay each row against its own step's
checkpoints (per-step groups of a seed), checked against one-checkpoint replays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from replay_helpers import LOG_CFG, save_tiny

from pdm_replay.io.rollouts import write_rollouts
from pdm_replay.replay.config import ReplayConfig
from pdm_replay.commands.replay import run_replay
from pdm_replay.replay.templates import check_template
from tolerances import LOGPROB_ATOL

pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning")
SMALL = dict(micro_batch_size=4, lr=1e-3, chunk_tokens=16, update_masks=("none",),
             attribution=False, trainer_mask="none")


@pytest.fixture(scope="module")
def steps_log(tmp_path_factory, replay_log) -> Path:
    """The 16-row test log as two trainer steps: rows 0-7 step 1, rows 8-15 step 2."""
    rows = pq.read_table(replay_log).to_pylist()
    for i, row in enumerate(rows):
        row["step"] = 1 if i < 8 else 2
    return write_rollouts(tmp_path_factory.mktemp("steps") / "log.parquet", rows,
                          LOG_CFG.meta())


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ckpts")
    for step in (1, 2, 3):
        save_tiny(root / f"step_{step}", rng_seed=10 + step)
    return root


def table(run: Path, kind: str, seed: int) -> pq.Table:
    return pq.read_table(run / kind / f"seed={seed}" / "part-0.parquet")


def test_seed_by_step_with_templates_equals_one_checkpoint_per_run(tmp_path, steps_log,
                                                                  ckpts):
    res = run_replay(ReplayConfig(log=steps_log, checkpoint=ckpts / "step_{step}",
                                  next_checkpoint=ckpts / "step_{next_step}",
                                  out=tmp_path / "t", seeds=2, batch_size=8, seed_by="step",
                                  **SMALL))
    m = res.manifest
    assert m["seed_plan"]["steps"] == [1, 2]
    assert set(m["hashes"]["checkpoint"]) == {"step=1", "step=2"}
    assert set(m["hashes"]["next_checkpoint"]) == {"step=1", "step=2"}
    assert [g["step"] for g in m["update_steps"]["1"]] == [2]
    for seed, step in ((0, 1), (1, 2)):
        plain = run_replay(ReplayConfig(log=steps_log, checkpoint=ckpts / f"step_{step}",
                                        next_checkpoint=ckpts / f"step_{step + 1}",
                                        out=tmp_path / f"p{step}", seeds=seed + 1,
                                        batch_size=8, seed_by="step", **SMALL))
        assert any("replayed against one checkpoint" in w for w in plain.manifest["warnings"])
        for kind in ("tokens", "updates"):
            assert table(res.run_dir, kind, seed).equals(table(plain.run_dir, kind, seed))
    assert set(table(res.run_dir, "tokens", 0)["step"].to_pylist()) == {1}


def test_a_seed_spanning_steps_is_replayed_per_step(tmp_path, steps_log, ckpts):
    res = run_replay(ReplayConfig(log=steps_log, checkpoint=ckpts / "step_{step}",
                                  next_checkpoint=ckpts / "step_{next_step}",
                                  out=tmp_path / "t", seeds=1, batch_size=16, **SMALL))
    assert [g["step"] for g in res.manifest["update_steps"]["0"]] == [1, 2]
    tok = table(res.run_dir, "tokens", 0).to_pandas()
    for step in (1, 2):
        plain = run_replay(ReplayConfig(log=steps_log, checkpoint=ckpts / f"step_{step}",
                                        next_checkpoint=ckpts / f"step_{step + 1}",
                                        out=tmp_path / f"p{step}", seeds=1, batch_size=16,
                                        **SMALL))
        ref = table(plain.run_dir, "tokens", 0).to_pandas()
        mine, theirs = tok[tok.step == step], ref[ref.step == step]
        assert list(mine.sample_id) == list(theirs.sample_id)
        # the same rows, other micro-batches (padding): float32 forward noise only
        assert np.allclose(mine.logp_train, theirs.logp_train, atol=LOGPROB_ATOL)
        other = ref[ref.step != step]  # the other step's rows under the wrong checkpoint
        assert not np.allclose(tok[tok.step != step].logp_train, other.logp_train, atol=1e-2)


def test_a_missing_step_checkpoint_fails_before_the_run(tmp_path, steps_log, ckpts):
    only = tmp_path / "only"  # keeps step 2's checkpoint, not step 3's
    only.mkdir()
    (only / "step_2").symlink_to(ckpts / "step_2", target_is_directory=True)
    with pytest.raises(ValueError, match=r"^next_checkpoint \(logged step 2\): .*step_3: "
                       "not a directory"):
        run_replay(ReplayConfig(log=steps_log, checkpoint=ckpts / "step_{step}",
                                next_checkpoint=only / "step_{next_step}",
                                out=tmp_path / "run", seeds=2, batch_size=8, seed_by="step",
                                **SMALL))
    assert not (tmp_path / "run").exists()


def test_unknown_template_fields_are_rejected():
    with pytest.raises(ValueError, match=r"unknown field \{rank\}"):
        check_template("ckpt/{rank}", "checkpoint")
    with pytest.raises(ValueError, match="not a valid path template"):
        check_template("ckpt/{step", "checkpoint")
