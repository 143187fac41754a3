"""Which allocator Arrow uses while a multi-threaded command streams a log.

Examples
--------
>>> import pyarrow as pa
>>> before = pa.default_memory_pool().backend_name
>>> with threaded_arrow_pool() as pool:
...     pa.default_memory_pool().backend_name == pool.backend_name
True
>>> pa.default_memory_pool().backend_name == before
True
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

import pyarrow as pa

POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"  # a user's explicit choice is always kept


def threaded_pool() -> pa.MemoryPool:
    """jemalloc where this pyarrow build has it, else the system allocator."""
    try:
        return pa.jemalloc_memory_pool()
    except NotImplementedError:
        return pa.system_memory_pool()


@contextmanager
def threaded_arrow_pool() -> Iterator[pa.MemoryPool]:
    """Make :func:`threaded_pool` Arrow's default pool for the block, then restore it.

    pyarrow's default pool (mimalloc) hands freed pages back to the kernel so eagerly that,
    with `masks`' reader, workers and writer on two cores, a 2M-token run spent 1.4–1.9 s
    of system time faulting them in again; jemalloc took 0.7–0.9 s and 7% less wall time
    (benchmarks/README.md). Buffers keep the pool they came from, so switching back is
    safe. With ``ARROW_DEFAULT_MEMORY_POOL`` set, the user's pool is left alone.
    """
    before = pa.default_memory_pool()
    pool = before if os.environ.get(POOL_ENV) else threaded_pool()
    pa.set_memory_pool(pool)
    try:
        yield pool
    finally:
        pa.set_memory_pool(before)
