"""Per-step mismatch metrics and keep statistics under the names trainers log them.

Each logged step's loss tokens (``queries_mismatch.sql``) go through the pure math of
:mod:`pdm_replay.math.mismatch` once; this module only names the results:

- :func:`step_metrics` ``[0]``, the ``mismatch`` table: one row per step, ``step`` then
  verl 0.9's ``rollout_corr/*`` keys (``compute_offpolicy_metrics``, ``compute_is_metrics``
  at verl's default ``rollout_is=sequence`` with the run's ``tis_cap`` as
  ``rollout_is_threshold``, and each rs mask's ``rollout_rs_<option>_masked_fraction``
  under the key the registry's ``logged_as`` names, its criterion at the run's
  thresholds); the token-level IS set (``rollout_is=token``, same cap), which verl logs under the same names when so
  configured, as ``rollout_corr_token/*``; TRL 1.16's ``sampling/*`` at GRPOConfig's
  defaults (``sequence_mask``, C_max 3.0); and ``topk/*``: top-K KL and TV mean / p99 and
  the out-of-region share at each δ the run analyses.
- :func:`step_metrics` ``[1]``, the ``keep_stats`` table: one row per (step, mask present)
  with its masked fractions by sign of Â and by side of its region, out of region kept /
  dropped, and TRL's ``clip_ratio/{low,high,region}_mean`` for the ratio masks (region on
  the ratio, ratio direction).

Examples
--------
>>> from pdm_replay.testing.synthetic_run import example_run
>>> from pdm_replay.report.db import connect
>>> with connect(example_run()) as db:
...     mismatch, keep = step_metrics(db)
>>> mismatch.columns[:3]
['step', 'rollout_corr/training_ppl', 'rollout_corr/training_log_ppl']
>>> "clip_ratio/low_mean" in keep.columns
True
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

import polars as pl
import torch

from pdm_replay.masks import MASK_SPECS, token_region
from pdm_replay.math.mismatch import (is_metrics, keep_metrics, offpolicy_metrics,
                                      sampling_metrics, topk_metrics, verl_masked_mean)
from pdm_replay.math.metrics import TokenStats
from pdm_replay.math.segments import Segments
from pdm_replay.report.db import ReportDB
from pdm_replay.schema import keep_column

QUERIES = "queries_mismatch.sql"
TRL_IS_MODE = "sequence_mask"  # trl GRPOConfig.vllm_importance_sampling_mode default
TRL_IS_CAP = 3.0  # trl GRPOConfig.vllm_importance_sampling_clip_max default
VERL, VERL_TOKEN, TRL, TOPK = "rollout_corr/", "rollout_corr_token/", "sampling/", "topk/"
CLIP_RATIO = ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean")


def mismatch_table(db: ReportDB) -> pl.DataFrame:
    """The ``mismatch`` report section's frame: :func:`step_metrics` ``[0]`` (computed once
    per connection with the ``keep_stats`` section's)."""
    return db.once("step_metrics", lambda: step_metrics(db))[0]


def keep_stats_table(db: ReportDB) -> pl.DataFrame:
    """The ``keep_stats`` report section's frame: :func:`step_metrics` ``[1]``."""
    return db.once("step_metrics", lambda: step_metrics(db))[1]


def step_metrics(db: ReportDB) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(mismatch, keep_stats)`` of every logged step of ``db``'s run (empty frames when
    the run has no tokens)."""
    rows, keeps = [], []
    for step in db.named("mismatch_steps", sql_file=QUERIES)["step"].to_list():
        frame = db.named("mismatch_step_tokens", {"step": step}, sql_file=QUERIES)
        if not frame.height:
            continue
        rows.append({"step": step, **mismatch_row(db, frame)})
        keeps += [{"step": step, "mask": name, **stats}
                  for name, stats in keep_rows(db, frame).items()]
    return (pl.DataFrame(rows, infer_schema_length=None),
            pl.DataFrame(keeps, infer_schema_length=None))


def _tensor(frame: pl.DataFrame, column: str) -> torch.Tensor:
    return torch.from_numpy(frame[column].cast(pl.Float64).fill_null(math.nan).to_numpy())


def _filled(column: pl.Series) -> torch.Tensor:
    """A tokens/v1 column as a tensor, nulls (a column this run lacks) as NaN / 0 / False;
    the text-coded ``direction_certified`` as 0 (no criterion with a ``logged_as`` reads it)."""
    if not (column.dtype.is_numeric() or column.dtype == pl.Boolean):
        return torch.zeros(len(column), dtype=torch.int8)
    fill = math.nan if column.dtype.is_float() else (False if column.dtype == pl.Boolean else 0)
    return torch.from_numpy(column.fill_null(fill).to_numpy().copy())


def _segments(frame: pl.DataFrame) -> Segments:
    """Each token's response (``frame`` is ordered by sample_id, pos); every token a loss
    token (tokens/v1 holds loss tokens only)."""
    ids = frame["sample_id"]
    index = (ids != ids.shift(1)).fill_null(True).cast(pl.Int64).cum_sum()
    return Segments(torch.from_numpy(index.to_numpy()), torch.ones(frame.height, dtype=torch.bool))


def mismatch_row(db: ReportDB, frame: pl.DataFrame) -> dict[str, Any]:
    """The ``mismatch`` keys of one step's tokens ``frame`` (log-prob keys only when every
    token has log π: a masks run of a log without train log-probs has none)."""
    t = db.info.thresholds
    out: dict[str, Any] = {}
    lt, lb, seqs = _tensor(frame, "logp_train"), _tensor(frame, "logp_behavior"), _segments(frame)
    if not bool(lt.isnan().any() or lb.isnan().any()):
        out |= {VERL + k: v for k, v in offpolicy_metrics(lt, lb, seqs).items()}
        out |= {VERL + k: v for k, v in is_metrics(lt, lb, seqs, level="sequence",
                                                    cap=t.tis_cap).items()}
        out |= _rs_fractions(db, frame)
        out |= {VERL_TOKEN + k: v for k, v in is_metrics(lt, lb, seqs, level="token",
                                                          cap=t.tis_cap).items()}
        out |= {TRL + k: v for k, v in sampling_metrics(lt, lb, seqs, mode=TRL_IS_MODE,
                                                         cap_max=TRL_IS_CAP).items()}
    # the run's δ and every δ a comparison analyses on that top-K divergence (not the
    # comparisons whose region is on another statistic, e.g. IcePop's band on r)
    deltas = {f: sorted({getattr(t, f"delta_{f}")} | {c.delta for c in db.layout.comparisons
                                                      if c.stat == f"{f}_topk"})
              for f in ("kl", "tv")}
    out |= {TOPK + k: v for k, v in topk_metrics(_tensor(frame, "kl_topk"),
                                                 _tensor(frame, "tv_topk"), deltas).items()}
    return out


def _rs_fractions(db: ReportDB, frame: pl.DataFrame) -> dict[str, float]:
    """verl's per-option masked token fraction of every registered mask with a
    ``logged_as`` key (the rs masks), present in the run or not: the registered criterion
    at the run's thresholds, evaluated as verl's ``compute_rollout_rejection_mask`` rejects,
    whatever Â (the keep columns keep Â = 0 tokens, which carry no gradient)."""
    stats = TokenStats(**{f.name: _filled(frame[f.name]) for f in fields(TokenStats)
                          if f.name != "advantage"},
                       advantage=torch.ones(frame.height, dtype=torch.float64))
    seqs, out = _segments(frame), {}
    for name, spec in MASK_SPECS.items():
        if spec.logged_as:
            keep = spec.build(db.info.thresholds).keep(stats, seqs)
            out[spec.logged_as] = float(verl_masked_mean((~keep).double(), seqs))
    return out


def keep_rows(db: ReportDB, frame: pl.DataFrame) -> dict[str, dict[str, float]]:
    """:func:`~pdm_replay.math.mismatch.keep_metrics` of every registered mask present in
    one step's ``frame``, with its region at the run's thresholds where it has a per-token
    one; TRL's ``clip_ratio`` keys only for ratio masks (region on r, ratio direction)."""
    out = {}
    advantage = _tensor(frame, "advantage")
    for name in db.info.masks:
        column = keep_column(name)
        if name not in MASK_SPECS or column not in frame.columns or \
                frame[column].null_count() == frame.height:
            continue
        region = token_region(name, db.info.thresholds)
        if region is not None and region[0] not in frame.columns:
            region = None
        stat = _tensor(frame, region[0]) if region else None
        stats = keep_metrics(torch.from_numpy(frame[column].to_numpy()), advantage, stat,
                             *(region[1:] if region else ()))
        if not (region and region[0] == "ratio" and MASK_SPECS[name].direction == "ratio"):
            stats = {k: v for k, v in stats.items() if k not in CLIP_RATIO}
        out[name] = stats
    return out
