"""``pdm-replay report`` and ``pdm-replay sql``: the direction analysis of a run, and
ad-hoc SQL over every report view."""

from __future__ import annotations

from pathlib import Path
from enum import Enum
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperCommand

from pdm_replay.cli.app import app
from pdm_replay.cli.common import choices, fail, value
from pdm_replay.cli.mask_options import MaskModules, load_mask_modules
from pdm_replay.names import DEFAULT_MEMORY_LIMIT, SQL_FORMATS
from pdm_replay.names import REPORT_BY as BY, REPORT_FORMATS as FORMATS

ReportFormat, SqlFormat, By = (choices("ReportFormat", FORMATS),
                               choices("SqlFormat", SQL_FORMATS), choices("By", BY))
RUN_HELP = ("A replay run directory (manifest.json, tokens/, updates/) or the tokens file "
            "written by `pdm-replay masks`.")
MEMORY_HELP = "DuckDB memory limit (it spills to a temp directory beyond it)."


def _errors() -> tuple[type[Exception], ...]:
    """The errors reported as one line; DuckDB's only once the command runs."""
    import duckdb
    return (FileNotFoundError, ValueError, ImportError, duckdb.Error)


def _keep(value: Any) -> Any:
    return value


class _NameValueCommand(TyperCommand):
    """Typer has no ``multiple`` option of pairs: make ``--param`` take two values."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.name == "param":
                param.nargs = 2


Fmt = Annotated[ReportFormat, typer.Option("--format", "-f",
                                           help="Output format (html embeds the plots).")]
Out = Annotated[Optional[Path], typer.Option("--out", "-o",
                                             help="Write here (atomically) instead of stdout.")]
PlotsDir = Annotated[Optional[Path], typer.Option(
    "--plots-dir", help="Also write the plots as PNG files here.")]
MemoryLimit = Annotated[str, typer.Option("--memory-limit", help=MEMORY_HELP)]
Threads = Annotated[Optional[int], typer.Option("--threads", min=1,
                                                help="DuckDB threads (default: all cores).")]
BootstrapSamples = Annotated[int, typer.Option(
    "--bootstrap-samples", min=1,
    help="Bootstrap draws B of the intervals (each draw resamples samples, not tokens).")]
Confidence = Annotated[float, typer.Option("--confidence", min=0.5, max=0.999,
                                           help="Level of the bootstrap intervals.")]
BootstrapSeed = Annotated[int, typer.Option(
    "--bootstrap-seed", help="Seed of the bootstrap (results are repeatable).")]
DeltaKL = Annotated[Optional[float], typer.Option(
    "--delta-kl", min=0.0,
    help="Re-threshold the KL direction analysis at this δ (no new replay): the "
         "out-of-region set, the decisions and the `actual` / `none` rates follow it; "
         "own-update rates only where the replay simulated that δ (a note says so).")]
DeltaTV = Annotated[Optional[float], typer.Option("--delta-tv", min=0.0,
                                                  help="The same for the TV family.")]
ByOpt = Annotated[Optional[By], typer.Option("--by", help="step: every section per logged step.")]
Wide = Annotated[bool, typer.Option(
    "--wide", help="--format table: every column (default: the key columns in 100 "
    "terminal columns, the others named).")]


@app.command()
def report(
    run: Annotated[Path, typer.Argument(help=RUN_HELP)], fmt: Fmt = "table",  # type: ignore[assignment]
    out: Out = None, plots_dir: PlotsDir = None,
    memory_limit: MemoryLimit = DEFAULT_MEMORY_LIMIT, threads: Threads = None,
    bootstrap_samples: BootstrapSamples = 2000, confidence: Confidence = 0.95,
    bootstrap_seed: BootstrapSeed = 0, delta_kl: DeltaKL = None, delta_tv: DeltaTV = None,
    by: ByOpt = None, wide: Wide = False, mask_module: MaskModules = None,
) -> None:
    """Headline direction analysis per update basis (`actual`: the trainer's real step,
    first when present; `own`: each mask's own simulated update; `none`: every token kept) and
    comparison (ratio vs predictive mask at each δ, a sweep's values side by side):
    out-of-region and disagreement tokens per seed, unsafe and corrective keep rates
    pooled (Σ/Σ) and as per-seed means, wins / losses / ties / empty seeds, sign-test and
    Wilcoxon p-values over independent seeds only, sample-clustered bootstrap intervals of
    the ratio − predictive difference; then sign accuracy, estimator accuracy (vs the
    reloaded µ; also on the disagreement tokens), µ fidelity, mask summary and log
    health. On `masks` output it shows what needs no replay and says what does."""
    options = {k: value(v) if isinstance(v, Enum) else v for k, v in locals().items()}
    # DuckDB and polars load when the command runs, not for --help.
    from pdm_replay.report.build import ReportConfig
    from pdm_replay.commands.report import produce_report
    options.update(source=options.pop("run"), format=options.pop("fmt"))
    del options["mask_module"]
    cfg = ReportConfig(**options)  # the other fields are named as the options
    try:
        load_mask_modules(mask_module)
        _, text = produce_report(cfg)
    except _errors() as err:
        fail(err)
    if out is None:
        typer.echo(text, nl=False)
    else:
        typer.echo(f"wrote {out}", err=True)


@app.command(cls=_NameValueCommand)
def sql(
    run: Path = typer.Argument(..., help=RUN_HELP),
    query: str = typer.Argument(..., help="SQL over the views: tokens, updates, "
                                "out_of_region, disagreements, alignment_by_seed, seed_rates, "
                                "sign_accuracy, estimator_accuracy, mask_summary, log_health, "
                                "settings, masks, mask_pairs, comparisons, bases, "
                                "cluster_counts, realized, ..."),
    param: Optional[list[str]] = typer.Option(
        None, "--param", "-p", metavar="NAME VALUE", parser=_keep,
        help="Bind $NAME to VALUE (repeatable); values are data, never SQL."),
    fmt: SqlFormat = typer.Option("table", "--format", "-f", help="Output format."),
    out: Optional[Path] = typer.Option(None, "--out", "-o",
                                       help="Write here (atomically); needed for parquet."),
    max_rows: int = typer.Option(50, "--max-rows", min=1, help="Rows shown by --format table."),
    memory_limit: str = typer.Option(DEFAULT_MEMORY_LIMIT, "--memory-limit", help=MEMORY_HELP),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="DuckDB threads."),
    mask_module: MaskModules = None,
) -> None:
    """Run one SQL query over a run's views (read-only: exactly one SELECT/WITH/FROM/
    DESCRIBE/SUMMARIZE statement; COPY, EXPORT, ATTACH, DDL and SET are refused, and the
    connection may read the run's files and nothing else). Example:
    pdm-replay sql RUN 'SELECT * FROM disagreements WHERE seed = $s' -p s 3
    (single quotes: inside double quotes the shell would expand $s before the query
    sees it)."""
    from pdm_replay.commands.report import SqlConfig, run_sql
    cfg = SqlConfig(source=run, query=query, params=tuple(tuple(p) for p in param or ()),
                    format=value(fmt), out=out, max_rows=max_rows, memory_limit=memory_limit,
                    threads=threads)
    try:
        load_mask_modules(mask_module)
        text = run_sql(cfg)
    except _errors() as err:
        fail(err)
    if text is not None:
        typer.echo(text, nl=False)
    else:
        typer.echo(f"wrote {out}", err=True)
