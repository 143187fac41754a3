"""The other trainers' masks (issue 37) in a real replay: tokens/v1 keep and weight
columns, updates/v1 rows, and steps that follow their weights."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from pdm_replay.commands.replay import run_replay
from pdm_replay.masks import MASK_SPECS, Thresholds
from pdm_replay.replay.config import ReplayConfig

# one of each new kind and reduction (each update mask is one more simulated step);
# tests/test_loss.py covers every new mask's gradient
UPDATES = ("none", "trl_is_token_truncate", "trl_is_sequence_mask", "m2po", "vaco_tv",
           "sapo", "gmpo")


def test_field_masks_replay_on_their_weights(tmp_path, replay_log, model_dir) -> None:
    # SAPO at τ = 0 has w = 4·σ(0)·(1 − σ(0)) = 1 exactly, and TRL's token_truncate with a
    # cap no ratio reaches w = r/r = 1 exactly: both take `none`'s step bit for bit. GMPO
    # weighs every token by its response ratio R/r: a different step.
    t = Thresholds(sapo_tau_pos=0.0, sapo_tau_neg=0.0, trl_is_cap=1e30)
    cfg = ReplayConfig(log=replay_log, checkpoint=model_dir, out=tmp_path / "run", seeds=1,
                       batch_size=6, micro_batch_size=4, lr=1e-3, chunk_tokens=16,
                       optimizer="sgd", attribution=False, masks=UPDATES,
                       update_masks=UPDATES, thresholds=t)
    run = run_replay(cfg).run_dir
    tok = pq.read_table(run / "tokens" / "seed=0" / "part-0.parquet").to_pandas()
    upd = pq.read_table(run / "updates" / "seed=0" / "part-0.parquet").to_pandas()
    weights = {n for n in UPDATES if MASK_SPECS[n].weight == "is"}
    assert {f"weight_{n}" for n in weights} <= set(tok.columns)
    assert not {f"weight_{n}" for n in set(UPDATES) - weights} & set(tok.columns)
    assert (tok.weight_sapo == 1.0).all() and (tok.weight_trl_is_token_truncate == 1.0).all()
    by = {m: g.reset_index(drop=True) for m, g in upd.groupby("update_mask")}
    for same in ("sapo", "trl_is_token_truncate"):
        assert np.array_equal(by[same].delta_logp.values, by["none"].delta_logp.values), same
    assert not np.array_equal(by["gmpo"].delta_logp.values, by["none"].delta_logp.values)
    for name in UPDATES:
        assert np.array_equal(by[name].kept.values, tok[f"keep_{name}"].values), name
