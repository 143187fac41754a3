"""Render a :class:`~pdm_replay.report.build.Report` as a terminal table, Markdown, JSON or
one self-contained HTML page (plots embedded as base64 PNG).

Examples
--------
>>> format_value("unsafe_ratio_pooled", 0.369), format_value("sign_test_p", 0.0123456)
('36.9%', '0.0123')
>>> format_value("unsafe_diff_pooled", 0.027), format_value("n_seeds", 61)
('+2.7 pp', '61')
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
import json
import re
from typing import Any, Mapping

import polars as pl
from rich.console import Console
from rich.table import Table

from pdm_replay.report.attribution_report import SHARE_COLUMNS
from pdm_replay.report.certificate_report import SHARE_COLUMNS as CERT_SHARE_COLUMNS
from pdm_replay.names import ACTUAL, NONE, OWN
from pdm_replay.report.build import Report
from pdm_replay.report.legend import coverage_line
from pdm_replay.report.legend import legend as report_legend
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


def _sentence(r: dict[str, Any], kind: str, confidence: float) -> str:
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


THRESHOLD_NAMES = {"eps": "ε", "eps_low": "ε_low", "eps_high": "ε_high", "delta_kl": "δ_KL",
                   "delta_tv": "δ_TV"}


def thresholds_text(report: Report) -> str:
    """The run's thresholds as ``ε = 0.2, …, δ_TV = 0.15 (from the tokens footer)``."""
    t = dataclasses.asdict(report.info.thresholds)
    return (", ".join(f"{THRESHOLD_NAMES.get(k, k)} = {v:g}" for k, v in t.items())
            + f" (from the {report.info.thresholds_source})")


def preamble(report: Report) -> tuple[str, list[str], list[str]]:
    """``(coverage, warnings, legend)`` lines every format prints (texts: :mod:`.legend`)."""
    cover = coverage_line(report.coverage) if report.coverage else ""
    return (cover, [w.message for w in report.warnings],
            [f"{term}: {text}" for term, text in report_legend()])


def headline_sentences(report: Report) -> list[str]:
    """One sentence per basis and comparison, in the paper's form."""
    return [_sentence(r, report.info.kind, report.confidence) + "."
            for r in report.headline.to_dicts()]


def _cells(key: str, frame: pl.DataFrame, confidence: float = 0.95
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


# the headline columns a 100-column terminal shows (``--wide``: every column); corrective
# keeps are left out there: they are 100% − unsafe keeps (report.legend)
NARROW = {"headline": ("step", "update", "pair", "δ", "unsafe: ratio (pooled)",
                       "unsafe: pred. (pooled)", "unsafe: ratio (seed mean)",
                       "unsafe: pred. (seed mean)", "seeds", "disagreements / seed"),
          "seed_wins": ("step", "update", "pair", "δ", "W/L/T/empty",
                        "sign test p", "Wilcoxon p"),
          # the rates first, then the counts they are over; family / estimator / region
          # repeat the pair's
          "seed_rates": ("step", "seed", "basis", "pair", "region", "unsafe ratio",
                         "unsafe predictive", "unsafe diff", "outcome", "n measured ratio",
                         "n measured predictive", "n disagree")}
# sections shown with their own headers: display labels (and every report section whose
# spec has labels or keeps its headers, e.g. the trainers' metric names)
LABELED = ("headline", "seed_wins")
TERMINAL_WIDTH = 100


def column_label(name: str) -> str:
    """A header without snake_case: ``n_out_of_region`` -> ``n out of region``."""
    return name.replace("_", " ")


def column_width(header: list[str], rows: list[list[str]], i: int) -> int:
    """Column ``i``'s width: its widest cell (a pair ``a vs b`` wraps after ``vs``) or its
    longest header word.

    >>> column_width(["pair"], [["dppo_topk_kl vs pdm_kl_agg"]], 0)
    15
    >>> column_width(["region"], [["ratio ∉ [0.5, 5.0]"]], 0)
    10
    """
    cells = [r[i] for r in rows]
    if header[i] in ("pair", "region"):  # rich wraps them at these spaces
        cells = [part for c in cells for part in re.split(r"(?<=vs) |(?<=[>∉<]) ", c)]
    return max([len(c) for c in cells] + [max(map(len, header[i].split() or [""]))])


def fit_columns(header: list[str], rows: list[list[str]], width: int
         ) -> tuple[list[int], list[str]]:
    """Indices of the leading columns that fit ``width`` (each at its widest cell or its
    longest header word, + 3 for borders and padding), and the names left out."""
    used, keep = 1, []
    for i, h in enumerate(header):
        need = column_width(header, rows, i) + 3
        if keep and used + need > width:
            return keep, [header[j] for j in range(i, len(header))]
        keep.append(i)
        used += need
    return keep, []


def _terminal_cells(key: str, frame: pl.DataFrame, confidence: float, wide: bool
                    ) -> tuple[list[str], list[list[str]], list[str]]:
    header, rows = _cells(key, frame, confidence)
    spec = SECTIONS.get(key)
    if key not in LABELED and not (spec and (spec.labels is not None or spec.headers)):
        header = [column_label(h) for h in header]
    if wide:
        return header, rows, []
    chosen = spec.narrow if spec and spec.narrow else NARROW.get(key)
    if chosen and frame.height:
        pos = {h: i for i, h in enumerate(header)}
        idx = [pos[h] for h in chosen if h in pos] + [
            i for i, h in enumerate(header) if h.startswith("Δ unsafe ratio")]
        dropped = [h for i, h in enumerate(header) if i not in idx]
        header, rows = [header[i] for i in idx], [[r[i] for i in idx] for r in rows]
    else:
        dropped = []
    keep, more = fit_columns(header, rows, TERMINAL_WIDTH)
    return ([header[i] for i in keep], [[r[i] for i in keep] for r in rows], dropped + more)


def display_frame(key: str, frame: pl.DataFrame, confidence: float = 0.95) -> pl.DataFrame:
    """A report section as the formats print it, every cell a string (rates as percent,
    small values scientific, no ``None``): what the dashboard shows where Streamlit's
    fixed decimals would print 9.39e-06 as 0.00."""
    header, rows = _cells(key, frame, confidence)
    return pl.DataFrame([dict(zip(header, r)) for r in rows],
                        schema={h: pl.String for h in header})


def verdict_lines(report: Report) -> list[str]:
    """The verdict (:mod:`.verdict`), one paragraph per comparison, what every format and
    the dashboard print first."""
    return [(f"step {v.step}: " if v.step is not None else "") + v.text
            for v in report.verdicts]


def _print_opening(console: Console, report: Report) -> list[str]:
    """Title, verdict, coverage, warnings and the headline sentences; returns the legend."""
    cover, warns, legend = preamble(report)
    console.print(f"[bold]pdm_replay report[/] — {report.info.source}; thresholds "
                  f"{thresholds_text(report)}", highlight=False)
    if report.verdicts:
        console.print("[bold]Verdict[/]")
    for line in verdict_lines(report):
        console.print(f"» {line}", highlight=False)
    console.print(f"coverage: {cover}", highlight=False)
    for w in warns:
        console.print(f"[bold]warning:[/] {w}", highlight=False)
    for line in headline_sentences(report):
        console.print(f"• {line}", highlight=False)
    return legend


def render_table(report: Report, width: int = TERMINAL_WIDTH, wide: bool = False) -> str:
    """Rich tables as plain text (what the terminal shows): ``width`` columns, each
    section's key columns (the rest named under it; ``wide``: every column, no limit)."""
    console = Console(file=io.StringIO(), width=10_000 if wide else width, record=True,
                      color_system=None)
    legend = _print_opening(console, report)
    for key, title, frame in report.sections():
        header, rows, left_out = _terminal_cells(key, frame, report.confidence, wide)
        table = Table(title=title, title_justify="left")
        for i, h in enumerate(header):  # headers wrap at words; cells stay whole
            table.add_column(h, overflow="fold", width=None if wide else
                             column_width(header, rows, i))
        for r in rows:
            table.add_row(*r)
        console.print(table if rows else f"{title}: (no rows)")
        if key in report.section_notes:
            console.print(f"  ({report.section_notes[key]})", highlight=False)
        if rows and left_out:
            console.print(f"  ({len(left_out)} more columns with --wide: "
                          f"{', '.join(left_out)})", highlight=False)
    console.print("[bold]Legend[/]")
    for line in legend:
        console.print(f"  {line}", highlight=False)
    for note in report.notes:
        console.print(f"note: {note}", highlight=False)
    return console.export_text()


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    def esc(s):
        return str(s).replace("|", "\\|")
    lines = ["| " + " | ".join(esc(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def render_markdown(report: Report) -> str:
    cover, warns, legend = preamble(report)
    parts = [f"# pdm_replay report\n\n`{report.info.source}`; thresholds "
             f"{thresholds_text(report)}.\n"]
    if report.verdicts:
        parts.append("## Verdict\n\n" + "\n".join(f"- {v}" for v in verdict_lines(report))
                     + "\n")
    parts.append(f"**Coverage:** {cover}\n")
    if warns:
        parts.append("## Warnings\n\n" + "\n".join(f"- {w}" for w in warns) + "\n")
    parts.append("\n".join(f"- {s}" for s in headline_sentences(report)) + "\n")
    for key, title, frame in report.sections():
        header, rows = _cells(key, frame, report.confidence)
        why = f"\n\n_{report.section_notes[key]}_" if key in report.section_notes else ""
        parts.append(f"## {title}\n\n" + (_markdown_table(header, rows) if rows
                                           else "(no rows)") + why + "\n")
    parts.append("## Legend\n\n" + "\n".join(f"- {line}" for line in legend) + "\n")
    if report.notes:
        parts.append("## Notes\n\n" + "\n".join(f"- {n}" for n in report.notes) + "\n")
    return "\n".join(parts)


def render_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, allow_nan=False, default=str) + "\n"


# .wide scrolls a table wider than the window (a 1,280 px screen) instead of the page
_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
.wide{overflow-x:auto;max-width:100%}code{background:#f3f3f3;padding:0 0.2em}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:0.9em}
th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
img{max-width:100%;border:1px solid #eee}.note{color:#8a4b00}.warning{color:#a00}
td{white-space:nowrap}dt{font-weight:bold}dd{margin:0 0 0.4em 1.5em}"""


def inline(text: str) -> str:
    """``text`` as HTML, its Markdown-style `code` spans as ``<code>`` (no raw backticks).

    >>> inline("update `none` & <b>")
    'update <code>none</code> &amp; &lt;b&gt;'
    """
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                   for r in rows)
    return (f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
            "</table></div>")


def render_html(report: Report, plots: Mapping[str, bytes]) -> str:
    """One self-contained page: tables, notes and the PNG ``plots`` inlined as base64."""
    cover, warns, legend = preamble(report)
    parts = [f"<h1>pdm_replay report</h1><p><code>{html.escape(str(report.info.source))}"
             f"</code>; thresholds {html.escape(thresholds_text(report))}.</p>"]
    if report.verdicts:
        parts.append('<h2>Verdict</h2><ul class="verdict">' + "".join(
            f"<li>{inline(v)}</li>" for v in verdict_lines(report)) + "</ul>")
    parts.append(f'<p class="coverage"><b>Coverage:</b> {inline(cover)}</p>')
    if warns:
        parts.append('<h2>Warnings</h2><ul class="warnings">' + "".join(
            f'<li class="warning">{inline(w)}</li>' for w in warns) + "</ul>")
    parts.append("<ul>" + "".join(f"<li>{inline(s)}</li>"
                                  for s in headline_sentences(report)) + "</ul>")
    for key, title, frame in report.sections():
        header, rows = _cells(key, frame, report.confidence)
        why = report.section_notes.get(key)
        parts.append(f"<h2>{inline(title)}</h2>"
                     + (_html_table(header, rows) if rows else "<p>(no rows)</p>")
                     + (f'<p class="note">{inline(why)}</p>' if why else ""))
    for name, png in plots.items():
        data = base64.b64encode(png).decode("ascii")
        parts.append(f"<h2>{inline(plot_title(name))}</h2>"
                     f'<img alt="{html.escape(name)}" src="data:image/png;base64,{data}">')
    parts.append("<h2>Legend</h2><dl>" + "".join(
        f"<dt>{inline(t)}</dt><dd>{inline(x)}</dd>" for t, x in report_legend()) + "</dl>")
    if report.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(
            f'<li class="note">{inline(n)}</li>' for n in report.notes) + "</ul>")
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>pdm_replay report"
            f"</title><style>{_CSS}</style></head><body>{''.join(parts)}</body></html>\n")
