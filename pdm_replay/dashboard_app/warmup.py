"""The dashboard server's start-up work: the first page's data before the first session.

:func:`start` (called by :mod:`.serve` before it imports Streamlit) starts a child process
that computes the first page (:mod:`.precompute`) and records it in :data:`START_UP`. The
pages' cache (:func:`.state.compute`) asks :meth:`StartUp.value` before it queries: for
the run the child computed, at the fingerprint taken before it started, the first call
waits for the child (it started with the server, so most of its work is done by the time
a browser has loaded Streamlit) and reads its result; a run changed since has another
fingerprint and is queried afresh. Once the server has done its imports,
:meth:`StartUp.open_connection` opens the run's DuckDB connection in one thread for the
other pages, which take it over (:meth:`StartUp.connection`, from the pages'
``st.cache_resource``); that thread imports nothing (tests/dashboard/test_warmup.py), so
no import of the server runs beside a session's. Nothing here imports Streamlit.

A failure is kept (:meth:`StartUp.error`; the pages show it, :func:`.state.open_page`);
the page then computes itself and shows its own error. A connection that failed to open
is not kept: the page that needs it opens it and says why.
"""

from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from typing import IO, Any

from pdm_replay.dashboard_app.precompute import Precomputed, connect_run, env_memory_limit
from pdm_replay.dashboard_app.runs import RunRef, env_run, run_ref

PRECOMPUTE_MODULE = "pdm_replay.dashboard_app.precompute"


@dataclass
class StartUp:
    """The server's start-up computation: of ``run``, by ``child`` writing ``output`` (an
    unnamed temporary file both processes hold, so nothing is left on disk whatever ends
    the server), or already ``result`` (collected; tests give one directly)."""

    run: RunRef | None = None
    child: subprocess.Popen[bytes] | None = None
    output: IO[bytes] | None = None
    result: Precomputed | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    opening: threading.Thread | None = None
    opened: tuple[str, Any] | None = None  # (memory limit, ReportDB)

    def collect(self) -> Precomputed | None:
        """The child's result, waiting for it the first time (None: nothing was started)."""
        with self.lock:  # two sessions may ask at once; the child is read once
            if self.result is None and self.child is not None:
                self.result = _read(self.child, self.output)
                self._drop_child()
            return self.result

    def value(self, run: RunRef, name: str, kwargs: dict[str, Any]) -> tuple[bool, Any]:
        """(True, the value) of query ``name`` with ``kwargs`` on ``run`` if the start-up
        computed it, else (False, None)."""
        if run != self.run:
            return False, None
        out = self.collect()
        return out.value(name, kwargs) if out is not None else (False, None)

    def error(self, run: RunRef) -> str | None:
        """Why the start-up computation of ``run`` failed (None: it did not, or it was of
        another run, or of this run before it changed)."""
        out = self.collect() if run == self.run else None
        return out.error if out is not None else None

    def open_connection(self) -> None:
        """Open the run's DuckDB connection in a background thread, for the pages after
        the first (the first reads the child's result): 0.4 s of a second page's first
        visit. Call it once every module is imported (:func:`.serve.preload`)."""
        if self.run is None:
            return
        self.opening = threading.Thread(target=self._open, args=(self.run, env_memory_limit()),
                                        name="pdm-replay-open-run", daemon=True)
        self.opening.start()

    def _open(self, run: RunRef, memory_limit: str) -> None:
        try:
            self.opened = (memory_limit, connect_run(run.path, memory_limit))
        except Exception:  # nothing kept: the page that needs it opens it and says why
            self.opened = None

    def connection(self, run: RunRef, memory_limit: str) -> Any:
        """The ``ReportDB`` opened at start-up for ``run`` with
        ``memory_limit`` (waiting for it), handed over once; None where there is none."""
        if run != self.run or self.opening is None:
            return None
        self.opening.join()
        with self.lock:
            opened, self.opened = self.opened, None
        if opened is not None and opened[0] == memory_limit:
            return opened[1]
        if opened is not None:
            opened[1].close()
        return None

    def close(self) -> None:
        """Stop the child, remove its output and close an unclaimed connection (at exit)."""
        self._drop_child()
        if self.opened is not None:
            self.opened[1].close()
            self.opened = None

    def _drop_child(self) -> None:
        """Stop the child if it still runs and close its output (once read, or at exit)."""
        if self.child is not None and self.child.poll() is None:
            self.child.kill()
            self.child.wait()
        self.child = None
        if self.output is not None:
            self.output.close()
            self.output = None


START_UP = StartUp()  # the server process's; :func:`start` fills it


def start(record: StartUp = START_UP) -> StartUp:
    """Start the child computing the first page of ``$PDM_REPLAY_RUN_DIR`` into ``record``
    (nothing when there is no such run, the page says so; nor off POSIX, where a file
    descriptor cannot be handed to a child: there the first session computes it)."""
    path = env_run()
    if path is None or not path.exists() or os.name != "posix":
        return record
    record.run = run_ref(path)
    record.output = tempfile.TemporaryFile(prefix="pdm_replay_start_")
    fd = record.output.fileno()
    record.child = subprocess.Popen([sys.executable, "-m", PRECOMPUTE_MODULE, str(fd)],
                                    env=os.environ, stdin=subprocess.DEVNULL, pass_fds=(fd,))
    atexit.register(record.close)
    return record


def _read(child: subprocess.Popen[bytes], output: IO[bytes] | None) -> Precomputed:
    """What ``child`` wrote to ``output`` once it exits, or why there is nothing."""
    code = child.wait()
    try:
        if code != 0 or output is None:
            raise EOFError("nothing written")
        output.seek(0)
        out = pickle.load(output)
    except (OSError, EOFError, pickle.UnpicklingError) as err:
        return Precomputed(error=f"the start-up process (exit code {code}) left no result: "
                                 f"{err}")
    if not isinstance(out, Precomputed):
        return Precomputed(error=f"the start-up process wrote a {type(out).__name__}")
    return out
