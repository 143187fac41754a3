"""Run the CLI in a child process with one deterministic interruption installed.

``python tests/proc_driver.py HOOK DIR -- pdm-replay arguments...``: HOOK picks the moment
(see :data:`HOOKS`); DIR is where the child announces it reached the moment (a file
``reached-<pid>``) and, for the ``hold-*`` hooks, waits for a file ``release``. The kill
hooks SIGKILL the process at that moment (no cleanup of any kind can run), so the tests
see exactly what a crash leaves behind.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

# A hold ends when the test releases it or the test process is gone (this process is
# reparented): never after a set time, since on a loaded machine the test's own steps
# meanwhile (a report, a second child's start) took longer than a 120 s hold (issue 35:
# a flaky failure under load). The cap only ends a hold whose test hung.
HANG_CAP_S = 3600.0


def _reached(directory: Path) -> None:
    (directory / f"reached-{os.getpid()}").write_text(str(os.getpid()))


def _hold(directory: Path) -> None:
    _reached(directory)
    parent, deadline = os.getppid(), time.monotonic() + HANG_CAP_S
    while not (directory / "release").exists() and os.getppid() == parent \
            and time.monotonic() < deadline:
        time.sleep(0.02)


def _kill(directory: Path) -> None:
    _reached(directory)
    os.kill(os.getpid(), signal.SIGKILL)


def _after_nth(module: Any, name: str, n: int, act: Callable[[], None],
               when: Callable[..., bool] = lambda *a, **k: True) -> None:
    """Replace ``module.name`` by a wrapper that calls ``act`` after its ``n``-th call for
    which ``when(*args)`` holds (1-based)."""
    original = getattr(module, name)
    count = {"n": 0}

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if when(*args, **kwargs):
            count["n"] += 1
            if count["n"] == n:
                act()
        return result
    setattr(module, name, wrapper)


def _install(hook: str, directory: Path) -> None:
    from pdm_replay.io import atomic
    from pdm_replay.commands import replay as run

    kill, hold = (lambda: _kill(directory)), (lambda: _hold(directory))
    if hook == "kill-during-seed":  # seed 1's pre pass done, nothing of it written
        _after_nth(run, "pre_pass", 1, kill, lambda models, index, seed, rows, **kw: seed == 1)
    elif hook == "kill-between-seeds":  # seed 0 finished (done marker written)
        _after_nth(run, "finish_seed", 1, kill)
    elif hook in ("kill-while-writing", "kill-masks-writing", "kill-ingest-writing"):
        # a Parquet temp file holds one written table and is not yet renamed: for replay
        # the second part written (seed 0's updates), for masks / ingest the second table
        _after_nth(atomic.AtomicParquetWriter, "write", 2, kill)
    elif hook == "hold-after-seed":  # seed 0 finished; the run goes on once released
        _after_nth(run, "finish_seed", 1, hold)
    elif hook != "none":
        raise SystemExit(f"unknown hook {hook!r}")


def main(argv: list[str]) -> None:
    hook, directory, sep, *args = argv
    assert sep == "--", "usage: proc_driver.py HOOK DIR -- ARGS..."
    _install(hook, Path(directory))
    from pdm_replay.cli import app
    app(args=args, prog_name="pdm-replay")


if __name__ == "__main__":
    main(sys.argv[1:])
