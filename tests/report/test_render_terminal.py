"""The terminal table fits 100 columns, names what it leaves out, and `--wide` shows every
column (issue 19); numbers by magnitude, no Python reprs."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.report.display import format_value

runner = CliRunner()


def _table(run: Path, *extra: str) -> str:
    result = runner.invoke(app, ["report", str(run), "--bootstrap-samples", "50", *extra])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_default_table_fits_100_columns_and_names_the_rest(hand_run: Path) -> None:
    text = _table(hand_run)
    assert max(map(len, text.splitlines())) <= 100
    # corrective keeps are 100% − unsafe keeps: left out of the narrow headline, named
    flat = " ".join(text.split())
    assert ("more columns with --wide: family, estimator, region, out of region / seed, "
            "corrective: ratio (pooled)") in flat
    assert "Thresholds(" not in text and "None" not in text


def test_wide_shows_every_column(hand_run: Path) -> None:
    text = _table(hand_run, "--wide")
    flat = " ".join(text.split())
    assert "corrective: pred. (seed mean)" in flat and "more columns with --wide" not in text
    assert max(map(len, text.splitlines())) > 100


def test_numbers_by_magnitude() -> None:
    assert format_value("recompute_deviation_max", 9.39e-06) == "9.39e-06"
    assert format_value("n_tokens", 1_234_567) == "1,234,567"
    assert format_value("n_tokens", 9999) == "9999"
    assert format_value("unsafe_diff_pooled", -0.222) == "-22.2 pp"


def test_sql_table_fits_and_names_the_columns_left_out(hand_run: Path) -> None:
    result = runner.invoke(app, ["sql", str(hand_run), "SELECT * FROM tokens"])
    assert result.exit_code == 0, result.output
    assert max(map(len, result.stdout.splitlines())) <= 100
    assert "more columns:" in result.stdout and "keep_pdm_kl_agg" in result.stdout


def test_sql_one_row_is_transposed_and_numbers_by_magnitude(hand_run: Path) -> None:
    q = "SELECT 9.39e-06::DOUBLE AS tiny, 123456 AS big, NULL AS nothing, * FROM log_health"
    result = runner.invoke(app, ["sql", str(hand_run), q])
    assert result.exit_code == 0, result.output
    lines = {tuple(c.strip() for c in line.strip("│ ").split("│")) for line in
             result.stdout.splitlines() if line.startswith("│")}
    assert {("tiny", "9.39e-06"), ("big", "123,456"), ("nothing", "NULL")} <= lines
