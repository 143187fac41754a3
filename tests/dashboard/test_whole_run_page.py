"""The Overview of a ``masks --engine ray`` output: the whole run's counts from its
``summary.parquet``, as the report's ``whole_run`` section (one computation)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dashboard_fixtures import app_for  # noqa: F401 (fixture)
from pdm_replay.report.build import _whole_run
from pdm_replay.report.db import connect
from pdm_replay.report.overview import overview
from pdm_replay.report.display import display_frame
from ray_outputs import SAMPLE, ray_output


@pytest.fixture(scope="module")
def ray_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ray_output(SAMPLE, tmp_path_factory.mktemp("whole_run") / "ray", 3000)


def test_dashboard_overview_shows_the_whole_run_as_the_report_does(ray_run, app_for) -> None:
    """The dashboard's Overview of a Ray ``masks`` output shows the summary's whole-run
    counts (the report's ``whole_run`` section, one computation) and says which rows its
    per-token tables read."""
    ray = ray_run
    with connect(ray) as db:
        ov, section = overview(db), _whole_run(db)
    assert ov.whole_run.equals(section) and ov.whole_run.height
    at = app_for(ray, "Overview")
    assert not at.exception
    assert "Whole run (summary.parquet)" in [h.value for h in at.subheader]
    assert any("report read every row (87,167 tokens" in c.value for c in at.caption)
    shown = next(d.value for d in at.dataframe if "fraction" in d.value.columns)
    assert shown.equals(display_frame("whole_run", section).to_pandas())
