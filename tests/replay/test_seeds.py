"""Independent seeds: disjoint batches, prefix stability, one seed per step, overlap."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdm_replay.replay.config import ReplayConfig
from pdm_replay.commands.replay import run_replay
from pdm_replay.replay.seeds import SeedPlan

pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning")
SMALL = dict(micro_batch_size=4, lr=1e-3, chunk_tokens=16, update_masks=("none",),
             attribution=False)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), batch=st.integers(1, 80), extra=st.integers(0, 3))
def test_seeds_that_fit_are_disjoint_sorted_and_full(n, batch, extra):
    plan = SeedPlan(n, batch, allow_overlap=True)
    fit = plan.capacity
    assert fit == (1 if batch >= n else n // batch)
    rows = [plan.rows(s) for s in range(fit + extra)]
    for r in rows:
        assert np.all(np.diff(r) > 0) and r.size == min(batch, n)
    first = np.concatenate(rows[:fit])
    assert len(set(first.tolist())) == first.size  # no row in two seeds of the first round
    assert plan.overlap(fit)["overlap"] is False
    if extra and batch < n:
        assert plan.overlap(fit + extra)["max_seeds_per_sample"] >= 1


def test_a_seed_does_not_depend_on_how_many_seeds_run():
    a, b = SeedPlan(1536, 64), SeedPlan(1536, 64)
    assert np.array_equal(a.rows(3), b.rows(3))
    a.check(24)  # the sample log: 1,536 samples fit 24 seeds of 64
    with pytest.raises(ValueError, match="1600 distinct rows, the log has 1536: 24 seeds fit"):
        a.check(25)


def test_one_seed_per_step():
    steps = np.array([3, 1, 1, 3, 2, 3, 3])
    plan = SeedPlan(7, 2, by="step", steps=steps)
    assert plan.capacity == 3 and [plan.step_of(s) for s in range(3)] == [1, 2, 3]
    assert plan.rows(0).tolist() == [1, 2] and plan.rows(1).tolist() == [4]
    assert set(plan.rows(2).tolist()) <= {0, 3, 5, 6} and plan.rows(2).size == 2
    with pytest.raises(ValueError, match="holds 3 step"):
        SeedPlan(7, 2, by="step", steps=steps, allow_overlap=True).check(4)
    groups = plan.groups(np.array([0, 1, 4, 6]))
    assert [(s, r.tolist()) for s, r in groups] == [(1, [1]), (2, [4]), (3, [0, 6])]


def token_samples(run, seeds: int) -> list[set[str]]:
    return [set(pq.read_table(run / "tokens" / f"seed={s}" / "part-0.parquet",
                              columns=["sample_id"])["sample_id"].to_pylist())
            for s in range(seeds)]


def test_replay_seeds_use_disjoint_samples(tmp_path, replay_log, model_dir):
    res = run_replay(ReplayConfig(log=replay_log, checkpoint=model_dir, out=tmp_path / "r",
                                  seeds=3, batch_size=5, **SMALL))
    samples = token_samples(res.run_dir, 3)
    assert all(len(s) == 5 for s in samples)
    assert not (samples[0] & samples[1] or samples[0] & samples[2] or samples[1] & samples[2])
    assert res.manifest["seed_overlap"]["overlap"] is False
    assert res.manifest["seed_plan"]["by"] == "sample"


def test_too_many_seeds_fail_before_the_run_or_overlap_when_allowed(tmp_path, replay_log,
                                                                    model_dir):
    cfg = dict(log=replay_log, checkpoint=model_dir, seeds=3, batch_size=8, **SMALL)
    with pytest.raises(ValueError, match="the log has 16: 2 seeds fit.*pass allow_overlap"):
        run_replay(ReplayConfig(out=tmp_path / "no", **cfg))
    assert not (tmp_path / "no").exists()
    res = run_replay(ReplayConfig(out=tmp_path / "yes", allow_overlap=True, **cfg))
    overlap = res.manifest["seed_overlap"]
    assert overlap["overlap"] is True and overlap["disjoint_capacity"] == 2
    samples = token_samples(res.run_dir, 3)
    assert not samples[0] & samples[1]  # the first round stays disjoint
    assert overlap["samples_in_several_seeds"] == len((samples[0] | samples[1]) & samples[2])
    assert any("--allow-overlap: seeds share samples" in w for w in res.manifest["warnings"])
    on_disk = json.loads((res.run_dir / "manifest.json").read_text())
    assert on_disk["seed_overlap"] == overlap
