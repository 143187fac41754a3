"""A new report section is one spec (issue 36, item 5a): a section defined here — its SQL
in one file of its own, its spec registered by this test, nothing else touched — appears in
every report format (table, Markdown, JSON, HTML), in the legend, among the plots, in the
dashboard's page list and on its page, through ``report.dashboard_api``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import polars as pl
import pytest

from pdm_replay.commands.report import produce_report
from pdm_replay.dashboard_app import ENV_RUN_DIR, page_target
from pdm_replay.report import dashboard_api as dapi
from pdm_replay.report.build import ReportConfig, section_keys
from pdm_replay.report.db import connect
from pdm_replay.report.figures import _figure, _png
from pdm_replay.report.legend import legend
from pdm_replay.report.plots import report_plots
from pdm_replay.report.sections import SECTIONS, ReportSection, SectionPage, register_section

NAME = "tiny_counts"
TITLE = "Tiny counts: tokens per seed and their out-of-region share (a test's section)"
TERM = ("tiny share", "tiny counts: the share of a seed's tokens with kl_topk > δ_KL")
# the section's one file: its view, then its named query ($family: a filter of the page)
SQL = """-- A test's report section.
CREATE OR REPLACE VIEW tiny_counts AS
SELECT seed, count(*) AS n_tokens,
       avg(CAST(kl_topk > getvariable('report_run').delta_kl AS DOUBLE)) AS share_high
FROM tokens GROUP BY seed;

-- name: tiny_counts
SELECT * FROM tiny_counts ORDER BY seed NULLS FIRST;
"""


def tiny_png(frame: pl.DataFrame) -> bytes:
    fig = _figure(3.0, 2.0)
    fig.subplots().bar([str(s) for s in frame["seed"]], frame["n_tokens"].to_list())
    return _png(fig)


@pytest.fixture
def tiny(tmp_path: Path) -> Iterator[ReportSection]:
    """The section, registered for one test (the registry as it was afterwards)."""
    sql = tmp_path / "views_tiny_counts.sql"
    sql.write_text(SQL)
    spec = register_section(ReportSection(
        name=NAME, title=TITLE, sql=sql, percent=("share_high",), legend=(TERM,),
        narrow=("seed", "n tokens", "share high"), plot=tiny_png, plot_title="Tiny counts",
        page=SectionPage("Tiny counts", ":material/counter_1:"), after="mask_summary"))
    try:
        yield spec
    finally:
        SECTIONS.pop(NAME)


def _render(run: Path, fmt: str, tmp_path: Path) -> str:
    out = tmp_path / f"report.{fmt}"
    produce_report(ReportConfig(source=run, format=fmt, out=out, bootstrap_samples=20))
    return out.read_text()


def test_the_section_is_printed_by_every_format(tiny, hand_run: Path, tmp_path: Path) -> None:
    with connect(hand_run) as db:
        expected = tiny.compute(db)
    assert expected["n_tokens"].to_list() == [6, 4]  # report_fixtures: seed 1 and seed 2
    keys = section_keys()
    assert keys.index(NAME) == keys.index("mask_comparison") + 1  # both after mask_summary
    doc = json.loads(_render(hand_run, "json", tmp_path))
    assert doc[NAME] == expected.to_dicts()
    assert doc["legend"][TERM[0]] == TERM[1]
    share = f"{expected['share_high'][0]:.1%}"  # a percent column: the spec's
    for fmt in ("table", "markdown", "html"):
        text = _render(hand_run, fmt, tmp_path)
        flat = " ".join(text.split())
        assert TITLE.split(":")[0] in flat and share in flat, fmt
        assert TERM[1].split(":")[0] in flat, fmt
    html = _render(hand_run, "html", tmp_path)
    assert f'alt="{NAME}"' in html and "<h2>Tiny counts</h2>" in html
    assert legend().count(TERM) == 1


def test_the_section_is_plotted_and_shown_by_the_dashboard(tiny, hand_run: Path,
                                                          monkeypatch) -> None:
    with connect(hand_run) as db:
        assert report_plots(db)[NAME][:4] == b"\x89PNG"
        frame, note = dapi.section_table(db, NAME)
        assert frame.equals(dapi.section_frame(db, NAME)) and note is None
    from pdm_replay.dashboard_app import PAGES

    entry = next(p for p in PAGES if p[1] == "Tiny counts")
    assert page_target(entry[0]) == ("section.py", NAME)
    titles = [title for _, title, _ in PAGES]  # the section pages in registry order
    assert titles[-4:] == ["Mask comparison", "Mismatch over training", "Tiny counts",
                           "Log health"]
    AppTest = pytest.importorskip("streamlit.testing.v1").AppTest
    monkeypatch.setenv(ENV_RUN_DIR, str(hand_run))
    at = AppTest.from_string("from pdm_replay.dashboard_app.page_scripts.section import "
                             f"render\nrender({NAME!r})\n", default_timeout=120).run()
    assert not at.exception and not at.error, [e.value for e in at.exception]
    assert at.title[0].value == "Tiny counts"
    shown = at.dataframe[0].value
    assert list(shown["n_tokens"]) == [str(n) for n in frame["n_tokens"]]
    assert any(TERM[1] in m.value for m in at.markdown)
    assert len(at.get("image")) == 1
    app = AppTest.from_file(str(Path(dapi.__file__).parents[1] / "dashboard_app" / "app.py"),
                            default_timeout=120).run()  # the page list with the section
    assert not app.exception, [e.value for e in app.exception]
