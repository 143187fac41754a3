"""The Typer application object every command module registers on."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="pdm-replay",
    help="Replay logged LLM-RL rollouts and measure what trust-region masks really did.\n\n"
    "Typical flow: ingest -> validate -> masks (log only) or replay (checkpoint) -> report "
    "-> dashboard. Every command has --help.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
    add_completion=False,
    pretty_exceptions_enable=False,
)
