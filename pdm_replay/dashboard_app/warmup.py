"""The dashboard server's start-up work: the first page's data before the first session.

:mod:`.serve` (the process ``pdm-replay dashboard`` runs) calls :func:`warm_up` in a
background thread while Streamlit starts: it opens the run of ``$PDM_REPLAY_RUN_DIR`` and
computes the Overview's data (:func:`pdm_replay.report.overview.overview`) through the very
caches the page reads (:func:`.state.compute`: ``st.cache_resource`` for the connection,
``st.cache_data`` keyed on the run's path and fingerprint for the result). It imports no
other page's modules: on a busy 2-core machine that CPU would come out of the first page's
render, and the other pages load theirs when first opened. A session that arrives before
it has finished waits on Streamlit's per-key compute lock instead of computing the same
thing twice; a run changed since has another fingerprint, so the page computes it afresh
instead of reading the start-up copy.

A failure is kept in :data:`.state.WARM_UP` (the pages show it, :func:`.state.open_page`)
and printed to the server's stderr; it is not cached, so the page computes again and shows
its own error.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

from pdm_replay.dashboard_app.state import WARM_UP, WarmUp, compute, env_run, open_run, run_ref
from pdm_replay.report.overview import overview

# What the first page (Overview) reads through state.data: (function, keyword arguments)
FIRST_PAGE: tuple[tuple[Callable[..., Any], dict[str, Any]], ...] = ((overview, {}),)


def warm_up(record: WarmUp = WARM_UP) -> WarmUp:
    """Open the run of ``$PDM_REPLAY_RUN_DIR`` and compute :data:`FIRST_PAGE` into the
    caches; fill ``record`` (error: the failure's type and message) and set its ``done``."""
    t0 = time.perf_counter()
    try:
        path = env_run()
        run = run_ref(path) if path is not None and path.exists() else None  # None: the
        record.fingerprint = run.fingerprint if run else None  # page says there is no run
        if run is not None:
            open_run(run)
            for fn, kwargs in FIRST_PAGE:
                compute(run, fn, **kwargs)
    except Exception as err:  # any failure: kept for the pages, never lost in a thread
        record.error = f"{type(err).__name__}: {err}"
    finally:
        record.seconds = time.perf_counter() - t0
        record.done.set()
        _report(record)
    return record


def _report(record: WarmUp) -> None:
    outcome = f"failed: {record.error}" if record.error else "ready"
    print(f"pdm-replay dashboard: start-up computation of the first page {outcome} "
          f"({record.seconds:.2f} s)", file=sys.stderr, flush=True)
