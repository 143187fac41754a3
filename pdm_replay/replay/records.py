"""Per-seed records (the done markers) and what the manifest pools from them.

A seed is replayed in step groups (one unless the checkpoints are ``{step}`` templates);
each group reports counts, |Δ| statistics (recomputed vs logged π, reloaded vs logged µ)
and, per update, the lr used and the realized ‖Δθ‖₂. :func:`merge_groups` makes the
seed's record, :func:`pool` / :func:`updates_by_seed` the manifest's run-level fields.

Examples
--------
>>> a = abs_stats(np.array([0.1, -0.3, 0.2]), np.array([True, True, False]))
>>> a == {"max": 0.3, "sum": 0.4, "count": 2}
True
>>> pool([a, abs_stats(np.array([0.5]), np.array([True]))])["mean"]
0.3
"""

from __future__ import annotations

import math

import numpy as np
import torch

from pdm_replay.io.reader import FlatTokens
from pdm_replay.replay.tables import PreUpdate, behavior_gaps

STAT_KEYS = ("deviation", "behavior_gap", "behavior_gap_max")


def abs_stats(values: np.ndarray | None, sel: np.ndarray) -> dict:
    """``{"max", "sum", "count"}`` of ``|values|`` where ``sel`` ``(N,)`` (mergeable)."""
    if values is None or not sel.any():
        return {"max": None, "sum": 0.0, "count": 0}
    v = np.abs(values[sel])
    return {"max": float(v.max()), "sum": float(v.sum()), "count": int(sel.sum())}


def merge(stats: list[dict]) -> dict:
    """One :func:`abs_stats` record of several (groups, ranks)."""
    live = [s for s in stats if s["count"]]
    return {"max": max(s["max"] for s in live) if live else None,
            "sum": sum(s["sum"] for s in live), "count": sum(s["count"] for s in live)}


def pool(stats: list[dict]) -> dict | None:
    """Run-level ``{"max", "mean", "tokens"}``; ``None`` when nothing was measured."""
    m = merge(stats)
    if not m["count"]:
        return None
    return {"max": m["max"], "mean": m["sum"] / m["count"], "tokens": m["count"]}


def merge_groups(seed: int, groups: list[dict]) -> dict:
    """The seed's record from its step groups' (same keys, summed or merged)."""
    timings: dict[str, float] = {}
    for g in groups:
        for k, v in g["timings"].items():
            timings[k] = timings.get(k, 0.0) + v
    out = {"seed": seed, "samples": sum(g["samples"] for g in groups),
           "tokens": sum(g["tokens"] for g in groups), "timings": timings,
           "steps": [g["step_info"] for g in groups]}
    out.update({k: merge([g[k] for g in groups]) for k in STAT_KEYS if k in groups[0]})
    return out


def updates_by_seed(records: list[dict]) -> dict[str, list[dict]]:
    """Manifest ``update_steps``: per seed, per step group, each update's lr and ‖Δθ‖."""
    return {str(r["seed"]): r.get("steps", []) for r in records}


def unit_roundoff(dtype: torch.dtype) -> float:
    """Half the gap from 1 to the next representable number: the relative error of one
    rounding to ``dtype`` (bfloat16 2⁻⁸, float16 2⁻¹¹, float32 2⁻²⁴)."""
    return float(torch.finfo(dtype).eps) / 2


def behavior_fidelity(records: list[dict], dtype_name: str, dtype: torch.dtype) -> dict | None:
    """Manifest ``behavior_fidelity``: logged vs reloaded µ over every loss token, beside
    the behaviour dtype's unit roundoff u (a log-prob ℓ rounded once moves by up to u·|ℓ|;
    logits z by u·|z|, which can move log-probs by about 2u·max|z|)."""
    gap = pool([r["behavior_gap"] for r in records if "behavior_gap" in r])
    if gap is None:
        return None
    worst = pool([r["behavior_gap_max"] for r in records if "behavior_gap_max" in r])
    u = unit_roundoff(dtype)
    return {"dtype": dtype_name, "unit_roundoff": u, "log2_unit_roundoff": math.log2(u),
            "gap_k": gap, "gap_support_max": worst,
            "columns": ["behavior_logp_gap", "behavior_logp_gap_max"]}


def group_record(flat: FlatTokens, pre: PreUpdate, samples: int, timings: dict,
                 step_info: dict) -> dict:
    """One step group's record: counts, timings, |recomputed − logged log π(k)| and, with
    a behaviour checkpoint, |reloaded − logged log µ| (at k; the max over S), over the
    loss tokens."""
    sel = flat.loss_mask
    train = flat.train_logprobs
    record = {"samples": samples, "tokens": int(sel.sum()), "timings": timings,
              "deviation": abs_stats(pre.pi.logp_k.numpy() - train
                                     if train is not None else None, sel),
              "step_info": step_info}
    if pre.pi.exact is not None:
        gaps = behavior_gaps(pre)
        record["behavior_gap"] = abs_stats(gaps["behavior_logp_gap"], sel)
        record["behavior_gap_max"] = abs_stats(gaps["behavior_logp_gap_max"], sel)
    return record
