"""Reports over replay runs and ``masks`` outputs: DuckDB views, a polars API, renderers.

Typical use (the dashboard does the same)::

    from pdm_replay.report import connect, headline, disagreements
    with connect("runs/r1") as db:
        print(headline(db))
        page = disagreements(db, family="kl", limit=50, offset=0)

See :mod:`pdm_replay.report.api` for every report and the metric definitions.
"""

from __future__ import annotations

from pdm_replay.report.api import (alignment, alignment_by_seed, behavior_fidelity,
                                   direction_terms, disagreements, estimator_accuracy,
                                   headline, kept_deltas, log_health, mask_summary,
                                   seed_rates, seed_wins, settings, sign_accuracy)
from pdm_replay.report.build import Report, ReportConfig, build_report
from pdm_replay.report.db import ReportDB, connect, load_sql
from pdm_replay.report.run import RunInfo, discover_run

__all__ = [
    "Report", "ReportConfig", "ReportDB", "RunInfo", "alignment", "alignment_by_seed",
    "behavior_fidelity",
    "build_report", "connect", "direction_terms", "disagreements", "discover_run",
    "estimator_accuracy", "headline", "kept_deltas", "load_sql", "log_health",
    "mask_summary", "seed_rates", "seed_wins", "settings", "sign_accuracy",
]
