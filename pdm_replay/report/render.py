"""Render a :class:`~pdm_replay.report.build.Report` in an output format: a terminal table
(each section's key columns fitted to 100 columns), Markdown, JSON or one self-contained HTML
page (plots embedded as base64 PNG), each opening with the report's thresholds, verdict,
coverage, warnings and headline sentences. How a frame's cells read (labels, a value as
text) is :mod:`.display`'s, shared with the dashboard.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
import json
import re
from typing import Mapping

import polars as pl
from rich.console import Console
from rich.table import Table

from pdm_replay.report.build import Report
from pdm_replay.report.display import (THRESHOLD_NAMES, column_label, headline_sentence,
                                       plot_title, section_cells)
from pdm_replay.report.legend import coverage_line
from pdm_replay.report.legend import legend as report_legend
from pdm_replay.report.section_catalog import SECTIONS


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
    return [headline_sentence(r, report.info.kind, report.confidence) + "."
            for r in report.headline.to_dicts()]


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
    header, rows = section_cells(key, frame, confidence)
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
        header, rows = section_cells(key, frame, report.confidence)
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
        header, rows = section_cells(key, frame, report.confidence)
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
