"""The dashboard's run handle and caches (Streamlit only; no SQL, no torch).

One read-only DuckDB connection per run directory lives in ``st.cache_resource``; query
results live in ``st.cache_data`` keyed on the run, the fingerprint of its files, the
library function and its arguments. The fingerprint (names, sizes and mtimes of the
manifest, the done markers and the Parquet files) changes when a replay adds a seed, so a
reload shows it. Every failure becomes a message in the page (:func:`fail`), not a
traceback.

The server fills the same caches at start-up (:mod:`.warmup` calls :func:`open_run` and
:func:`compute`, the raising forms of :func:`current_run` and :func:`data`), before the
first session; :data:`WARM_UP` records what it did, and a failure there is shown on the
pages of the run it was computing (:func:`open_page`).
"""

from __future__ import annotations

import hashlib
import os
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NoReturn

import duckdb
import streamlit as st

from pdm_replay.dashboard_app import (ENV_MASK_MODULES, ENV_MEMORY_LIMIT, ENV_RUN_DIR,
                                      ENV_TOKENIZER)
from pdm_replay.dashboard_app.text import LoadedTokenizer, load_tokenizer, tokenizer_candidates
from pdm_replay.report.dashboard_api import RunStatus, connect_dashboard
from pdm_replay.masks import load_mask_module
from pdm_replay.report.db import DEFAULT_MEMORY_LIMIT, ReportDB
from pdm_replay.report.run_info import RunInfo

ERRORS = (OSError, ValueError, duckdb.Error)
START_HINT = ("Start the dashboard with `pdm-replay dashboard RUN_DIR`, where RUN_DIR is the "
              "output directory of `pdm-replay replay` (or the tokens file of "
              "`pdm-replay masks`).")


@dataclass(frozen=True)
class RunRef:
    """A run as the caches key it: its path and the fingerprint of its files."""

    path: str
    fingerprint: str


@dataclass
class WarmUp:
    """What the server's start-up computation (:mod:`.warmup`) did, for the pages to show:
    the run it computed (``fingerprint``), its seconds and its error (None: it succeeded
    or has not run); ``done`` is set when it has finished."""

    done: threading.Event = field(default_factory=threading.Event)
    fingerprint: str | None = None
    seconds: float | None = None
    error: str | None = None


WARM_UP = WarmUp()  # one per server process
# load_mask_module lists a module before running it: a second thread must not see it half
# registered
_MASK_MODULES_LOCK = threading.Lock()


class _Handle:
    """An open report connection; queries take ``lock`` (one DuckDB connection is not safe
    for concurrent use by the sessions' threads)."""

    def __init__(self, db: ReportDB, status: RunStatus) -> None:
        self.db, self.status, self.lock = db, status, threading.Lock()
        # An evicted handle closes its connection (and DuckDB's temp dir) when collected.
        weakref.finalize(self, db.close)


def fingerprint(path: Path) -> str:
    """A digest of the names, sizes and mtimes of the run's files (no file is read).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); a = fingerprint(d)
    >>> _ = (d / "manifest.json").write_text("{}"); a == fingerprint(d)
    False
    """
    digest = hashlib.sha256()
    entries = [path] if path.is_file() else sorted(
        p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    for p in entries:
        stat = p.stat()
        digest.update(f"{p}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def fail(message: str, hint: str | None = None) -> NoReturn:
    """Show ``message`` (and ``hint``) as an error in the page and stop the page."""
    st.error(message if hint is None else f"{message}\n\n{hint}", icon="🚫")
    st.stop()
    raise AssertionError("unreachable: st.stop() ends the script run")  # for type checkers


@st.cache_resource(max_entries=4, show_spinner="Opening the run …")
def _open(path: str, fingerprint: str, memory_limit: str) -> _Handle:
    db, status = connect_dashboard(path, memory_limit=memory_limit)
    return _Handle(db, status)


def open_run(run: RunRef) -> _Handle:
    """The cached connection of ``run`` (opened on the first call); errors are raised."""
    memory_limit = os.environ.get(ENV_MEMORY_LIMIT, DEFAULT_MEMORY_LIMIT)
    with _MASK_MODULES_LOCK:  # the warm-up thread and a session may both get here first
        for module in filter(None, os.environ.get(ENV_MASK_MODULES, "").split(os.pathsep)):
            load_mask_module(module)  # once per process: a second load is a no-op
    return _open(run.path, run.fingerprint, memory_limit)


def _handle(run: RunRef) -> _Handle:
    try:
        return open_run(run)
    except ERRORS as err:
        fail(f"Cannot open `{run.path}`: {err}", START_HINT)


def run_ref(path: Path) -> RunRef:
    """The cache key of the run at ``path``: its resolved path and current fingerprint."""
    return RunRef(str(path.resolve()), fingerprint(path))


def current_run() -> RunRef:
    """The run named by ``$PDM_REPLAY_RUN_DIR``, opened; a message and stop when there is
    none, it does not exist, or it cannot be read."""
    path = env_run()
    if path is None:
        fail("No run directory was given.", START_HINT)
    if not path.exists():
        fail(f"`{path}`: no such run directory or tokens file.", START_HINT)
    run = run_ref(path)
    _handle(run)
    return run


def run_info(run: RunRef) -> tuple[RunInfo, RunStatus]:
    """What the open connection reads (files, thresholds, manifest) and its completeness."""
    handle = _handle(run)
    return handle.db.info, handle.status


@st.cache_data(max_entries=512, show_spinner="Querying …")
def _cached(path: str, fingerprint: str, name: str, kwargs: dict[str, Any],
            _fn: Callable[..., Any]) -> Any:
    handle = _handle(RunRef(path, fingerprint))
    with handle.lock:
        return _fn(handle.db, **kwargs)


def compute(run: RunRef, fn: Callable[..., Any], **kwargs: Any) -> Any:
    """``fn(db, **kwargs)`` through the cache :func:`data` reads; errors are raised."""
    return _cached(run.path, run.fingerprint, f"{fn.__module__}.{fn.__qualname__}", kwargs,
                   fn)


def data(run: RunRef, fn: Callable[..., Any], **kwargs: Any) -> Any:
    """``fn(db, **kwargs)`` for a report-API function ``fn``, cached per run and arguments.

    A failing query (e.g. a Parquet file damaged after the run was opened) shows a message
    and stops the page.
    """
    try:
        return compute(run, fn, **kwargs)
    except ERRORS as err:
        fail(f"Query `{fn.__name__}` on `{run.path}` failed: {err}",
             "If a replay is still writing this directory, wait and reload; otherwise "
             "re-run `pdm-replay replay ... --resume`.")


@st.cache_resource(max_entries=4, show_spinner="Loading the tokenizer …")
def _tokenizer(candidates: tuple[tuple[str, str], ...]) -> LoadedTokenizer:
    return load_tokenizer(candidates)


def tokenizer(run: RunRef) -> LoadedTokenizer:
    """The tokenizer of the run: ``$PDM_REPLAY_TOKENIZER`` (``--tokenizer``), else the one
    the log metadata names, else the checkpoint's; ``tokenizer`` None when none loads."""
    info, _ = run_info(run)
    explicit = os.environ.get(ENV_TOKENIZER, "").strip() or None
    return _tokenizer(tuple(tokenizer_candidates(info, explicit)))


def env_run() -> Path | None:
    """The run ``$PDM_REPLAY_RUN_DIR`` names (None when unset); it may not exist."""
    raw = os.environ.get(ENV_RUN_DIR, "").strip()
    return Path(raw).expanduser() if raw else None


def _warm_up_note() -> None:
    """The start-up computation's error, while the run is as it was when it failed (after
    a change the page's own computation is the news, and it shows its own errors)."""
    if not WARM_UP.error:
        return
    path = env_run()
    now = fingerprint(path) if path is not None and path.exists() else None
    if WARM_UP.fingerprint == now:
        st.warning(f"The server's start-up computation of this run failed: {WARM_UP.error}. "
                   "This page computes it again (its own error, if any, follows).", icon="⚠️")


def open_page(title: str, caption: str | None = None) -> RunRef:
    """Title the page, open the run (or explain why not) and show its caveats."""
    st.title(title)
    if caption:
        st.caption(caption)
    _warm_up_note()
    run = current_run()
    info, status = run_info(run)
    if status.partial:
        seeds = list(status.finished_seeds or [])
        st.warning(f"The replay is **{status.status}**: showing the {len(seeds)} finished "
                   f"seed(s) {seeds}; {status.ignored_files} file(s) of unfinished seeds are "
                   "left out. Reload the page to pick up seeds finished since.", icon="⏳")
    if status.error:
        st.error(f"The replay stopped with: {status.error}", icon="⚠️")
    if info.kind == "masks":
        st.info("This is `pdm-replay masks` output: no simulated update, so ΔD, unsafe-keep "
                "rates and sign accuracy are empty. Run `pdm-replay replay` for them.")
    for note in info.notes:
        st.info(note)
    return run


@st.cache_data(max_entries=4, show_spinner="Validating the log …")
def _validation(log: str, fingerprint: str) -> dict[str, Any]:
    from pdm_replay.validate import validate_log

    report = validate_log(log, max_errors=50)
    return {"ok": report.ok, "files": report.files, "samples": report.samples,
            "tokens": report.tokens, "error_counts": dict(report.error_counts),
            "warning_counts": dict(report.warning_counts),
            "mass_percentiles": report.mass_percentiles(),
            "errors": [str(e) for e in report.errors]}


def validation(log: Path) -> dict[str, Any]:
    """``pdm-replay validate`` of the rollout log (summary, error counts, first errors),
    cached until the log's files change."""
    return _validation(str(log), fingerprint(log))
