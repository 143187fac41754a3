"""Headline alignment numbers of a replay (SPEC §6), for the end-of-run summary.

Per family (KL, TV) and predictive estimator: out-of-region tokens O = {D_pre > δ}; the
disagreement set, tokens of O where the two masks of a registry pair
(:func:`~pdm_replay.masks.mask_pairs`: ratio ``dppo_topk_<fam>``, predictive
``pdm_<fam>_<est>``) decide differently; each mask's unsafe-keep rate
(among disagreement tokens it keeps, the share whose D grew under its own update) and
corrective rate (share whose D shrank); and on how many seeds the predictive mask's
unsafe-keep rate was lower. The full reports live in ``pdm_replay.report``.

Examples
--------
>>> import polars as pl
>>> tok = pl.DataFrame({"seed": [0, 0], "sample_id": ["a", "a"], "pos": [0, 1],
...                     "kl_topk": [0.5, 0.5], "tv_topk": [0.0, 0.0]})
>>> def upd(mask, kept, dkl):
...     return pl.DataFrame({"seed": [0, 0], "update_mask": [mask] * 2, "sample_id": ["a"] * 2,
...                          "pos": [0, 1], "kept": kept, "delta_kl_topk": dkl,
...                          "delta_tv_topk": [0.0, 0.0]})
>>> ups = pl.concat([upd("dppo_topk_kl", [True, False], [0.1, 0.1]),
...                  upd("pdm_kl_agg", [False, True], [0.1, -0.2])])
>>> row = alignment_summary(tok, ups, delta_kl=0.15, delta_tv=0.15)[0]
>>> row.out_of_region, row.disagreement, row.unsafe_keep_ratio, row.unsafe_keep_predictive
(2, 2, 1.0, 0.0)
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from pdm_replay.masks import MASKS, mask_pairs

KEY = ["seed", "sample_id", "pos"]


@dataclass(frozen=True)
class Alignment:
    """Ratio vs predictive mask on one family; rates are ``None`` where nothing was kept."""

    family: str
    ratio_mask: str
    predictive_mask: str
    out_of_region: int
    disagreement: int
    unsafe_keep_ratio: float | None
    unsafe_keep_predictive: float | None
    corrective_ratio: float | None
    corrective_predictive: float | None
    seeds_predictive_lower: int
    seeds_compared: int
    estimator: str | None = None  # the predictive mask's tail model (registry)


def _mask_rows(updates: pl.DataFrame, mask: str, fam: str, tag: str) -> pl.DataFrame:
    return (updates.filter(pl.col("update_mask") == mask)
            .select(*KEY, pl.col("kept").alias(f"kept_{tag}"),
                    pl.col(f"delta_{fam}_topk").alias(f"dd_{tag}")))


def _rates(df: pl.DataFrame, tag: str) -> pl.DataFrame:
    """Per-seed unsafe / corrective rate of mask ``tag`` on the disagreement tokens it keeps."""
    kept = df.filter(pl.col("dis") & pl.col(f"kept_{tag}"))
    return kept.group_by("seed").agg(
        (pl.col(f"dd_{tag}") > 0).sum().alias(f"unsafe_{tag}"),
        (pl.col(f"dd_{tag}") < 0).sum().alias(f"corr_{tag}"), pl.len().alias(f"n_{tag}"))


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def _pair(tokens: pl.DataFrame, updates: pl.DataFrame, fam: str, delta: float,
          ratio: str, pred: str, estimator: str | None) -> Alignment:
    df = (tokens.select(*KEY, pl.col(f"{fam}_topk").alias("d_pre"))
          .join(_mask_rows(updates, ratio, fam, "r"), on=KEY)
          .join(_mask_rows(updates, pred, fam, "p"), on=KEY)
          .with_columns(out=pl.col("d_pre") > delta))
    df = df.with_columns(dis=pl.col("out") & (pl.col("kept_r") != pl.col("kept_p")))
    per_seed = _rates(df, "r").join(_rates(df, "p"), on="seed", how="full", coalesce=True)
    per_seed = per_seed.fill_null(0)
    tot = {c: int(per_seed[c].sum()) for c in per_seed.columns if c != "seed"}
    both = per_seed.filter((pl.col("n_r") > 0) & (pl.col("n_p") > 0))
    lower = both.filter(pl.col("unsafe_p") / pl.col("n_p") < pl.col("unsafe_r") / pl.col("n_r"))
    return Alignment(
        family=fam, ratio_mask=ratio, predictive_mask=pred,
        out_of_region=int(df["out"].sum()), disagreement=int(df["dis"].sum()),
        unsafe_keep_ratio=_ratio(tot.get("unsafe_r", 0), tot.get("n_r", 0)),
        unsafe_keep_predictive=_ratio(tot.get("unsafe_p", 0), tot.get("n_p", 0)),
        corrective_ratio=_ratio(tot.get("corr_r", 0), tot.get("n_r", 0)),
        corrective_predictive=_ratio(tot.get("corr_p", 0), tot.get("n_p", 0)),
        seeds_predictive_lower=lower.height, seeds_compared=both.height, estimator=estimator)


def alignment_summary(tokens: pl.DataFrame, updates: pl.DataFrame, *, delta_kl: float,
                      delta_tv: float) -> list[Alignment]:
    """One :class:`Alignment` per family and predictive estimator whose ratio and
    predictive masks were both simulated (``updates.update_mask``); pooled over seeds."""
    simulated = set(updates["update_mask"].unique().to_list()) if updates.height else set()
    deltas = {"kl": delta_kl, "tv": delta_tv}
    return [_pair(tokens, updates, p.family, deltas[p.family], p.base, p.other, p.estimator)
            for p in mask_pairs([n for n in MASKS if n in simulated])
            if p.family in deltas]
