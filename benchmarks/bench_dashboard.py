"""Dashboard time to first render (issue 19 item 4: the first page renders in under 2 s
after the server is up).

Serves a run with ``pdm-replay dashboard`` and, beside it in the same run, a baseline: an
empty Streamlit page (``st.title`` only) served by ``streamlit run``. Once a server answers
``/_stcore/health`` (the server is up), headless Chromium (Playwright, the dev extra;
Debian's ``/usr/bin/chromium``) opens it at once; a page counts as rendered when its title
heading shows and Streamlit's script run is finished (no running script, no skeleton).
Printed: each server's start (command to health); per page the seconds from navigation to
rendered (cold: the first visit after the server is up, no session before it, so the
Overview waits for whatever of the server's start-up computation is left; warm: a second
visit) and the ratio to the empty page's first render; command to first page rendered
for both servers (start + cold first page); and the first page once more in a fresh
browser context on the warm server (the browser's share of a cold visit: Streamlit's
JavaScript, and the chunks of the page's elements, loaded and compiled again).

Usage: ``python benchmarks/bench_dashboard.py [--run RUN_DIR] [--settle S] [--json out.json]``
(default run: a 3-seed synthetic replay of 4,500 samples, written to a temp dir);
``--settle S`` waits S seconds after the health check before the first visit (then the
start-up computation has finished, and the cold Overview shows the page's own cost).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
IDLE = """() => document.querySelector('[data-testid="stApp"]')
                  ?.getAttribute('data-test-script-state') === 'notRunning'
             && !document.querySelector('[data-testid="stStatusWidget"]')
             && document.querySelectorAll('[data-testid="stSkeleton"]').length === 0"""
EMPTY_APP = "import streamlit as st\nst.title('Empty')\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(cmd: list[str], port: int, log: Path) -> tuple[subprocess.Popen, float]:
    """Start ``cmd``; return it and its start seconds once it answers /_stcore/health."""
    t0 = time.perf_counter()
    process = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health",
                                        timeout=2) as r:
                if r.read() == b"ok":
                    return process, time.perf_counter() - t0
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise SystemExit(f"{cmd[:4]} did not start:\n{log.read_text()}")


def rendered(page, title: str, action) -> float:
    """Seconds from ``action()`` (a navigation) until ``title`` shows and the run is idle."""
    t0 = time.perf_counter()
    action()
    page.get_by_role("heading", name=title, exact=True).wait_for(timeout=120_000)
    page.wait_for_function(IDLE, timeout=120_000, polling=50)
    return time.perf_counter() - t0


def measure(browser, url: str, titles: list[str]) -> dict[str, dict[str, float]]:
    """Cold then warm render time of each page title (the first through the URL, the
    others by their sidebar link)."""
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    out: dict[str, dict[str, float]] = {}
    for visit in ("cold", "warm"):
        for i, title in enumerate(titles):
            if i == 0:
                seconds = rendered(page, title, lambda: page.goto(url))
            else:
                link = page.get_by_test_id("stSidebarNav").get_by_text(title, exact=True)
                seconds = rendered(page, title, link.click)
            out.setdefault(title, {})[visit] = seconds
    page.close()
    return out


def synthetic_run(root: Path) -> Path:
    from pdm_replay.testing.synthetic_run import write_synthetic_run

    return write_synthetic_run(root / "run", seeds=(0, 1, 2), rows_per_seed=1500,
                               tokens_per_sample=32, exact=True)


def commands(run: Path, tmp: Path, ports: list[int]) -> list[list[str]]:
    """The empty page's server and the dashboard's."""
    (tmp / "empty.py").write_text(EMPTY_APP)
    return [[sys.executable, "-m", "streamlit", "run", str(tmp / "empty.py"),
             "--server.port", str(ports[0]), "--server.headless", "true",
             "--browser.gatherUsageStats", "false"],
            [sys.executable, "-m", "pdm_replay", "dashboard", str(run), "--port",
             str(ports[1])]]


def fresh_browser(browser, url: str, title: str) -> float:
    """The first page in a new browser context (none of Streamlit's JavaScript cached)
    on a server whose caches are full: the browser's share of a cold first page."""
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    try:
        return rendered(page, title, lambda: page.goto(url))
    finally:
        page.close()


def served(browser, cmd: list[str], port: int, log: Path, titles: list[str],
           settle: float) -> tuple[float, dict[str, dict[str, float]]]:
    """Start ``cmd``, visit ``titles`` as soon as it is up (after ``settle`` s), then the
    first page in a fresh browser, and stop it: its start seconds and the pages' times.
    One server at a time, so neither's start-up runs beside the other's pages."""
    process, start = serve(cmd, port, log)
    try:
        time.sleep(settle)
        url = f"http://127.0.0.1:{port}"
        times = measure(browser, url, titles)
        times[titles[0]]["fresh_browser"] = fresh_browser(browser, url, titles[0])
        return start, times
    finally:
        process.terminate()
        process.wait(timeout=30)


def report(run: Path, starts: list[float], base: dict[str, float],
           pages: dict[str, dict[str, float]]) -> None:
    print(f"run {run}; server start (command to /_stcore/health): empty page "
          f"{starts[0]:.2f} s, dashboard {starts[1]:.2f} s")
    print(f"empty Streamlit page: cold {base['cold']:.2f} s, warm {base['warm']:.2f} s")
    print(f"{'page':<18} {'cold s':>7} {'× empty':>8} {'warm s':>7} {'× empty':>8}")
    for title, t in pages.items():
        print(f"{title:<18} {t['cold']:>7.2f} {t['cold'] / base['cold']:>7.2f}× "
              f"{t['warm']:>7.2f} {t['warm'] / base['warm']:>7.2f}×")
    first = next(iter(pages.values()))
    print(f"command to first page rendered: empty page {starts[0] + base['cold']:.2f} s, "
          f"dashboard {starts[1] + first['cold']:.2f} s")
    print(f"first page in a fresh browser, server warm (the browser's share): empty page "
          f"{base['fresh_browser']:.2f} s, dashboard {first['fresh_browser']:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=None)
    parser.add_argument("--settle", type=float, default=0.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    from pdm_replay.dashboard_app import PAGES

    tmp = Path(tempfile.mkdtemp(prefix="bench_dashboard_"))
    run = args.run or synthetic_run(tmp)
    ports = [free_port(), free_port()]
    empty_cmd, dash_cmd = commands(run, tmp, ports)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--headless", "--no-sandbox", "--disable-gpu"])
        empty_start, empty = served(browser, empty_cmd, ports[0], tmp / "empty.log",
                                    ["Empty"], args.settle)
        dash_start, pages = served(browser, dash_cmd, ports[1], tmp / "dashboard.log",
                                   [t for _, t, _ in PAGES], args.settle)
        browser.close()
    base, starts = empty["Empty"], [empty_start, dash_start]
    for line in (tmp / "dashboard.log").read_text().splitlines():
        if line.startswith("pdm-replay dashboard:"):  # the server's start-up computation
            print(line)
    report(run, starts, base, pages)
    if args.json:
        args.json.write_text(json.dumps({"start": starts, "settle": args.settle,
                                         "empty": base, "pages": pages}, indent=2))


if __name__ == "__main__":
    main()
