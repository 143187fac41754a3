"""Connect to Ray: an existing cluster (an address, or ``RAY_ADDRESS``) or a local
instance sized to this process's usable CPUs.

Ray is an optional dependency (``pip install -e ".[ray]"``); it is imported here, when a
command asks for the Ray engine, never at package import.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from pdm_replay.threads import cpu_budget

log = logging.getLogger(__name__)

# The driver-side threads one Ray Data execution starts (ray 2.60, ``ray/data/_internal``):
# the scheduling loop (``execution/streaming_executor.py``, ``StreamingExecutor-<id>``,
# joined for only 2 s by its ``shutdown``), its metadata fetcher
# (``execution/metadata_fetcher.py``) and the batch iterator's pipeline workers
# (``block_batching/util.py`` and ``util.py``, ``make_async_gen`` / ``iter_threaded``),
# which stop only once the iterator is closed and the garbage collector finalizes their
# generators. One of them still calling into Ray after ``ray.shutdown`` ends the process
# at once with status 1 ("The core worker has already been shutdown ... The process will
# exit"): seen after a driver-side error, on a loaded 2-core machine.
DATA_THREADS = ("StreamingExecutor-", "ray-data-metadata-prefetch", "iter_threaded",
                "map_tp_filling_worker-", "map_tp_transforming_worker-", "Prefetcher")
DATA_THREADS_TIMEOUT_S = 60.0

RAY_MISSING = ("the Ray engine needs ray[data]; install it with `pip install -e \".[ray]\"` "
               "(or `pip install \"ray[data]>=2.41\"`)")


@dataclass(frozen=True)
class RayConnection:
    """Where the driver is connected: ``address`` (None: a local instance it started),
    ``started`` (whether :func:`disconnect` should shut Ray down) and the cluster's CPUs."""

    address: str | None
    started: bool
    cpus: float


def import_ray() -> Any:
    """The ``ray`` module with ``ray.data``; an ImportError says how to install them."""
    try:
        import ray
        import ray.data  # noqa: F401 (ray.data needs pandas; the extra pulls it)
    except ImportError as err:
        raise ImportError(f"{RAY_MISSING} ({err})") from err
    return ray


def connect(address: str | None = None) -> RayConnection:
    """Initialize Ray in this process, once.

    ``address`` (``"auto"``, ``"ray://host:10001"``, ``"host:6379"``) joins that cluster;
    with None, ``RAY_ADDRESS`` is honored (Ray reads it itself), and where it is unset a
    local instance is started with the CPUs this process may use
    (:func:`pdm_replay.threads.cpu_budget`: affinity capped by the cgroup quota), not the
    host's core count that Ray would otherwise claim. Already connected: reused as is.
    """
    ray = import_ray()
    if ray.is_initialized():
        return RayConnection(address, False, ray.cluster_resources().get("CPU", 0.0))
    joining = address or os.environ.get("RAY_ADDRESS")
    # "local": a new instance even where `ray start` left one on this machine (ray.init()
    # with no address would join that one, with another user's resources and code)
    kwargs: dict[str, Any] = {"address": joining} if joining else {
        "address": "local", "num_cpus": cpu_budget().cpus, "include_dashboard": False}
    ray.init(log_to_driver=False, configure_logging=False, logging_level=logging.WARNING,
             **kwargs)
    return RayConnection(joining, True, ray.cluster_resources().get("CPU", 0.0))


def _parked_prefetcher(thread: threading.Thread) -> bool:
    """Whether ``thread`` is a block prefetcher waiting for blocks that cannot come.

    An iteration that ends early never stops its ``WaitBlockPrefetcher``
    (``block_batching/util.py``): only the prefetcher's own thread still refers to it, so
    its ``__del__`` never runs and the thread waits, forever, in ``_run`` on a condition
    that only the (gone) iterator would notify. Parked there it cannot call into Ray."""
    frame = sys._current_frames().get(thread.ident or -1)
    return (thread.name == "Prefetcher" and frame is not None and frame.f_back is not None
            and frame.f_code.co_name == "wait" and frame.f_back.f_code.co_name == "_run")


def data_threads() -> list[threading.Thread]:
    """The live threads of Ray Data executions in this process (:data:`DATA_THREADS`),
    but a parked block prefetcher (:func:`_parked_prefetcher`)."""
    return [t for t in threading.enumerate()
            if t.name.startswith(DATA_THREADS) and not _parked_prefetcher(t)]


def wait_for_data_threads(timeout: float = DATA_THREADS_TIMEOUT_S) -> list[threading.Thread]:
    """Wait until no Ray Data execution thread is alive (their iterators closed, the
    executors shut down); the garbage collector runs first, as it is what stops the
    iterator's threads. Returns the threads still alive after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (alive := data_threads()) and time.monotonic() < deadline:
        gc.collect()  # finalizes the closed iterators' generators: their threads stop
        for t in alive:
            t.join(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
    return data_threads()


def disconnect(conn: RayConnection, timeout: float = DATA_THREADS_TIMEOUT_S) -> None:
    """Shut Ray down in this process where :func:`connect` started it, once every Ray Data
    thread has stopped (:func:`wait_for_data_threads`); a cluster joined by address keeps
    running (only this driver leaves it). Threads still alive after ``timeout`` seconds
    keep the connection open, with a warning: shutting down under them would end the
    process; it closes when the process exits."""
    ray = import_ray()
    if not (conn.started and ray.is_initialized()):
        return
    if left := wait_for_data_threads(timeout):
        log.warning("Ray stays connected: %d Ray Data thread(s) still running after %.0f s "
                    "(%s); it disconnects when this process exits", len(left), timeout,
                    ", ".join(sorted(t.name for t in left)))
        return
    ray.shutdown()


@contextmanager
def connected(address: str | None = None) -> Iterator[RayConnection]:
    """:func:`connect` for the block, then :func:`disconnect`."""
    conn = connect(address)
    try:
        yield conn
    finally:
        disconnect(conn)
