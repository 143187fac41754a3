"""The HTML report reads as a page (issue 35 item 6): no raw backticks, tables that scroll
inside a 1,280 px window instead of widening it, no empty `n=0` histogram."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.axes
import polars as pl
import pytest

from pdm_replay.report.build import build_report
from pdm_replay.report.db import connect
from pdm_replay.report.plots import kept_deltas_png
from pdm_replay.report.render import render_html


def test_html_has_code_spans_not_backticks_and_scrolling_tables(hand_run: Path) -> None:
    with connect(hand_run) as db:
        report = build_report(db, bootstrap_samples=50)
    page = render_html(report, {})
    text = re.sub(r"<style>.*?</style>", "", page, flags=re.S)
    assert "`" not in text
    assert "<code>none</code>" in text  # e.g. the legend's basis none
    assert text.count("<table>") == text.count('<div class="wide"><table>') > 0
    assert ".wide{overflow-x:auto" in page


def test_no_histogram_of_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    labels: list[str] = []
    real = matplotlib.axes.Axes.hist

    def hist(self, x, *args, **kwargs):
        labels.append(kwargs.get("label", ""))
        return real(self, x, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "hist", hist)
    # "c vs d": a pair whose one kept token has no measured ΔD
    deltas = pl.DataFrame({"pair": ["a vs b", "a vs b", "c vs d"], "delta": [0.1, 0.1, 0.1],
                           "region": ["kl_topk > 0.1"] * 3, "kept_by": ["ratio", "ratio", "predictive"],
                           "update_mask": ["a", "a", "d"],
                           "delta_d_kept": [0.1, -0.2, None]},
                          schema_overrides={"delta_d_kept": pl.Float64})
    assert kept_deltas_png(deltas)[:4] == b"\x89PNG"
    assert labels == ["kept by a (n=2)"]  # no "n=0" side, no empty panel's histogram


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.browser
def test_html_report_fits_1280_px_in_chromium(tmp_path: Path) -> None:
    """The HTML report of a run with every comparison, opened at 1,280 px: the page
    never scrolls sideways (wide tables scroll inside their block)."""
    pw = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        pytest.skip("needs the chromium apt package")
    from pdm_replay.report.plots import report_plots
    from pdm_replay.testing.synthetic_run import example_run

    with connect(example_run()) as db:
        page_html = render_html(build_report(db, bootstrap_samples=50), report_plots(db))
    path = tmp_path / "report.html"
    path.write_text(page_html)
    with pw.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM),
                                    args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(path.as_uri())
            width = page.evaluate("document.documentElement.scrollWidth")
            widest = page.evaluate("Math.max(...[...document.querySelectorAll('table')]"
                                   ".map(t => t.scrollWidth))")
        finally:
            browser.close()
    assert width <= 1280, width
    assert widest > 0
