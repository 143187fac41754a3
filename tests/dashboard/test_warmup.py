"""The server's start-up computation of the first page (issue 19 item 4): it fills the
caches the Overview reads, a run changed since is computed afresh, a failure shows on the
page, and the server process starts it before Streamlit."""

from __future__ import annotations

import functools
import logging
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pdm_replay.dashboard_app import APP_FILE, ENV_RUN_DIR, WARM_UP_THREAD, serve
from pdm_replay.report import overview as overview_module
from pdm_replay.report.dashboard_api import connect_dashboard
from dashboard_fixtures import app_for, run_dir, tokenizer_dir  # noqa: F401 (fixtures)

st = pytest.importorskip("streamlit")
state = pytest.importorskip("pdm_replay.dashboard_app.state")
warmup = pytest.importorskip("pdm_replay.dashboard_app.warmup")


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every computation of the Overview's data (the page's and the warm-up's), by run;
    empty caches to start with."""
    calls: list[str] = []
    original = overview_module.overview

    @functools.wraps(original)  # same module and name: the same cache entries
    def overview(db: Any) -> Any:
        calls.append(str(db.info.source))
        return original(db)

    monkeypatch.setattr(overview_module, "overview", overview)
    monkeypatch.setattr(warmup, "FIRST_PAGE", ((overview, {}),))
    st.cache_data.clear()
    st.cache_resource.clear()
    yield calls
    st.cache_data.clear()
    st.cache_resource.clear()


def start_up_warnings(at) -> list[str]:
    return [w.value for w in at.warning if "start-up" in w.value]


def metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def n_tokens(run: Path) -> int:
    db, _ = connect_dashboard(run)
    with db:
        return int(db.query("SELECT count(*) AS n FROM tokens")["n"][0])


def test_the_overview_reads_what_the_warm_up_computed(app_for, counted, run_dir: Path,
                                                      tmp_path: Path, monkeypatch) -> None:
    run = Path(shutil.copytree(run_dir, tmp_path / "run"))
    held = tmp_path / "later"
    for part in ("tokens", "updates"):  # seed 2 arrives after the server started
        shutil.move(str(run / part / "seed=2"), str(held / part / "seed=2"))
    monkeypatch.setenv(ENV_RUN_DIR, str(run))
    record = warmup.warm_up(state.WarmUp())
    assert record.error is None and record.done.is_set() and len(counted) == 1
    assert record.fingerprint == state.fingerprint(run)

    at = app_for(run, "Overview")
    assert not at.exception and not at.error and not start_up_warnings(at)
    assert len(counted) == 1  # the page found the warm-up's result
    assert metric(at, "Seeds") == "2" and metric(at, "Tokens") == f"{n_tokens(run):,}"

    for part in ("tokens", "updates"):
        shutil.move(str(held / part / "seed=2"), str(run / part / "seed=2"))
    at = app_for(run, "Overview")
    assert not at.exception and not at.error
    assert len(counted) == 2  # a changed run: computed again, not the start-up copy
    assert metric(at, "Seeds") == "3" and metric(at, "Tokens") == f"{n_tokens(run):,}"


def test_a_failed_warm_up_shows_on_the_page(app_for, counted, run_dir: Path,
                                            tmp_path: Path, monkeypatch) -> None:
    run = Path(shutil.copytree(run_dir, tmp_path / "run"))
    part = sorted((run / "tokens").rglob("*.parquet"))[0]
    part.write_bytes(part.read_bytes()[:100])
    monkeypatch.setenv(ENV_RUN_DIR, str(run))
    record = state.WarmUp()
    monkeypatch.setattr(state, "WARM_UP", record)  # the server's record, for this test
    warmup.warm_up(record)
    assert record.done.is_set() and record.error and part.name in record.error

    at = app_for(run, "Overview")
    assert not at.exception
    warned = "\n".join(w.value for w in at.warning)
    assert "start-up computation of this run failed" in warned and part.name in warned
    assert any(f"Cannot open `{run.resolve()}`" in e.value for e in at.error)


def test_a_failed_warm_up_is_not_shown_once_the_run_changed(app_for, counted, run_dir: Path,
                                                            tmp_path: Path,
                                                            monkeypatch) -> None:
    record = state.WarmUp(fingerprint="0" * 16, error="ValueError: damaged then")
    monkeypatch.setattr(state, "WARM_UP", record)
    at = app_for(run_dir, "Overview")
    assert not at.exception and not at.error and not start_up_warnings(at)


def test_the_server_process_starts_the_warm_up_before_streamlit(monkeypatch) -> None:
    started = threading.Event()
    seen: dict[str, Any] = {}

    def fake_warm_up() -> None:
        seen["thread"] = threading.current_thread().name
        started.set()

    def fake_streamlit(args: list[str], prog_name: str) -> None:
        seen["args"], seen["prog_name"] = args, prog_name

    import streamlit.web.cli

    monkeypatch.setattr(serve, "_warm_up", fake_warm_up)
    monkeypatch.setattr(streamlit.web.cli, "main", fake_streamlit)
    serve.main(["run", str(APP_FILE), "--server.port", "8599"])
    assert started.wait(10) and seen["thread"] == WARM_UP_THREAD
    assert seen["args"] == ["run", str(APP_FILE), "--server.port", "8599"]
    assert seen["prog_name"] == "streamlit"


@pytest.mark.parametrize("thread, message, kept", [
    (WARM_UP_THREAD, "No runtime found, using MemoryCacheStorageManager", False),
    (WARM_UP_THREAD, "Thread '%s': missing ScriptRunContext! ...", False),
    ("MainThread", "Thread '%s': missing ScriptRunContext! ...", True),
    (WARM_UP_THREAD, "Cache params for function %s are incompatible", True)])
def test_only_the_warm_ups_expected_warnings_are_quiet(thread: str, message: str,
                                                        kept: bool) -> None:
    record = logging.LogRecord("streamlit", logging.WARNING, __file__, 1, message,
                               (thread,), None)
    record.threadName = thread
    assert serve._quiet(record) is kept


def test_the_real_server_computes_the_first_page_at_start(run_dir: Path,
                                                          tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "pdm_replay", "dashboard",
                                    str(run_dir), "--port", str(port)],
                                   stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "start-up computation" not in log.read_text() and process.poll() is None:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(timeout=30)
    text = log.read_text()
    assert "start-up computation of the first page ready" in text, text
    assert "missing ScriptRunContext" not in text and "No runtime found" not in text, text
