"""The dashboard's run handle and caches (Streamlit only; no SQL, no torch).

One read-only DuckDB connection per run directory lives in ``st.cache_resource``; query
results live in ``st.cache_data`` keyed on the run, the fingerprint of its files, the
library function and its arguments. The fingerprint (names, sizes and mtimes of the
manifest, the done markers and the Parquet files) changes when a replay adds a seed, so a
reload shows it. Every failure becomes a message in the page (:func:`fail`), not a
traceback.

A page finds its run without DuckDB (:func:`current_run` lists the files and reads the
manifest); the connection opens with the first query the cache does not hold. The first
page's queries come from the server's start-up computation (:mod:`.warmup`) when it has
them, and a failure there is shown on the pages of the run it was computing
(:func:`open_page`).
"""

from __future__ import annotations

import os
import threading
import weakref
from pathlib import Path
from typing import Any, Callable, NoReturn

import duckdb
import streamlit as st

from pdm_replay.dashboard_app import ENV_TOKENIZER
from pdm_replay.dashboard_app.precompute import connect_run, env_memory_limit, load_mask_modules
from pdm_replay.dashboard_app.runs import RunRef, env_run, fingerprint, query_name, run_ref
from pdm_replay.dashboard_app.warmup import START_UP
from pdm_replay.dashboard_app.text import LoadedTokenizer, load_tokenizer, tokenizer_candidates
from pdm_replay.report.dashboard_api import RunStatus, finished_run
from pdm_replay.report.db import ReportDB
from pdm_replay.report.run_info import RunInfo

ERRORS = (OSError, ValueError, duckdb.Error)
START_HINT = ("Start the dashboard with `pdm-replay dashboard RUN_DIR`, where RUN_DIR is the "
              "output directory of `pdm-replay replay` (or the tokens file of "
              "`pdm-replay masks`).")


class _Handle:
    """An open report connection; queries take ``lock`` (one DuckDB connection is not safe
    for concurrent use by the sessions' threads)."""

    def __init__(self, db: ReportDB) -> None:
        self.db, self.lock = db, threading.Lock()
        # An evicted handle closes its connection (and DuckDB's temp dir) when collected.
        weakref.finalize(self, db.close)


def fail(message: str, hint: str | None = None) -> NoReturn:
    """Show ``message`` (and ``hint``) as an error in the page and stop the page."""
    st.error(message if hint is None else f"{message}\n\n{hint}", icon="🚫")
    st.stop()
    raise AssertionError("unreachable: st.stop() ends the script run")  # for type checkers


@st.cache_resource(max_entries=4, show_spinner="Opening the run …")
def _open(path: str, fingerprint: str, memory_limit: str) -> _Handle:
    opened = START_UP.connection(RunRef(path, fingerprint), memory_limit)
    return _Handle(opened or connect_run(path, memory_limit))


def open_run(run: RunRef) -> _Handle:
    """The cached connection of ``run`` (the server's start-up one, or opened on the first
    call); errors are raised."""
    load_mask_modules()  # before the cache: the pages read the registry without a query too
    return _open(run.path, run.fingerprint, env_memory_limit())


def _handle(run: RunRef) -> _Handle:
    try:
        return open_run(run)
    except ERRORS as err:
        fail(f"Cannot open `{run.path}`: {err}", START_HINT)


@st.cache_resource(max_entries=4, show_spinner=False)
def _discover(path: str, fingerprint: str) -> tuple[RunInfo, RunStatus]:
    return finished_run(path)


def current_run() -> RunRef:
    """The run named by ``$PDM_REPLAY_RUN_DIR``, found (its files listed, its manifest
    read; the DuckDB connection opens with the first query not yet cached); a message and
    stop when there is none, it does not exist, or it holds nothing to show."""
    path = env_run()
    if path is None:
        fail("No run directory was given.", START_HINT)
    if not path.exists():
        fail(f"`{path}`: no such run directory or tokens file.", START_HINT)
    run = run_ref(path)
    _start_up_note(run)
    run_info(run)
    return run


def run_info(run: RunRef) -> tuple[RunInfo, RunStatus]:
    """What the run holds (files, thresholds, manifest) and its completeness."""
    try:
        return _discover(run.path, run.fingerprint)
    except ERRORS as err:
        fail(f"Cannot open `{run.path}`: {err}", START_HINT)


@st.cache_data(max_entries=512, show_spinner="Querying …")
def _cached(path: str, fingerprint: str, name: str, kwargs: dict[str, Any],
            _produce: Callable[[], Any]) -> Any:
    return _produce()


def _query(run: RunRef, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    found, value = START_UP.value(run, query_name(fn), kwargs)
    if found:  # the server's start-up computed it (no connection needed)
        return value
    handle = _handle(run)
    with handle.lock:
        return fn(handle.db, **kwargs)


def compute(run: RunRef, fn: Callable[..., Any], **kwargs: Any) -> Any:
    """``fn(db, **kwargs)`` through the cache :func:`data` reads (on a miss, the server's
    start-up result where it has one, :mod:`.warmup`); errors are raised."""
    return _cached(run.path, run.fingerprint, query_name(fn), kwargs,
                   lambda: _query(run, fn, kwargs))


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


def _start_up_note(run: RunRef) -> None:
    """The start-up computation's error, while the run is as it was when it failed (after
    a change the page's own computation is the news, and it shows its own errors)."""
    error = START_UP.error(run)
    if error:
        st.warning(f"The server's start-up computation of this run failed: {error}. "
                   "This page computes it again (its own error, if any, follows).", icon="⚠️")


def open_page(title: str, caption: str | None = None) -> RunRef:
    """Title the page, open the run (or explain why not) and show its caveats."""
    st.title(title)
    if caption:
        st.caption(caption)
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
    from pdm_replay.commands.validate import validate_log

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
