"""``pdm-replay validate``: check a rollout log before using it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from pdm_replay.cli.app import app
from pdm_replay.cli.common import console, fail

if TYPE_CHECKING:
    from pdm_replay.checks import ValidationReport


def render_report(report: ValidationReport) -> None:
    """Print the summary table and every listed problem."""
    t = Table(title=f"rollout log {report.path}", show_header=False)
    t.add_row("files", str(report.files))
    t.add_row("samples", str(report.samples))
    t.add_row("tokens", str(report.tokens))
    if report.meta:
        m = report.meta
        t.add_row("vocab / K", f"{m.vocab_size} / {m.top_k} ({m.topk_convention}, "
                  f"{m.logprobs_mode} logprobs)")
    t.add_row("top-K sizes", ", ".join(f"{k}: {v}" for k, v in sorted(report.k_hist.items())))
    t.add_row("top-K mass", ", ".join(f"{k} {v:.4f}" for k, v in
                                      report.mass_percentiles().items()))
    steps = sorted(report.steps.items())
    t.add_row("steps", ", ".join(f"{s} ({n} samples)" for s, n in steps[:10])
              + (f" … {len(steps)} steps" if len(steps) > 10 else ""))
    for kind, n in sorted(report.warning_counts.items()):
        if n:
            t.add_row(f"warning: {kind}", _warning_text(kind, n))
    console.print(t)
    for problem in report.errors:
        console.print(f"[red]✗[/] {problem}", highlight=False, soft_wrap=True)
    if report.error_count > len(report.errors):
        console.print(f"… {report.error_count - len(report.errors)} more problems "
                      "(raise --max-errors to list them)")
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(report.error_counts.items()))
    console.print("[green]OK[/]: no errors" if report.ok
                  else f"[red]{report.error_count} errors[/] ({counts})")


def _warning_text(kind: str, n: int) -> str:
    if kind == "mass-overflow":
        return (f"{n} tokens whose logged top-K mass exceeds 1 (bf16/fp8 or renormalized "
                "log-probs); their µ tail is clamped to 0")
    if kind == "truncated-sampler":
        return ("the sampler truncated (top-p/top-k) and log-probs are 'processed': the "
                "logged tail mass is renormalized, not the model's tail")
    return str(n)


@app.command()
def validate(
    log: Path = typer.Argument(..., help="Rollout log: a Parquet file or a directory of them."),
    max_errors: int = typer.Option(50, "--max-errors", min=0,
                                   help="List at most this many problems (all are counted)."),
) -> None:
    """Check a rollout/v1 log: schema, footer metadata, lengths, id ranges, NaN/inf,
    log-probs <= 0, duplicate top-K ids, top-K mass, and behavior_logprobs vs top-K.

    Exit code 0 when clean, 1 when any error was found, 2 when there is no log to check
    (a missing path, a directory without Parquet files).
    """
    from pdm_replay.io.reader import list_parquet_files
    from pdm_replay.commands.validate import validate_log  # torch: only when the command runs
    try:
        list_parquet_files(log)
    except FileNotFoundError as exc:  # nothing to summarize: no table, the path once
        fail(exc)
    report = validate_log(log, max_errors=max_errors)
    render_report(report)
    raise typer.Exit(0 if report.ok else 1)
