"""Weight and sequence masks in a real replay: tokens/v1 weight columns, and the
simulated step on −Σ w·r·Â / N."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from pdm_replay.masks import Thresholds
from pdm_replay.replay.config import ReplayConfig
from pdm_replay.commands.replay import run_replay

UPDATES = ("none", "tis", "cispo", "seq_tis", "gspo", "rs_seq_mean_k3")


def _run(tmp_path, replay_log, model_dir, name, thresholds):
    cfg = ReplayConfig(log=replay_log, checkpoint=model_dir, out=tmp_path / name, seeds=1,
                       batch_size=6, micro_batch_size=4, lr=1e-3, chunk_tokens=16,
                       optimizer="sgd", attribution=False, masks=UPDATES,
                       update_masks=UPDATES, thresholds=thresholds)
    run = run_replay(cfg).run_dir
    return (pq.read_table(run / "tokens" / "seed=0" / "part-0.parquet").to_pandas(),
            pq.read_table(run / "updates" / "seed=0" / "part-0.parquet").to_pandas())


def test_weight_masks_step_on_their_weights(tmp_path, replay_log, model_dir):
    # A cap no ratio reaches makes every TIS weight exactly 1.0: the same float64 loss as
    # `none`, so the same step, bit for bit. CISPO with a band of width 0 has w = 1/r, so
    # its step follows Â·∇log π instead of r·Â·∇log π: a different step.
    t = Thresholds(tis_cap=1e30, cispo_eps_low=0.0, cispo_eps_high=0.0)
    tok, upd = _run(tmp_path, replay_log, model_dir, "run", t)
    assert {"weight_tis", "weight_cispo", "weight_seq_tis"} <= set(tok.columns)
    assert "weight_gspo" not in tok.columns  # a binary mask has keep only
    assert (tok.weight_tis == 1.0).all()
    np.testing.assert_allclose(tok.weight_cispo, 1.0 / tok.ratio, rtol=1e-6)  # float32 column
    by = {m: g.reset_index(drop=True) for m, g in upd.groupby("update_mask")}
    assert np.array_equal(by["tis"].delta_logp.values, by["none"].delta_logp.values)
    assert not np.array_equal(by["cispo"].delta_logp.values, by["none"].delta_logp.values)
    for name in UPDATES:
        assert np.array_equal(by[name].kept.values, tok[f"keep_{name}"].values), name
