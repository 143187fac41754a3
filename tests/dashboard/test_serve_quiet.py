"""The dashboard's server start says nothing it need not (issue 35): importing the pages
before Streamlit's runtime exists made ``st.cache_data`` warn "No runtime found"."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from importlib import import_module
from pathlib import Path

from pdm_replay.dashboard_app import serve

ROOT = Path(__file__).resolve().parents[2]


def test_preload_in_a_fresh_server_process_warns_nothing() -> None:
    """A new interpreter, as the server is: the pages' modules are imported there first."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", "from pdm_replay.dashboard_app.serve "
                           "import preload; preload(); print('preloaded')"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and "preloaded" in done.stdout, done.stderr
    assert "No runtime found" not in done.stderr, done.stderr
    assert "WARNING" not in done.stderr, done.stderr


def test_only_that_message_is_quieted_and_only_meanwhile() -> None:
    log = import_module("streamlit.runtime.caching.cache_data_api")._LOGGER  # level set
    before = log.level
    with serve.no_runtime_yet():
        assert log.level == logging.ERROR  # an error there still shows
    assert log.level == before
