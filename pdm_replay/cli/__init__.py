"""Command-line interface: a thin Typer layer over the library.

One module per command group; each registers its commands on :data:`app`.
"""

from __future__ import annotations

from pdm_replay.cli.app import app
from pdm_replay.threads import apply_wait_policy
from pdm_replay.cli import validate as _validate  # noqa: F401  (registers commands)
from pdm_replay.cli import masks as _masks  # noqa: F401
from pdm_replay.cli import ingest as _ingest  # noqa: F401
from pdm_replay.cli import replay as _replay  # noqa: F401
from pdm_replay.cli import recompute as _recompute  # noqa: F401
from pdm_replay.cli import report as _report  # noqa: F401
from pdm_replay.cli import sample as _sample  # noqa: F401
from pdm_replay.cli import dashboard as _dashboard  # noqa: F401


def main() -> None:
    # Before any command imports torch: libgomp reads its wait policy once, when it loads.
    apply_wait_policy()
    app()


__all__ = ["app", "main"]
