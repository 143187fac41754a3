"""README's command documentation and `--help` stay true to the Typer app (issue 19): a
command, option, choice, page or formula documented in one and not the other fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.dashboard_app import PAGES
from pdm_replay.replay.config import CHUNK_MEMORY, DTYPES, OPTIMIZERS
from pdm_replay.names import REPORT_FORMATS as FORMATS, SQL_FORMATS

README = (Path(__file__).parents[2] / "README.md").read_text()
COMMANDS = typer.main.get_command(app).commands
runner = CliRunner()


def _rows() -> dict[str, str]:
    """The README command table: command name -> its row."""
    rows = [line for line in README.splitlines() if line.startswith("| `pdm-replay ")]
    return {r.split("`pdm-replay ", 1)[1].split()[0].rstrip("`"): r for r in rows}


def _help(*args: str) -> str:
    result = runner.invoke(app, [*args, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    return " ".join(result.output.replace("│", " ").split())


def test_every_command_has_a_readme_row_and_back() -> None:
    assert set(_rows()) == set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_readme_options_exist(name: str) -> None:
    row = re.sub(r"`pip install[^`]*`", "", _rows()[name])  # pip's own options
    opts = {o for p in COMMANDS[name].params for o in (*p.opts, *p.secondary_opts)}
    documented = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", row))
    assert documented <= opts, f"README documents {sorted(documented - opts)} for {name}"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_cuts_nothing_off(name: str) -> None:
    assert "…" not in _help(name)


def test_choices_are_listed_in_help() -> None:
    replay, report, sql = _help("replay"), _help("report"), _help("sql")
    assert "|".join(OPTIMIZERS) in replay and "|".join(DTYPES) in replay
    assert "|".join(FORMATS) in report and "|".join(SQL_FORMATS) in sql


def test_chunk_memory_is_one_statement() -> None:
    assert CHUNK_MEMORY in _help("replay")
    assert CHUNK_MEMORY in " ".join(README.split())


def test_dashboard_pages_in_help_and_readme() -> None:
    text, row = _help("dashboard"), _rows()["dashboard"]
    assert all(title in text and title in row for _, title, _ in PAGES)


def test_short_options_mean_one_thing() -> None:
    meaning: dict[str, set[str]] = {}
    for cmd in COMMANDS.values():
        for p in cmd.params:
            longs = [o for o in p.opts if o.startswith("--")]
            for short in (o for o in p.opts if re.fullmatch(r"-\w", o)):
                meaning.setdefault(short, set()).update(longs)
    assert {s: m for s, m in meaning.items() if len(m) > 1} == {}
