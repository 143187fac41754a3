"""The Typer application object every command module registers on."""

from __future__ import annotations

import typer

from pdm_replay.cli.errors import DEBUG_ENV, DEBUG_KEY, GuardedGroup

app = typer.Typer(
    name="pdm-replay",
    cls=GuardedGroup,
    help="Replay logged LLM-RL rollouts and measure what trust-region masks really did.\n\n"
    "Typical flow: ingest -> validate -> masks (log only) or replay (checkpoint) -> report "
    "-> dashboard. Every command has --help.\n\n"
    "Exit codes: 0 ok, 1 validate found problems, 2 usage or input error, 3 unexpected "
    "error (a bug), 130 interrupted. Errors are one or two lines; --debug shows the "
    "traceback.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _main(ctx: typer.Context,
          debug: bool = typer.Option(False, "--debug", envvar=DEBUG_ENV,
                                     help="Show the full traceback of any error "
                                     "(before the command: pdm-replay --debug CMD ...).")
          ) -> None:
    ctx.meta[DEBUG_KEY] = debug
