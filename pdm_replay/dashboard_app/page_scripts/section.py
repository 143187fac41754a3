"""The generic page of a report section (:mod:`pdm_replay.report.sections`) whose spec
names no script of its own: its table as every report format prints it, its plot, the note
on empty cells and its legend terms. ``app.py`` registers one such page per section
(``section.py#<name>`` in the page list); importing this module renders nothing."""

from __future__ import annotations

import streamlit as st

from pdm_replay.dashboard_app.state import data, open_page
from pdm_replay.report import dashboard_api as dapi
from pdm_replay.report.display import display_frame
from pdm_replay.report.section_catalog import SECTIONS


def render(name: str) -> None:
    """The page of the registered report section ``name``."""
    spec = SECTIONS[name]
    run = open_page(spec.page.title if spec.page else spec.name, spec.title)
    frame, why = data(run, dapi.section_table, section=name)
    if spec.plot is not None and frame.height:
        st.image(spec.png(frame), caption=spec.plot_title)
    st.dataframe(display_frame(name, frame), hide_index=True, key=f"section_{name}")
    if why:
        st.caption(why)
    if spec.legend:
        st.markdown("\n".join(f"- **{term}**: {text}" for term, text in spec.legend))
