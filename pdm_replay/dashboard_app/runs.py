"""Which run the dashboard shows, and the key its caches file it under (no Streamlit, no
DuckDB: the server's start-up child process (:mod:`.precompute`) and the pages share it).

Examples
--------
>>> import tempfile
>>> d = Path(tempfile.mkdtemp()); a = fingerprint(d)
>>> _ = (d / "manifest.json").write_text("{}"); a == fingerprint(d)
False
>>> run_ref(d).path == str(d.resolve())
True
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from pdm_replay.dashboard_app import ENV_RUN_DIR


@dataclass(frozen=True)
class RunRef:
    """A run as the caches key it: its path and the fingerprint of its files."""

    path: str
    fingerprint: str


def fingerprint(path: Path) -> str:
    """A digest of the names, sizes and mtimes of the run's files (no file is read): it
    changes when a replay adds a seed, so a reload shows it."""
    digest = hashlib.sha256()
    entries = [path] if path.is_file() else sorted(
        p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    for p in entries:
        stat = p.stat()
        digest.update(f"{p}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def run_ref(path: Path) -> RunRef:
    """The cache key of the run at ``path``: its resolved path and current fingerprint."""
    return RunRef(str(path.resolve()), fingerprint(path))


def env_run() -> Path | None:
    """The run ``$PDM_REPLAY_RUN_DIR`` names (None when unset); it may not exist."""
    raw = os.environ.get(ENV_RUN_DIR, "").strip()
    return Path(raw).expanduser() if raw else None


def query_name(fn: object) -> str:
    """The name a report-API function's results are cached under (module and name)."""
    return f"{fn.__module__}.{fn.__qualname__}"  # type: ignore[attr-defined]
