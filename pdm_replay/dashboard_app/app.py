"""Streamlit entry script of the dashboard (``pdm-replay dashboard RUN_DIR`` runs it).

Pages are the scripts of ``page_scripts/`` (not ``pages/``, which Streamlit would
also list as a legacy multipage app); the run comes from ``$PDM_REPLAY_RUN_DIR``. Streamlit
runs this file as ``__main__``; importing it (doctests, ``dashboards/app.py``) runs nothing
until :func:`main` is called.
"""

from __future__ import annotations

import os

import streamlit as st

from pdm_replay.dashboard_app import ENV_RUN_DIR, PAGES, PAGES_DIR, page_target


def _page(i: int, name: str, title: str, icon: str) -> st.Page:
    """A page script, or the generic page of a report section (``section.py#<name>``)."""
    script, section = page_target(name)
    if section is None:
        return st.Page(PAGES_DIR / script, title=title, icon=icon, default=(i == 0))
    from pdm_replay.dashboard_app.page_scripts.section import render

    def page() -> None:
        render(section)
    return st.Page(page, title=title, icon=icon, url_path=section, default=(i == 0))


def main() -> None:
    """Configure the page, register the pages with ``st.navigation`` and run the chosen one."""
    st.set_page_config(page_title="pdm-replay dashboard", page_icon=":material/insights:",
                       layout="wide")
    pages = [_page(i, *entry) for i, entry in enumerate(PAGES)]
    nav = st.navigation(pages)
    st.sidebar.caption(f"Run: `{os.environ.get(ENV_RUN_DIR) or '(none)'}`")
    nav.run()


if __name__ == "__main__":
    main()
