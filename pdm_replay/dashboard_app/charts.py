"""Altair charts of the dashboard, each a pure function of a small polars DataFrame.

Examples
--------
>>> import polars as pl
>>> hist = pl.DataFrame({"bin": [0, 1], "x_lo": [-3.0, -2.0], "x_hi": [-2.0, -1.0],
...                      "n": [5, 2]})
>>> spec = histogram_chart(hist, threshold=0.15, log=True, title="kl").to_dict()
>>> spec["layer"][1]["mark"]["type"]
'rule'
"""

from __future__ import annotations

import math
from typing import Any

import altair as alt
import polars as pl

DIRECTION_COLORS = alt.Scale(domain=["ratio", "predictive"], range=["#d62728", "#1f77b4"])
AGREEMENT_COLORS = alt.Scale(domain=["sign agrees", "sign differs", "no ΔD"],
                              range=["#2ca02c", "#d62728", "#9e9e9e"])


def seed_unsafe_chart(rates: pl.DataFrame) -> alt.Chart:
    """Per-seed unsafe-keep rate of the ratio vs the predictive mask, one panel per
    (update basis, comparison pair, δ); ``rates`` is
    :func:`pdm_replay.report.api.seed_rates`. A rate of 0 draws a tick at 0, a seed where
    the mask kept no disagreement token an "∅" (empty), so the two never look alike."""
    long = (rates.with_columns(panel=pl.format("{}: {}, δ = {}", "basis", "pair", "delta"))
            .unpivot(index=["seed", "panel"], on=["unsafe_ratio", "unsafe_predictive"],
                     variable_name="direction", value_name="unsafe_keep_rate")
            .with_columns(pl.col("direction").str.replace("unsafe_", ""),
                          # a rate of 0 is a bar of height 0; no kept token is "empty"
                          kept=pl.when(pl.col("unsafe_keep_rate").is_null())
                          .then(pl.lit("empty")).otherwise(pl.lit(None))))
    x = alt.X("seed:O", title="seed")
    offset = alt.XOffset("direction:N", sort=["ratio", "predictive"])
    color = alt.Color("direction:N", scale=DIRECTION_COLORS, title="mask direction")
    bars = alt.Chart().mark_bar().encode(
        x=x, xOffset=offset, color=color,
        y=alt.Y("unsafe_keep_rate:Q", title="unsafe-keep rate", scale=alt.Scale(domain=[0, 1])),
        tooltip=["panel", "seed", "direction",
                 alt.Tooltip("unsafe_keep_rate:Q", format=".1%")])
    zero = alt.Chart().transform_filter("datum.unsafe_keep_rate === 0").mark_tick(
        thickness=2, size=8).encode(x=x, xOffset=offset, color=color,
                                   y=alt.Y("unsafe_keep_rate:Q"))
    empty = alt.Chart().transform_filter("datum.kept === 'empty'").mark_text(
        text="∅", dy=-6, fontSize=11).encode(x=x, xOffset=offset, color=color,
                                             y=alt.datum(0), tooltip=["panel", "seed",
                                                                      "direction", "kept"])
    return alt.layer(bars, zero, empty, data=long).properties(height=180, width=280).facet(
        facet=alt.Facet("panel:N", title=None), columns=2)


def histogram_chart(hist: pl.DataFrame, *, threshold: float | None, log: bool,
                    title: str) -> alt.LayerChart:
    """Bars of :func:`~pdm_replay.report.dashboard_api.value_histogram` with the threshold
    δ as a rule (log10 axis when ``log``)."""
    unit = f"log10 {title}" if log else title
    bars = alt.Chart(hist).mark_bar(color="#5c6bc0").encode(
        x=alt.X("x_lo:Q", title=unit, bin="binned"), x2="x_hi:Q",
        y=alt.Y("n:Q", title="tokens"),
        tooltip=[alt.Tooltip("x_lo:Q", format=".3f"), alt.Tooltip("x_hi:Q", format=".3f"), "n"])
    layers = [bars]
    if threshold is not None and threshold > 0:
        value = math.log10(threshold) if log else threshold
        rule_data = pl.DataFrame({"x": [value], "label": [f"δ = {threshold}"]})
        layers.append(alt.Chart(rule_data).mark_rule(color="#e65100", strokeWidth=2)
                      .encode(x="x:Q", tooltip=["label"]))
    return alt.layer(*layers).properties(height=260, width="container", title=title)


def terms_scatter(terms: pl.DataFrame) -> alt.LayerChart:
    """Local vs global term of Ḋ_KL (signed by sign(Â)) on out-of-region tokens, colored by
    whether the predictive sign agreed with the realized ΔD under ``none``. Above the
    diagonal the predictive rule says "moves away"; above zero the ratio rule does."""
    agree = (pl.when(pl.col("delta_d_none").is_null()).then(pl.lit("no ΔD"))
             .when(pl.col("predicted").sign() == pl.col("delta_d_none").sign())
             .then(pl.lit("sign agrees")).otherwise(pl.lit("sign differs")))
    df = terms.with_columns(agreement=agree)
    points = alt.Chart(df).mark_circle(size=18, opacity=0.6).encode(
        x=alt.X("global_term:Q", title="global term sign(Â)(local − Ḋ_agg)"),
        y=alt.Y("local_term:Q", title="local term sign(Â)(π_k − µ_k)"),
        color=alt.Color("agreement:N", scale=AGREEMENT_COLORS, title="predictive vs ΔD"),
        tooltip=["seed", "sample_id", "pos", alt.Tooltip("predicted:Q", format=".4f"),
                 alt.Tooltip("delta_d_none:Q", format=".4f")])
    lo = min(df["global_term"].min() or 0.0, df["local_term"].min() or 0.0)
    hi = max(df["global_term"].max() or 0.0, df["local_term"].max() or 0.0)
    diagonal = alt.Chart(pl.DataFrame({"x": [lo, hi], "y": [lo, hi]})).mark_line(
        color="#555", strokeDash=[4, 4]).encode(x="x:Q", y="y:Q")
    zero = alt.Chart(pl.DataFrame({"y": [0.0]})).mark_rule(color="#bbb").encode(y="y:Q")
    return alt.layer(zero, diagonal, points).properties(height=380, width="container")


def estimator_scatter(sample: pl.DataFrame, reference: str) -> alt.Chart:
    """The aggregated- and uniform-tail KL slopes against ``reference`` (``dkl_exact``
    when the run has it, else one estimator against the other)."""
    others = [c for c in ("dkl_agg", "dkl_uniform") if c != reference]
    long = sample.unpivot(index=["seed", "sample_id", "pos", reference, "out_of_region"],
                          on=others, variable_name="estimator", value_name="estimate")
    return alt.Chart(long).mark_circle(size=14, opacity=0.5).encode(
        x=alt.X(f"{reference}:Q", title=reference), y=alt.Y("estimate:Q", title="estimate"),
        color=alt.Color("estimator:N"), shape=alt.Shape("out_of_region:N"),
        tooltip=["seed", "sample_id", "pos", "estimator",
                 alt.Tooltip("estimate:Q", format=".4f"),
                 alt.Tooltip(f"{reference}:Q", format=".4f")],
    ).properties(height=360, width="container")


def support_atoms_chart(dist: pl.DataFrame) -> alt.Chart:
    """µ vs π_pre vs π_post on each token of the support S and the tail, one group of bars
    per token in support order (``dist``: ``support_distribution`` plus a ``label`` column)."""
    order = dist["distribution"].unique(maintain_order=True).to_list()
    labels = dist.sort("slot")["label"].unique(maintain_order=True).to_list()
    return alt.Chart(dist.drop_nulls("p")).mark_bar().encode(
        x=alt.X("label:N", title=None, sort=labels),
        xOffset=alt.XOffset("distribution:N", sort=order),
        y=alt.Y("p:Q", title="probability"),
        color=alt.Color("distribution:N", title=None, sort=order),
        tooltip=["label", "token_id", "distribution", alt.Tooltip("p:Q", format=".4g")],
    ).properties(height=280, width="container")


def support_chart(masses: pl.DataFrame) -> alt.Chart:
    """µ vs π_pre vs π_post on the parts of the support
    (:func:`~pdm_replay.report.dashboard_api.support_masses`; unknown parts are left out)."""
    order = masses["distribution"].unique(maintain_order=True).to_list()
    return alt.Chart(masses.drop_nulls("p")).mark_bar().encode(
        x=alt.X("part:N", title=None, sort=["k (sampled)", "rest of S", "tail (outside S)"]),
        xOffset=alt.XOffset("distribution:N", sort=order),
        y=alt.Y("p:Q", title="probability", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("distribution:N", title=None, sort=order),
        tooltip=["distribution", "part", alt.Tooltip("p:Q", format=".4f")],
    ).properties(height=280, width="container")


DODGE = 0.02  # a spread point's step, as a share of the x range: a point's width apart
NEAR = 0.01  # points closer than this share of both ranges overlap


def dodge(frame: pl.DataFrame, x: str, y: str) -> pl.DataFrame:
    """``frame`` with ``<x>_shown``: ``x``, except that points within :data:`NEAR` of
    each other's x and y ranges (overprinted marks) are spread sideways by
    :data:`DODGE` of the x range, centered on their mean x.

    >>> f = pl.DataFrame({"k": [0.90, 0.9001, 0.5], "d": [0.1, 0.1, 0.3]})
    >>> [round(v, 3) for v in dodge(f, "k", "d")["k_shown"]]
    [0.896, 0.904, 0.5]
    """
    if frame.height < 2:
        return frame.with_columns(pl.col(x).alias(f"{x}_shown"))
    span = {c: (frame[c].max() - frame[c].min()) or 1.0 for c in (x, y)}
    cell = [pl.col(c).truediv(NEAR * span[c]).round(0).alias(f"_{c}") for c in (x, y)]
    keys = [f"_{x}", f"_{y}"]
    spread = (pl.int_range(pl.len()).over(keys) - (pl.len().over(keys) - 1) / 2)
    return (frame.with_row_index("_row").with_columns(cell)
            .with_columns((pl.col(x).mean().over(keys) + spread * DODGE * span[x])
                          .alias(f"{x}_shown"))
            .sort("_row").drop("_row", *keys))


def mask_comparison_chart(frame: pl.DataFrame) -> alt.LayerChart:
    """Keep fraction (x: the cost in kept gradient) vs the median realized ΔD on
    out-of-region tokens under each mask's own update (y; rule p10–p90), one color per
    mask and one shape per divergence family (a legend, not labels: masks of one family
    keep nearly the same fraction, and their labels overprinted each other); ``frame`` is
    :func:`pdm_replay.report.mask_comparison.mask_comparison` rows with a measured ΔD.
    Lower and to the right: the divergence kept down at little cost."""
    frame = dodge(frame, "keep_fraction", "median_delta_d")
    base = alt.Chart(frame).encode(
        x=alt.X("keep_fraction_shown:Q", title="keep fraction (share of tokens whose "
                "gradient is used; points at one spot spread sideways, the tooltip is "
                "exact)", axis=alt.Axis(format="%"), scale=alt.Scale(zero=False)),
        color=alt.Color("mask:N", title="mask"))
    tips = ["mask", "family", alt.Tooltip("keep_fraction:Q", format=".1%"),
            alt.Tooltip("median_delta_d:Q", format=".3g"),
            alt.Tooltip("p10_delta_d:Q", format=".3g"),
            alt.Tooltip("p90_delta_d:Q", format=".3g"), "n_measured"]
    spread = base.mark_rule(opacity=0.5).encode(y="p10_delta_d:Q", y2="p90_delta_d:Q")
    points = base.mark_point(filled=True, size=70).encode(
        y=alt.Y("median_delta_d:Q", title="ΔD, own update (median, p10–p90)"),
        shape=alt.Shape("family:N", title="divergence"), tooltip=tips)
    zero = alt.Chart(pl.DataFrame({"y": [0.0]})).mark_rule(color="black").encode(y="y:Q")
    return alt.layer(spread, points, zero).properties(height=360, width="container")


def metric_panel(frame: pl.DataFrame, metric: str) -> alt.Chart:
    """One W&B-style panel: column ``metric`` of a per-step table ``frame`` (a ``step``
    column; :func:`pdm_replay.report.dashboard_api.mismatch_over_training`) as a line over
    steps, titled with the metric's name (the column is renamed: Vega-Lite reads ``/`` and
    ``@`` in field names as paths)."""
    data = frame.select("step", pl.col(metric).cast(pl.Float64).alias("value"))
    return alt.Chart(data).mark_line(point=True).encode(
        x=alt.X("step:Q", title="step", axis=alt.Axis(format="d")),
        y=alt.Y("value:Q", title=None, scale=alt.Scale(zero=False)),
        tooltip=["step", alt.Tooltip("value:Q", format=".4g")],
    ).properties(title=alt.TitleParams(metric, fontSize=10), height=160, width="container")
