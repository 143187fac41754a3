"""Dashboard time to first render (issue 19 item 4: the first page renders in under 2 s
after the server is up).

Serves a run with ``pdm-replay dashboard`` and, beside it in the same run, a baseline: an
empty Streamlit page (``st.title`` only) served by ``streamlit run``. Once a server answers
``/_stcore/health``, headless Chromium (Playwright, the dev extra; Debian's
``/usr/bin/chromium``) opens it; a page counts as rendered when its title heading shows and
Streamlit's script run is finished (no running script, no skeleton). Printed per page: the
seconds from navigation to rendered (cold: the first visit after the server started, every
cache empty; warm: a second visit) and the ratio to the empty page's first render.

Usage: ``python benchmarks/bench_dashboard.py [--run RUN_DIR] [--json out.json]``
(default run: a 3-seed synthetic replay of 4,500 samples, written to a temp dir).
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


def serve(cmd: list[str], port: int, log: Path) -> subprocess.Popen:
    """Start ``cmd``; return once it answers /_stcore/health."""
    process = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health",
                                        timeout=2) as r:
                if r.read() == b"ok":
                    return process
        except OSError:
            time.sleep(0.2)
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
    from pdm_replay.report.synthetic import write_synthetic_run

    return write_synthetic_run(root / "run", seeds=(0, 1, 2), rows_per_seed=1500,
                               tokens_per_sample=32, exact=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    from pdm_replay.dashboard_app import PAGES

    tmp = Path(tempfile.mkdtemp(prefix="bench_dashboard_"))
    run = args.run or synthetic_run(tmp)
    (tmp / "empty.py").write_text(EMPTY_APP)
    ports = free_port(), free_port()
    servers = [serve([sys.executable, "-m", "streamlit", "run", str(tmp / "empty.py"),
                      "--server.port", str(ports[0]), "--server.headless", "true",
                      "--browser.gatherUsageStats", "false"], ports[0], tmp / "empty.log"),
               serve([sys.executable, "-m", "pdm_replay", "dashboard", str(run), "--port",
                      str(ports[1])], ports[1], tmp / "dashboard.log")]
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM,
                                        args=["--headless", "--no-sandbox", "--disable-gpu"])
            base = measure(browser, f"http://127.0.0.1:{ports[0]}", ["Empty"])["Empty"]
            pages = measure(browser, f"http://127.0.0.1:{ports[1]}", [t for _, t, _ in PAGES])
            browser.close()
    finally:
        for s in servers:
            s.terminate()
            s.wait(timeout=30)
    print(f"run {run}; empty Streamlit page: cold {base['cold']:.2f} s, warm "
          f"{base['warm']:.2f} s")
    print(f"{'page':<18} {'cold s':>7} {'× empty':>8} {'warm s':>7} {'× empty':>8}")
    for title, t in pages.items():
        print(f"{title:<18} {t['cold']:>7.2f} {t['cold'] / base['cold']:>7.2f}× "
              f"{t['warm']:>7.2f} {t['warm'] / base['warm']:>7.2f}×")
    if args.json:
        args.json.write_text(json.dumps({"empty": base, "pages": pages}, indent=2))


if __name__ == "__main__":
    main()
