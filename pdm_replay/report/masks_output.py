"""Reading the directory ``pdm-replay masks --engine ray`` writes: its whole-run summary,
and every row only when that is affordable.

The directory holds ``step=<t>/part-*.parquet`` (tokens/v1), ``summary.parquet`` (per-step
counts: :mod:`pdm_replay.run_summary`) and ``manifest.json`` (written last; it lists each
part with its rows). Up to :data:`MAX_REPORT_TOKENS` tokens, ``report`` and ``dashboard``
read every part; above, a seeded subset of parts (whole blocks, so each chosen sequence
is whole) of about that many tokens, and the whole-run counts come from the summary.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import polars as pl

from pdm_replay.run_summary import SUMMARY_FILE

MANIFEST = "manifest.json"
# Tokens a report reads row by row: ~20M rows keep DuckDB's views over the sample to
# seconds and its memory to the report's default limit (benchmarks/README.md § report).
MAX_REPORT_TOKENS = int(os.environ.get("PDM_REPLAY_REPORT_MAX_TOKENS", 20_000_000))
SAMPLE_SEED = 0


def masks_manifest(source: Path) -> dict[str, Any] | None:
    """The manifest of a Ray ``masks`` output directory; None for anything else."""
    path = source / MANIFEST
    if not (source.is_dir() and path.is_file()):
        return None
    manifest = json.loads(path.read_text())
    return manifest if manifest.get("kind") == "masks" else None


def chosen_parts(source: Path, manifest: dict[str, Any], max_tokens: int = MAX_REPORT_TOKENS,
                 rng_seed: int = SAMPLE_SEED) -> tuple[list[Path], str]:
    """The parts a report reads and a note saying which: every part when the output has
    at most ``max_tokens`` tokens, else parts drawn in an ``rng_seed``-ed order until
    ``max_tokens`` (a bounded, reproducible sample)."""
    parts: dict[str, int] = manifest["parts"]
    total = sum(parts.values())
    if total <= max_tokens:
        return ([source / p for p in sorted(parts)],
                f"{source}: report read every row ({total:,} tokens in {len(parts)} parts)")
    order = sorted(parts)
    random.Random(rng_seed).shuffle(order)
    picked, tokens = [], 0
    for part in order:
        if tokens >= max_tokens:
            break
        picked.append(part)
        tokens += parts[part]
    return ([source / p for p in sorted(picked)],
            f"{source}: {total:,} tokens; report read {SUMMARY_FILE} for the whole run's "
            f"counts and a seeded subset (seed {rng_seed}) of {len(picked)} of {len(parts)} "
            f"parts ({tokens:,} tokens) for everything per token (disagreement lists, "
            "rates, the mask summary)")


def whole_run(summary: Path, step: int | None = None) -> pl.DataFrame:
    """The whole run from ``summary.parquet``: per mask its kept tokens and keep
    fraction, per ratio/predictive pair its region (stat, family, bound) and its
    out-of-region and disagreement tokens, over every step (or ``step`` alone).

    Columns: kind, name, stat, family, threshold, n_tokens, count, fraction.
    """
    df = pl.read_parquet(summary)
    df = df if step is None else df.filter(pl.col("step") == step)
    tokens = int(df.filter(pl.col("kind") == "tokens")["count"].sum())
    rows = (df.filter(pl.col("kind").is_in(["kept", "out_of_region", "disagreements"]))
            .with_row_index("order")
            .group_by(["kind", "name", "stat", "family", "threshold"], maintain_order=True)
            .agg(pl.col("count").sum(), pl.col("order").min())
            .sort("order").drop("order"))
    return rows.with_columns(pl.lit(tokens, pl.Int64).alias("n_tokens"),
                             (pl.col("count") / max(tokens, 1)).alias("fraction")
                             ).select("kind", "name", "stat", "family", "threshold",
                                      "n_tokens", "count", "fraction")
