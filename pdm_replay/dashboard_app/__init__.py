"""The Streamlit dashboard of a replay run (``pdm-replay dashboard RUN_DIR``).

``app.py`` is the Streamlit entry script (``st.navigation`` over ``page_scripts/*.py``);
``serve.py`` is the server process, which has a child process compute the first page's
data while Streamlit starts (``warmup.py``, ``precompute.py``);
``dashboards/app.py`` in the repository is a thin entry that runs the same app. The run
directory and tokenizer come from the environment (:data:`ENV_RUN_DIR`,
:data:`ENV_TOKENIZER`, defined by :mod:`pdm_replay.commands.dashboard`, which sets them). Pages call the report API
(:mod:`pdm_replay.report.api`, :mod:`pdm_replay.report.dashboard_api`) through the caches of
:mod:`pdm_replay.dashboard_app.state`; they hold no SQL.

>>> APP_FILE.name, sorted(p.name for p in PAGES_DIR.glob("[!_]*.py"))[:2]
('app.py', ['disagreements.py', 'divergence.py'])
"""

from __future__ import annotations

from pathlib import Path

from pdm_replay.commands.dashboard import (APP_FILE, ENV_MASK_MODULES, ENV_MEMORY_LIMIT,
                                           ENV_RUN_DIR, ENV_TOKENIZER, SERVE_MODULE)

__all__ = ["APP_FILE", "ENV_MASK_MODULES", "ENV_MEMORY_LIMIT", "ENV_RUN_DIR", "ENV_TOKENIZER",
           "PAGES", "PAGES_DIR", "SERVE_MODULE"]
PAGES_DIR = Path(__file__).with_name("page_scripts")
# (file, title, icon); the first page is the default. Here, not in app.py, so that
# `pdm-replay dashboard --help` lists the pages without importing Streamlit.
PAGES = (("overview.py", "Overview", ":material/dashboard:"),
         ("disagreements.py", "Disagreements", ":material/compare_arrows:"),
         ("divergence.py", "Divergence", ":material/stacked_line_chart:"),
         ("estimators.py", "Estimators", ":material/functions:"),
         ("sign_attribution.py", "Attribution", ":material/call_split:"),
         ("mask_comparison.py", "Mask comparison", ":material/compare:"),
         ("mismatch.py", "Mismatch over training", ":material/show_chart:"),
         ("log_health.py", "Log health", ":material/health_and_safety:"))
