"""What the direction analysis compares: registered mask pairs × threshold settings × updates.

A *comparison* is one registered (ratio mask, predictive mask) pair
(:func:`pdm_replay.masks.mask_pairs`, the one list of pairs; ``pair`` names it) at one
threshold setting. Its region is the predictive mask's own proximity criterion, read
from the **built** mask (``MASK_SPECS[name].build(thresholds)``: a
:class:`~pdm_replay.masks.kinds.Criterion`'s ``stat``, ``low``, ``high``) and its
direction from the Criterion's ``slope``: never from names. Out-of-region and
disagreement sets are functions of stored tokens/v1 columns (the statistic, the
advantage, the ratio and the slope), so they exist at any threshold. ``delta`` is the
value of the pair's first declared ``thresholds`` field (the one a sweep or
``report --delta-kl``/``--delta-tv`` varies). The realized change ΔD of the pair's
``family`` (the divergence the predictive mask declares) of a kept disagreement token is
measured under one *basis*:

- ``actual``: the trainer's real step (update ``actual``, ``replay --next-checkpoint``);
- ``own``: each mask's own simulated update, which exists only at the setting it was
  replayed at (``<mask>`` or the sweep variant ``<mask>@<value>``);
- ``none``: the simulated update with every token kept.

``actual`` and ``none`` do not depend on the thresholds, so ``report --delta-kl V``
re-thresholds them without a new replay; ``own`` at a setting no update was simulated at
is left out with a note. A pair whose region or slope is not a per-token tokens/v1
column, or whose masks are sequence masks, cannot be re-derived from stored columns: it
is left out of the direction analysis with a note (:func:`plan`).

Examples
--------
>>> from pdm_replay.testing.synthetic_run import example_run
>>> from pdm_replay.report.run_info import discover_run
>>> info = discover_run(example_run())
>>> cs = comparisons(info, {"none", "dppo_topk_kl", "pdm_kl_agg"})
>>> [(c.pair, c.region, c.slope, c.ratio_update, c.predictive_update) for c in cs][:2]
... # doctest: +NORMALIZE_WHITESPACE
[('dppo_topk_kl vs pdm_kl_agg', 'kl_topk > 0.15', 'dkl_agg', 'dppo_topk_kl', 'pdm_kl_agg'),
 ('dppo_topk_kl vs pdm_kl_uniform', 'kl_topk > 0.15', 'dkl_uniform', 'dppo_topk_kl', None)]
>>> cs = comparisons(info, set(), thresholds={"delta_kl": 0.3})
>>> [(c.delta, c.high) for c in cs if c.predictive_mask == "pdm_kl_agg"]
[(0.3, 0.3)]
>>> bases({"none", "actual", "pdm_kl_agg"}, has_updates=True)
['actual', 'own', 'none']
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass
from typing import Any, Collection, Mapping

import pyarrow as pa

from pdm_replay.masks.kinds import Criterion
from pdm_replay.masks import MASK_SPECS, MaskPair, Thresholds, mask_pairs, token_region
from pdm_replay.names import ACTUAL, NONE, OWN
from pdm_replay.report.run_info import RunInfo
from pdm_replay.schema import tokens_schema

BASES = (ACTUAL, OWN, NONE)  # print order: the trainer's real step first


@dataclass(frozen=True)
class Comparison:
    """One pair at one threshold setting: its region ``low <= stat <= high`` (outside:
    out of region) and predictive ``slope`` column; ``*_update`` name each mask's own
    update (None: not simulated)."""

    pair: str
    family: str
    estimator: str | None
    field: str  # the Thresholds field ``delta`` is the value of (the pair's first)
    delta: float
    stat: str
    low: float
    high: float
    slope: str
    ratio_mask: str
    predictive_mask: str
    ratio_update: str | None
    predictive_update: str | None

    @property
    def own_measured(self) -> bool:
        return self.ratio_update is not None and self.predictive_update is not None

    @property
    def region(self) -> str:
        """The out-of-region test as text, e.g. ``kl_topk > 0.15``, ``ratio ∉ [0.5, 5.0]``.

        >>> Comparison("a vs b", "kl", None, "icepop_low", 0.5, "ratio", 0.5, 5.0, "dkl_agg",
        ...            "a", "b", None, None).region
        'ratio ∉ [0.5, 5.0]'
        """
        return region_label(self.stat, self.low, self.high)


def region_label(stat: str, low: float, high: float) -> str:
    """``stat`` outside ``[low, high]`` as text (one infinite bound: a one-sided test)."""
    if low == -math.inf:
        return f"{stat} > {high!r}"
    if high == math.inf:
        return f"{stat} < {low!r}"
    return f"{stat} ∉ [{low!r}, {high!r}]"


@functools.cache
def per_token_columns() -> frozenset[str]:
    """The tokens/v1 float64 per-token columns a region or slope may read in SQL."""
    schema = tokens_schema([], replay=True, exact=True)
    return frozenset(f.name for f in schema if f.type == pa.float64())


def _fields(pair: MaskPair) -> tuple[str, ...]:
    """The Thresholds fields the pair reads (the predictive mask's, then the ratio's)."""
    return tuple(dict.fromkeys(MASK_SPECS[pair.other].thresholds + MASK_SPECS[pair.base].thresholds))


def _settings(info: RunInfo, pair: MaskPair, override: Mapping[str, float]
              ) -> list[Thresholds]:
    """Threshold settings a pair is analyzed at: the report-time overrides of its fields,
    else each sweep variant of its ratio mask, else the run's primary thresholds."""
    fields = _fields(pair)
    given = {f: v for f, v in override.items() if f in fields}
    if given:
        return [dataclasses.replace(info.thresholds, **given)]
    swept = [dataclasses.replace(info.thresholds, **{f: float(v[f]) for f in fields if f in v})
             for v in info.mask_variants.values() if v.get("mask") == pair.base]
    key = fields[0] if fields else None
    out = list(dict.fromkeys(swept)) or [info.thresholds]
    return sorted(out, key=lambda t: getattr(t, key)) if key else out


def own_update(info: RunInfo, mask: str, setting: Thresholds,
               updates: Collection[str]) -> str | None:
    """The name of ``mask``'s simulated update at ``setting``, if the run holds it."""
    fields = MASK_SPECS[mask].thresholds
    def same(values: Mapping[str, Any]) -> bool:
        return all(float(values.get(f, getattr(info.thresholds, f))) == getattr(setting, f)
                   for f in fields)
    names = [n for n, v in info.mask_variants.items() if v.get("mask") == mask and same(v)]
    if not any(v.get("mask") == mask for v in info.mask_variants.values()) \
            and same(dataclasses.asdict(info.thresholds)):
        names = [mask]
    return next((n for n in names if n in updates), None)


def mask_region(name: str, thresholds: Thresholds) -> tuple[str, float, float] | None:
    """:func:`~pdm_replay.masks.token_region` of mask ``name``, when SQL can test it (its
    statistic a tokens/v1 column); else None.

    >>> mask_region("dppo_binary_kl", Thresholds(delta_kl=0.1))
    ('kl_binary', -inf, 0.1)
    >>> mask_region("rs_token_k3", Thresholds()) is None  # k3 is not a tokens/v1 column
    True
    """
    region = token_region(name, thresholds)
    return region if region is not None and region[0] in per_token_columns() else None


def _criterion(pair: MaskPair, setting: Thresholds) -> Criterion | str:
    """The predictive mask's Criterion at ``setting``, or why SQL cannot re-derive it."""
    pred, ratio = MASK_SPECS[pair.other].build(setting), MASK_SPECS[pair.base].build(setting)
    columns = per_token_columns()
    if not isinstance(pred, Criterion) or not isinstance(ratio, Criterion):
        return "a mask of the pair is not a proximity × direction criterion"
    if pred.reads_sequences or MASK_SPECS[pair.other].granularity != "token":
        return "it is a sequence mask (its region is a sequence statistic)"
    if (ratio.stat, ratio.low, ratio.high, ratio.reduce) != (pred.stat, pred.low, pred.high,
                                                             pred.reduce):
        return "its two masks build different regions"
    if ratio.clip_ratio_c or pred.clip_ratio_c:
        return "a mask of the pair dual-clips"
    missing = [c for c in (pred.stat, pred.slope) if c not in columns]
    if missing:
        return f"{' and '.join(missing)} is not a per-token tokens/v1 column"
    return pred


def plan(info: RunInfo, updates: Collection[str], *,
         thresholds: Mapping[str, float] | None = None
         ) -> tuple[list[Comparison], list[str]]:
    """Every comparison of the run, and a note per pair left out of the direction
    analysis: registered pairs whose two masks the run decided (``keep_`` columns) or
    simulated (``updates``), at each setting (``thresholds`` maps Thresholds fields, e.g.
    ``delta_kl``, to report-time values)."""
    present = set(info.masks) | {str(info.mask_variants.get(u, {}).get("mask", u))
                                 for u in updates}
    out, notes = [], []
    for p in mask_pairs(list(MASK_SPECS)):
        if p.family is None or p.base not in present or p.other not in present:
            continue
        field = next(iter(_fields(p)), "")  # the one `delta` reports
        for setting in _settings(info, p, thresholds or {}):
            crit = _criterion(p, setting)
            if isinstance(crit, str):
                notes.append(f"{p.label} is left out of the direction analysis: "
                             f"{crit}, so its decisions cannot be re-derived from stored "
                             "columns")
                break
            out.append(Comparison(
                p.label, p.family, p.estimator, field,
                float(getattr(setting, field)) if field else math.nan, crit.stat,
                crit.low, crit.high, crit.slope, p.base, p.other,
                own_update(info, p.base, setting, updates),
                own_update(info, p.other, setting, updates)))
    return out, notes


def comparisons(info: RunInfo, updates: Collection[str], *,
                thresholds: Mapping[str, float] | None = None) -> list[Comparison]:
    """The comparisons of :func:`plan` (without its notes)."""
    return plan(info, updates, thresholds=thresholds)[0]


def bases(updates: Collection[str], *, has_updates: bool) -> list[str]:
    """The bases this run can measure, in print order (``own`` always: without updates
    it carries the counts, with empty rates)."""
    return [b for b in BASES if b == OWN or (has_updates and b in updates)]


def comparisons_table(cs: list[Comparison], *, has_updates: bool) -> pa.Table:
    """The ``comparisons`` table the views read (``ord``: print order); ``own_in_grid``:
    whether the ``own`` basis has rows (both own updates simulated, or no updates at all:
    counts only)."""
    f64 = pa.float64()
    return pa.table({
        "ord": pa.array(range(len(cs)), pa.int32()),
        "pair": pa.array([c.pair for c in cs], pa.string()),
        "family": pa.array([c.family for c in cs], pa.string()),
        "estimator": pa.array([c.estimator for c in cs], pa.string()),
        "delta": pa.array([c.delta for c in cs], f64),
        "region": pa.array([c.region for c in cs], pa.string()),
        "stat": pa.array([c.stat for c in cs], pa.string()),
        "low": pa.array([c.low for c in cs], f64),
        "high": pa.array([c.high for c in cs], f64),
        "slope": pa.array([c.slope for c in cs], pa.string()),
        "ratio_mask": pa.array([c.ratio_mask for c in cs], pa.string()),
        "predictive_mask": pa.array([c.predictive_mask for c in cs], pa.string()),
        "ratio_update": pa.array([c.ratio_update for c in cs], pa.string()),
        "predictive_update": pa.array([c.predictive_update for c in cs], pa.string()),
        "own_in_grid": pa.array([c.own_measured or not has_updates for c in cs], pa.bool_()),
    })


def column_pattern(names: Collection[str]) -> str:
    """A regular expression matching exactly ``names`` (the views' ``COLUMNS(...)``);
    every per-token column when ``names`` is empty (a run without comparisons: the views
    still bind, and no region reads them).

    >>> column_pattern(["kl_topk", "ratio"])
    '^(kl_topk|ratio)$'
    """
    chosen = sorted(names) or sorted(per_token_columns())
    return "^(" + "|".join(re.escape(n) for n in chosen) + ")$"


def region_columns(cs: list[Comparison], stats: Collection[str] = ()) -> dict[str, str]:
    """The ``report_regions`` variable: patterns of the statistic and slope columns the
    comparisons read (and the other region ``stats`` of the ``masks`` table)."""
    return {"stat_columns": column_pattern({c.stat for c in cs} | set(stats)),
            "slope_columns": column_pattern({c.slope for c in cs})}


def bases_table(names: list[str]) -> pa.Table:
    return pa.table({"basis": names, "basis_ord": pa.array(range(len(names)), pa.int32())})
