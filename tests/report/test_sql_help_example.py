"""`pdm-replay sql --help`'s example, pasted into bash, runs the query it shows."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdm_replay.cli import app

runner = CliRunner()


def help_example() -> str:
    """The example command line of ``sql --help`` (rich's line wrapping undone)."""
    text = " ".join(runner.invoke(app, ["sql", "--help"]).output.split())
    found = re.search(r"Example: (pdm-replay sql RUN .*? -p \w+ \S+)", text)
    assert found, text
    return found.group(1)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_sql_help_example_survives_bash(hand_run: Path) -> None:
    line = help_example().replace("RUN", str(hand_run), 1)
    # bash's own word splitting and expansion, with $s set as a user's shell might have it
    argv = subprocess.run(["bash", "-c", f's=oops; for a in {line}; do printf "%s\\0" "$a"; done'],
                          capture_output=True, text=True, check=True).stdout.split("\0")[:-1]
    assert argv[0] == "pdm-replay" and "$s" in argv[3], argv  # the query reached us whole
    result = runner.invoke(app, argv[1:])
    assert result.exit_code == 0, result.output
    assert "seed" in result.output
