"""What the direction analysis compares: ratio-vs-predictive pairs × thresholds × updates.

A *comparison* is one registered (ratio mask, predictive mask) pair of a family
(:func:`pdm_replay.masks.comparison_pairs`, the one list of pairs) at one threshold δ.
Its out-of-region set and disagreement set are functions of stored tokens/v1 columns
(``kl_topk``/``tv_topk``, the advantage, the ratio and the slopes), so they exist at any δ.
The realized change ΔD of a kept disagreement token is measured under one *basis*:

- ``actual``: the trainer's real step (update ``actual``, ``replay --next-checkpoint``);
- ``own``: each mask's own simulated update, which exists only at the δ it was replayed
  at (``<mask>`` or the sweep variant ``<mask>@<value>``);
- ``none``: the simulated keep-all update.

``actual`` and ``none`` do not depend on δ, so ``report --delta-kl V`` re-thresholds them
without a new replay; ``own`` at a δ no update was simulated at is left out with a note.

Examples
--------
>>> from pdm_replay.report.synthetic import example_run
>>> from pdm_replay.report.run_info import discover_run
>>> info = discover_run(example_run())
>>> cs = comparisons(info, {"none", "dppo_topk_kl", "pdm_kl_agg"})
>>> [(c.family, c.estimator, c.delta, c.ratio_update, c.predictive_update) for c in cs][:2]
[('kl', 'agg', 0.15, 'dppo_topk_kl', 'pdm_kl_agg'), ('kl', 'uniform', 0.15, 'dppo_topk_kl', None)]
>>> bases({"none", "actual", "pdm_kl_agg"}, has_updates=True)
['actual', 'own', 'none']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Mapping

import pyarrow as pa

from pdm_replay.masks import MASKS, comparison_pairs
from pdm_replay.report.run_info import RunInfo

ACTUAL = "actual"  # the update name `replay --next-checkpoint` writes (replay/actual.py)
NONE = "none"
BASES = (ACTUAL, "own", NONE)  # print order: the trainer's real step first


@dataclass(frozen=True)
class Comparison:
    """One pair at one δ; ``*_update`` name each mask's own update (None: not simulated)."""

    family: str
    estimator: str
    delta: float
    ratio_mask: str
    predictive_mask: str
    ratio_update: str | None
    predictive_update: str | None

    @property
    def own_measured(self) -> bool:
        return self.ratio_update is not None and self.predictive_update is not None


def threshold_field(mask: str) -> str:
    """The Thresholds field (``delta_kl`` / ``delta_tv``) a divergence mask reads."""
    return MASKS[mask].thresholds[0]


def _deltas(info: RunInfo, mask: str, override: float | None) -> list[float]:
    """δ values a pair is analysed at: the override, the sweep's, or the run's primary."""
    if override is not None:
        return [override]
    field = threshold_field(mask)
    swept = [float(v[field]) for v in info.mask_variants.values()
             if v.get("mask") == mask and field in v]
    return sorted(dict.fromkeys(swept)) or [getattr(info.thresholds, field)]


def own_update(info: RunInfo, mask: str, delta: float, updates: Collection[str]) -> str | None:
    """The name of ``mask``'s simulated update at ``delta``, if the run holds it."""
    field = threshold_field(mask)
    names = [n for n, v in info.mask_variants.items()
             if v.get("mask") == mask and float(v.get(field, "nan")) == delta]
    if not any(v.get("mask") == mask for v in info.mask_variants.values()) \
            and delta == getattr(info.thresholds, field):
        names = [mask]
    return next((n for n in names if n in updates), None)


def comparisons(info: RunInfo, updates: Collection[str], *,
                thresholds: Mapping[str, float] | None = None) -> list[Comparison]:
    """Every comparison of the run: registered pairs whose two masks the run decided
    (``keep_`` columns) or simulated (``updates``), at each δ (``thresholds`` maps
    ``delta_kl``/``delta_tv`` to a report-time δ)."""
    present = set(info.masks) | {str(info.mask_variants.get(u, {}).get("mask", u))
                                 for u in updates}
    out = []
    for family, estimator, ratio, pred in comparison_pairs(list(MASKS)):
        if ratio not in present or pred not in present:
            continue
        override = (thresholds or {}).get(threshold_field(ratio))
        for delta in _deltas(info, ratio, override):
            out.append(Comparison(family, estimator, delta, ratio, pred,
                                  own_update(info, ratio, delta, updates),
                                  own_update(info, pred, delta, updates)))
    return out


def bases(updates: Collection[str], *, has_updates: bool) -> list[str]:
    """The bases this run can measure, in print order (``own`` always: without updates
    it carries the counts, with empty rates)."""
    return [b for b in BASES if b == "own" or (has_updates and b in updates)]


def comparisons_table(cs: list[Comparison], *, has_updates: bool) -> pa.Table:
    """The ``comparisons`` table the views read; ``own_in_grid``: whether the ``own`` basis
    has rows (both own updates simulated, or no updates at all: counts only)."""
    return pa.table({
        "family": [c.family for c in cs], "estimator": [c.estimator for c in cs],
        "delta": pa.array([c.delta for c in cs], pa.float64()),
        "ratio_mask": [c.ratio_mask for c in cs],
        "predictive_mask": [c.predictive_mask for c in cs],
        "ratio_update": pa.array([c.ratio_update for c in cs], pa.string()),
        "predictive_update": pa.array([c.predictive_update for c in cs], pa.string()),
        "own_in_grid": [c.own_measured or not has_updates for c in cs],
    })


def bases_table(names: list[str]) -> pa.Table:
    return pa.table({"basis": names, "basis_ord": pa.array(range(len(names)), pa.int32())})
