"""The report's verdict (pdm_replay.report.verdict): its rules, and that its numbers are
the report's own."""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import NormalDist

import polars as pl
import pytest
from hypothesis import given, strategies as st
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.report.build import build_report
from pdm_replay.report.db import connect
from pdm_replay.report.overview import overview
from pdm_replay.report.display import format_value
from pdm_replay.report.render import render_html, render_markdown, render_table
from pdm_replay.report.verdict import (NUMBER_KEYS, PAPER_DIFF, comparison_verdict,
                                       tokens_needed, verdicts)

runner = CliRunner()


def _row(basis: str, **kw) -> dict:
    row = {"basis": basis, "pair": "dppo_topk_kl vs pdm_kl_agg", "delta": 0.15,
           "region": "kl_topk > 0.15", "ratio_mask": "dppo_topk_kl",
           "predictive_mask": "pdm_kl_agg", "unsafe_ratio_pooled": 0.274,
           "unsafe_predictive_pooled": 0.263, "unsafe_diff_pooled": 0.011, "ci_low": -0.035,
           "ci_high": 0.057, "seeds_compared": 13, "seeds_independent": True,
           "sign_test_p": 1.0, "wilcoxon_p": 0.8, "n_seeds": 16,
           "out_of_region_per_seed": 1068.6, "disagreement_per_seed": 87.4}
    return {**row, **kw}


N = {"n_ratio": 700, "n_predictive": 650}


def test_own_first_and_actual_confounded_by_the_trainers_side() -> None:
    rows = {"actual": _row("actual", unsafe_ratio_pooled=0.681, unsafe_predictive_pooled=0.597,
                           unsafe_diff_pooled=0.083, ci_low=0.032, ci_high=0.134),
            "own": _row("own"), "none": _row("none")}
    v = comparison_verdict(rows, {b: N for b in rows}, kind="replay",
                           trainer_mask="dppo_topk_kl")
    assert v.basis == "own" and v.confounded_side == "ratio" and not v.resolved
    assert "own update (unconfounded)" in v.sentences[0]
    assert "includes 0" in v.sentences[0]
    assert "13 independent seeds" in v.sentences[1]
    assert v.tokens_needed_per_side == tokens_needed(0.274, 0.263)
    assert f"{v.tokens_needed_per_side:,} kept disagreement tokens per side" in v.sentences[2]
    assert v.sentences[3].startswith("Under the trainer's actual update (confounded)")
    assert "the ratio side" in v.sentences[3]
    assert "predictive side's are tokens the trainer dropped" in v.sentences[3]
    assert "excludes 0" not in v.sentences[3]  # a confounded basis decides nothing
    # the predictive mask as the trainer's: the other side is confounded
    w = comparison_verdict(rows, {b: N for b in rows}, kind="replay",
                           trainer_mask="pdm_kl_agg")
    assert w.confounded_side == "predictive" and "ratio side's are tokens" in w.sentences[3]
    # the trainer's mask on neither side: actual is stated, unjudged
    x = comparison_verdict(rows, {b: N for b in rows}, kind="replay", trainer_mask="ppo_clip")
    assert x.confounded_side is None and "ppo_clip is neither side" in x.sentences[3]


def test_an_unconfounded_actual_is_judged_and_an_excluded_zero_resolves() -> None:
    rows = {"actual": _row("actual", ci_low=0.01, ci_high=0.05)}
    v = comparison_verdict(rows, {"actual": N}, kind="replay", trainer_mask="ppo_clip")
    assert v.basis == "actual" and v.resolved and v.confounded_side is None
    assert v.sentences[0].startswith("dppo_topk_kl vs pdm_kl_agg (out of region: kl_topk")
    assert "the predictive mask keeps fewer unsafe tokens" in v.sentences[0]
    assert v.tokens_needed_per_side is None and len(v.sentences) == 2
    lower = comparison_verdict({"own": _row("own", ci_low=-0.05, ci_high=-0.01)},
                               {"own": N}, kind="replay")
    assert lower.resolved and "the ratio mask keeps fewer" in lower.sentences[0]


def test_only_a_confounded_basis_resolves_nothing() -> None:
    rows = {"actual": _row("actual", ci_low=0.01, ci_high=0.05)}
    v = comparison_verdict(rows, {"actual": N}, kind="replay", trainer_mask="dppo_topk_kl")
    assert v.basis is None and not v.resolved and "No unconfounded basis" in v.text


@pytest.mark.parametrize("independent,n,expected", [
    (False, 16, "not independent: no p-values"), (True, 3, "Only 3 compared seeds"),
    (True, 6, "Over 6 independent seeds: sign test p = 1, Wilcoxon p = 0.8")])
def test_seed_sentence(independent: bool, n: int, expected: str) -> None:
    v = comparison_verdict({"own": _row("own", seeds_independent=independent,
                                        seeds_compared=n)}, {"own": N}, kind="replay")
    assert expected in v.sentences[1]


@given(st.floats(0.01, 0.99), st.floats(0.01, 0.99))
def test_tokens_needed_is_the_two_proportion_formula(p: float, q: float) -> None:
    n = tokens_needed(p, q)
    z = NormalDist().inv_cdf(0.975) + NormalDist().inv_cdf(0.8)
    exact = z ** 2 * (p * (1 - p) + q * (1 - q)) / PAPER_DIFF ** 2
    assert n == math.ceil(exact)
    # at n per side the difference's standard error is PAPER_DIFF / z: it resolves
    assert math.sqrt((p * (1 - p) + q * (1 - q)) / n) <= PAPER_DIFF / z


def test_the_verdicts_numbers_are_the_reports_tables(hand_run: Path) -> None:
    with connect(hand_run) as db:
        report = build_report(db, bootstrap_samples=200)
    head, rates = report.headline, report.seed_rates
    assert [(v.pair, v.delta) for v in report.verdicts] == \
        head.select("pair", "delta").unique(maintain_order=True).rows()
    for v in report.verdicts:
        for basis, numbers in v.numbers.items():
            row = head.filter((pl.col("basis") == basis) & (pl.col("pair") == v.pair)
                              & (pl.col("delta") == v.delta)).row(0, named=True)
            assert {k: numbers[k] for k in NUMBER_KEYS} == {k: row[k] for k in NUMBER_KEYS}
            mine = rates.filter((pl.col("basis") == basis) & (pl.col("pair") == v.pair))
            assert numbers["n_ratio"] == mine["n_measured_ratio"].sum()
            assert numbers["n_predictive"] == mine["n_measured_predictive"].sum()
        # the sentence prints the table's cells, as the tables format them
        own = v.numbers.get("own")
        if own:
            for key in ("unsafe_ratio_pooled", "unsafe_predictive_pooled"):
                assert format_value(key, own[key]) in v.sentences[0]
            assert format_value("unsafe_diff_pooled", own["unsafe_diff_pooled"]) in v.text
    kl = report.verdicts[0]
    # hand_run kl/agg own: ratio 2 of 3 unsafe, predictive 1 of 3 (report_fixtures.py)
    assert (kl.numbers["own"]["n_ratio"], kl.numbers["own"]["n_predictive"]) == (3, 3)


def test_every_format_opens_with_the_verdict(hand_run: Path) -> None:
    with connect(hand_run) as db:
        report = build_report(db, bootstrap_samples=200)
        ov = overview(db)
    first = report.verdicts[0].sentences[0]
    table = render_table(report, wide=True)
    assert table.index("Verdict") < table.index("coverage:")
    assert first[:60] in table
    md, page = render_markdown(report), render_html(report, {})
    assert md.index("## Verdict") < md.index("**Coverage:**") and first in md
    assert page.index("<h2>Verdict</h2>") < page.index("Coverage:")
    assert ov.verdict == tuple(v.text for v in report.verdicts)
    result = runner.invoke(app, ["report", str(hand_run), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [d["verdict"] for d in doc["verdicts"]] == [v.text for v in report.verdicts]
    assert doc["verdicts"][0]["numbers"]["own"]["n_ratio"] == 3


def test_masks_output_says_it_has_no_delta_d(hand_masks_file: Path) -> None:
    with connect(hand_masks_file) as db:
        report = build_report(db, bootstrap_samples=100)
    assert report.verdicts and all(v.basis is None for v in report.verdicts)
    assert "this is `masks` output: it has every decision and divergence but no ΔD" \
        in report.verdicts[0].text
    assert verdicts(report.headline, report.seed_rates, kind="masks")[0].numbers == {}
    # hand_masks_file: KL out of region 5 + 3 tokens, kl/agg disagreements 3 + 3
    assert "8 tokens out of region and 6 disagreement tokens in the log" in \
        report.verdicts[0].text


def test_by_step_verdicts_name_their_step(hand_run: Path) -> None:
    result = runner.invoke(app, ["report", str(hand_run), "--format", "json", "--by", "step",
                                 "--bootstrap-samples", "50"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["verdicts"] and {v["step"] for v in doc["verdicts"]} == {0}
