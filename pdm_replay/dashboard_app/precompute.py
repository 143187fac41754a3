"""The first page's data, computed in a child process while the server starts.

``python -m pdm_replay.dashboard_app.precompute FD`` opens the run of
``$PDM_REPLAY_RUN_DIR`` (with the ``--mask-module`` files and the memory limit of the
environment, as the pages' connection does), computes :data:`FIRST_PAGE`, writes one
pickled :class:`Precomputed` to the open file descriptor ``FD`` (an unnamed temporary file
of the server, read once this process has exited with code 0), then prints one line to
stderr (the server's log). :mod:`.warmup` starts it before the server
imports Streamlit, so on a 2-core machine it runs on the other core instead of sharing
the server's interpreter: Streamlit's start and this computation (imports, DuckDB's view
binding, the Overview's queries: about 1.5 s) overlap instead of interleaving, and no
thread of the server imports modules beside the sessions' script threads.

It imports no Streamlit; its pickle is read back only by the server that started it.

Examples
--------
>>> from pdm_replay.testing.synthetic_run import example_run
>>> out = first_page(example_run())
>>> [name for name, _, _ in out.results], out.error
(['pdm_replay.report.overview.overview'], None)
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any, Callable

from pdm_replay.dashboard_app import ENV_MASK_MODULES, ENV_MEMORY_LIMIT
from pdm_replay.dashboard_app.runs import env_run, query_name
from pdm_replay.names import DEFAULT_MEMORY_LIMIT

# load_mask_module lists a module before running it: a second thread (two sessions, or a
# session and the server's start-up) must not see it half registered
_MASK_MODULES_LOCK = threading.Lock()
# What the first page (Overview) reads through state.data: (module, function, keyword
# arguments); imported by first_page only (the report stack: DuckDB, polars).
FIRST_PAGE = (("pdm_replay.report.overview", "overview", {}),)


@dataclass(frozen=True)
class Precomputed:
    """``results``: (query name, keyword arguments, value) per :data:`FIRST_PAGE` entry;
    ``error``: the failure's type and message (then ``results`` is empty); ``seconds``:
    how long it took."""

    results: tuple[tuple[str, dict[str, Any], Any], ...] = ()
    error: str | None = None
    seconds: float = 0.0

    def value(self, name: str, kwargs: dict[str, Any]) -> tuple[bool, Any]:
        """(True, the value) of query ``name`` with ``kwargs``; (False, None) if absent."""
        for n, kw, v in self.results:
            if n == name and kw == kwargs:
                return True, v
        return False, None


def first_page_queries() -> tuple[tuple[Callable[..., Any], dict[str, Any]], ...]:
    """The report-API functions of :data:`FIRST_PAGE` with their arguments."""
    return tuple((getattr(import_module(m), f), kw) for m, f, kw in FIRST_PAGE)


def load_mask_modules() -> None:
    """Register the ``--mask-module`` files the environment names (a repeat is a no-op)."""
    from pdm_replay.masks import load_mask_module

    with _MASK_MODULES_LOCK:
        for module in filter(None, os.environ.get(ENV_MASK_MODULES, "").split(os.pathsep)):
            load_mask_module(module)


def env_memory_limit() -> str:
    """The DuckDB memory limit ``$PDM_REPLAY_MEMORY_LIMIT`` names (``--memory-limit``)."""
    return os.environ.get(ENV_MEMORY_LIMIT, DEFAULT_MEMORY_LIMIT)


def connect_run(path: Path | str, memory_limit: str) -> Any:
    """The run's report connection (a ``ReportDB``) as every part of the dashboard opens
    it: the ``--mask-module`` files registered first, then
    :func:`pdm_replay.report.dashboard_api.connect_dashboard` over its finished part."""
    from pdm_replay.report.dashboard_api import connect_dashboard

    load_mask_modules()
    return connect_dashboard(path, memory_limit=memory_limit)[0]


def first_page(path: Path) -> Precomputed:
    """Open ``path`` as the pages do and compute the first page's queries; a failure is
    returned as :attr:`Precomputed.error`, not raised."""
    t0 = time.perf_counter()
    try:
        with connect_run(path, env_memory_limit()) as db:
            results = tuple((query_name(fn), kw, fn(db, **kw))
                            for fn, kw in first_page_queries())
        return Precomputed(results, seconds=time.perf_counter() - t0)
    except Exception as err:  # any failure goes back to the server, which shows it
        return Precomputed(error=f"{type(err).__name__}: {err}",
                           seconds=time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> None:
    """Compute the first page of ``$PDM_REPLAY_RUN_DIR`` into the file descriptor
    ``argv[0]``."""
    fd = int((sys.argv[1:] if argv is None else argv)[0])
    path = env_run()
    try:
        out = (Precomputed(error=f"no run at {path}") if path is None or not path.exists()
               else first_page(path))
        with os.fdopen(fd, "wb") as f:
            pickle.dump(out, f, protocol=pickle.HIGHEST_PROTOCOL)
    except KeyboardInterrupt:  # Ctrl-C reaches the server's whole process group
        raise SystemExit(130) from None
    outcome = f"failed: {out.error}" if out.error else "ready"
    print(f"pdm-replay dashboard: start-up computation of the first page {outcome} "
          f"({out.seconds:.2f} s)", file=sys.stderr, flush=True)


if __name__ == "__main__":  # run under the module's own name, so the pickle names it
    from pdm_replay.dashboard_app import precompute

    precompute.main()
