"""Report plots as PNG bytes (matplotlib, the optional ``report`` extra).

- ``kept_deltas``: ΔD of the disagreement tokens each mask kept, under its own update;
- ``direction_terms``: local vs global term of the KL slope on out-of-region tokens,
  colored by whether the predictive sign agreed with the realized ΔD (update ``none``);
- ``seed_rates``: per-seed unsafe-keep rate, ratio (x) vs predictive (y);
- every report section with a plot (:mod:`pdm_replay.report.sections`), by its name:
  ``mask_comparison``, per mask the realized ΔD on out-of-region tokens under its own
  update (box p25–p75, whiskers p10–p90) beside its keep fraction; ``mismatch`` /
  ``keep_stats``, the per-step trainer metrics over steps
  (:mod:`pdm_replay.report.mismatch_plots`).

Figures are built with ``matplotlib.figure.Figure`` (no pyplot state), so this is safe to
call from a server (the dashboard).

Examples
--------
>>> from pdm_replay.testing.synthetic_run import example_run
>>> from pdm_replay.report.db import connect
>>> with connect(example_run()) as db:
...     pngs = report_plots(db)
>>> sorted(pngs)
['direction_terms', 'keep_stats', 'kept_deltas', 'mask_comparison', 'mismatch', 'seed_rates']
>>> pngs["seed_rates"][:4]
b'\\x89PNG'
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pdm_replay.report import api
from pdm_replay.report.db import ReportDB
from pdm_replay.report.figures import INSTALL_HINT, _empty, _figure, _png  # noqa: F401
from pdm_replay.report.section_catalog import SECTIONS
# one color per comparison pair, in the order the pairs come (registry order)
PAIR_COLORS = ("#1f77b4", "#17becf", "#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
                "#bcbd22")


def kept_deltas_png(deltas: pl.DataFrame) -> bytes:
    """Histograms of ``delta_d_kept`` per pair (and δ), ratio- vs predictive-kept."""
    pairs = deltas.select("pair", "delta", "region").unique(maintain_order=True).rows()
    fig = _figure(4.0 * max(len(pairs), 1), 3.2)
    axes = fig.subplots(1, max(len(pairs), 1), squeeze=False)[0]
    if not pairs:
        _empty(axes[0], "no realized ΔD: needs a replay")
    for ax, (pair, delta, region) in zip(axes, pairs):
        sub = deltas.filter((pl.col("pair") == pair) & (pl.col("delta") == delta)
                            & pl.col("delta_d_kept").is_not_null())
        values = sub["delta_d_kept"].to_numpy()
        ax.set_title(f"{pair}, {region}", fontsize=8)  # a band reads as one: IcePop's
        if not len(values):  # an empty histogram with "n=0" legends says nothing
            _empty(ax, "no kept disagreement token\nwith a measured ΔD")
            continue
        bins = np.histogram_bin_edges(values, bins=30)
        for kept_by, color in (("ratio", "#7f7f7f"), ("predictive", "#2ca02c")):
            part = sub.filter(pl.col("kept_by") == kept_by)
            if part.height:
                ax.hist(part["delta_d_kept"].to_numpy(), bins=bins, alpha=0.6, color=color,
                        label=f"kept by {part['update_mask'][0]} (n={part.height})")
        ax.axvline(0.0, color="black", lw=0.8)
        ax.set_xlabel("ΔD (> 0: unsafe keep)")
        ax.legend(fontsize=7)
    return _png(fig)


def direction_terms_png(terms: pl.DataFrame) -> bytes:
    """Scatter of sign(Â)·local vs sign(Â)·global term; the diagonal is the predictive
    boundary, the vertical axis the ratio boundary."""
    fig = _figure(5.5, 4.5)
    ax = fig.subplots()
    measured = terms.filter(pl.col("delta_d_none").is_not_null())
    if measured.height == 0:
        _empty(ax, "no realized ΔD under `none`: needs a replay")
        return _png(fig)
    agree = (np.sign(measured["predicted"].to_numpy())
             == np.sign(measured["delta_d_none"].to_numpy()))
    x, y = measured["local_term"].to_numpy(), measured["global_term"].to_numpy()
    ax.scatter(x[agree], y[agree], s=4, alpha=0.5, color="#2ca02c",
               label=f"predictive sign = sign(ΔD) ({agree.sum()})")
    ax.scatter(x[~agree], y[~agree], s=4, alpha=0.7, color="#d62728",
               label=f"predictive sign ≠ sign(ΔD) ({(~agree).sum()})")
    lim = float(np.nanmax(np.abs(np.concatenate([x, y])))) or 1.0
    ax.plot([-lim, lim], [-lim, lim], color="black", lw=0.8, label="local = global")
    ax.axvline(0.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("sign(Â) · local term (π_k − µ_k)")
    ax.set_ylabel("sign(Â) · global term")
    ax.legend(fontsize=7, loc="upper left")
    return _png(fig)


def seed_rates_png(rates: pl.DataFrame) -> bytes:
    """Per-seed unsafe-keep rates, ratio (x) vs predictive (y); below the diagonal = win.
    Under the first basis of ``rates`` (``actual`` when the run has it, else ``own``)."""
    fig = _figure(5.0, 4.5)
    ax = fig.subplots()
    first = rates["basis"][0] if rates.height else None
    both = rates.filter(pl.col("basis") == first).drop_nulls(
        ["unsafe_ratio", "unsafe_predictive"])
    if both.height == 0:
        _empty(ax, "no per-seed rates: needs a replay")
        return _png(fig)
    groups = both.group_by(["pair", "delta", "region"], maintain_order=True)
    for i, ((pair, delta, region), g) in enumerate(groups):
        ax.scatter(g["unsafe_ratio"], g["unsafe_predictive"], s=18, alpha=0.8,
                   color=PAIR_COLORS[i % len(PAIR_COLORS)], label=f"{pair}, {region}")
    ax.plot([0, 1], [0, 1], color="black", lw=0.8)
    ax.set_xlim(-0.02, 1.02)  # rates of 0 and 1 are common with few disagreements
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"update: {first}; below the diagonal: predictive lower (a win)",
                 fontsize=8)
    ax.text(0.97, 0.03, "predictive better", ha="right", va="bottom", fontsize=7,
            transform=ax.transAxes, color="#2a7a2a")
    ax.text(0.03, 0.97, "ratio better", ha="left", va="top", fontsize=7,
            transform=ax.transAxes, color="#a03030")
    ax.set_xlabel("unsafe-keep rate, ratio mask")
    ax.set_ylabel("unsafe-keep rate, predictive mask")
    ax.legend(fontsize=7)
    return _png(fig)


def report_plots(db: ReportDB, *, max_points: int = 20_000) -> dict[str, bytes]:
    """Every report plot of ``db``'s run as PNG bytes, by name."""
    pngs = {"kept_deltas": kept_deltas_png(api.kept_deltas(db)),
            "direction_terms": direction_terms_png(api.direction_terms(db, limit=max_points)),
            "seed_rates": seed_rates_png(api.seed_rates(db))}
    return {**pngs, **section_plots(db)}


def section_plots(db: ReportDB) -> dict[str, bytes]:
    """The plot of every registered report section that has one, by section name."""
    return {s.name: s.png(s.compute(db)) for s in SECTIONS.values() if s.plot is not None}
