"""End to end in a real browser: `pdm-replay dashboard` serves the run on localhost and
Debian's Chromium (headless, driven by Playwright) opens every page, changes a filter,
opens a token's detail and saves screenshots of every page at 1,280 px. Each page fails on
a Python traceback, an empty or ``None`` dataframe cell (read from the grid's accessible
table: the cells themselves are drawn on a canvas) or a chart that drew no mark.

Screenshots go to the test's temp dir and, when ``$PDM_REPLAY_SCREENSHOT_DIR`` is set, also
there (``dashboard_<page>.png``; the README uses ``dashboard_disagreements.png``).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from pdm_replay.dashboard_app import ENV_TOKENIZER
from pdm_replay.report import dashboard_api as dapi
from dashboard_fixtures import run_dir, tokenizer_dir  # noqa: F401 (fixtures)

try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
except ImportError:  # the server fixture skips the test
    PlaywrightTimeout = TimeoutError

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
IDLE = """() => document.querySelector('[data-testid="stApp"]')
                  ?.getAttribute('data-test-script-state') === 'notRunning'
             && !document.querySelector('[data-testid="stStatusWidget"]')
             && document.querySelectorAll('[data-testid="stSkeleton"]').length === 0"""
PAGES = {  # sidebar link -> texts the page must show
    "Overview": ["Headline: ratio vs predictive masks", "Unsafe-keep rate per seed",
                 "Mask summary"],
    "Divergence": ["kl_topk", "tv_topk", "Local vs global term of Ḋ_KL"],
    "Estimators": ["Accuracy against the exact slope", "Estimates per token"],
    "Log health": ["Top-K mass coverage", "Validation of the rollout log"],
    "Attribution": ["Attribution"],
    "Mask comparison": ["Keep fraction vs realized ΔD", "Every mask", "out of region kept"],
    "Mismatch over training": ["verl: off-policy metrics", "TRL: sampling/*",
                               "Keep statistics per mask"],
    "Disagreements": ["disagreement tokens", "Token detail:", "µ vs π_pre vs π_post"],
}
# toggles switched on before a page's checks: what a page draws only when asked is checked too
TOGGLES = {"Overview": ["Plot the rates per seed"]}
WIDTH = 1280  # the window width: every page must read at it
NONE_CELL = re.compile(r"(^|\t|\n)None($|\t|\n)")  # a Python None printed as a cell


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the dashboard exited ({process.returncode}):\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.read() == b"ok":
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"the dashboard did not answer within {timeout} s:\n{log.read_text()}")


@pytest.fixture(scope="module")
def server(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent: apt-get install chromium (CI's .ci/run does)")
    pytest.importorskip("playwright.sync_api", reason="pip install playwright (dev extra)")
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    env = {k: v for k, v in os.environ.items() if k != ENV_TOKENIZER}
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "pdm_replay", "dashboard",
                                    str(run_dir), "--port", str(port)],
                                   stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process, log)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def settle(page) -> None:
    """Wait until Streamlit finished the run the last interaction started."""
    page.wait_for_timeout(300)  # let the rerun start
    page.wait_for_function(IDLE, timeout=90_000)


def screenshot(page, name: str, tmp: Path) -> Path:
    """A screenshot of the whole page (Streamlit scrolls inside its main element)."""
    height = page.evaluate(
        "() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": WIDTH, "height": min(max(height + 40, 900), 4000)})
    page.wait_for_timeout(800)  # charts re-layout to the new size
    path = tmp / f"dashboard_{name}.png"
    page.screenshot(path=str(path))
    out = os.environ.get("PDM_REPLAY_SCREENSHOT_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(out) / path.name)
    page.set_viewport_size({"width": WIDTH, "height": 1000})
    return path


def open_options(page, label: str):
    """Open the selectbox labeled ``label``; its options. A click can land while charts
    still move the layout, so it is retried until the list shows."""
    box = page.get_by_test_id("stSelectbox").filter(has_text=label)
    for _ in range(5):
        box.scroll_into_view_if_needed()
        box.click()
        try:
            page.get_by_role("listbox").wait_for(state="visible", timeout=3000)
            return page.get_by_role("option")
        except PlaywrightTimeout:
            page.keyboard.press("Escape")
    raise AssertionError(f"the selectbox {label!r} did not open")


def choose(page, label: str, option: str) -> None:
    """Pick ``option`` in the selectbox labeled ``label``."""
    open_options(page, label).filter(has_text=option).first.click()
    settle(page)


def main_text(page) -> str:
    return page.get_by_test_id("stMain").inner_text()


def test_every_page_in_chromium(server: str, run_dir: Path, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
            page.goto(server)
            page.get_by_role("heading", name="Overview").wait_for(timeout=90_000)
            settle(page)
            for name, expected in PAGES.items():
                page.get_by_test_id("stSidebarNav").get_by_text(name, exact=True).click()
                page.get_by_role("heading", name=name, exact=True).wait_for(timeout=90_000)
                settle(page)
                for label in TOGGLES.get(name, []):
                    page.get_by_text(label, exact=True).click()
                    settle(page)
                    assert page.get_by_test_id("stVegaLiteChart").count() >= 1, (name, label)
                text = main_text(page)
                assert not page.get_by_test_id("stException").count(), text
                assert "Traceback" not in text and not NONE_CELL.search(text), (name, text)
                assert not (empty := _charts_drawn(page)), (name, empty)
                assert not (bad := _scan_frames(page)), (name, bad)
                for snippet in expected:
                    assert snippet in text, (name, snippet)
                if name != "Disagreements":
                    screenshot(page, name.lower().replace(" ", "_"), tmp_path)
            check_disagreements(page, run_dir, tmp_path)
        finally:
            browser.close()


def _charts_drawn(page) -> list[str]:
    """``chart i: ...`` for every Vega chart that drew no data mark (each scrolled into view
    first). Vega's SVG puts each mark's items in a ``g.role-mark`` group (axes, legends and
    titles are ``role-axis-*``, ``role-legend-*``, ``role-title``); a chart over no rows
    draws its axes and an empty group, so this fails on it (checked on an empty altair
    point chart: its group has 0 children). Streamlit draws large charts on a canvas
    instead: there the chart must have colored pixels (marks are colored, axes and text
    grey or black: max − min channel > 60)."""
    bad = []
    charts = page.get_by_test_id("stVegaLiteChart")
    for i in range(charts.count()):
        charts.nth(i).scroll_into_view_if_needed()
        page.wait_for_timeout(300)
        bad += charts.nth(i).evaluate("""(c, i) => {
            const groups = [...c.querySelectorAll('svg g.role-mark')];
            if (groups.some(g => g.childElementCount > 0)) return [];
            const canvas = c.querySelector('canvas');
            if (canvas && !groups.length) {  // a large chart: count colored pixels
                const px = canvas.getContext('2d')
                    .getImageData(0, 0, canvas.width, canvas.height).data;
                let colored = 0;
                for (let k = 0; k < px.length; k += 4) {
                    const hi = Math.max(px[k], px[k + 1], px[k + 2]);
                    const lo = Math.min(px[k], px[k + 1], px[k + 2]);
                    if (px[k + 3] > 0 && hi - lo > 60) colored += 1;
                }
                if (colored > 50) return [];
                return [`chart ${i}: canvas with ${colored} colored pixels`];
            }
            return [`chart ${i}: ${groups.length} mark groups, none drawn; svg `
                    + `${c.querySelectorAll('svg').length}, canvas `
                    + `${c.querySelectorAll('canvas').length}`];
        }""", i)
    return bad


def _scan_frames(page) -> list[str]:
    """``table i: column = text`` of every dataframe cell that is empty or ``None``, and
    ``table i: no row`` for a dataframe whose grid showed none.

    st.dataframe draws its cells on a canvas (glide-data-grid), so ``inner_text`` never
    sees them; glide also renders the rows in view as an accessible ``table[role=grid]``
    inside the canvas, whose ``td`` text is the cell's display text (only for a grid on
    screen: each is scrolled into view first). A null cell is ``""`` there (checked: a
    polars None in a String and an Int64 column and a NaN in a Float64 column all read
    ""), so an empty or "None" cell fails the test."""
    bad = []
    frames = page.get_by_test_id("stDataFrame")
    for i in range(frames.count()):
        frames.nth(i).scroll_into_view_if_needed()
        page.wait_for_timeout(300)  # glide renders the rows in view
        bad += frames.nth(i).evaluate("""(d, i) => {
            const t = d.querySelector('table[role="grid"]');
            const rows = t ? [...t.querySelectorAll('tbody tr')] : [];
            if (!rows.length) return [`table ${i}: no row`];
            const heads = [...t.querySelectorAll('thead th')].map(h => h.textContent.trim());
            return rows.flatMap(r => [...r.querySelectorAll('td')]
                .map((c, j) => [heads[j], c.textContent.trim()])
                .filter(([, v]) => v === '' || v === 'None')
                .map(([h, v]) => `table ${i}: ${h} = ${JSON.stringify(v)}`));
        }""", i)
    return bad


def expected_count(run_dir: Path, **flt) -> str:
    db, _ = dapi.connect_dashboard(run_dir)
    with db:
        n = dapi.disagreement_count(db, dapi.DisagreementFilter(pair=dapi.default_pair(),
                                                                **flt))
    return f"{n:,} disagreement tokens"


def check_disagreements(page, run_dir: Path, tmp_path: Path) -> None:
    """Change a filter, then open the second token of the table in the detail view."""
    summary = page.get_by_text("disagreement tokens", exact=False).first
    assert summary.inner_text().startswith(expected_count(run_dir))
    choose(page, "Sign of ΔD", "ΔD > 0 (moved away: unsafe)")
    assert summary.inner_text().startswith(expected_count(run_dir, delta_sign=1))
    detail = page.get_by_role("heading", name="Token detail:", exact=False)
    first = detail.inner_text()
    second = open_options(page, "Token detail").nth(1)
    label = second.inner_text()
    second.click()
    settle(page)
    sample, pos = label.split(" · ")[2], label.split(" · ")[3]
    assert detail.inner_text() != first
    assert f"{sample} · {pos}" in detail.inner_text()
    assert page.locator("mark").count() == 1  # the token highlighted in its context
    assert page.get_by_test_id("stVegaLiteChart").count() >= 1
    shot = screenshot(page, "disagreements", tmp_path)
    assert shot.stat().st_size > 20_000
