"""Reports over replay runs and ``masks`` outputs: DuckDB views, a polars API, renderers.

Typical use (the dashboard does the same)::

    from pdm_replay.report import connect, headline, disagreements
    with connect("runs/r1") as db:
        print(headline(db))
        page = disagreements(db, family="kl", limit=50, offset=0)

See :mod:`pdm_replay.report.api` for every report and the metric definitions.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Each public name and the module defining it, imported on first use: the CLI reads
# ``pdm_replay.names`` for its --help, which must not load DuckDB, polars or torch.
_API = ("alignment", "alignment_by_seed", "behavior_fidelity", "direction_terms",
        "disagreements", "estimator_accuracy", "headline", "kept_deltas", "log_health",
        "mask_summary", "seed_rates", "seed_wins", "settings", "sign_accuracy")
_HOME = {**{name: "api" for name in _API}, "Report": "build", "ReportConfig": "build",
         "build_report": "build", "ReportDB": "db", "connect": "db", "load_sql": "db",
         "RunInfo": "run_info", "discover_run": "run_info",
         # report sections (report.sections), the built-in ones registered first
         "ReportSection": "section_catalog", "SectionPage": "section_catalog",
         "register_section": "section_catalog"}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(import_module(f"pdm_replay.report.{_HOME[name]}"), name)
    raise AttributeError(f"module 'pdm_replay.report' has no attribute {name!r}")
