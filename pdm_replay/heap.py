"""Freed CPU memory kept for reuse while a replay runs (glibc's malloc, through ``mallopt``).

torch allocates CPU tensors with ``posix_memalign`` (``c10::alloc_cpu``,
c10/core/impl/alloc_cpu.cpp). glibc serves a block above its mmap threshold (128 KiB,
rising with use to at most 32 MiB) from a fresh ``mmap`` and unmaps it on ``free``, and
trims the heap's free top back to the system. So each step's gradients, activations and
logits chunks land on new pages, and every 4 KiB page costs a fault when it is first
touched. On a Qwen3-0.6B-shaped replay (2 threads, 128 tokens, 3 seeds × 3 update masks)
the seed loop took 77.6 s so, and 58.1 s with freed memory reused: 0.6–2.9 s less per
update, with 4.0 M instead of 9.8 M minor faults (benchmarks/README.md § replay, "Heap
reuse").

:func:`reuse_freed_memory` turns mmap and trimming off for the block
(``M_MMAP_MAX = 0``, ``M_TRIM_THRESHOLD = SIZE_MAX``). Freed blocks then go back to the
heap, and the next update's tensors of the same sizes reuse pages that are already
resident. The peak resident set stays the same: it is the most memory in use at once. The
resident set just does not shrink between updates. Afterwards glibc's defaults are set
back (``M_MMAP_MAX`` 65,536, ``M_TRIM_THRESHOLD`` 128 KiB; the threshold stops adapting
once it has been set) and ``malloc_trim(0)`` returns the free memory to the system.

The user's own allocator settings stand: nothing is changed under another ``malloc``
(musl, macOS, a ``jemalloc`` / ``tcmalloc`` / ``mimalloc`` in ``LD_PRELOAD``) or when
``MALLOC_*_`` variables or ``glibc.malloc`` tunables are set.

Examples
--------
>>> heap_choice(False, {}).to_json()
{'heap_reuse': False, 'heap_reason': '--no-heap-reuse'}
>>> heap_choice(True, {"MALLOC_ARENA_MAX": "2"}).heap_reason
'the malloc environment variables set for this process stand'
"""

from __future__ import annotations

import ctypes
import os
import platform
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Iterator, Mapping

# mallopt parameters (glibc malloc/malloc.h) and glibc's defaults, to set them back.
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
DEFAULT_TRIM_THRESHOLD, DEFAULT_MMAP_MAX = 128 * 1024, 65536
SIZE_MAX = -1  # mallopt's int, converted to size_t by glibc: no trimming


@dataclass(frozen=True)
class HeapChoice:
    """Whether freed memory is kept for reuse, and why (recorded in the manifest's
    ``threads``, beside the other CPU settings)."""

    heap_reuse: bool
    heap_reason: str

    def to_json(self) -> dict:
        return asdict(self)


def _user_allocator(environ: Mapping[str, str]) -> str | None:
    """Why the process's allocator is the user's choice, or ``None``."""
    if any(k.startswith("MALLOC_") for k in environ) or \
            "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
        return "the malloc environment variables set for this process stand"
    if "malloc" in environ.get("LD_PRELOAD", ""):
        return "another malloc is preloaded (LD_PRELOAD)"
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return "not glibc's malloc"
    return None


def heap_choice(requested: bool, environ: Mapping[str, str] | None = None) -> HeapChoice:
    """What :func:`reuse_freed_memory` does for ``--heap-reuse`` = ``requested``."""
    if not requested:
        return HeapChoice(False, "--no-heap-reuse")
    why_not = _user_allocator(os.environ if environ is None else environ)
    if why_not is not None:
        return HeapChoice(False, why_not)
    return HeapChoice(True, "glibc: mmap and trimming off while the replay runs")


def _mallopt(libc: ctypes.CDLL, param: int, value: int) -> None:
    if libc.mallopt(param, value) != 1:
        raise OSError(f"mallopt({param}, {value}) was refused")


@contextmanager
def reuse_freed_memory(requested: bool = True) -> Iterator[HeapChoice]:
    """Keep freed memory in the heap for the block (see the module docstring), then set
    glibc's defaults back and return the free memory to the system."""
    choice = heap_choice(requested)
    if not choice.heap_reuse:
        yield choice
        return
    libc = ctypes.CDLL("libc.so.6")
    _mallopt(libc, M_MMAP_MAX, 0)
    _mallopt(libc, M_TRIM_THRESHOLD, SIZE_MAX)
    try:
        yield choice
    finally:
        _mallopt(libc, M_MMAP_MAX, DEFAULT_MMAP_MAX)
        _mallopt(libc, M_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD)
        libc.malloc_trim(0)
