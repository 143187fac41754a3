"""The figure helpers every report plot module shares (:mod:`.plots`,
:mod:`.mismatch_plots`, a report section's plot): an Agg-backed ``Figure`` without pyplot
state (safe in a server, the dashboard), its PNG bytes, and the text of an empty panel.

>>> fig = _figure(2.0, 1.0)
>>> _empty(fig.subplots(), "nothing to plot")
>>> _png(fig)[:4]
b'\\x89PNG'
"""

from __future__ import annotations

import io
from typing import Any

INSTALL_HINT = "plots need matplotlib: pip install 'pdm_replay[report]' (or matplotlib>=3.7)"


def _figure(width: float, height: float) -> Any:
    """A new Agg-backed Figure; a clear ImportError when matplotlib is missing."""
    try:
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError(INSTALL_HINT) from err
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
