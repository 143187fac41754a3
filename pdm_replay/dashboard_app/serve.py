"""The dashboard's server process: ``python -m pdm_replay.dashboard_app.serve run APP ...``.

``pdm-replay dashboard`` executes this instead of ``python -m streamlit``. First thing, it
starts the child process that computes the first page's data (:func:`.warmup.start`);
then it imports the first page's module and what its elements import on first use
(Streamlit, polars, DuckDB, the report, pandas: about 0.9 s on a 2-core machine), and runs
Streamlit's own command line (``streamlit run`` and its flags, unchanged). The child (its
imports, opening the run, the Overview's queries: about 1.5 s) runs on the other core
beside this, the server's start and the browser's loading of Streamlit's JavaScript,
instead of after them in the first session, and the first session's script imports
nothing. Imports happen here, in the main thread, before the server runs: an import in a
thread beside a session's script can meet a module the other has half imported (seen
with the earlier warm-up thread: "partially initialized module 'pandas' has no attribute
'Timestamp'").
"""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager, suppress
from importlib import import_module
from pathlib import Path
from typing import Iterator, Sequence

from pdm_replay.dashboard_app import PAGES, warmup

# The first page's module (its script, importable: page scripts render only as __main__).
FIRST_PAGE_MODULE = f"pdm_replay.dashboard_app.page_scripts.{Path(PAGES[0][0]).stem}"
# What Streamlit imports on an element's first use, measured on a 2-core machine in the
# first session's first run: pandas for st.dataframe (0.39 s), the emoji list for an
# icon (0.04 s), the Material icon names of the pages' icons. Optional: a Streamlit
# that has moved them loses only the head start.
FIRST_USE_IMPORTS = ("pandas", "streamlit.emojis", "streamlit.material_icon_names",
                     # and what opening the run's connection imports on first use (the
                     # packaged SQL's readers, pyarrow's pandas bridge), so that the thread
                     # opening it imports nothing (tests/dashboard/test_warmup.py)
                     "importlib.readers", "importlib.resources.readers",
                     "pyarrow.pandas_compat", "pyarrow.vendored.version")


@contextmanager
def no_runtime_yet() -> Iterator[None]:
    """Quiet Streamlit's "No runtime found, using MemoryCacheStorageManager" while the
    pages' modules are imported before its server exists: ``st.cache_data`` checks each
    decorated function's parameters against a storage manager at decoration time
    (``DataCaches.validate_cache_params``, streamlit/runtime/caching/cache_data_api.py) and
    warns that it checked them against the in-memory one; the caches themselves are
    created in the sessions, under the runtime's manager. Other messages still show."""
    try:
        from streamlit.runtime.caching import cache_data_api
        log = cache_data_api._LOGGER
    except (ImportError, AttributeError):  # another Streamlit: its message, if any, shows
        yield
        return
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def preload() -> None:
    """Import the first page's module, :data:`FIRST_USE_IMPORTS` and Streamlit's server,
    then fill ``inspect``'s module cache: the first element a Streamlit process sends
    checks whether it runs in a REPL by walking the stack (``env_util.is_repl``), which maps
    every loaded module to its file, 0.14–0.22 s of the first session's first element in a
    trace of the server; done here it takes 0.06 s and leaves that session 0.002 s."""
    with no_runtime_yet():
        import_module(FIRST_PAGE_MODULE)
    for module in (*FIRST_USE_IMPORTS, "streamlit.web.server"):
        with suppress(ImportError):
            import_module(module)
    with suppress(ImportError, AttributeError):
        import_module("streamlit.env_util").is_repl()


def main(argv: Sequence[str] | None = None) -> None:
    """Start the first page's computation, import its modules, start opening the run's
    connection, then run ``streamlit`` with ``argv`` (default: sys.argv[1:])."""
    warmup.start()
    preload()
    warmup.START_UP.open_connection()  # a thread, but one that imports nothing
    from streamlit.web.cli import main as streamlit_main

    # prog_name as `python -m streamlit` sets it, so Streamlit sees the same command line
    streamlit_main(args=list(sys.argv[1:] if argv is None else argv), prog_name="streamlit")


if __name__ == "__main__":
    main()
