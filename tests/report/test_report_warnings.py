"""Warnings where they matter (issue 35 item 3): a recompute that does not reproduce the
log is a report warning; `masks` output says it has no ΔD, and its coverage line counts
the seeds its tables count."""

from __future__ import annotations

import json
from pathlib import Path

from report_fixtures import MANIFEST
from pdm_replay.report.build import build_report
from pdm_replay.report.db import connect
from pdm_replay.report.legend import DEVIATION_WARN, coverage_line
from pdm_replay.report.render import render_markdown


def test_a_recompute_that_misses_the_log_is_a_report_warning(hand_run: Path) -> None:
    dev = {"max": 0.9, "mean": 2 * DEVIATION_WARN, "tokens": 10}
    (hand_run / "manifest.json").write_text(json.dumps({**MANIFEST,
                                                        "recompute_deviation": dev}))
    with connect(hand_run) as db:
        report = build_report(db, bootstrap_samples=50)
    (w,) = [w for w in report.warnings if w.code == "recompute_mismatch"]
    assert w.threshold == DEVIATION_WARN
    assert f"mean |Δ log π(k)| {2 * DEVIATION_WARN:.3g} nats, max 0.9 over 10 tokens" \
        in w.message
    assert w.message in render_markdown(report)


def test_a_recompute_within_the_bound_does_not_warn(hand_run: Path) -> None:
    with connect(hand_run) as db:  # MANIFEST: mean 0.0005
        report = build_report(db, bootstrap_samples=50)
    assert not [w for w in report.warnings if w.code == "recompute_mismatch"]


def test_masks_output_says_it_has_no_delta_d(hand_masks_file: Path) -> None:
    with connect(hand_masks_file) as db:
        report = build_report(db, bootstrap_samples=50)
    codes = [w.code for w in report.warnings]
    assert codes == ["no_updates"]  # not "too few tokens ... replay more --seeds"
    assert "decisions and the divergences, but no ΔD" in report.warnings[0].message
    seeds = set(report.headline["n_seeds"].to_list())
    assert seeds == {1} and report.coverage.n_seeds == 1
    assert report.log_health["n_seeds"][0] == 1
    assert "over 1 seed (`masks` output has no seeds" in coverage_line(report.coverage)


def test_the_legend_defines_every_log_health_field(hand_run: Path) -> None:
    from pdm_replay.report.legend import LEGEND_TEXT

    with connect(hand_run) as db:
        report = build_report(db, bootstrap_samples=50)
    defined = {name.strip() for key in LEGEND_TEXT for name in key.split("/")}
    fields = set(report.log_health.columns)
    assert fields <= defined, fields - defined
    for term in ("agg / uniform", "sign accuracy", "away / toward / uncertain", "verdict"):
        assert term in LEGEND_TEXT
