"""Small helpers shared by the command modules: console, errors, progress."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``message`` as an error on stderr and exit with ``code``."""
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
