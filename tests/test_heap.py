"""When freed memory is kept for reuse (the user's allocator settings stand), and what
glibc then does with a freed block: it stays resident inside the block and goes back to
the system after it."""

from __future__ import annotations

import ctypes
import platform
import resource

import pytest

from pdm_replay.heap import heap_choice, reuse_freed_memory

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
BLOCK = 64 << 20  # above glibc's largest dynamic mmap threshold (32 MiB): mmap'd by default


@pytest.mark.parametrize(("environ", "reason"), [
    ({"MALLOC_ARENA_MAX": "2"}, "malloc environment variables"),
    ({"MALLOC_TRIM_THRESHOLD_": "0"}, "malloc environment variables"),
    ({"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0"}, "malloc environment variables"),
    ({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}, "LD_PRELOAD"),
])
def test_the_users_allocator_settings_stand(environ: dict[str, str], reason: str) -> None:
    choice = heap_choice(True, environ)
    assert not choice.heap_reuse and reason in choice.heap_reason


def test_off_when_not_requested_and_on_under_plain_glibc() -> None:
    assert heap_choice(False, {}).to_json() == {"heap_reuse": False,
                                                "heap_reason": "--no-heap-reuse"}
    # an unrelated tunable or preload leaves the choice to us
    env = {"GLIBC_TUNABLES": "glibc.pthread.rseq=0", "LD_PRELOAD": "libfoo.so"}
    assert heap_choice(True, env).heap_reuse == GLIBC


def _resident() -> int:
    """This process's resident set in bytes (/proc/self/statm, second field)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _touch_and_free(libc: ctypes.CDLL) -> int:
    """Allocate BLOCK bytes, write every page, free them; the resident set's growth that
    outlives the free."""
    before = _resident()
    ptr = libc.malloc(BLOCK)
    assert ptr, "malloc failed"
    ctypes.memset(ptr, 1, BLOCK)
    libc.free(ptr)
    return _resident() - before


@pytest.mark.skipif(not heap_choice(True).heap_reuse,
                    reason="glibc's malloc, untuned by this process's environment, only")
def test_a_freed_block_stays_resident_inside_and_returns_after() -> None:
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    # By default a 64 MiB block is mmap'd and unmapped on free: nothing stays resident
    # (slack: 1/4 of the block for whatever else the process touched meanwhile).
    assert _touch_and_free(libc) < BLOCK // 4
    with reuse_freed_memory():
        before = _resident()
        assert _touch_and_free(libc) > BLOCK * 3 // 4  # kept in the heap for reuse
        assert _touch_and_free(libc) < BLOCK // 4  # reused: no new resident pages
    # malloc_trim(0) handed the free heap back, and the mmap default is restored
    assert _resident() - before < BLOCK // 4
    assert _touch_and_free(libc) < BLOCK // 4
