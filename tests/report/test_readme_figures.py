"""The README's "What it finds on the shipped sample" figures come from the Quickstart
command beside them (pdm_replay.report.readme_figures): the paragraph is generated from
docs/sample_figures.json, and a slow test reruns the command and requires the JSON's
figures."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from pdm_replay.report.build import build_report
from pdm_replay.report.db import connect
from pdm_replay.report.readme_figures import (FIGURES_FILE, README_FILE, figures, paragraph,
                                              readme_paragraph)
from pdm_replay.report.render import render_json
from pdm_replay.report.verdict import tokens_needed

ROOT = Path(__file__).parents[2]


def _doc() -> dict:
    return json.loads(FIGURES_FILE.read_text())


def test_the_readme_paragraph_is_generated_from_the_figures() -> None:
    doc = _doc()
    assert readme_paragraph(README_FILE.read_text()) == paragraph(doc["figures"],
                                                                  doc["timings"]), (
        "README drifted from docs/sample_figures.json: rerun "
        "`python -m pdm_replay.report.readme_figures` (see its docstring)")


def test_the_figures_agree_with_the_verdicts_formula() -> None:
    fig = _doc()["figures"]
    assert fig["tokens_needed_per_side"] == tokens_needed(fig["own"]["ratio"],
                                                          fig["own"]["predictive"])
    lo, hi = fig["own"]["ci"]
    assert lo < 0 < hi  # the paragraph says "no resolved difference"


def quickstart_replay(out: Path) -> list[str]:
    """The README Quickstart's replay command, writing to ``out``."""
    block = README_FILE.read_text().split("## Quickstart", 1)[1].split("```bash\n", 1)[1]
    line = block.split("\n", 1)[0]
    replay = next(p for p in line.split(" && ") if "pdm-replay replay" in p)
    args = shlex.split(replay)
    args = args[args.index("pdm-replay"):]
    args[args.index("--out") + 1] = str(out)
    return args


@pytest.mark.slow
def test_the_quickstart_command_gives_the_figures(tmp_path: Path) -> None:
    """About 4 min of CPU (10 wall on a loaded 2-core machine): the whole sample."""
    run = tmp_path / "sample"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(quickstart_replay(run), cwd=ROOT, env=env, check=True,
                   capture_output=True)
    with connect(run) as db:
        doc = json.loads(render_json(build_report(db)))
        steps = db.info.manifest["seed_plan"]["steps"]
    # JSON floats round-trip exactly; the bootstrap is seeded, so equality is exact
    assert figures(doc, steps) == _doc()["figures"]
