"""`masks` and `replay` give one answer per token (issue 35 item 1).

Both build their statistics with :func:`pdm_replay.math.token_builder.build_token_stats`;
the only input that differs is π: `masks` reads the trainer's logged train_logprobs,
`replay` recomputes them from the step's checkpoint (float32). So on the shipped sample,
each step replayed against its own θ_t, every tokens/v1 column the two share must agree:
floats within the recompute's float32 error carried through each statistic, decisions
exactly, except where a statistic lies within that error of a threshold (found by moving
each statistic by its bound and asking the registry's own masks whether they decide
otherwise).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.masks import Thresholds, build_masks, weight_masks
from pdm_replay.math.certificates import CERT_LABELS, certify
from pdm_replay.math.metrics import TokenStats
from pdm_replay.math.segments import Segments
from tolerances import SAMPLE_LOGP_MAGNITUDE, SAMPLE_RECOMPUTE_VS_LOGGED, ulp32

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"
STEPS, PER_STEP = (8, 9), 32  # 2 seeds (--seed-by step) x 32 samples: ~400 loss tokens
runner = CliRunner()
EPS = SAMPLE_RECOMPUTE_VS_LOGGED  # |Δ log π| at any support entry (tolerances.py)
# Exact: read from the log, never from π.
FROM_LOG = ("step", "token_id", "advantage", "logp_behavior", "mu_tail", "support_size",
            "mass_overflow")
# Probability-scale divergences and tails: sums over S ∪ {tail} whose derivatives in
# log π_i are probability-weighted (weights µ_i or π_i, summing to at most 1 each), so the
# log π error at most twice over. Measured: 0.29 x (kl_topk 2.5e-6 against 8.8e-6).
DIVERGENCES = ("pi_tail", "kl_topk", "tv_topk", "kl_binary", "tv_binary", "dkl_local")
# The direction slopes and the certificate's bounds, whose threshold is 0: a float32
# log-softmax moves log π_i by Δz_i − Σ_j π_j Δz_j (Δz: the logits' error), so the
# π-weighted slopes, kept exact as π_k → 1, carry a factor 1 − π_k (the larger of the two
# sides', and at least π_tail: a float32 log-softmax may round log π_k to 0): bound
# 2 (1 − π_k) Δz, Δz = 8 ulps of the logits' binade [16, 32) (a GEMM of hidden 64 on
# each side), plus float64 rounding. Measured 1.7 (1 − π_k) ulp32(16): the bound is 16 of
# those. Without that factor every token with π_k ≈ 1 (Ḋ ~ 1e-13) would count as near
# the sign threshold.
SLOPE_DZ = 8 * ulp32(SAMPLE_LOGP_MAGNITUDE)
SLOPES = ("dkl_agg", "dkl_uniform", "dtv_agg", "dtv_uniform", "dkl_lo", "dkl_hi")
PROB_SCALE = DIVERGENCES + SLOPES


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> pl.DataFrame:
    """masks and replay on the same subset of the sample log, joined on (sample_id, pos):
    the masks side's columns carry the suffix ``_m``."""
    tmp = tmp_path_factory.mktemp("agree")
    table = pq.read_table(SAMPLE / "rollouts")  # footer (top_k, convention) kept
    step = table.column("step").to_numpy()
    rows = np.concatenate([np.flatnonzero(step == s)[:PER_STEP] for s in STEPS])
    (tmp / "log").mkdir()
    pq.write_table(table.take(pa.array(rows)), tmp / "log" / "part-00000.parquet")
    res = runner.invoke(app, ["masks", str(tmp / "log"), "--out", str(tmp / "masks.parquet")])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, [
        "replay", str(tmp / "log"), "--checkpoint", str(SAMPLE / "checkpoints" / "step_{step}"),
        "--seed-by", "step", "--seeds", str(len(STEPS)), "--batch-size", str(PER_STEP),
        "--update-masks", "none", "--no-attribution", "--dtype", "float32",
        "--out", str(tmp / "run")])
    assert res.exit_code == 0, res.output
    masks = pl.read_parquet(tmp / "masks.parquet")
    replay = pl.read_parquet(tmp / "run" / "tokens" / "**" / "*.parquet")
    assert len(masks) == len(replay) > 300
    joined = replay.join(masks, on=["sample_id", "pos"], suffix="_m")
    assert len(joined) == len(replay)  # the same loss tokens on both sides
    return joined.sort(["sample_id", "pos"])


def float_bounds(df: pl.DataFrame) -> dict[str, np.ndarray]:
    """Per token, how far each float column of replay may lie from masks'. ``ratio`` =
    exp(log π − log µ) with log µ exact: relative e^EPS − 1. A weight (TIS, CISPO, MIS; a
    sequence weight sums its tokens' log-ratios): relative e^(T·EPS) − 1, T the loss
    tokens of its sample. Float64 rounding of the statistics adds a few 1e-16. The
    others: :data:`DIVERGENCES`, :data:`SLOPES`."""
    tokens = df.group_by("sample_id").len().rename({"len": "t"})
    t = df.join(tokens, on="sample_id").sort(["sample_id", "pos"])["t"].to_numpy()
    out = {"logp_train": np.full(len(df), EPS)}
    out.update({c: np.full(len(df), 2 * EPS) for c in DIVERGENCES})
    lp = np.minimum(df["logp_train"].to_numpy(), df["logp_train_m"].to_numpy())
    off_k = np.maximum.reduce([-np.expm1(lp), df["pi_tail"].to_numpy(),
                               df["pi_tail_m"].to_numpy()])  # 1 − π_k
    out.update({c: 2 * off_k * SLOPE_DZ + 1e-15 for c in SLOPES})
    out["ratio"] = df["ratio_m"].to_numpy() * math.expm1(EPS) + 1e-15
    for c in (c for c in df.columns if c.startswith("weight_") and not c.endswith("_m")):
        out[c] = np.abs(df[f"{c}_m"].to_numpy()) * np.expm1(t * EPS) + 1e-15
    return out


def stats_of(df: pl.DataFrame) -> TokenStats:
    """The masks side's TokenStats back from its tokens/v1 columns."""
    codes = {label: code for code, label in CERT_LABELS.items()}
    cols = {}
    for f in dataclasses.fields(TokenStats):
        if f.name == "direction_certified":
            v = np.array([codes[x] for x in df[f"{f.name}_m"]], dtype=np.int8)
        else:
            v = df[f"{f.name}_m"].to_numpy()
        cols[f.name] = torch.from_numpy(np.array(v))  # a writable copy
    return TokenStats(**cols)


def decisions(stats: TokenStats, seqs: Segments, thresholds: Thresholds) -> dict[str, np.ndarray]:
    """Every registered mask's keep and the certificate ``(N,)``, as tokens/v1 decides them."""
    masks = build_masks(None, thresholds)
    weighted = set(weight_masks(masks))
    out = {f"keep_{n}": (m.weight(stats, seqs) > 0 if n in weighted else m.keep(stats, seqs))
           .numpy() for n, m in masks.items()}
    out["direction_certified"] = certify(stats.dkl_lo, stats.dkl_hi, stats.advantage).numpy()
    return out


def near_threshold(df: pl.DataFrame, bounds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per decision column, ``(N,)`` bool: tokens where moving one statistic of the masks
    side by its bound (either way) changes that decision: a threshold lies within the
    recompute's error. A sequence mask's moved decision covers its whole sample."""
    stats, thresholds = stats_of(df), Thresholds()  # both commands ran with the defaults
    rows = df["sample_id"].to_numpy()
    seqs = Segments.of(np.unique(rows, return_inverse=True)[1], np.ones(len(df), bool))
    base = decisions(stats, seqs, thresholds)
    codes = {label: code for code, label in CERT_LABELS.items()}
    stored = {c: (np.array([codes[x] for x in df[f"{c}_m"]]) if c == "direction_certified"
                  else df[f"{c}_m"].to_numpy()) for c in base}
    assert all((base[c] == stored[c]).all() for c in base)  # the stats read back decide alike
    near = {c: np.zeros(len(df), bool) for c in base}
    for name in ("logp_train", "ratio", *PROB_SCALE):
        for sign in (-1.0, 1.0):
            moved = getattr(stats, name) + sign * torch.from_numpy(bounds[name])
            after = decisions(dataclasses.replace(stats, **{name: moved}), seqs, thresholds)
            for key, value in after.items():
                near[key] |= value != base[key]
    return near


def test_masks_and_replay_agree_on_every_shared_column(both: pl.DataFrame) -> None:
    bounds = float_bounds(both)
    for c in FROM_LOG:
        assert (both[c] == both[f"{c}_m"]).all(), c
    for c, bound in bounds.items():
        diff = np.abs(both[c].to_numpy() - both[f"{c}_m"].to_numpy())
        assert (diff <= bound).all(), (c, diff.max(), bound[diff.argmax()])
    near = near_threshold(both, bounds)
    shared = [c for c in both.columns if (c.startswith("keep_") and not c.endswith("_m"))
              or c == "direction_certified"]
    assert set(shared) == set(near) and len(shared) > 30  # every mask, and the certificate
    for c in shared:
        # the exclusion leaves each decision most of its tokens (the certificate of tokens
        # with π_k ≈ 1, whose Ḋ bounds are ~(1 − π_k)², loses the most: 15% here)
        assert near[c].sum() < len(both) // 5, (c, int(near[c].sum()))
        same = both[c].to_numpy() == both[f"{c}_m"].to_numpy()
        assert same[~near[c]].all(), (c, int((~same[~near[c]]).sum()))
    certified = both["direction_certified_m"].to_numpy()[~near["direction_certified"]]
    assert {"away", "toward"} <= set(certified)  # compared where it certifies, both ways
