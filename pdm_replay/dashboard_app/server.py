"""The dashboard server (``pdm-replay dashboard`` runs ``streamlit run`` on this file).

``streamlit run`` finds :data:`app`, an ``st.App`` of the entry script ``app.py``, and
serves it; its lifespan runs once per server process, after Streamlit's runtime has
started and before the port accepts sessions, and starts :func:`.warmup.start` (a
background thread, so the server does not wait for it) to compute the first page's data
into the caches the page reads. ``streamlit run app.py`` still serves the same pages,
without that start-up work.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import streamlit as st

from pdm_replay.dashboard_app import APP_FILE


@asynccontextmanager
async def lifespan(_app: Any) -> AsyncIterator[None]:
    """Start the first page's computation when the server starts."""
    # imported here: the runtime exists now, so the caches bind to its storage
    from pdm_replay.dashboard_app import warmup

    warmup.start()
    yield None


app = st.App(APP_FILE, lifespan=lifespan)
