import pyarrow as pa
import pytest

from pdm_replay.io.memory import POOL_ENV, threaded_arrow_pool, threaded_pool


def test_pool_is_set_for_the_block_and_restored_after_an_error() -> None:
    before = pa.default_memory_pool().backend_name
    with pytest.raises(RuntimeError), threaded_arrow_pool() as pool:
        assert pool.backend_name in ("jemalloc", "system")
        assert pa.default_memory_pool().backend_name == threaded_pool().backend_name
        raise RuntimeError("boom")
    assert pa.default_memory_pool().backend_name == before


def test_a_users_pool_choice_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(POOL_ENV, "mimalloc")
    before = pa.default_memory_pool().backend_name
    with threaded_arrow_pool() as pool:
        assert pool.backend_name == before == pa.default_memory_pool().backend_name
