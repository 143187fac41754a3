"""The dashboard's server process: ``python -m pdm_replay.dashboard_app.serve run APP ...``.

``pdm-replay dashboard`` executes this instead of ``python -m streamlit``: it starts the
first page's computation (:func:`.warmup.warm_up`) in a background thread first thing,
then runs Streamlit's own command line (``streamlit run`` and its flags, unchanged) in the
main thread. The computation (importing DuckDB, polars and the report, opening the run,
the Overview's data: about 2 s on a 2-core machine) thus overlaps the server's own start
(about 1 s) and the browser's loading of Streamlit's JavaScript, instead of following them
in the first session. The results land in the caches the pages read (``st.cache_resource``
and ``st.cache_data`` of :mod:`.state`), whether or not Streamlit's runtime exists yet:
the caches are module-level and outlive the runtime's start.

This module imports no Streamlit before the thread starts (the thread and the server
import it side by side).
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Sequence

from pdm_replay.dashboard_app import WARM_UP_THREAD

# Streamlit warns when a cache function runs outside a session (once per cache_data
# function created before the runtime, once per spinner): the warm-up does so on purpose.
QUIET = {"streamlit.runtime.scriptrunner_utils.script_run_context": "Thread '%s': missing",
         "streamlit.runtime.caching.cache_data_api": "No runtime found"}


def _quiet(record: logging.LogRecord) -> bool:
    """False for the warnings of :data:`QUIET` raised in the warm-up thread."""
    return not (record.threadName == WARM_UP_THREAD
                and any(str(record.msg).startswith(m) for m in QUIET.values()))


def _warm_up() -> None:
    from pdm_replay.dashboard_app import warmup  # Streamlit, DuckDB, polars, the report

    warmup.warm_up()


def main(argv: Sequence[str] | None = None) -> None:
    """Start the warm-up thread, then ``streamlit`` with ``argv`` (default: sys.argv[1:])."""
    for name in QUIET:
        logging.getLogger(name).addFilter(_quiet)
    threading.Thread(target=_warm_up, name=WARM_UP_THREAD, daemon=True).start()
    from streamlit.web.cli import main as streamlit_main

    # prog_name as `python -m streamlit` sets it, so Streamlit sees the same command line
    streamlit_main(args=list(sys.argv[1:] if argv is None else argv), prog_name="streamlit")


if __name__ == "__main__":
    main()
