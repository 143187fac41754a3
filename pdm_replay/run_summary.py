"""A whole run's counts per step, small enough to read instead of every token row.

One row per ``(step, kind, name)``: ``kind`` is ``tokens`` and ``mass_overflow`` (name
``""``), ``kept`` (name: a mask; keep fraction = kept / tokens), ``out_of_region`` and
``disagreements`` (name: a pair label ``<ratio mask> vs <predictive mask>``, with the
pair's proximity statistic, family and region bound from the mask registry:
:func:`pdm_replay.masks.mask_pairs`, :func:`pdm_replay.masks.token_region`). The Ray
engine of ``masks`` computes it per block and sums it (:func:`combine`); it is written
beside the tokens as ``summary.parquet``.

Examples
--------
>>> import pyarrow as pa
>>> t = pa.table({"step": [1, 1, 2], "keep_none": [True, True, True],
...               "mass_overflow": [False, True, False]})
>>> rows = step_counts(t, ["none"], [], {}).to_pylist()
>>> [(r["step"], r["kind"], r["count"]) for r in rows if r["kind"] != "mass_overflow"]
[(1, 'tokens', 2), (1, 'kept', 2), (2, 'tokens', 1), (2, 'kept', 1)]
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pdm_replay.masks import MaskPair
from pdm_replay.schema import keep_column

SUMMARY_FILE = "summary.parquet"
SUMMARY_SCHEMA_ID = "masks-summary/v1"
SUMMARY_SCHEMA = pa.schema([
    ("step", pa.int64()), ("kind", pa.string()), ("name", pa.string()),
    ("stat", pa.string()), ("family", pa.string()), ("threshold", pa.float64()),
    ("count", pa.int64())]).with_metadata({"pdm_replay.schema": SUMMARY_SCHEMA_ID})

Region = tuple[str, float, float]  # (stat, low, high) of a pair's region


def _outside(values: np.ndarray, low: float, high: float) -> np.ndarray:
    # NaN is never outside (as in the masks)
    return ~np.isnan(values) & ~((values >= low) & (values <= high))


def _pair_rows(step: int, cols: dict[str, np.ndarray], pairs: Sequence[MaskPair],
               regions: dict[str, Region]) -> list[dict]:
    rows = []
    for pair in pairs:
        stat, low, high = regions.get(pair.label, (None, np.nan, np.nan))
        bound = high if np.isfinite(high) else low
        meta = {"step": step, "name": pair.label, "stat": stat, "family": pair.family,
                "threshold": None if stat is None else float(bound)}
        if stat is not None and stat in cols:
            rows.append({**meta, "kind": "out_of_region",
                         "count": int(_outside(cols[stat], low, high).sum())})
        # two masks of one proximity agree inside its region: any difference is outside
        differ = cols[keep_column(pair.base)] != cols[keep_column(pair.other)]
        rows.append({**meta, "kind": "disagreements", "count": int(differ.sum())})
    return rows


def step_counts(table: pa.Table, masks: Sequence[str], pairs: Sequence[MaskPair],
                regions: dict[str, Region]) -> pa.Table:
    """The summary rows of tokens/v1 rows ``table`` (N rows), one group per step."""
    stats = {stat for stat, _, _ in regions.values()}
    names = [n for n in table.column_names if n.startswith("keep_") or n in stats
             or n == "mass_overflow"]
    steps = table.column("step").to_numpy()
    rows: list[dict] = []
    for step in np.unique(steps):
        rows_of = steps == step
        cols = {n: table.column(n).to_numpy(zero_copy_only=False)[rows_of] for n in names}
        base = {"step": int(step), "name": "", "stat": None, "family": None,
                "threshold": None}
        rows.append({**base, "kind": "tokens", "count": int(rows_of.sum())})
        rows.append({**base, "kind": "mass_overflow",
                     "count": int(cols["mass_overflow"].sum())})
        rows.extend({**base, "name": m, "kind": "kept",
                     "count": int(cols[keep_column(m)].sum())} for m in masks)
        rows.extend(_pair_rows(int(step), cols, pairs, regions))
    return pa.Table.from_pylist(rows, schema=SUMMARY_SCHEMA)


def combine(tables: Sequence[pa.Table]) -> pa.Table:
    """Sum summary tables row-wise per ``(step, kind, name)``, sorted by step, then in the
    order rows first appear (the registry's order)."""
    if not tables:
        return SUMMARY_SCHEMA.empty_table()
    keys = ["step", "kind", "name", "stat", "family", "threshold"]
    table = pa.concat_tables([t.select(SUMMARY_SCHEMA.names).cast(SUMMARY_SCHEMA)
                              for t in tables])
    order = pa.array(np.arange(table.num_rows))
    grouped = (table.append_column("order", order)
               .group_by(keys, use_threads=False)
               .aggregate([("count", "sum"), ("order", "min")]))
    grouped = grouped.sort_by([("step", "ascending"), ("order_min", "ascending")])
    return (grouped.select(keys + ["count_sum"]).rename_columns(keys + ["count"])
            .cast(SUMMARY_SCHEMA))


def totals(summary: pa.Table, kind: str) -> dict[str, int]:
    """``name -> count`` of one ``kind`` over every step, in first-appearance order."""
    rows = summary.filter(pc.equal(summary.column("kind"), kind))
    out: dict[str, int] = {}
    for name, count in zip(rows.column("name").to_pylist(), rows.column("count").to_pylist()):
        out[name] = out.get(name, 0) + count
    return out
