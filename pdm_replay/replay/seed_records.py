"""Per-seed records (the done markers) and what the manifest pools from them.

A seed is replayed in step groups (one unless the checkpoints are ``{step}`` templates);
each group reports counts, |Δ| statistics (recomputed vs logged π, reloaded vs logged µ)
and, per update, the lr used and the realized ‖Δθ‖₂. :func:`merge_groups` makes the
seed's :class:`SeedRecord`, :func:`pool` / :func:`updates_by_seed` the manifest's
run-level fields.

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
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from pdm_replay.io.reader import FlatTokens
from pdm_replay.replay.outputs import PreUpdate, behavior_gaps

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


@dataclass(frozen=True)
class GroupRecord:
    """One step group of a seed: counts, timings, |Δ| statistics (:func:`abs_stats`
    records) and ``step_info`` (the step, the actual step norm, each update's lr and ‖Δθ‖)."""

    samples: int
    tokens: int
    timings: dict
    step_info: dict
    deviation: dict
    behavior_gap: dict | None = None
    behavior_gap_max: dict | None = None


@dataclass(frozen=True)
class SeedRecord:
    """A finished seed: its done marker ``done/seed=<s>.json``. :meth:`to_json` /
    :meth:`from_json` are its one serialized form; keys written by the ranks' combination
    (``world_size``, ``ranks``, ``rank``, ``peak_memory``) travel in ``extra``."""

    seed: int
    samples: int
    tokens: int
    timings: dict
    steps: tuple[dict, ...] = ()
    deviation: dict | None = None
    behavior_gap: dict | None = None
    behavior_gap_max: dict | None = None
    extra: dict = field(default_factory=dict)

    def timed(self, total_s: float) -> SeedRecord:
        """This record with the seed's wall time ``timings["total_s"]``."""
        return replace(self, timings={**self.timings, "total_s": total_s})

    def to_json(self) -> dict:
        doc = {"seed": self.seed, "samples": self.samples, "tokens": self.tokens,
               "timings": dict(self.timings), "steps": list(self.steps), **self.extra}
        doc.update({k: getattr(self, k) for k in STAT_KEYS if getattr(self, k) is not None})
        return doc

    @classmethod
    def from_json(cls, doc: dict) -> SeedRecord:
        known = {"seed", "samples", "tokens", "timings", "steps", *STAT_KEYS}
        return cls(seed=int(doc["seed"]), samples=doc["samples"], tokens=doc["tokens"],
                   timings=dict(doc["timings"]), steps=tuple(doc.get("steps", ())),
                   **{k: doc[k] for k in STAT_KEYS if k in doc},
                   extra={k: v for k, v in doc.items() if k not in known})


def merge_groups(seed: int, groups: list[GroupRecord]) -> SeedRecord:
    """The seed's record from its step groups' (same keys, summed or merged)."""
    timings: dict[str, float] = {}
    for g in groups:
        for k, v in g.timings.items():
            timings[k] = timings.get(k, 0.0) + v
    stats = {k: merge([getattr(g, k) for g in groups]) for k in STAT_KEYS
             if getattr(groups[0], k) is not None}
    return SeedRecord(seed=seed, samples=sum(g.samples for g in groups),
                      tokens=sum(g.tokens for g in groups), timings=timings,
                      steps=tuple(g.step_info for g in groups), **stats)


def updates_by_seed(records: list[SeedRecord]) -> dict[str, list[dict]]:
    """Manifest ``update_steps``: per seed, per step group, each update's lr and ‖Δθ‖."""
    return {str(r.seed): list(r.steps) for r in records}


def unit_roundoff(dtype: torch.dtype) -> float:
    """Half the gap from 1 to the next representable number: the relative error of one
    rounding to ``dtype`` (bfloat16 2⁻⁸, float16 2⁻¹¹, float32 2⁻²⁴)."""
    return float(torch.finfo(dtype).eps) / 2


def behavior_fidelity(records: list[SeedRecord], dtype_name: str, dtype: torch.dtype
                      ) -> dict | None:
    """Manifest ``behavior_fidelity``: logged vs reloaded µ over every loss token, beside
    the behavior dtype's unit roundoff u (a log-prob ℓ rounded once moves by up to u·|ℓ|;
    logits z by u·|z|, which can move log-probs by about 2u·max|z|)."""
    gap = pool([r.behavior_gap for r in records if r.behavior_gap is not None])
    if gap is None:
        return None
    worst = pool([r.behavior_gap_max for r in records if r.behavior_gap_max is not None])
    u = unit_roundoff(dtype)
    return {"dtype": dtype_name, "unit_roundoff": u, "log2_unit_roundoff": math.log2(u),
            "gap_k": gap, "gap_support_max": worst,
            "columns": ["behavior_logp_gap", "behavior_logp_gap_max"]}


def group_record(flat: FlatTokens, pre: PreUpdate, samples: int, timings: dict,
                 step_info: dict) -> GroupRecord:
    """One step group's record: counts, timings, |recomputed − logged log π(k)| and, with
    a behavior checkpoint, |reloaded − logged log µ| (at k; the max over S), over the
    loss tokens."""
    sel = flat.loss_mask
    train = flat.train_logprobs
    gaps = behavior_gaps(pre) if pre.pi.exact is not None else None
    return GroupRecord(
        samples=samples, tokens=int(sel.sum()), timings=timings, step_info=step_info,
        deviation=abs_stats(pre.pi.logp_k.numpy() - train if train is not None else None,
                            sel),
        behavior_gap=abs_stats(gaps["behavior_logp_gap"], sel) if gaps else None,
        behavior_gap_max=abs_stats(gaps["behavior_logp_gap_max"], sel) if gaps else None)
