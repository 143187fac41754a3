"""Small helpers shared by the command modules: console, errors, progress."""

from __future__ import annotations

import enum
import sys
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, NoReturn, Sequence

import typer
from typer.core import TyperCommand
from rich.console import Console
from rich.markup import escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from pdm_replay.cli.errors import debug_enabled, error_text

HELP_WIDTH = 100  # columns of a PlainHelpCommand's --help (click's default is 80 at most)


def choices(name: str, values: Sequence[str]) -> type[enum.Enum]:
    """A str Enum of ``values``, so Typer checks an option against them and ``--help`` lists
    them; the command passes ``member.value`` on (a plain str) to its config."""
    return enum.Enum(name, {v: v for v in values}, type=str)  # type: ignore[return-value]


def value(option: enum.Enum | None) -> str | None:
    """The plain string of a :func:`choices` option (None stays None)."""
    return None if option is None else str(option.value)


class PlainHelpCommand(TyperCommand):
    """A command whose ``--help`` is click's plain text, wrapped at words: for commands
    with many options, where rich's table squeezes the help column and cuts long
    defaults and choices with "…"."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        formatter.width = max(formatter.width or 0, HELP_WIDTH)
        super(TyperCommand, self).format_help(ctx, formatter)  # the plain Command's help


console = Console()
err_console = Console(stderr=True)


def fail(message: str | BaseException, code: int = 2) -> NoReturn:
    """Print ``message`` (an exception: its :func:`error_text`, fields as this command's
    flags) as an error on stderr and exit with ``code``; under ``--debug``, called while
    handling an exception, re-raise it instead (its traceback is shown)."""
    if debug_enabled() and sys.exc_info()[1] is not None:
        raise  # noqa: PLE0704 - the exception being handled by the caller
    if isinstance(message, BaseException):
        message = error_text(message)
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False,
                      soft_wrap=True)
    raise typer.Exit(code)


PROGRESS_EVERY_S = 10.0  # seconds between plain progress lines (stderr not a terminal)


class ProgressLines:
    """What ``progress_bar`` yields when stderr is not a terminal (a log file, CI, nohup):
    the same ``update(task_id, completed=, total=, rate=, description=)`` as rich's Progress, printed as
    one plain line at most every ``every_s`` seconds and once at the end."""

    def __init__(self, description: str, total: int | None, unit: str,
                 every_s: float = PROGRESS_EVERY_S, clock: Callable[[], float] = time.monotonic,
                 write: Callable[[str], None] | None = None) -> None:
        self.task_ids = [0]
        self._desc, self._total, self._unit, self._every = description, total, unit, every_s
        self._clock, self._start = clock, clock()
        self._last: float | None = None
        self._done, self._rate = 0, ""
        self._write = write or (lambda line: print(line, file=sys.stderr, flush=True))

    def update(self, task_id: int, *, completed: int | None = None, total: int | None = None,
               rate: str | None = None, description: str | None = None) -> None:
        self._desc = self._desc if description is None else description
        self._done = self._done if completed is None else completed
        self._total = self._total if total is None else total
        self._rate = self._rate if rate is None else rate
        now = self._clock()
        if self._last is None or now - self._last >= self._every:
            self._last = now
            self._write(self.line(now))

    def line(self, now: float) -> str:
        of = f"/{self._total:,}" if self._total is not None else ""
        rate = f", {self._rate}" if self._rate else ""
        return (f"{self._desc}: {self._done:,}{of} {self._unit}{rate}, "
                f"{now - self._start:.0f} s elapsed")

    def finish(self) -> None:
        if self._last is not None:
            self._write(self.line(self._clock()))


@contextmanager
def progress_bar(description: str, total: int | None, unit: str = "rows"
                 ) -> Iterator[Progress | ProgressLines]:
    """A rich progress bar on stderr, or plain progress lines when stderr is not a
    terminal (so a long command piped to a file or run by a scheduler is never silent)."""
    if not err_console.is_terminal:
        lines = ProgressLines(description, total, unit)
        yield lines
        lines.finish()
        return
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn(unit), TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
               TimeRemainingColumn()]
    with Progress(*columns, console=err_console, transient=False) as progress:
        progress.add_task(description, total=total, rate="")
        yield progress
