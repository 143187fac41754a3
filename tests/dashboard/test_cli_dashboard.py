"""`pdm-replay dashboard` through Typer's CliRunner (the server start is intercepted)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.commands import dashboard as launch
from pdm_replay.commands.dashboard import APP_FILE, ENV_RUN_DIR, ENV_TOKENIZER, SERVE_MODULE
from dashboard_fixtures import run_dir, tokenizer_dir  # noqa: F401 (fixtures)

runner = CliRunner()


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], dict]]:
    calls: list[tuple[list[str], dict]] = []
    monkeypatch.setattr(launch, "_exec", lambda cmd, env: calls.append((cmd, env)) or 0)
    monkeypatch.setattr(launch.subprocess, "Popen", _refuse)
    return calls


def _refuse(*args, **kwargs):
    raise AssertionError("the test must not start a server")


def said(result) -> str:
    """The output with rich's line wrapping undone."""
    return " ".join(result.output.split())


def option(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_defaults_bind_localhost_headless_without_usage_stats(started, run_dir: Path) -> None:
    result = runner.invoke(app, ["dashboard", str(run_dir)])
    assert result.exit_code == 0, result.output
    (cmd, env), = started
    assert cmd[1:5] == ["-m", SERVE_MODULE, "run", str(APP_FILE)]
    assert option(cmd, "--server.address") == "127.0.0.1"
    assert option(cmd, "--server.port") == "8501"
    assert option(cmd, "--server.headless") == "true"
    assert option(cmd, "--browser.gatherUsageStats") == "false"
    assert env[ENV_RUN_DIR] == str(run_dir.resolve()) and ENV_TOKENIZER not in env


def test_port_host_and_tokenizer(started, run_dir: Path) -> None:
    result = runner.invoke(app, ["dashboard", str(run_dir), "--port", "9123", "--host",
                                 "0.0.0.0", "--tokenizer", "my/tok"])
    assert result.exit_code == 0, result.output
    (cmd, env), = started
    assert option(cmd, "--server.port") == "9123"
    assert option(cmd, "--server.address") == "0.0.0.0"
    assert env[ENV_TOKENIZER] == "my/tok"


@pytest.mark.parametrize("host, warned", [("0.0.0.0", True), ("192.168.1.7", True),
                                          ("::", True), ("127.0.0.1", False),
                                          ("localhost", False), ("::1", False)])
def test_non_loopback_host_warns_no_authentication(started, run_dir: Path, host: str,
                                                   warned: bool) -> None:
    result = runner.invoke(app, ["dashboard", str(run_dir), "--host", host])
    assert result.exit_code == 0, result.output
    assert ("no authentication" in said(result)) is warned
    assert len(started) == 1  # a warning, not a refusal


def test_missing_run_is_an_error_before_starting(started, tmp_path: Path) -> None:
    result = runner.invoke(app, ["dashboard", str(tmp_path / "nope")])
    assert result.exit_code == 2 and not started
    assert "no such run directory" in said(result)


def test_non_tokens_parquet_refused_before_serving(started, tmp_path: Path,
                                                   small_log: Path) -> None:
    """The input is checked as `report` and `sql` check it: a rollout log or a Parquet file
    of other columns is refused before a server starts, the error said once."""
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), other)
    for path, why in ((small_log, "expected 'tokens/v1'"), (other, "missing column")):
        result = runner.invoke(app, ["dashboard", str(path)])
        assert result.exit_code == 2 and not started, result.output
        assert why in said(result) and said(result).count("error:") == 1, result.output
        assert "serving" not in said(result)


def test_bad_port(started, run_dir: Path) -> None:
    result = runner.invoke(app, ["dashboard", str(run_dir), "--port", "70000"])
    assert result.exit_code == 2 and "--port 70000" in said(result) and not started


def test_missing_streamlit_is_explained(started, run_dir: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    real = launch.importlib.util.find_spec
    monkeypatch.setattr(launch.importlib.util, "find_spec",
                        lambda name: None if name == "streamlit" else real(name))
    result = runner.invoke(app, ["dashboard", str(run_dir)])
    assert result.exit_code == 2 and "pdm_replay[dashboard]" in said(result)
