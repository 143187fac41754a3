"""`pdm-replay report` and `pdm-replay sql` through Typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.report.headline import SCHEMA as HEADLINE_SCHEMA
from pdm_replay.testing.synthetic_run import write_synthetic_run

runner = CliRunner()
HEADLINE_FIELDS = set(HEADLINE_SCHEMA)


def invoke(*args: str):
    result = runner.invoke(app, [str(a) for a in args])
    return result


def test_report_json_has_the_headline_fields(hand_run: Path) -> None:
    result = invoke("report", hand_run, "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert {r["family"] + "/" + r["estimator"] for r in doc["headline"]} == \
        {"kl/agg", "kl/uniform", "tv/agg"}
    assert [r["basis"] for r in doc["headline"]] == ["own"] * 3 + ["none"] * 3
    kl = next(r for r in doc["headline"] if (r["family"], r["estimator"]) == ("kl", "agg"))
    assert set(kl) == HEADLINE_FIELDS
    # own updates, kl/agg ratio-kept tokens: seed 1 {+0.02, -0.01}, seed 2 {+0.05}
    assert (kl["wins"], kl["seeds_compared"], kl["unsafe_ratio_pooled"]) == \
        (2, 2, pytest.approx(2 / 3))
    assert kl["unsafe_ratio_seed_mean"] == pytest.approx((1 / 2 + 1) / 2)
    assert doc["thresholds"]["delta_kl"] == 0.1 and doc["kind"] == "replay"
    assert doc["log_health"]["n_mass_overflow"] == 1
    assert any("tv/uniform" in n for n in doc["notes"])


def test_report_on_a_synthetic_run_with_exact_columns(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "run", seeds=(0, 1, 2, 3), rows_per_seed=1500,
                              exact=True)
    out = tmp_path / "report.json"
    result = invoke("report", run, "-f", "json", "--out", out)
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert all(set(r) == HEADLINE_FIELDS for r in doc["headline"])
    paper = [r for r in doc["headline"] if r["ratio_mask"] in ("dppo_topk_kl", "dppo_topk_tv")]
    assert len(paper) == 8  # 4 paper pairs x bases own, none (composed pairs may add rows)
    assert all(r["n_seeds"] == 4 for r in doc["headline"])
    assert {r["estimator"] for r in doc["estimator_accuracy"]} == {"agg", "uniform"}
    assert "predictive_exact" in {r["predictor"] for r in doc["sign_accuracy"]}


def test_report_markdown_and_table(hand_run: Path) -> None:
    md = invoke("report", hand_run, "--format", "markdown")
    assert md.exit_code == 0, md.output
    assert "## Direction analysis" in md.stdout
    assert "| own | dppo_topk_kl vs pdm_kl_agg | kl | agg | kl_topk > 0.1 | 0.1 | 2 |" in md.stdout
    assert "| 2/0/0/0 |" in md.stdout  # wins / losses / ties / empty
    table = invoke("report", hand_run)
    assert table.exit_code == 0 and "Mask summary" in table.stdout


def test_report_html_is_self_contained_with_plots(hand_run: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out, plots = tmp_path / "r.html", tmp_path / "plots"
    result = invoke("report", hand_run, "--format", "html", "--out", out, "--plots-dir", plots)
    assert result.exit_code == 0, result.output
    page = out.read_text()
    # + mask_comparison (issue 19), + mismatch / keep_stats over steps (issue 37)
    assert page.count("data:image/png;base64,") == 6
    assert "http://" not in page and "https://" not in page and "<script" not in page
    assert sorted(p.name for p in plots.iterdir()) == [
        "direction_terms.png", "keep_stats.png", "kept_deltas.png", "mask_comparison.png",
        "mismatch.png", "seed_rates.png"]


def test_report_on_masks_output(hand_masks_file: Path) -> None:
    result = invoke("report", hand_masks_file, "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["kind"] == "masks"
    assert all(r["unsafe_ratio_pooled"] is None for r in doc["headline"])
    assert any("pdm-replay replay" in n for n in doc["notes"])


def test_report_errors_name_the_input(tmp_path: Path) -> None:
    result = invoke("report", tmp_path / "missing")
    assert result.exit_code == 2 and "missing" in result.output
    bad = invoke("report", tmp_path, "--format", "pdf")
    assert bad.exit_code == 2


def test_sql_binds_parameters(hand_run: Path) -> None:
    q = "SELECT seed, pos, kept_by FROM disagreements WHERE family = $f AND seed = $s " \
        "ORDER BY estimator, pos"
    result = invoke("sql", hand_run, q, "-p", "f", "kl", "-p", "s", "2", "-f", "csv")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        '"seed","pos","kept_by"', '2,0,"predictive"', '2,1,"predictive"', '2,2,"ratio"',
        '2,0,"predictive"', '2,1,"predictive"', '2,2,"ratio"']


def test_sql_parameter_containing_sql_is_data(hand_run: Path) -> None:
    evil = "'; DROP VIEW tokens; DROP TABLE masks; --"
    q = "SELECT $v AS v, (SELECT count(*) FROM tokens WHERE sample_id = $v) AS n_matching, " \
        "(SELECT count(*) FROM tokens) AS n_tokens"
    result = invoke("sql", hand_run, q, "-p", "v", evil, "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [{"v": evil, "n_matching": 0, "n_tokens": 10}]
    again = invoke("sql", hand_run, "SELECT count(*) AS n FROM tokens", "-f", "csv")
    assert again.stdout.splitlines() == ['"n"', "10"]


def test_sql_is_sandboxed(hand_run: Path, tmp_path: Path) -> None:
    target = tmp_path / "leak.csv"
    result = invoke("sql", hand_run, f"COPY (SELECT 1) TO '{target}'")
    assert result.exit_code == 2 and not target.exists()
    result = invoke("sql", hand_run, "SELECT * FROM read_csv('/etc/hostname')")
    assert result.exit_code == 2 and "disabled" in result.output


def test_sql_outputs(hand_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    result = invoke("sql", hand_run, "SELECT * FROM tokens ORDER BY seed, pos", "-f",
                    "parquet", "--out", out)
    assert result.exit_code == 0, result.output
    assert pq.read_table(out).num_rows == 10
    csv = tmp_path / "t.csv"
    assert invoke("sql", hand_run, "SELECT pos FROM tokens", "-f", "csv", "-o", csv).exit_code == 0
    assert len(csv.read_text().splitlines()) == 11
    table = invoke("sql", hand_run, "SELECT seed, pos FROM tokens ORDER BY seed, pos",
                   "--max-rows", "3")
    assert "first 3 rows shown" in table.stdout and table.stdout.count("│ 1    │") == 3
    assert invoke("sql", hand_run, "SELECT 1", "-f", "parquet").exit_code == 2
    assert invoke("sql", hand_run, "SELECT $x", "-p", "x").exit_code == 2  # needs NAME VALUE
    assert invoke("sql", hand_run, "SELECT * FROM no_such_view").exit_code == 2


def test_html_without_matplotlib_says_how_to_install(hand_run: Path, monkeypatch) -> None:
    import sys
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails
    result = invoke("report", hand_run, "--format", "html")
    assert result.exit_code == 2
    assert "pip install 'pdm_replay[report]'" in result.output
    assert invoke("report", hand_run, "--format", "json").exit_code == 0  # needs no plots
