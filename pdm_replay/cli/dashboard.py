"""``pdm-replay dashboard``: browse a run in the Streamlit dashboard."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from pdm_replay.cli.app import app
from pdm_replay.cli.common import err_console, fail
from pdm_replay.cli.mask_options import MaskModules, load_mask_modules
from pdm_replay.commands import dashboard as launch
from pdm_replay.dashboard_app import PAGES
from pdm_replay.names import DEFAULT_MEMORY_LIMIT


DASHBOARD_HELP = (f"Serve the dashboard ({', '.join(title for _, title, _ in PAGES)}) of RUN "
                  "until Ctrl-C. The run is read in place and read-only; tables are paged, so "
                  "a run of millions of tokens stays on disk.")


@app.command(help=DASHBOARD_HELP)
def dashboard(
    run: Path = typer.Argument(..., help="A replay run directory (manifest.json, tokens/, "
                               "updates/) or the tokens file written by `pdm-replay masks`."),
    port: int = typer.Option(8501, "--port", help="Port to serve on."),
    host: str = typer.Option("127.0.0.1", "--host",
                             help="Address to bind; the default serves this machine only. "
                             "The dashboard has no authentication: any other address "
                             "(0.0.0.0) shows the run to whoever reaches the port (a "
                             "warning is printed)."),
    tokenizer: Optional[str] = typer.Option(
        None, "--tokenizer", help="Tokenizer (local directory or cached hub name) for decoded "
        "text; default: the one the log metadata names, else the checkpoint's."),
    memory_limit: str = typer.Option(DEFAULT_MEMORY_LIMIT, "--memory-limit",
                                     help="DuckDB memory limit (it spills beyond it)."),
    mask_module: MaskModules = None,
) -> None:
    """Serve the dashboard (help text: DASHBOARD_HELP, which lists every page)."""
    try:
        cfg = launch.DashboardConfig(run=run, host=host, port=port, tokenizer=tokenizer,
                                     memory_limit=memory_limit,
                                     mask_modules=tuple(mask_module or ()))
        load_mask_modules(mask_module)  # a bad file fails here, not in the browser
        launch.check_ready(cfg)
    except (ValueError, FileNotFoundError, ImportError) as err:
        fail(err)
    warning = launch.exposure_warning(cfg)
    if warning:
        err_console.print(f"[bold yellow]warning:[/] {escape(warning)}", highlight=False,
                          soft_wrap=True)
    err_console.print(f"serving {escape(str(run))} on http://{host}:{port} (Ctrl-C to stop)",
                      highlight=False)
    code = launch.run_dashboard(cfg, os.environ)
    if code not in (0, -15):
        raise typer.Exit(code)
