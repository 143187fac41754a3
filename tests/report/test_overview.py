"""report.overview: the Overview page's data from one call equals what the page read
before from separate calls (each query now runs once)."""

from __future__ import annotations

import pickle

from pdm_replay.report import api
from pdm_replay.report.db import connect
from pdm_replay.report.legend import coverage_line, report_warnings, run_coverage
from pdm_replay.report.overview import overview
from pdm_replay.testing.synthetic_run import example_run


def test_overview_equals_the_separate_calls() -> None:
    with connect(example_run()) as db:
        ov = overview(db)
        head, rates = api.headline(db), api.seed_rates(db)
        coverage = run_coverage(db)
        warnings = report_warnings(db, rates, head, api.behavior_fidelity(db), coverage)
        assert ov.headline.equals(head) and ov.seed_rates.equals(rates)
        assert ov.mask_summary.equals(api.mask_summary(db))
        assert ov.health == api.log_health(db).row(0, named=True)
        assert ov.settings == api.settings(db).row(0, named=True)
        assert ov.coverage == coverage_line(coverage)
        assert ov.warnings == tuple(warnings)


def test_overview_reads_each_query_once_and_pickles() -> None:
    with connect(example_run()) as db:
        seen: list[str] = []
        named = db.named
        db.named = lambda name, *a, **k: seen.append(name) or named(name, *a, **k)
        ov = overview(db)
    # n_samples (one count) is still read by both the coverage line and the headline
    twice = sorted({q for q in seen if seen.count(q) > 1})
    assert twice == ["n_samples"], seen
    assert {"alignment_by_seed", "log_health", "seed_rates", "cluster_counts"} <= set(seen)
    assert pickle.loads(pickle.dumps(ov)).headline.equals(ov.headline)  # st.cache_data
