"""Threshold sweeps: <mask>@<value> variants, and a two-δ replay equal to one-δ replays."""

from __future__ import annotations

import json

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pdm_replay.masks import Thresholds
from pdm_replay.replay.config import ReplayConfig
from pdm_replay.commands.replay import run_replay
from pdm_replay.replay.sweep import Sweep, parse_values, trainer_variant, variants

pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning")
MASK_SPECS = ("none", "dppo_topk_kl", "pdm_kl_agg", "dppo_topk_tv")
SMALL = dict(seeds=2, batch_size=6, micro_batch_size=4, lr=1e-3, chunk_tokens=16,
             update_masks=MASK_SPECS, masks=MASK_SPECS + ("ppo_clip",), attribution=False)


def test_only_masks_reading_a_swept_field_get_variants():
    got = variants(["none", "ppo_clip", "clip_higher", "pdm_tv_agg"],
                   Sweep(eps=(0.1, 0.2), delta_tv=(0.3,)))
    assert list(got) == ["none", "ppo_clip@0.1", "ppo_clip@0.2", "clip_higher", "pdm_tv_agg"]
    assert got["ppo_clip@0.1"].describe() == {"mask": "ppo_clip", "eps": 0.1}
    cfg = ReplayConfig(log="l", checkpoint="c", out="o", thresholds=Thresholds(delta_kl=0.9),
                       sweep=Sweep(delta_kl=(0.05, 0.15), delta_tv=(0.3,)))
    assert cfg.thresholds.delta_kl == 0.05 and cfg.sweep == Sweep(delta_kl=(0.05, 0.15))


def test_trainer_mask_names_its_threshold_when_swept():
    sweep = Sweep(delta_kl=(0.05, 0.15))
    assert trainer_variant("pdm_kl_agg@0.05", sweep).values == (("delta_kl", 0.05),)
    assert trainer_variant("dppo_topk_tv", sweep).name == "dppo_topk_tv"
    with pytest.raises(ValueError, match="e.g. trainer_mask pdm_kl_agg@0.05") as info:
        trainer_variant("pdm_kl_agg", sweep)
    assert info.value.fields == ("trainer_mask", "delta_kl")  # the CLI spells them as flags
    with pytest.raises(ValueError, match="unknown mask"):
        trainer_variant("nope@0.1", sweep)
    with pytest.raises(ValueError, match="numbers separated by commas"):
        parse_values("0.05,x", "delta_kl")


def updates(run, seed: int, mask: str):
    t = pq.read_table(run / "updates" / f"seed={seed}" / "part-0.parquet")
    return t.filter(pc.equal(t["update_mask"], mask)).drop(["update_mask"])


def test_two_delta_run_equals_one_delta_runs(tmp_path, replay_log, model_dir):
    base = dict(log=replay_log, checkpoint=model_dir, **SMALL)
    both = run_replay(ReplayConfig(out=tmp_path / "both",
                                   sweep=Sweep(delta_kl=(0.05, 0.15)), **base))
    one = {d: run_replay(ReplayConfig(out=tmp_path / f"d{d}",
                                      thresholds=Thresholds(delta_kl=d), **base))
           for d in (0.05, 0.15)}
    m = both.manifest
    assert m["updates"] == ["none", "dppo_topk_kl@0.05", "dppo_topk_kl@0.15",
                            "pdm_kl_agg@0.05", "pdm_kl_agg@0.15", "dppo_topk_tv"]
    assert m["mask_variants"]["pdm_kl_agg@0.15"] == {"mask": "pdm_kl_agg", "delta_kl": 0.15}
    for seed in range(2):
        for d, run in one.items():
            for mask in ("dppo_topk_kl", "pdm_kl_agg"):
                assert updates(both.run_dir, seed, f"{mask}@{d}").equals(
                    updates(run.run_dir, seed, mask))
            for mask in ("none", "dppo_topk_tv"):  # unswept: one update, the same
                assert updates(both.run_dir, seed, mask).equals(updates(run.run_dir, seed, mask))
        tok = pq.read_table(both.run_dir / "tokens" / f"seed={seed}" / "part-0.parquet")
        for d, run in one.items():
            ref = pq.read_table(run.run_dir / "tokens" / f"seed={seed}" / "part-0.parquet")
            for mask in ("dppo_topk_kl", "pdm_kl_agg"):
                assert tok[f"keep_{mask}@{d}"].equals(ref[f"keep_{mask}"])
            assert tok["keep_ppo_clip"].equals(ref["keep_ppo_clip"])
            assert tok["kl_topk"].equals(ref["kl_topk"])
        footer = tok.schema.metadata
        assert json.loads(footer[b"pdm_replay.thresholds"])["delta_kl"] == 0.05
        assert "keep_pdm_kl_agg" not in tok.column_names
        assert json.loads(footer[b"pdm_replay.mask_variants"])["dppo_topk_kl@0.05"] == {
            "mask": "dppo_topk_kl", "delta_kl": 0.05}
    # the summary (the report's headline) groups the sweep by δ: its rows at each δ are
    # the one-δ run's rows, the own updates named by their variants
    own = {r["delta"]: r["ratio_update"] for r in both.summary if r["basis"] == "own"}
    assert own == {0.05: "dppo_topk_kl@0.05", 0.15: "dppo_topk_kl@0.15"}
    names = ("ratio_update", "predictive_update")
    strip = lambda rows: [{k: v for k, v in r.items() if k not in names}  # noqa: E731
                          for r in rows]
    for d, run in one.items():
        mine = strip(r for r in both.summary if r["delta"] == d)
        assert mine and mine == strip(run.summary)
