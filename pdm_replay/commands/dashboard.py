"""Start the dashboard server: ``streamlit run`` on the packaged app (through
:mod:`.serve`), bound to localhost.

Kept free of Streamlit imports so the CLI can explain a missing ``dashboard`` extra.

Examples
--------
>>> cfg = DashboardConfig(run=Path("runs/r1"), port=8600)
>>> cmd = streamlit_command(cfg)
>>> cmd[1:4], cmd[cmd.index("--server.address") + 1], cmd[cmd.index("--server.port") + 1]
(['-m', 'pdm_replay.dashboard_app.serve', 'run'], '127.0.0.1', '8600')
>>> streamlit_env(cfg, {})["PDM_REPLAY_RUN_DIR"].endswith("r1")
True
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, NoReturn

from pdm_replay.errors import FieldError
from pdm_replay.names import DEFAULT_MEMORY_LIMIT

# What the server process reads from its environment (set here, read by dashboard_app).
ENV_RUN_DIR = "PDM_REPLAY_RUN_DIR"
ENV_TOKENIZER = "PDM_REPLAY_TOKENIZER"
ENV_MEMORY_LIMIT = "PDM_REPLAY_MEMORY_LIMIT"
ENV_MASK_MODULES = "PDM_REPLAY_MASK_MODULES"  # --mask-module files, os.pathsep-separated
# The Streamlit entry script, by path: this module sits below dashboard_app and does not
# import it (dashboard_app imports streamlit).
APP_FILE = Path(__file__).resolve().parents[1] / "dashboard_app" / "app.py"
# the server process `pdm-replay dashboard` runs: `streamlit run APP_FILE` after it has
# started computing the first page (serve.py, warmup.py)
SERVE_MODULE = "pdm_replay.dashboard_app.serve"

INSTALL_HINT = "the dashboard needs streamlit and altair: pip install 'pdm_replay[dashboard]'"


@dataclass(frozen=True)
class DashboardConfig:
    """Options of ``pdm-replay dashboard`` (1:1 with the CLI)."""

    run: Path
    host: str = "127.0.0.1"
    port: int = 8501
    tokenizer: str | None = None
    memory_limit: str = DEFAULT_MEMORY_LIMIT
    mask_modules: tuple[Path, ...] = ()  # --mask-module: user masks the app registers

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 65535:
            raise FieldError("{port} {got}: must be in 1..65535", got=self.port)


LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def exposure_warning(cfg: DashboardConfig) -> str | None:
    """A warning when ``cfg.host`` serves more than this machine (None for loopback).

    >>> exposure_warning(DashboardConfig(run=Path("r"), host="0.0.0.0"))[:39]
    'the dashboard has no authentication: 0.'
    >>> exposure_warning(DashboardConfig(run=Path("r"))) is None
    True
    """
    if cfg.host in LOOPBACK or cfg.host.startswith("127."):
        return None
    return (f"the dashboard has no authentication: {cfg.host}:{cfg.port} shows this run's "
            "data (token text included) to anyone who can reach the port; keep the default "
            "--host 127.0.0.1 and use an SSH tunnel (ssh -L 8501:localhost:8501 HOST), or "
            "put it behind an authenticating proxy")


def streamlit_command(cfg: DashboardConfig) -> list[str]:
    """The server's command line: ``streamlit run`` of the app through :mod:`.serve`
    (which first starts computing the first page), headless, no usage statistics, no file
    watcher, no developer toolbar, bound to ``cfg.host`` only."""
    return [sys.executable, "-m", SERVE_MODULE, "run", str(APP_FILE),
            "--server.address", cfg.host, "--server.port", str(cfg.port),
            "--server.headless", "true", "--browser.gatherUsageStats", "false",
            "--server.fileWatcherType", "none", "--server.runOnSave", "false",
            "--client.toolbarMode", "viewer"]


def streamlit_env(cfg: DashboardConfig, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` plus the variables the app reads (run directory, tokenizer, memory limit)."""
    env = {**base, ENV_RUN_DIR: str(cfg.run.expanduser().resolve()),
           ENV_MEMORY_LIMIT: cfg.memory_limit}
    if cfg.tokenizer:
        env[ENV_TOKENIZER] = cfg.tokenizer
    else:
        env.pop(ENV_TOKENIZER, None)
    if cfg.mask_modules:
        env[ENV_MASK_MODULES] = os.pathsep.join(str(Path(m).resolve()) for m in cfg.mask_modules)
    else:
        env.pop(ENV_MASK_MODULES, None)
    return env


def check_ready(cfg: DashboardConfig) -> None:
    """Fail before starting a server that could only show an error: the input is checked
    as ``report`` and ``sql`` check it (:func:`~pdm_replay.report.dashboard_api.finished_run`:
    a tokens/v1 file or a replay run directory; a rollout log or any other Parquet file is
    refused). A replay still before its first seed is served: its pages say to wait."""
    for module in ("streamlit", "altair"):
        if importlib.util.find_spec(module) is None:
            raise ImportError(INSTALL_HINT)
    if not cfg.run.expanduser().exists():
        raise FileNotFoundError(f"{cfg.run}: no such run directory or tokens file; pass the "
                                "output of `pdm-replay replay` (or `pdm-replay masks`)")
    from pdm_replay.report.dashboard_api import RunNotReady, finished_run  # duckdb, pyarrow
    try:
        finished_run(cfg.run.expanduser())
    except RunNotReady:
        pass


def run_dashboard(cfg: DashboardConfig, env: Mapping[str, str]) -> int:
    """Serve until Ctrl-C. On POSIX this process becomes the server (``exec``), so signals
    reach it directly and no orphan is left; elsewhere it waits on a child process."""
    check_ready(cfg)
    command, full_env = streamlit_command(cfg), streamlit_env(cfg, env)
    if os.name == "posix":
        return _exec(command, full_env)
    process = subprocess.Popen(command, env=full_env)
    try:
        return process.wait()
    except KeyboardInterrupt:
        process.terminate()
        return process.wait()


def _exec(command: list[str], env: dict[str, str]) -> NoReturn:
    """Replace this process with ``command`` (never returns)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(command[0], command, env)
