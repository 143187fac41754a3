"""What every command's ``--help`` says: no type beside an on/off flag, and timings that
were measured."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdm_replay.cli import app

runner = CliRunner()
COMMANDS = ["ingest", "validate", "masks", "replay", "report", "sql", "dashboard",
            "make-sample"]
SAMPLE_README = Path(__file__).resolve().parents[2] / "sample_data" / "README.md"


def help_text(*args: str) -> str:
    result = runner.invoke(app, [*args, "--help"])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.replace("│", " ").split())  # rich's boxes and wrapping undone


@pytest.mark.parametrize("command", [[], *([c] for c in COMMANDS)], ids=["app", *COMMANDS])
def test_no_bool_type_beside_a_flag(command: list[str]) -> None:
    """A flag takes no value (``--force``, not ``--force true``): Typer's ``<bool>`` said
    it did."""
    text = help_text(*command)
    assert "<bool>" not in text and "--help" in text


def test_make_sample_time_is_the_measured_one() -> None:
    """``--size small``'s time is the sample README's measured one (sft + rl +
    statistics), in minutes, with its parts."""
    line = " ".join(SAMPLE_README.read_text().split())
    parts = re.search(r"Time on this run: sft ([\d.]+) s, rl ([\d.]+) s, statistics ([\d.]+) s",
                      line)
    assert parts, "sample_data/README.md no longer states its time"
    sft, rl, stats = (float(x) for x in parts.groups())
    text = help_text("make-sample")
    assert f"measured {round((sft + rl + stats) / 60)} minutes" in text, text
    assert parts.group(0).removeprefix("Time on this run: ") in text, text
