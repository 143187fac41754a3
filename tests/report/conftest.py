"""Fixtures of the report tests: the hand-built run of :mod:`report_fixtures`."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from report_fixtures import THRESHOLDS, token_rows, tokens_table, write_run


@pytest.fixture
def hand_run(tmp_path: Path) -> Path:
    """The hand-built replay run (report_fixtures.py: every number worked out)."""
    return write_run(tmp_path / "run")


@pytest.fixture
def hand_masks_file(tmp_path: Path) -> Path:
    """The same tokens as one `pdm-replay masks` file: no seed column, no updates."""
    rows = [{k: v for k, v in r.items() if k != "seed"} for r in token_rows()]
    path = tmp_path / "tokens.parquet"
    pq.write_table(tokens_table(rows, replay=False, footer=THRESHOLDS), path)
    return path
