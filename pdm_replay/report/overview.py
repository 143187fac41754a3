"""What the dashboard's Overview page shows, from one call that runs each query once.

The Overview is the dashboard's first page, so its data is what the server computes at
start-up (:mod:`pdm_replay.dashboard_app.warmup`) and caches for the first session: one
picklable :class:`Overview` per run. ``alignment_by_seed`` and ``log_health`` are read
once and shared by the coverage line and the headline (they were read twice each when the
page asked for the explanation, the seed rates and the log health separately).

Examples
--------
>>> from pdm_replay.testing.synthetic_run import example_run
>>> from pdm_replay.report.db import connect
>>> from pdm_replay.report import api
>>> with connect(example_run()) as db:
...     ov = overview(db)
...     same = ov.headline.equals(api.headline(db))
>>> ov.coverage.split(" (")[0], ov.health["n_seeds"], same
('replay: 96 samples, 6,000 tokens over 3 seeds', 3, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from pdm_replay.report import api
from pdm_replay.report.db import ReportDB
from pdm_replay.report.masks_output import whole_run
from pdm_replay.report.legend import ReportWarning, coverage_line, report_warnings, run_coverage
from pdm_replay.report.verdict import trainer_mask_of, verdicts


@dataclass(frozen=True)
class Overview:
    """The Overview page's data: ``health`` and ``settings`` are the one row of
    :func:`api.log_health` and :func:`api.settings`; ``coverage`` the report's coverage
    line; ``warnings`` :func:`report_warnings`; ``headline`` :func:`api.headline` (one row
    per basis × comparison, the default 2,000-draw bootstrap); ``seed_rates``
    :func:`api.seed_rates` (one row per seed × comparison); ``mask_summary``
    :func:`api.mask_summary` (one row per mask, unformatted); ``verdict`` the report's
    verdict paragraphs (:mod:`pdm_replay.report.verdict`), one per comparison;
    ``whole_run`` the whole run's counts from the ``summary.parquet`` of a
    ``masks --engine ray`` output (:func:`~pdm_replay.report.masks_output.whole_run`;
    empty for any other run) and ``notes`` the run's notes, which say whether the per-token
    tables read every row or a seeded subset of parts."""

    health: dict[str, Any]
    settings: dict[str, Any]
    coverage: str
    warnings: tuple[ReportWarning, ...]
    headline: pl.DataFrame
    seed_rates: pl.DataFrame
    mask_summary: pl.DataFrame
    verdict: tuple[str, ...] = ()
    whole_run: pl.DataFrame = field(default_factory=pl.DataFrame)
    notes: tuple[str, ...] = ()


def overview(db: ReportDB) -> Overview:
    """Every number of the Overview page of ``db``'s run (see :class:`Overview`)."""
    health = api.log_health(db)
    by_seed = api.alignment_by_seed(db)
    head = api.headline(db, by_seed=by_seed)
    rates = api.seed_rates(db)
    coverage = run_coverage(db, health=health, by_seed=by_seed)
    warnings = report_warnings(db, rates, head, api.behavior_fidelity(db), coverage)
    return Overview(health=health.row(0, named=True),
                    settings=api.settings(db).row(0, named=True),
                    coverage=coverage_line(coverage), warnings=tuple(warnings),
                    headline=head, seed_rates=rates, mask_summary=api.mask_summary(db),
                    verdict=tuple(v.text for v in verdicts(
                        head, rates, kind=db.info.kind,
                        trainer_mask=trainer_mask_of(db.info.manifest))),
                    whole_run=pl.DataFrame() if db.info.summary is None
                    else whole_run(db.info.summary), notes=db.info.notes)
