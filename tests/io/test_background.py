"""The prefetching iterator and the background sink: order, errors, early exits."""

import random
import threading
import time

import pytest

from pdm_replay.io.background import BackgroundSink, ordered_map, prefetch


def _alive(name: str) -> bool:
    return any(t.name == name and t.is_alive() for t in threading.enumerate())


def test_prefetch_yields_every_item_in_order() -> None:
    assert list(prefetch(range(100), depth=3)) == list(range(100))


def test_prefetch_reraises_the_producer_error_in_the_consumer() -> None:
    def items():
        yield 1
        raise ValueError("bad batch 2")
    got = []
    with pytest.raises(ValueError, match="bad batch 2"):
        for x in prefetch(items()):
            got.append(x)
    assert got == [1]


def test_leaving_prefetch_early_stops_the_producer() -> None:
    produced = []

    def items():
        for i in range(1000):
            produced.append(i)
            yield i
    it = prefetch(items(), depth=2)
    assert next(it) == 0
    it.close()  # what a `break` out of the for loop does
    assert not _alive("pdm-replay-prefetch")
    assert len(produced) <= 4  # the one consumed, two queued, one blocked on the full queue


def test_sink_consumes_every_item_in_order_before_close_returns() -> None:
    out = []

    def slow(x: int) -> None:
        time.sleep(0.001)
        out.append(x)
    with BackgroundSink(slow, depth=2) as sink:
        for i in range(50):
            sink.put(i)
    assert out == list(range(50))


def test_sink_failure_is_raised_in_the_caller() -> None:
    def fail(x: int) -> None:
        if x == 3:
            raise OSError("disk full")
    with pytest.raises(OSError, match="disk full"):
        with BackgroundSink(fail) as sink:
            for i in range(100):
                sink.put(i)
                time.sleep(0.001)
    assert not _alive("pdm-replay-sink")


def test_error_in_the_block_stops_the_sink_without_draining() -> None:
    gate, out = threading.Event(), []

    def blocked(x: int) -> None:
        gate.wait(5)
        out.append(x)
    threading.Timer(0.2, gate.set).start()  # opens only after the block has failed
    with pytest.raises(KeyError):
        with BackgroundSink(blocked, depth=4) as sink:
            for i in range(4):
                sink.put(i)
            raise KeyError("compute failed")
    assert out == [0] and not _alive("pdm-replay-sink")  # 1..3 were dropped


def _jittered_square(x: int) -> int:
    time.sleep(random.random() / 500)  # results finish out of order
    return x * x


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_ordered_map_keeps_input_order(workers: int) -> None:
    assert list(ordered_map(_jittered_square, range(60), workers)) == [x * x for x in range(60)]


def test_ordered_map_raises_a_failure_after_every_earlier_result() -> None:
    def fn(x: int) -> int:
        if x in (3, 7):
            time.sleep(0.05 if x == 3 else 0.0)  # item 7 fails first in time, 3 first in order
            raise ValueError(f"item {x}")
        return x
    got = []
    with pytest.raises(ValueError, match="item 3"):
        for y in ordered_map(fn, range(10), workers=4):
            got.append(y)
    assert got == [0, 1, 2]


def test_ordered_map_raises_a_source_failure_after_the_items_before_it() -> None:
    def items():
        yield from range(4)
        raise OSError("file 2 unreadable")
    got = []
    with pytest.raises(OSError, match="file 2"):
        for y in ordered_map(_jittered_square, items(), workers=3):
            got.append(y)
    assert got == [0, 1, 4, 9]


def test_leaving_ordered_map_early_runs_no_more_items() -> None:
    started = []

    def fn(x: int) -> int:
        started.append(x)
        return x
    it = ordered_map(fn, range(1000), workers=2, depth=3)
    assert next(it) == 0
    it.close()
    assert len(started) <= 4 and not _alive("pdm-replay-worker")
