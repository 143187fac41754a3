"""Altair charts of the attribution page, each a pure function of a small polars DataFrame.

Examples
--------
>>> import polars as pl
>>> split = pl.DataFrame({"scope": ["out_of_region"], "predictor": ["ratio"],
...                       "n_errors": [5], "n_errors_self": [4], "geometry_share": [0.5],
...                       "interference_share": [0.5], "curvature_share": [0.5],
...                       "parameter_space_share": [0.4], "curvature_all_share": [0.6]})
>>> stage_shares(split, with_self=True)["stage"].to_list()
['geometry', 'interference', 'curvature']
>>> spec = stage_chart(stage_shares(split, with_self=False)).to_dict()
>>> spec["mark"]["type"]
'bar'
"""

from __future__ import annotations

import altair as alt
import polars as pl

SELF_STAGES = {"geometry": "geometry_share", "interference": "interference_share",
               "curvature": "curvature_share"}
LINEAR_STAGES = {"parameter space": "parameter_space_share",
                 "curvature": "curvature_all_share"}
STAGE_COLORS = alt.Scale(
    domain=["geometry", "interference", "parameter space", "curvature"],
    range=["#8e24aa", "#f57c00", "#6d4c41", "#1e88e5"])


def stage_shares(split: pl.DataFrame, *, with_self: bool) -> pl.DataFrame:
    """Long form of :func:`~pdm_replay.report.attribution_report.attribution_split`: one row per
    (scope, predictor, stage) with the stage's share of the predictor's errors (those with a
    self term when ``with_self``, else all errors, with geometry + interference merged)."""
    stages = SELF_STAGES if with_self else LINEAR_STAGES
    base = "n_errors_self" if with_self else "n_errors"
    return (split.select("scope", "predictor", pl.col(base).alias("errors"),
                         *[pl.col(c).alias(s) for s, c in stages.items()])
            .unpivot(index=["scope", "predictor", "errors"], on=list(stages),
                     variable_name="stage", value_name="share")
            .drop_nulls("share"))


def stage_chart(shares: pl.DataFrame) -> alt.Chart:
    """Share of each predictor's sign errors at each stage, side by side per predictor.
    Stages can overlap (an error flips at one stage or at all three), so bars need not
    sum to 1."""
    return alt.Chart(shares).mark_bar().encode(
        x=alt.X("predictor:N", title=None),
        xOffset=alt.XOffset("stage:N", sort=list(STAGE_COLORS.domain)),
        y=alt.Y("share:Q", title="share of the sign errors", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("stage:N", scale=STAGE_COLORS, title="sign flips at"),
        tooltip=["scope", "predictor", "stage", "errors",
                 alt.Tooltip("share:Q", format=".1%")],
    ).properties(height=280, width="container")


def parts_scatter(points: pl.DataFrame, x: str, y: str, x_title: str,
                  y_title: str) -> alt.LayerChart:
    """``y`` against ``x`` per token (e.g. realized ΔD vs the linear term), the diagonal
    dashed, disagreement tokens colored."""
    df = points.drop_nulls([x, y]).with_columns(
        token=pl.when(pl.col("disagreement")).then(pl.lit("disagreement"))
        .otherwise(pl.lit("other out-of-region")))
    dots = alt.Chart(df).mark_circle(size=18, opacity=0.6).encode(
        x=alt.X(f"{x}:Q", title=x_title), y=alt.Y(f"{y}:Q", title=y_title),
        color=alt.Color("token:N", title=None),
        tooltip=["seed", "sample_id", "pos", alt.Tooltip(f"{x}:Q", format=".3g"),
                 alt.Tooltip(f"{y}:Q", format=".3g")])
    lo = min(df[x].min() or 0.0, df[y].min() or 0.0)
    hi = max(df[x].max() or 0.0, df[y].max() or 0.0)
    diagonal = alt.Chart(pl.DataFrame({"a": [lo, hi], "b": [lo, hi]})).mark_line(
        color="#555", strokeDash=[4, 4]).encode(x="a:Q", y="b:Q")
    return alt.layer(diagonal, dots).properties(height=320, width="container")
