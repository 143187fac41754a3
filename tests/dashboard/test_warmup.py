"""The server's start-up computation of the first page (issue 19 item 4): a child process
computes the Overview's data, the page reads it instead of querying, a run changed since
is computed afresh, a failure shows on the page, and the server process starts the child
and does its imports before Streamlit, with no thread beside the sessions'."""

from __future__ import annotations

import functools
import pickle
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pdm_replay.dashboard_app import APP_FILE, ENV_MEMORY_LIMIT, ENV_RUN_DIR, serve
from pdm_replay.dashboard_app.precompute import Precomputed, first_page
from pdm_replay.dashboard_app.runs import RunRef, query_name, run_ref
from pdm_replay.report import overview as overview_module
from pdm_replay.report.dashboard_api import connect_dashboard
from dashboard_fixtures import app_for, run_dir, tokenizer_dir  # noqa: F401 (fixtures)

st = pytest.importorskip("streamlit")
state = pytest.importorskip("pdm_replay.dashboard_app.state")
warmup = pytest.importorskip("pdm_replay.dashboard_app.warmup")


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every computation of the Overview's data (the page's and the start-up's, in this
    process), by run; empty caches and no start-up result to start with."""
    calls: list[str] = []
    original = overview_module.overview

    @functools.wraps(original)  # same module and name: the same cache entries
    def overview(db: Any) -> Any:
        calls.append(str(db.info.source))
        return original(db)

    monkeypatch.setattr(overview_module, "overview", overview)
    monkeypatch.setattr(state, "START_UP", warmup.StartUp())
    st.cache_data.clear()
    st.cache_resource.clear()
    yield calls
    st.cache_data.clear()
    st.cache_resource.clear()


def start_up(monkeypatch: pytest.MonkeyPatch, run: Path, result: Precomputed
             ) -> "warmup.StartUp":
    """``result`` as the server's start-up computation of ``run`` (as it was now)."""
    record = warmup.StartUp(run=run_ref(run), result=result)
    monkeypatch.setattr(state, "START_UP", record)
    return record


def start_up_warnings(at) -> list[str]:
    return [w.value for w in at.warning if "start-up" in w.value]


def fact(at, label: str) -> str:
    """The Overview's value of ``label`` in its one-line facts ("**Seeds** 3 · ...")."""
    line = next(m.value for m in at.markdown if m.value.startswith("**Kind**"))
    return dict(part.split("** ", 1) for part in line.replace("**", "", 1).split(" · **"))[label]


def n_tokens(run: Path) -> int:
    db, _ = connect_dashboard(run)
    with db:
        return int(db.query("SELECT count(*) AS n FROM tokens")["n"][0])


def test_the_overview_reads_what_the_start_up_computed(app_for, counted, run_dir: Path,
                                                       tmp_path: Path, monkeypatch) -> None:
    run = Path(shutil.copytree(run_dir, tmp_path / "run"))
    held = tmp_path / "later"
    for part in ("tokens", "updates"):  # seed 2 arrives after the server started
        shutil.move(str(run / part / "seed=2"), str(held / part / "seed=2"))
    result = first_page(run)
    assert result.error is None and len(counted) == 1
    start_up(monkeypatch, run, result)

    at = app_for(run, "Overview")
    assert not at.exception and not at.error and not start_up_warnings(at)
    assert len(counted) == 1  # the page read the start-up's result
    assert fact(at, "Seeds") == "2" and fact(at, "Tokens") == f"{n_tokens(run):,}"

    for part in ("tokens", "updates"):
        shutil.move(str(held / part / "seed=2"), str(run / part / "seed=2"))
    at = app_for(run, "Overview")
    assert not at.exception and not at.error
    assert len(counted) == 2  # a changed run: computed again, not the start-up copy
    assert fact(at, "Seeds") == "3" and fact(at, "Tokens") == f"{n_tokens(run):,}"


def test_a_failed_start_up_shows_on_the_page(app_for, counted, run_dir: Path,
                                             tmp_path: Path, monkeypatch) -> None:
    run = Path(shutil.copytree(run_dir, tmp_path / "run"))
    part = sorted((run / "tokens").rglob("*.parquet"))[0]
    part.write_bytes(part.read_bytes()[:100])
    result = first_page(run)
    assert result.error and part.name in result.error and not result.results
    start_up(monkeypatch, run, result)

    at = app_for(run, "Overview")
    assert not at.exception
    warned = "\n".join(w.value for w in at.warning)
    assert "start-up computation of this run failed" in warned and part.name in warned
    assert any(f"Cannot open `{run.resolve()}`" in e.value for e in at.error)


def test_a_failed_start_up_is_not_shown_once_the_run_changed(app_for, counted,
                                                             run_dir: Path,
                                                             monkeypatch) -> None:
    record = warmup.StartUp(run=RunRef(str(run_dir.resolve()), "0" * 16),
                            result=Precomputed(error="ValueError: damaged then"))
    monkeypatch.setattr(state, "START_UP", record)
    at = app_for(run_dir, "Overview")
    assert not at.exception and not at.error and not start_up_warnings(at)
    assert len(counted) == 1  # computed by the page


def test_the_child_process_gives_what_the_page_would_compute(run_dir: Path,
                                                             monkeypatch) -> None:
    monkeypatch.setenv(ENV_RUN_DIR, str(run_dir))
    record = warmup.start(warmup.StartUp())
    assert record.run == run_ref(run_dir) and record.child is not None
    output = record.output
    out = record.collect()
    assert out is not None and out.error is None, out
    found, value = out.value(query_name(overview_module.overview), {})
    db, _ = connect_dashboard(run_dir)
    with db:
        expected = overview_module.overview(db)
    assert found and value.headline.equals(expected.headline)
    assert value.health == expected.health and value.coverage == expected.coverage
    assert record.child is None and output.closed  # read once, then closed
    assert record.collect() is out


def test_a_child_that_leaves_no_result_is_a_start_up_failure() -> None:
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    record = warmup.StartUp(run=RunRef("r", "f"), child=child,
                            output=tempfile.TemporaryFile())
    out = record.collect()
    assert out is not None and "exit code 3" in out.error and "left no result" in out.error
    assert record.error(RunRef("r", "f")) == out.error
    assert record.error(RunRef("r", "other")) is None


def test_a_half_written_result_is_a_start_up_failure() -> None:
    output = tempfile.TemporaryFile()
    output.write(pickle.dumps(Precomputed(error="x"))[:10])  # cut short, as by a kill
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    out = warmup.StartUp(run=RunRef("r", "f"), child=child, output=output).collect()
    assert out is not None and "left no result" in out.error


def test_the_server_starts_the_child_and_imports_before_streamlit(monkeypatch) -> None:
    events: list[str] = []
    real_import = serve.import_module

    def fake_streamlit(args: list[str], prog_name: str) -> None:
        events.append(f"streamlit {' '.join(args)} ({prog_name}), "
                      f"{threading.active_count() - threads} new threads")

    import streamlit.web.cli

    threads = threading.active_count()
    monkeypatch.setattr(warmup, "start", lambda: events.append("child"))
    monkeypatch.setattr(warmup.START_UP, "open_connection", lambda: events.append("open"))
    monkeypatch.setattr(serve, "import_module",
                        lambda name: (events.append(name), real_import(name))[1])
    monkeypatch.setattr(streamlit.web.cli, "main", fake_streamlit)
    serve.main(["run", str(APP_FILE), "--server.port", "8599"])
    assert events == ["child", serve.FIRST_PAGE_MODULE, *serve.FIRST_USE_IMPORTS,
                      "streamlit.web.server", "streamlit.env_util", "open",
                      f"streamlit run {APP_FILE} --server.port 8599 (streamlit), "
                      "0 new threads"]
    assert serve.FIRST_PAGE_MODULE.endswith(".overview")


OPENS_WITHOUT_IMPORTS = """
import sys
from pdm_replay.dashboard_app import serve, warmup
record = warmup.StartUp(run=warmup.run_ref(warmup.env_run()))
serve.preload()
before = set(sys.modules)
record.open_connection()
record.opening.join()
assert record.opened is not None
print(sorted(set(sys.modules) - before))
"""


def test_the_connection_thread_imports_nothing(run_dir: Path, monkeypatch) -> None:
    """The one thread the server starts opens the run's connection after the server's
    imports (:func:`serve.preload`), so it never imports beside a session's script."""
    monkeypatch.setenv(ENV_RUN_DIR, str(run_dir))
    out = subprocess.run([sys.executable, "-c", OPENS_WITHOUT_IMPORTS], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_the_start_up_connection_is_handed_over_once(run_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_RUN_DIR, str(run_dir))
    monkeypatch.setenv(ENV_MEMORY_LIMIT, "768MB")
    run = run_ref(run_dir)
    record = warmup.StartUp(run=run)
    record.open_connection()
    assert record.connection(run, "512MB") is None  # opened with another limit: closed
    record.open_connection()
    db = record.connection(run, "768MB")
    with db:
        assert int(db.query("SELECT count(*) AS n FROM tokens")["n"][0]) == n_tokens(run_dir)
    assert record.connection(run, "768MB") is None  # handed over once
    assert warmup.StartUp().connection(run, "768MB") is None  # nothing opened


def test_a_page_takes_the_start_up_connection(app_for, counted, run_dir: Path,
                                              monkeypatch) -> None:
    monkeypatch.setenv(ENV_RUN_DIR, str(run_dir))
    record = start_up(monkeypatch, run_dir, first_page(run_dir))
    record.open_connection()
    at = app_for(run_dir, "Overview")
    assert not at.exception and not at.error and len(counted) == 1
    record.opening.join()
    assert record.opened is not None  # the Overview needed no connection
    at = app_for(run_dir, "Disagreements")
    assert not at.exception and not at.error
    assert record.opened is None  # the page's connection is the start-up's


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
    assert "Traceback" not in text and "partially initialized" not in text, text
