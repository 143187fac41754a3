"""Connect to Ray: an existing cluster (an address, or ``RAY_ADDRESS``) or a local
instance sized to this process's usable CPUs.

Ray is an optional dependency (``pip install -e ".[ray]"``); it is imported here, when a
command asks for the Ray engine, never at package import.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from pdm_replay.threads import cpu_budget

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


def disconnect(conn: RayConnection) -> None:
    """Shut Ray down in this process where :func:`connect` started it; a cluster joined
    by address keeps running (only this driver leaves it)."""
    ray = import_ray()
    if conn.started and ray.is_initialized():
        ray.shutdown()


@contextmanager
def connected(address: str | None = None) -> Iterator[RayConnection]:
    """:func:`connect` for the block, then :func:`disconnect`."""
    conn = connect(address)
    try:
        yield conn
    finally:
        disconnect(conn)
