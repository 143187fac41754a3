"""How a report frame reads, shared by every output format (:mod:`.render`: table,
Markdown, JSON, HTML) and the dashboard's pages: column labels and plot titles, a cell as
text (:func:`format_value`), a section as a frame of strings (:func:`display_frame`, the
headline, seed-wins and labeled-section displays) and a headline row as a sentence.

Examples
--------
>>> format_value("unsafe_ratio_pooled", 0.369), format_value("sign_test_p", 0.0123456)
('36.9%', '0.0123')
>>> format_value("unsafe_diff_pooled", 0.027), format_value("n_seeds", 61)
('+2.7 pp', '61')
"""

from __future__ import annotations

from typing import Any

import polars as pl

from pdm_replay.report.attribution_report import SHARE_COLUMNS
from pdm_replay.report.certificate_report import SHARE_COLUMNS as CERT_SHARE_COLUMNS
from pdm_replay.names import ACTUAL, NONE, OWN
from pdm_replay.report.section_catalog import (SECTIONS, percent_columns, signed_columns)

DIFF_COLUMNS = ("unsafe_diff", "ci_low", "ci_high", "unsafe_diff_pooled",
                "unsafe_diff_seed_mean", "seed_mean_ci_low", "seed_mean_ci_high")
RATE_COLUMNS = frozenset({
    "unsafe_keep_rate", "corrective_rate", "keep_fraction", "accuracy", "sign_agreement",
    "mass_overflow_fraction", "unsafe_ratio", "unsafe_predictive", "corrective_ratio",
    "corrective_predictive", "within_one_rounding",
    *(f"{w}_{s}_{p}" for w in ("unsafe", "corrective") for s in ("ratio", "predictive")
      for p in ("pooled", "seed_mean"))}
) | SHARE_COLUMNS | CERT_SHARE_COLUMNS  # and each report section's percent columns
HEADLINE_LABELS = {
    "basis": "update", "pair": "pair", "family": "family", "estimator": "estimator",
    "region": "region", "delta": "δ",
    "n_seeds": "seeds", "out_of_region_per_seed": "out of region / seed",
    "disagreement_per_seed": "disagreements / seed",
    "unsafe_ratio_pooled": "unsafe: ratio (pooled)",
    "unsafe_predictive_pooled": "unsafe: pred. (pooled)",
    "unsafe_ratio_seed_mean": "unsafe: ratio (seed mean)",
    "unsafe_predictive_seed_mean": "unsafe: pred. (seed mean)",
    "corrective_ratio_pooled": "corrective: ratio (pooled)",
    "corrective_predictive_pooled": "corrective: pred. (pooled)",
    "corrective_ratio_seed_mean": "corrective: ratio (seed mean)",
    "corrective_predictive_seed_mean": "corrective: pred. (seed mean)",
}
BASIS_TEXT = {ACTUAL: "under the trainer's actual update",
              OWN: "each mask under its own simulated update",
              NONE: f"under `{NONE}` (every token kept)"}
THRESHOLD_NAMES = {"eps": "ε", "eps_low": "ε_low", "eps_high": "ε_high", "delta_kl": "δ_KL",
                   "delta_tv": "δ_TV"}
PLOT_TITLES = {  # and each report section's plot_title
    "kept_deltas": "ΔD of kept disagreement tokens, under the keeping mask's own update",
    "direction_terms": "Local vs global term of the KL slope (out-of-region tokens)",
    "seed_rates": "Per-seed unsafe-keep rate: ratio (x) vs predictive (y); a point below the "
                  "diagonal is a seed where predictive kept fewer unsafe tokens (lower is "
                  "better)",
}


def plot_title(name: str) -> str:
    """The heading of the plot ``name`` (a report section's: its spec's ``plot_title``)."""
    spec = SECTIONS.get(name)
    return PLOT_TITLES.get(name) or (spec and spec.plot_title) or name


def format_value(column: str, value: Any) -> str:
    """A cell as text: rates as percent, differences of rates in points, p-values 3 digits."""
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if not isinstance(value, float):
        return str(value)
    column = column.split("@")[0]  # a threshold comparison's <column>@<δ>
    if column in DIFF_COLUMNS:
        return f"{100 * value:+.1f} pp"
    if column.endswith("_p"):
        return f"{value:.3g}"
    if column in signed_columns():  # a realized ΔD: its sign is the point
        return f"{value:+.3g}" if value else "0"
    if column in RATE_COLUMNS or column in percent_columns():
        return f"{value:.1%}"
    return f"{value:.4g}"


def threshold_cell(r: dict[str, Any]) -> str:
    """A comparison's threshold as shown: δ, or the band of a two-sided region (the IcePop
    pair's ``ratio ∉ [0.5, 5.0]`` reads ``[0.5, 5.0]``, not ``0.5``).

    >>> threshold_cell({"delta": 0.5, "region": "ratio ∉ [0.5, 5.0]"})
    '[0.5, 5.0]'
    >>> threshold_cell({"delta": 0.15, "region": "kl_topk > 0.15"})
    '0.15'
    """
    region = r.get("region") or ""
    return region.split(" ∉ ", 1)[1] if " ∉ " in region else format_value("delta", r["delta"])


def headline_display(headline: pl.DataFrame, confidence: float = 0.95) -> pl.DataFrame:
    """The headline's rates as strings with readable labels."""
    rows = []
    for r in headline.to_dicts():
        row = {"step": str(r["step"])} if "step" in r else {}
        row.update({label: format_value(k, r[k]) for k, label in HEADLINE_LABELS.items()})
        row["δ"] = threshold_cell(r)
        rows.append(row)
    columns = list(rows[0]) if rows else list(HEADLINE_LABELS.values())
    return pl.DataFrame(rows, schema={c: pl.String for c in columns})


def section_display(key: str, frame: pl.DataFrame) -> pl.DataFrame:
    """A registered report section (:mod:`pdm_replay.report.sections`) as strings under
    its spec's labels (a leading ``step`` kept); "–" where empty."""
    labels = SECTIONS[key].labels or {c: c for c in frame.columns if c != "step"}
    rows = []
    for r in frame.to_dicts():
        row = {"step": str(r["step"])} if "step" in r else {}
        row.update({label: format_value(k, r[k]) for k, label in labels.items()})
        rows.append(row)
    columns = list(rows[0]) if rows else list(labels.values())
    return pl.DataFrame(rows, schema={c: pl.String for c in columns})


def mask_comparison_display(frame: pl.DataFrame) -> pl.DataFrame:
    """The mask comparison (:mod:`pdm_replay.report.mask_comparison`) as strings under its
    labels: ΔD signed, 3 digits; "–" where empty."""
    return section_display("mask_comparison", frame)


def seed_wins_display(wins: pl.DataFrame, confidence: float = 0.95) -> pl.DataFrame:
    """Seed outcomes, paired tests and the differences with their intervals as strings."""
    ci = f"{confidence:.0%} CI"
    rows = []
    for r in wins.to_dicts():
        row = {"step": str(r["step"])} if "step" in r else {}
        row.update({HEADLINE_LABELS[k]: format_value(k, r[k])
                    for k in ("basis", "pair", "family", "estimator", "region", "delta",
                              "n_seeds")})
        row["δ"] = threshold_cell(r)
        row["W/L/T/empty"] = f"{r['wins']}/{r['losses']}/{r['ties']}/{r['empty_seeds']}"
        row["empty seeds"] = format_value("empty_seed_list", r["empty_seed_list"])
        row["sign test p"] = format_value("sign_test_p", r["sign_test_p"])
        row["Wilcoxon p"] = format_value("wilcoxon_p", r["wilcoxon_p"])
        for name, lo, hi, label in (
                ("unsafe_diff_pooled", "ci_low", "ci_high", "Δ unsafe ratio − pred. (pooled)"),
                ("unsafe_diff_seed_mean", "seed_mean_ci_low", "seed_mean_ci_high",
                 "Δ unsafe (seed mean)")):
            bounds = [format_value(c, r[c]).removesuffix(" pp") for c in (lo, hi)]
            row[f"{label} [{ci}]"] = f"{format_value(name, r[name])} [{', '.join(bounds)}]"
        row["bootstrap"] = f"B = {r['bootstrap_resamples']}, {r['bootstrap_clusters']} samples"
        rows.append(row)
    columns = list(rows[0]) if rows else ["basis"]
    return pl.DataFrame(rows, schema={c: pl.String for c in columns})


def _basis(r: dict[str, Any]) -> str:
    if r["basis"] == OWN:
        return f"{BASIS_TEXT[OWN]} ({r['ratio_update']} / {r['predictive_update']})"
    return BASIS_TEXT.get(r["basis"], r["basis"])


def headline_sentence(r: dict[str, Any], kind: str, confidence: float) -> str:
    """A headline row as a sentence in the paper's form (``kind``: the run's; a ``masks``
    run's row is counts only, it has no replay)."""
    step = f"step {r['step']}, " if "step" in r else ""
    pair = (f"{step}{r['pair']} ({r['family']}/{r['estimator']}, out of region: "
            f"{r['region']})")
    if kind == "masks":
        return (f"{pair}: {r['out_of_region_per_seed']:.0f} tokens out of region, "
                f"{r['disagreement_per_seed']:.0f} disagreements (log only, no replay)")
    v = {k: format_value(k, r[k]) for k in r}
    text = (f"{pair}, {_basis(r)}: {r['out_of_region_per_seed']:.1f} tokens out of region "
            f"and {r['disagreement_per_seed']:.1f} disagreements per seed over "
            f"{r['n_seeds']} seeds")
    if r["unsafe_ratio_pooled"] is None and r["unsafe_predictive_pooled"] is None:
        return text
    text += (f"; unsafe keeps predictive vs ratio: pooled {v['unsafe_predictive_pooled']} vs "
             f"{v['unsafe_ratio_pooled']}, per-seed mean {v['unsafe_predictive_seed_mean']} "
             f"vs {v['unsafe_ratio_seed_mean']}; corrective pooled "
             f"{v['corrective_predictive_pooled']} vs {v['corrective_ratio_pooled']}, "
             f"per-seed mean {v['corrective_predictive_seed_mean']} vs "
             f"{v['corrective_ratio_seed_mean']}; ratio − predictive unsafe "
             f"{v['unsafe_diff_pooled']} pooled, {confidence:.0%} CI [{v['ci_low']}, "
             f"{v['ci_high']}] (sample-clustered bootstrap, B = {r['bootstrap_resamples']}, "
             f"{r['bootstrap_clusters']} samples); predictive lower on {r['wins']} of "
             f"{r['n_seeds']} seeds ({r['losses']} higher, {r['ties']} tied, "
             f"{r['empty_seeds']} with an empty side)")
    if not r["seeds_compared"]:
        return text + ", no seed to compare"
    if r["seeds_independent"]:
        return text + (f", sign test p = {v['sign_test_p']}, Wilcoxon p = "
                       f"{v['wilcoxon_p']} (over independent seeds)")
    return text + ", no p-values: the seeds are not independent"


def section_cells(key: str, frame: pl.DataFrame, confidence: float = 0.95
                  ) -> tuple[list[str], list[list[str]]]:
    """Header and string rows of a section (headline relabeled, log health transposed)."""
    shows = {"headline": headline_display, "seed_wins": seed_wins_display}
    if key in shows and frame.height:
        shown = shows[key](frame, confidence)
        return shown.columns, [list(r) for r in shown.rows()]
    if key in SECTIONS and SECTIONS[key].labels is not None and frame.height:
        shown = section_display(key, frame)
        return shown.columns, [list(r) for r in shown.rows()]
    if key == "log_health" and "step" not in frame.columns:
        row = frame.row(0, named=True) if frame.height else {}
        return ["measure", "value"], [[k, format_value(k, v)] for k, v in row.items()]
    return frame.columns, [[format_value(c, v) for c, v in zip(frame.columns, r)]
                           for r in frame.rows()]


def column_label(name: str) -> str:
    """A header without snake_case: ``n_out_of_region`` -> ``n out of region``."""
    return name.replace("_", " ")


def display_frame(key: str, frame: pl.DataFrame, confidence: float = 0.95) -> pl.DataFrame:
    """A report section as the formats print it, every cell a string (rates as percent,
    small values scientific, no ``None``): what the dashboard shows where Streamlit's
    fixed decimals would print 9.39e-06 as 0.00."""
    header, rows = section_cells(key, frame, confidence)
    return pl.DataFrame([dict(zip(header, r)) for r in rows],
                        schema={h: pl.String for h in header})

