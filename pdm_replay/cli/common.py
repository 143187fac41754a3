"""Small helpers shared by the command modules: console, errors, progress."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from pdm_replay.cli.errors import debug_enabled

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``message`` as an error on stderr and exit with ``code``; under ``--debug``,
    called while handling an exception, re-raise it instead (its traceback is shown)."""
    if debug_enabled() and sys.exc_info()[1] is not None:
        raise  # noqa: PLE0704 - the exception being handled by the caller
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False,
                      soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def progress_bar(description: str, total: int | None, unit: str = "rows") -> Iterator[Progress]:
    """A rich progress bar on stderr (hidden when stderr is not a terminal)."""
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn(unit), TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
               TimeRemainingColumn()]
    with Progress(*columns, console=err_console, transient=False,
                  disable=not err_console.is_terminal) as progress:
        progress.add_task(description, total=total, rate="")
        yield progress
