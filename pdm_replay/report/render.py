"""Render a :class:`~pdm_replay.report.build.Report` as a terminal table, Markdown, JSON or
one self-contained HTML page (plots embedded as base64 PNG).

Examples
--------
>>> format_value("unsafe_keep_ratio", 0.369), format_value("sign_test_p", 0.0123456)
('36.9%', '0.0123')
>>> format_value("mean_unsafe_diff", 0.027), format_value("n_seeds", 61)
('+2.7 pp', '61')
"""

from __future__ import annotations

import base64
import html
import io
import json
from typing import Any, Mapping

import polars as pl
from rich.console import Console
from rich.table import Table

from pdm_replay.report.attribution import SHARE_COLUMNS
from pdm_replay.report.certificates import SHARE_COLUMNS as CERT_SHARE_COLUMNS
from pdm_replay.report.build import Report

DIFF_COLUMNS = ("mean_unsafe_diff", "unsafe_diff", "ci_low", "ci_high")
RATE_COLUMNS = frozenset({
    "unsafe_keep_rate", "corrective_rate", "keep_fraction", "accuracy", "sign_agreement",
    "mass_overflow_fraction", "unsafe_keep_ratio", "unsafe_keep_predictive",
    "corrective_ratio", "corrective_predictive", "unsafe_ratio", "unsafe_predictive"}
) | SHARE_COLUMNS | CERT_SHARE_COLUMNS
HEADLINE_LABELS = {
    "family": "family", "estimator": "estimator", "n_seeds": "seeds",
    "out_of_region_per_seed": "out of region / seed",
    "disagreement_per_seed": "disagreements / seed",
    "unsafe_keep_ratio": "unsafe keeps: ratio", "unsafe_keep_predictive": "unsafe: predictive",
    "corrective_ratio": "corrective: ratio", "corrective_predictive": "corrective: predictive",
    "wins": "wins", "sign_test_p": "sign test p", "wilcoxon_p": "Wilcoxon p",
    "mean_unsafe_diff": "Δ unsafe (ratio − pred.)",
}
PLOT_TITLES = {
    "kept_deltas": "ΔD of kept disagreement tokens, under the keeping mask's own update",
    "direction_terms": "Local vs global term of the KL slope (out-of-region tokens)",
    "seed_rates": "Per-seed unsafe-keep rate: ratio vs predictive",
}


def format_value(column: str, value: Any) -> str:
    """A cell as text: rates as percent, differences of rates in points, p-values 3 digits."""
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    if not isinstance(value, float):
        return str(value)
    if column in DIFF_COLUMNS:
        return f"{100 * value:+.1f} pp"
    if column.endswith("_p"):
        return f"{value:.3g}"
    if column in RATE_COLUMNS:
        return f"{value:.1%}"
    return f"{value:.4g}"


def headline_display(headline: pl.DataFrame, confidence: float = 0.95) -> pl.DataFrame:
    """The headline as strings with readable labels (wins as "x / y", the CI as one cell)."""
    ci = f"{confidence:.0%} CI"
    rows = []
    for r in headline.to_dicts():
        row = {label: format_value(k, r[k]) for k, label in HEADLINE_LABELS.items()}
        row["wins"] = f"{r['wins'] or 0} / {r['seeds_compared'] or 0}"
        lo, hi = format_value("ci_low", r["ci_low"]), format_value("ci_high", r["ci_high"])
        row[ci] = f"[{lo}, {hi}]"
        rows.append(row)
    schema = {c: pl.String for c in [*HEADLINE_LABELS.values(), ci]}
    return pl.DataFrame(rows, schema=schema)


def headline_sentences(report: Report) -> list[str]:
    """One sentence per pair in the paper's form."""
    out = []
    for r in report.headline.to_dicts():
        pair = f"{r['family']}/{r['estimator']} ({r['ratio_mask']} vs {r['predictive_mask']})"
        if report.info.kind == "masks":
            text = (f"{pair}: {r['out_of_region_per_seed']:.0f} tokens out of region, "
                    f"{r['disagreement_per_seed']:.0f} disagreements (log only, no replay)")
        else:
            text = (f"{pair}: {r['out_of_region_per_seed']:.1f} tokens out of region and "
                    f"{r['disagreement_per_seed']:.1f} disagreements per seed over "
                    f"{r['n_seeds']} seeds")
        if r["unsafe_keep_ratio"] is not None or r["unsafe_keep_predictive"] is not None:
            v = {k: format_value(k, r[k]) for k in r}
            text += (f"; unsafe keeps {v['unsafe_keep_predictive']} predictive vs "
                     f"{v['unsafe_keep_ratio']} ratio, corrective "
                     f"{v['corrective_predictive']} vs {v['corrective_ratio']}; predictive "
                     f"lower on {r['wins']} of {r['seeds_compared']} seeds (sign test p = "
                     f"{v['sign_test_p']}, Wilcoxon p = {v['wilcoxon_p']})")
        out.append(text + ".")
    return out


def _cells(key: str, frame: pl.DataFrame, confidence: float = 0.95
           ) -> tuple[list[str], list[list[str]]]:
    """Header and string rows of a section (headline relabelled, log health transposed)."""
    if key == "headline":
        shown = headline_display(frame, confidence)
        return shown.columns, [list(r) for r in shown.rows()]
    if key == "log_health":
        row = frame.row(0, named=True) if frame.height else {}
        return ["measure", "value"], [[k, format_value(k, v)] for k, v in row.items()]
    return frame.columns, [[format_value(c, v) for c, v in zip(frame.columns, r)]
                           for r in frame.rows()]


def render_table(report: Report, width: int = 160) -> str:
    """Rich tables as plain text (what the terminal shows)."""
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    console.print(f"[bold]pdm_replay report[/] — {report.info.source} ({report.info.kind}); "
                  f"thresholds {report.info.thresholds} from {report.info.thresholds_source}")
    for line in headline_sentences(report):
        console.print(f"• {line}")
    for key, title, frame in report.sections():
        header, rows = _cells(key, frame, report.confidence)
        table = Table(title=title, title_justify="left")
        for h in header:
            table.add_column(h, overflow="fold")
        for r in rows:
            table.add_row(*r)
        console.print(table if rows else f"{title}: (no rows)")
    for note in report.notes:
        console.print(f"note: {note}", highlight=False)
    return console.export_text()


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(esc(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def render_markdown(report: Report) -> str:
    parts = [f"# pdm_replay report\n\n`{report.info.source}` ({report.info.kind}); "
             f"thresholds `{report.info.thresholds}` from {report.info.thresholds_source}.\n",
             "\n".join(f"- {s}" for s in headline_sentences(report)) + "\n"]
    for key, title, frame in report.sections():
        header, rows = _cells(key, frame, report.confidence)
        parts.append(f"## {title}\n\n" + (_markdown_table(header, rows) if rows
                                           else "(no rows)") + "\n")
    if report.notes:
        parts.append("## Notes\n\n" + "\n".join(f"- {n}" for n in report.notes) + "\n")
    return "\n".join(parts)


def render_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, allow_nan=False, default=str) + "\n"


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:0.9em}
th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
img{max-width:100%;border:1px solid #eee}.note{color:#8a4b00}"""


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(report: Report, plots: Mapping[str, bytes]) -> str:
    """One self-contained page: tables, notes and the PNG ``plots`` inlined as base64."""
    info = report.info
    parts = [f"<h1>pdm_replay report</h1><p><code>{html.escape(str(info.source))}</code> "
             f"({info.kind}); thresholds <code>{html.escape(str(info.thresholds))}</code> "
             f"from {html.escape(info.thresholds_source)}.</p><ul>"
             + "".join(f"<li>{html.escape(s)}</li>" for s in headline_sentences(report))
             + "</ul>"]
    for key, title, frame in report.sections():
        header, rows = _cells(key, frame, report.confidence)
        parts.append(f"<h2>{html.escape(title)}</h2>"
                     + (_html_table(header, rows) if rows else "<p>(no rows)</p>"))
    for name, png in plots.items():
        data = base64.b64encode(png).decode("ascii")
        parts.append(f"<h2>{html.escape(PLOT_TITLES.get(name, name))}</h2>"
                     f'<img alt="{html.escape(name)}" src="data:image/png;base64,{data}">')
    if report.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(
            f'<li class="note">{html.escape(n)}</li>' for n in report.notes) + "</ul>")
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>pdm_replay report"
            f"</title><style>{_CSS}</style></head><body>{''.join(parts)}</body></html>\n")
