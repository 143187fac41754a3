"""The end-of-run alignment numbers on hand-built token and update tables."""

from __future__ import annotations

import polars as pl

from pdm_replay.replay.summary import alignment_summary


def frames(seeds: list[int], d_pre: list[float], kept: dict[str, list[bool]],
           dd: dict[str, list[float]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    n = len(seeds)
    key = {"seed": seeds, "sample_id": ["s"] * n, "pos": list(range(n))}
    tokens = pl.DataFrame({**key, "kl_topk": d_pre, "tv_topk": [0.0] * n})
    updates = pl.concat([pl.DataFrame({**key, "update_mask": [m] * n, "kept": kept[m],
                                       "delta_kl_topk": dd[m], "delta_tv_topk": [0.0] * n})
                         for m in kept])
    return tokens, updates


def test_rates_pool_over_seeds_and_count_seeds_where_predictive_is_lower():
    r, p = "dppo_topk_kl", "pdm_kl_agg"
    tokens, updates = frames(
        seeds=[0, 0, 0, 1, 1, 1], d_pre=[0.3, 0.3, 0.01, 0.3, 0.3, 0.3],
        kept={r: [True, False, True, True, False, True], p: [False, True, False, False,
                                                              True, True]},
        dd={r: [0.1, 0.0, 0.5, -0.1, 0.0, 0.2], p: [0.0, -0.1, 0.0, 0.0, 0.3, 0.2]})
    [row] = alignment_summary(tokens, updates, delta_kl=0.15, delta_tv=0.15)
    # Out of region: every token but seed 0 pos 2. Disagreements: (0,0) (0,1) (1,3) (1,4).
    assert (row.out_of_region, row.disagreement) == (5, 4)
    assert row.unsafe_keep_ratio == 0.5  # kept (0,0): +0.1, (1,3): -0.1
    assert row.corrective_ratio == 0.5
    assert row.unsafe_keep_predictive == 0.5  # kept (0,1): -0.1, (1,4): +0.3
    # Seed 0: ratio 1/1 unsafe vs predictive 0/1 -> lower; seed 1: 0/1 vs 1/1 -> not.
    assert (row.seeds_predictive_lower, row.seeds_compared) == (1, 2)


def test_no_row_without_both_masks_simulated():
    tokens, updates = frames([0], [0.3], {"none": [True]}, {"none": [0.1]})
    assert alignment_summary(tokens, updates, delta_kl=0.15, delta_tv=0.15) == []
