"""Fixtures of the dashboard tests: a replay run directory with a tokenizer, and AppTest.

Test modules import them (``from dashboard_fixtures import ...``): a second
``tests/*/conftest.py`` would clash with the others under ``--doctest-modules``.

``$PDM_REPLAY_TEST_RUN_DIR`` points the tests at another run (e.g. the sample replay)
instead of the synthetic one; the tests assert nothing that only the synthetic run has.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import pytest

from pdm_replay.dashboard_app import APP_FILE, ENV_RUN_DIR, ENV_TOKENIZER
from pdm_replay.testing.synthetic_run import write_synthetic_run
from pdm_replay.sample.tokenizer import build_tokenizer, save_tokenizer

PAGE_FILES = {"Overview": None, "Disagreements": "page_scripts/disagreements.py",
              "Divergence": "page_scripts/divergence.py",
              "Estimators": "page_scripts/estimators.py",
              "Log health": "page_scripts/log_health.py",
              "Mask comparison": "page_scripts/mask_comparison.py",
              "Mismatch over training": "page_scripts/mismatch.py"}


def add_tokenizer(run: Path, tokenizer_dir: Path) -> Path:
    """Name ``tokenizer_dir`` in the run's manifest the way a replay records the log's."""
    manifest_path = run / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["log_meta"] = {"tokenizer": str(tokenizer_dir), "vocab_size": 1003}
    manifest_path.write_text(json.dumps(manifest))
    return run


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample task's word-level tokenizer (ids 7..1006 decode to the numbers 0..999)."""
    return save_tokenizer(build_tokenizer(), tmp_path_factory.mktemp("tok") / "tokenizer")


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Path:
    """A 3-seed synthetic replay (exact columns) whose manifest names the tokenizer."""
    override = os.environ.get("PDM_REPLAY_TEST_RUN_DIR")
    if override:
        return Path(override)
    run = write_synthetic_run(tmp_path_factory.mktemp("dash") / "run", seeds=(0, 1, 2),
                              rows_per_seed=1500, tokens_per_sample=32, exact=True)
    return add_tokenizer(run, tokenizer_dir)


@pytest.fixture
def app_for(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """``app_for(run, page)``: an ``AppTest`` of the dashboard on ``run``, switched to
    ``page`` and run."""
    AppTest = pytest.importorskip("streamlit.testing.v1").AppTest

    def make(run: Path | str | None, page: str = "Overview") -> Any:
        if run is None:
            monkeypatch.delenv(ENV_RUN_DIR, raising=False)
        else:
            monkeypatch.setenv(ENV_RUN_DIR, str(run))
        monkeypatch.delenv(ENV_TOKENIZER, raising=False)
        at = AppTest.from_file(str(APP_FILE), default_timeout=120).run()
        if PAGE_FILES[page] is not None:
            at.switch_page(PAGE_FILES[page]).run()
        return at
    return make
