"""Shared fixtures: small synthetic rollout logs, and a registry restored after user masks."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pyarrow.parquet as pq
import pytest

from pdm_replay.testing.fixtures import SyntheticLogConfig, write_synthetic_log
from pdm_replay.masks import MASK_SPECS


@pytest.fixture
def small_log(tmp_path: Path) -> Path:
    """8 samples x 6 tokens, vocab 50, K 5, with train log-probs and prompts."""
    cfg = SyntheticLogConfig(n_samples=8, response_len=6, vocab_size=50, top_k=5,
                             mismatch=1.0)
    return write_synthetic_log(tmp_path / "log.parquet", cfg)


@pytest.fixture
def small_rows(small_log: Path) -> list[dict]:
    """The rows of ``small_log`` as Python dicts, for building bad logs."""
    return pq.read_table(small_log).to_pylist()


@pytest.fixture
def user_registry() -> Iterator[None]:
    """Undo a user mask module's registration afterwards: the registry is per process."""
    before, modules = dict(MASK_SPECS), set(sys.modules)
    yield
    MASK_SPECS.clear()
    MASK_SPECS.update(before)
    for name in set(sys.modules) - modules:
        if name.startswith("pdm_replay_user_masks_"):
            del sys.modules[name]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Don't collect conftest.py files as doctest modules.

    ``--doctest-modules`` would import each ``tests/*/conftest.py`` as a module named
    ``conftest`` and fail with "import file mismatch" on the second one (order-dependent).
    They are still loaded as conftests.
    """
    if collection_path.name == "conftest.py":
        return True
    return None
