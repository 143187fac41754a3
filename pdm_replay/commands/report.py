"""Orchestration behind ``pdm-replay report`` and ``pdm-replay sql``: connect, query,
render, write atomically. The CLI only parses options into the configs below.

Examples
--------
>>> import tempfile, pathlib, json
>>> from pdm_replay.testing.synthetic_run import example_run
>>> out = pathlib.Path(tempfile.mkdtemp()) / "report.json"
>>> _ = produce_report(ReportConfig(source=example_run(), format="json", out=out))
>>> sorted(json.loads(out.read_text()))[:3]
['attribution', 'behavior_fidelity', 'by']
>>> text = run_sql(SqlConfig(source=example_run(), query="SELECT $x AS x",
...                          params=(("x", "'; DROP TABLE tokens; --"),), format="csv"))
>>> text.splitlines()
['"x"', '"\\'; DROP TABLE tokens; --"']
"""

from __future__ import annotations

import dataclasses
import io
import os
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.csv as pacsv
from rich.console import Console
from rich.table import Table

from pdm_replay.errors import FieldError
from pdm_replay.io.atomic import AtomicParquetWriter, atomic_write_bytes, temp_path_for
from pdm_replay.report.build import (FORMATS, Report, ReportConfig, build_report,
                                     combine_by_step)
from pdm_replay.report.db import (DEFAULT_MEMORY_LIMIT, ReportDB, SqlFieldRefused, connect,
                                  read_only_query)
from pdm_replay.report.legend import run_coverage
from pdm_replay.names import SQL_FORMATS
from pdm_replay.report.run_info import RunInfo
from pdm_replay.report.render import (TERMINAL_WIDTH, fit_columns, render_html, render_json,
                                      render_markdown, render_table)

MAX_CELL = 40  # characters of a text cell in the sql table (csv/json/parquet keep all)


def render(report: Report, fmt: str, plots: dict[str, bytes] | None = None,
           wide: bool = False) -> str:
    """``report`` as text in ``fmt`` (one of :data:`FORMATS`); html embeds ``plots``;
    ``wide``: the table format shows every column (default: 100 terminal columns)."""
    if fmt == "table":
        return render_table(report, wide=wide)
    if fmt == "markdown":
        return render_markdown(report)
    if fmt == "json":
        return render_json(report)
    if fmt == "html":
        return render_html(report, plots or {})
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def produce_report(cfg: ReportConfig) -> tuple[Report, str]:
    """Build the report of ``cfg.source``; write ``cfg.out`` and PNGs to ``cfg.plots_dir``.

    Returns the report and its rendered text. Plots are made only for html or a plots_dir
    (they need matplotlib).
    """
    if cfg.format not in FORMATS:
        raise ValueError(f"unknown format {cfg.format!r}; expected one of {', '.join(FORMATS)}")
    if cfg.by not in (None, "step"):
        raise FieldError("{by} {got!r}: expected step", got=cfg.by)
    opts = {"memory_limit": cfg.memory_limit, "threads": cfg.threads,
            "thresholds": cfg.thresholds()}
    boot = {"bootstrap_samples": cfg.bootstrap_samples, "confidence": cfg.confidence,
            "bootstrap_seed": cfg.bootstrap_seed}
    with connect(cfg.source, **opts) as db:
        report = build_report(db, **boot) if cfg.by is None else None
        steps = logged_steps(db) if cfg.by == "step" else []
        coverage = run_coverage(db)
        plots = None
        if cfg.format == "html" or cfg.plots_dir is not None:
            from pdm_replay.report.plots import report_plots
            plots = report_plots(db)
    if report is None:
        per_step = {}
        for step in steps:
            with connect(db.info, step=step, **opts) as step_db:
                per_step[step] = build_report(step_db, **boot)
        if not per_step:
            raise FieldError("{by} step needs the tokens' step column (it holds no logged "
                             "step)", file=cfg.source)
        report = dataclasses.replace(combine_by_step(per_step), coverage=coverage)
    text = render(report, cfg.format, plots, cfg.wide)
    if cfg.out is not None:
        atomic_write_bytes(Path(cfg.out), text.encode("utf-8"))
    if cfg.plots_dir is not None and plots:
        for name, png in plots.items():
            atomic_write_bytes(Path(cfg.plots_dir) / f"{name}.png", png)
    return report, text


def logged_steps(db: ReportDB) -> list[int]:
    """The distinct logged steps of the run's tokens, ascending."""
    return [int(r[0]) for r in db.con.sql(
        "SELECT DISTINCT step FROM tokens WHERE step IS NOT NULL ORDER BY 1").fetchall()]


@dataclass(frozen=True)
class SqlConfig:
    """Options of ``pdm-replay sql`` (1:1 with the CLI)."""

    source: Path
    query: str
    params: tuple[tuple[str, str], ...] = ()  # (name, value): bound as $name, never inlined
    format: str = "table"
    out: Path | None = None
    max_rows: int = 50  # rows shown by the table format
    memory_limit: str = DEFAULT_MEMORY_LIMIT
    threads: int | None = None


def _param_dict(params: tuple[tuple[str, str], ...]) -> dict[str, str]:
    names = [n for n, _ in params]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"parameter(s) given twice: {', '.join(dupes)}")
    bad = [n for n in names if not n.isidentifier()]
    if bad:
        raise ValueError(f"parameter name(s) {', '.join(map(repr, bad))} are not identifiers; "
                         "use -p name value and $name in the query")
    return dict(params)


def run_sql(cfg: SqlConfig) -> str | None:
    """Run ``cfg.query`` over every report view; return the text, or None when written.

    Values are strings bound as parameters (DuckDB casts them where the query compares
    them with a typed column; ``$x::INT`` casts explicitly). The connection is sandboxed:
    it reads the run's files only.
    """
    if cfg.format not in SQL_FORMATS:
        raise ValueError(f"unknown format {cfg.format!r}; expected one of "
                         f"{', '.join(SQL_FORMATS)}")
    if cfg.format == "parquet" and cfg.out is None:
        raise FieldError("{format} parquet needs {out} FILE")
    params = _param_dict(cfg.params)
    query = read_only_query(cfg.query)
    with connect(cfg.source, memory_limit=cfg.memory_limit, threads=cfg.threads) as db:
        _refuse_run_output(cfg.out, db.info)
        reader = db.arrow_batches(query, params)
        if cfg.format == "parquet":
            with AtomicParquetWriter(Path(cfg.out), reader.schema) as writer:
                for batch in reader:
                    writer.write(batch)
            return None
        if cfg.format == "csv":
            return _write_csv(reader, cfg.out)
        if cfg.format == "json":
            text = pl.DataFrame(pl.from_arrow(reader.read_all())).write_json() + "\n"
        else:
            text = _table_text(reader, cfg.max_rows)
    if cfg.out is not None:
        atomic_write_bytes(Path(cfg.out), text.encode("utf-8"))
        return None
    return text


def _refuse_run_output(out: Path | str | None, info: RunInfo) -> None:
    """``--out`` must not replace the run's own data (its Parquet files, manifest)."""
    if out is None:
        return
    target = Path(out).resolve()
    data = {p.resolve() for p in (*info.tokens_files, *info.updates_files)}
    root = info.source.resolve() if info.source.is_dir() else None
    if target in data or (root is not None and root in target.parents):
        raise SqlFieldRefused("{out} {path} is inside the run being queried; write the "
                              "result elsewhere", file=out, path=out)


def _write_csv(reader: pa.RecordBatchReader, out: Path | None) -> str | None:
    """Stream CSV to ``out`` atomically (bounded memory), or return it as text."""
    if out is None:
        sink = io.BytesIO()
        with pacsv.CSVWriter(sink, reader.schema) as writer:
            for batch in reader:
                writer.write_batch(batch)
        return sink.getvalue().decode("utf-8")
    tmp = temp_path_for(Path(out))
    try:
        with pacsv.CSVWriter(str(tmp), reader.schema) as writer:
            for batch in reader:
                writer.write_batch(batch)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return None


def _table_text(reader: pa.RecordBatchReader, max_rows: int) -> str:
    """The first ``max_rows`` rows as a rich table; says when more rows were left out."""
    batches, n = [], 0
    for batch in reader:
        batches.append(batch)
        n += batch.num_rows
        if n > max_rows:  # one row past the limit tells that rows were left out
            break
    shown = pa.Table.from_batches(batches, reader.schema)
    more = shown.num_rows > max_rows
    frame = pl.DataFrame(pl.from_arrow(shown.slice(0, max_rows)))
    rows = [[sql_cell(v) for v in row] for row in frame.rows()]
    keep, left_out = fit_columns(frame.columns, rows, TERMINAL_WIDTH)
    if len(rows) == 1 and left_out:  # one wide row reads better as (column, value) lines
        frame = pl.DataFrame({"column": frame.columns, "value": rows[0]})
        rows, keep, left_out = [list(r) for r in frame.rows()], [0, 1], []
    table = Table(show_lines=False)
    for i in keep:
        table.add_column(frame.columns[i], overflow="fold", width=max(
            [len(r[i]) for r in rows] + [len(frame.columns[i])]))
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    console = Console(file=io.StringIO(), width=TERMINAL_WIDTH, record=True, color_system=None)
    console.print(table)
    if left_out:
        console.print(f"({len(left_out)} more columns: {', '.join(left_out)}; select fewer "
                      "or use --format csv/json/parquet)", highlight=False)
    if more:
        console.print(f"(first {max_rows} rows shown; use --format csv/json/parquet for all)")
    return console.export_text()


def sql_cell(value: object) -> str:
    """A query result cell: NULL, floats by magnitude (4 significant digits, scientific
    below 1e-4), thousands separators, long texts cut at :data:`MAX_CELL` characters."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    text = ", ".join(map(sql_cell, value)) if isinstance(value, list) else str(value)
    return text if len(text) <= MAX_CELL else text[:MAX_CELL - 1] + "…"
