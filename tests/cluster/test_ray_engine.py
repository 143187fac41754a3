"""`cluster.ray_engine.wait_for_data_threads`: Ray Data's iteration threads must be gone
before ``ray.shutdown`` (one still calling into Ray afterwards ends the process). The
threads here stand in for Ray Data's by name only: the waiting is plain ``threading``
and ``gc``; the real threads are checked on a real cluster in ``tests/test_recompute_ray.py``.
"""

from __future__ import annotations

import gc
import threading
from typing import Iterator

from pdm_replay.cluster.ray_engine import data_threads, wait_for_data_threads


def _parked(stop: threading.Event) -> Iterator[None]:
    """A generator whose finalizer stops a worker, as Ray Data's prefetcher's does."""
    try:
        yield
    finally:
        stop.set()


def test_a_thread_stopped_by_the_garbage_collector_is_waited_for() -> None:
    stop = threading.Event()
    gen = _parked(stop)
    next(gen)
    cycle: list[object] = [gen]
    cycle.append(cycle)  # only the cyclic collector frees it, as for Ray Data's iterators
    worker = threading.Thread(target=stop.wait, name="Prefetcher", daemon=True)
    worker.start()
    gc.disable()  # no automatic collection: only the one the waiting runs may free it
    try:
        del gen, cycle
        assert worker in data_threads()
        assert wait_for_data_threads(timeout=30) == [] and not worker.is_alive()
    finally:
        gc.enable()


def test_a_thread_that_does_not_stop_is_returned_after_the_timeout() -> None:
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, name="StreamingExecutor-ds_1", daemon=True)
    other = threading.Thread(target=stop.wait, name="not-ray-data", daemon=True)
    worker.start(), other.start()
    try:
        assert wait_for_data_threads(timeout=0.5) == [worker]  # `other` is not Ray Data's
    finally:
        stop.set()
    assert wait_for_data_threads(timeout=30) == []


def test_a_parked_block_prefetcher_is_not_waited_for() -> None:
    """Ray Data's ``WaitBlockPrefetcher`` of an iteration ended early waits in ``_run`` on
    a condition nobody can notify; the same thread doing anything else is waited for."""
    cond, busy, stop = threading.Condition(), threading.Event(), threading.Event()

    def _run() -> None:  # the prefetcher's loop, parked in Condition.wait
        with cond:
            cond.wait()

    parked = threading.Thread(target=_run, name="Prefetcher", daemon=True)
    working = threading.Thread(target=lambda: (busy.set(), stop.wait()), name="Prefetcher",
                               daemon=True)
    parked.start(), working.start()
    busy.wait()
    try:
        assert wait_for_data_threads(timeout=0.5) == [working]
    finally:
        stop.set()
        with cond:
            cond.notify()
    assert wait_for_data_threads(timeout=30) == []
