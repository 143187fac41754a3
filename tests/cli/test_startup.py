"""Start-up cost: importing the CLI and rendering every --help loads none of the heavy
libraries (torch ~1.3 s, transformers, DuckDB, Streamlit, polars); commands import them
when they run. Checked in a fresh interpreter, since this test process has them loaded."""

from __future__ import annotations

import json
import subprocess
import sys

# pyarrow and NumPy too (0.1-0.15 s together): issue 20 gives --help 0.5 s in all.
HEAVY = ("torch", "transformers", "duckdb", "streamlit", "polars", "pyarrow", "numpy")

PROBE = """
import json, sys
from typer.main import get_command
from typer.testing import CliRunner
import pdm_replay.cli
from pdm_replay.cli import app
runner = CliRunner()
names = sorted(get_command(app).commands)
codes = {name: runner.invoke(app, [name, "--help"]).exit_code for name in names}
codes[""] = runner.invoke(app, ["--help"]).exit_code
heavy = [m for m in %r if m in sys.modules]
print(json.dumps({"codes": codes, "heavy": heavy}))
""" % (HEAVY,)


def test_cli_and_every_help_import_no_heavy_library() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(result["codes"]) >= 9  # every command (validate ... dashboard) and the app
    assert set(result["codes"].values()) == {0}, result["codes"]
    # A failure names who imports it: python -X importtime -c "import pdm_replay.cli"
    # (pdm_replay.masks, pdm_replay.replay.config and the package __init__s must stay light).
    assert result["heavy"] == []


def test_replay_module_imports_no_report_library() -> None:
    """The replay's start-up (issue 20) loads torch but not the report stack: DuckDB and
    polars come in after the seeds (``run_summary``), pandas (which pyarrow pulls in on the
    first ``pa.array``) not at import."""
    probe = ("import sys, json, pdm_replay.commands.replay; print(json.dumps([m for m in "
             "('duckdb', 'polars', 'pandas', 'streamlit', 'scipy') if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
