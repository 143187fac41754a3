"""Session-wide fixtures: tiny random Qwen3 checkpoints (safetensors) and a ragged log."""

from __future__ import annotations

from pathlib import Path

import pytest
from replay_helpers import ragged_log, save_tiny


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("ckpt") / "policy", rng_seed=0)


@pytest.fixture(scope="session")
def behavior_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("ckpt") / "behavior", rng_seed=1)


@pytest.fixture(scope="session")
def replay_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ragged_log(tmp_path_factory.mktemp("log") / "log.parquet")
