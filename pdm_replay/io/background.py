"""Overlap reading, compute and writing on threads: a prefetching iterator, an ordered
parallel map and a background sink.

Parquet decoding, Arrow encoding, numpy and torch kernels release the GIL, so threads keep
every core busy. Everything in flight is bounded (``depth`` items), so memory stays
bounded; an exception in any thread is re-raised in the caller at its place in the
order, and leaving early stops the threads.

Examples
--------
>>> out = []
>>> with BackgroundSink(out.append) as sink:
...     for x in prefetch(range(5)):
...         sink.put(x * x)
>>> out
[0, 1, 4, 9, 16]
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Callable, Generic, Iterable, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")
_DONE = object()
_POLL_S = 0.05  # how often a blocked thread checks whether the other side has stopped


def _put(q: queue.Queue, item: object, stop: threading.Event) -> bool:
    """Put ``item`` unless ``stop`` is set first; True if it was put."""
    while not stop.is_set():
        try:
            q.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def prefetch(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """Yield ``items``, produced by a background thread up to ``depth`` items ahead.

    >>> list(prefetch(iter("abc"), depth=1))
    ['a', 'b', 'c']
    """
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                if not _put(q, (item, None), stop):
                    return
            _put(q, (_DONE, None), stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, re-raised there
            _put(q, (None, exc), stop)

    thread = threading.Thread(target=produce, name="pdm-replay-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item, exc = q.get()
            if exc is not None:
                raise exc
            if item is _DONE:
                return
            yield item
    finally:
        stop.set()
        thread.join()


def ordered_map(fn: Callable[[T], R], items: Iterable[T], workers: int,
                depth: int | None = None) -> Iterator[R]:
    """``map(fn, items)`` on ``workers`` threads, results in input order, at most ``depth``
    (default ``workers + 1``) items in flight. A failure of ``fn`` or of ``items`` is raised
    after every result before it.

    >>> list(ordered_map(lambda x: x * x, range(6), workers=3))
    [0, 1, 4, 9, 16, 25]
    """
    if workers <= 1:
        yield from map(fn, items)
        return
    depth = depth or workers + 1
    source = iter(items)
    pending: deque[Future] = deque()
    failure: BaseException | None = None
    open_ = True  # False once ``items`` is exhausted or has failed
    with ThreadPoolExecutor(workers, thread_name_prefix="pdm-replay-worker") as pool:
        try:
            while True:
                while open_ and len(pending) < depth:
                    try:
                        pending.append(pool.submit(fn, next(source)))
                    except StopIteration:
                        open_ = False
                    except BaseException as exc:  # noqa: BLE001 - raised after earlier results
                        failure, open_ = exc, False
                if not pending:
                    break
                yield pending.popleft().result()
            if failure is not None:
                raise failure
        finally:
            for future in pending:  # leaving early: drop what has not started
                future.cancel()


class BackgroundSink(Generic[T]):
    """Call ``consume(item)`` on a background thread for every ``put`` item, in order.

    A context manager: a clean exit waits for every item and re-raises a failure of
    ``consume``; an exception in the block stops the thread and drops what is queued.
    """

    def __init__(self, consume: Callable[[T], None], depth: int = 2) -> None:
        self._consume = consume
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="pdm-replay-sink", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():  # abort() sets it: what is still queued is dropped
            try:
                item = self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if item is _DONE:
                return
            try:
                self._consume(item)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                self._error = exc
                self._stop.set()

    def _raise_pending(self) -> None:
        if self._error is not None:
            raise self._error

    def put(self, item: T) -> None:
        """Queue ``item``; blocks while ``depth`` items wait; raises an earlier failure."""
        self._raise_pending()
        if not _put(self._queue, item, self._stop):
            self._raise_pending()
            raise RuntimeError("background sink stopped")

    def close(self) -> None:
        """Wait until every queued item is consumed; re-raise a failure of ``consume``."""
        if self._thread.is_alive():
            _put(self._queue, _DONE, self._stop)
            self._thread.join()
        self._raise_pending()

    def abort(self) -> None:
        """Stop without consuming what is still queued."""
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> "BackgroundSink[T]":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
