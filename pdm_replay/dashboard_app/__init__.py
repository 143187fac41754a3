"""The Streamlit dashboard of a replay run (``pdm-replay dashboard RUN_DIR``).

``app.py`` is the Streamlit entry script (``st.navigation`` over ``page_scripts/*.py``);
``serve.py`` is the server process, which has a child process compute the first page's
data while Streamlit starts (``warmup.py``, ``precompute.py``);
``dashboards/app.py`` in the repository is a thin entry that runs the same app. The run
directory and tokenizer come from the environment (:data:`ENV_RUN_DIR`,
:data:`ENV_TOKENIZER`, defined by :mod:`pdm_replay.commands.dashboard`, which sets them). Pages call the report API
(:mod:`pdm_replay.report.api`, :mod:`pdm_replay.report.dashboard_api`) through the caches of
:mod:`pdm_replay.dashboard_app.state`; they hold no SQL.

The page list is :data:`PAGES`: the fixed pages, then every registered report section's
page (:mod:`pdm_replay.report.sections`: its own script, or the generic section page,
``section.py#<name>``), then Log health.

>>> APP_FILE.name, sorted(p.name for p in PAGES_DIR.glob("[!_]*.py"))[:2]
('app.py', ['disagreements.py', 'divergence.py'])
>>> [title for _, title, _ in pages()][5:7]
['Mask comparison', 'Mismatch over training']
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pdm_replay.commands.dashboard import (APP_FILE, ENV_MASK_MODULES, ENV_MEMORY_LIMIT,
                                           ENV_RUN_DIR, ENV_TOKENIZER, SERVE_MODULE)
from pdm_replay.report.section_catalog import SECTIONS

__all__ = ["APP_FILE", "ENV_MASK_MODULES", "ENV_MEMORY_LIMIT", "ENV_RUN_DIR", "ENV_TOKENIZER",
           "PAGES", "PAGES_DIR", "SERVE_MODULE"]
PAGES_DIR = Path(__file__).with_name("page_scripts")
SECTION_PAGE = "section.py"  # the generic page of a report section without a script
# (file, title, icon); the first page is the default. Here, not in app.py, so that
# `pdm-replay dashboard --help` lists the pages without importing Streamlit.
FIRST_PAGES = (("overview.py", "Overview", ":material/dashboard:"),
               ("disagreements.py", "Disagreements", ":material/compare_arrows:"),
               ("divergence.py", "Divergence", ":material/stacked_line_chart:"),
               ("estimators.py", "Estimators", ":material/functions:"),
               ("sign_attribution.py", "Attribution", ":material/call_split:"))
LAST_PAGES = (("log_health.py", "Log health", ":material/health_and_safety:"),)


def pages() -> tuple[tuple[str, str, str], ...]:
    """``(file, title, icon)`` of every page: :data:`FIRST_PAGES`, each registered report
    section's page (``section.py#<name>`` for the generic one), :data:`LAST_PAGES`."""
    sections = tuple((s.page.script or f"{SECTION_PAGE}#{s.name}", s.page.title, s.page.icon)
                     for s in SECTIONS.values() if s.page is not None)
    return (*FIRST_PAGES, *sections, *LAST_PAGES)


def page_target(file: str) -> tuple[str, str | None]:
    """The script of a :data:`PAGES` entry's ``file`` and its report section (None: a page
    of its own).

    >>> page_target("section.py#tiny"), page_target("overview.py")
    (('section.py', 'tiny'), ('overview.py', None))
    """
    script, _, section = file.partition("#")
    return script, section or None


def __getattr__(name: str) -> Any:
    if name == "PAGES":  # computed on use: a section registered after import is listed
        return pages()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
