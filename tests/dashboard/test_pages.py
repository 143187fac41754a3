"""Every dashboard page through ``streamlit.testing.v1.AppTest`` on a replay run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.ipc  # noqa: F401  (pa.ipc)
import pyarrow.parquet as pq

from pdm_replay.dashboard_app.text import load_tokenizer, token_texts, tokenizer_candidates
from pdm_replay.testing.fixtures import SyntheticLogConfig, write_synthetic_log
from pdm_replay.report import api, dashboard_api as dapi
from pdm_replay.report.build import build_report
from pdm_replay.report.run_info import discover_run
from dashboard_fixtures import app_for, run_dir, tokenizer_dir  # noqa: F401 (fixtures)


def texts(elements) -> str:
    return "\n".join(str(e.value) for e in elements)


def assert_clean(at) -> None:
    assert not at.exception, texts(at.exception)
    assert not at.error, texts(at.error)


def test_overview_shows_manifest_headline_chart_and_masks(app_for, run_dir: Path) -> None:
    at = app_for(run_dir, "Overview")
    assert_clean(at)
    assert at.title[0].value == "Overview"
    assert {"Headline: ratio vs predictive masks", "Unsafe-keep rate per seed",
            "Mask summary"} <= {s.value for s in at.subheader}
    facts = next(m.value for m in at.markdown if m.value.startswith("**Kind**"))
    assert all(f"**{k}**" in facts for k in ("Kind", "Status", "Seeds", "Tokens"))
    headline = at.dataframe[0].value
    assert {"basis", "family", "estimator", "delta", "unsafe_ratio_pooled",
            "unsafe_predictive_seed_mean", "empty_seeds"} <= set(headline)
    # the per-seed rates: a table at once, their chart only when asked (no Altair before)
    rates = next(d.value for d in at.dataframe if "seed" in d.value.columns)
    assert len(rates) and not rates.isna().any().any()
    assert not at.get("vega_lite_chart")
    at.toggle(key="seed_chart").set_value(True).run()
    assert_clean(at)
    assert len(at.get("vega_lite_chart")) == 1
    assert not at.json  # the manifest too only when asked
    at.toggle(key="manifest").set_value(True).run()
    assert_clean(at)
    assert len(at.json) == 2 and "versions" in at.json[1].value
    masks = at.dataframe[-1].value
    assert "none" in set(masks["mask"]) and masks["keep_fraction"].str.endswith("%").all()
    assert not masks.isna().any().any()  # no None cells: "–" where a mask has no family
    # the report's coverage line, warnings and legend (report.legend), not a second text
    assert any(c.value.startswith("Coverage: replay:") for c in at.caption)
    assert any("unsafe keep" in e.value for e in at.markdown)


def test_disagreements_table_detail_and_context(app_for, run_dir: Path) -> None:
    at = app_for(run_dir, "Disagreements")
    assert_clean(at)
    rows = at.dataframe[0].value
    assert len(rows) > 0 and set(rows["family"]) == {"kl"} and set(rows["estimator"]) == {"agg"}
    assert (rows["d_pre"] > 0).all()
    first = rows.iloc[0]
    detail = [s.value for s in at.subheader if s.value.startswith("Token detail")]
    assert detail == [f"Token detail: {first['sample_id']} · pos {first['pos']} · seed "
                      f"{first['seed']}"]
    context = next(m.value for m in at.markdown if "<mark" in m.value)
    assert f"pos {first['pos']}," in context
    assert {"D_pre (KL top-K)", "δ"} <= {m.label for m in at.metric}
    assert len(at.get("vega_lite_chart")) == 1
    loaded = load_tokenizer(tokenizer_candidates(discover_run(run_dir)))
    assert list(rows["token"]) == token_texts(loaded.tokenizer, list(rows["token_id"]))


def count(run_dir: Path, **flt) -> int:
    db, _ = dapi.connect_dashboard(run_dir)
    with db:
        return dapi.disagreement_count(db, dapi.DisagreementFilter(**flt))


def test_overview_opens_with_the_reports_verdict(app_for, run_dir: Path) -> None:
    at = app_for(run_dir, "Overview")
    assert_clean(at)
    subheads = [s.value for s in at.subheader]
    assert subheads.index("Verdict") < subheads.index("Headline: ratio vs predictive masks")
    db, _ = dapi.connect_dashboard(run_dir)
    with db:
        report = build_report(db, bootstrap_samples=2000)
    shown = texts(at.markdown)
    assert all(v.text in shown for v in report.verdicts) and report.verdicts


def test_the_default_filter_counts_what_the_headline_counts(app_for, run_dir: Path) -> None:
    """The page opens on the report's first comparison: its count is the headline's
    disagreement tokens (per seed × seeds), not the pair's family with the IcePop pair's."""
    at = app_for(run_dir, "Disagreements")
    assert_clean(at)
    db, _ = dapi.connect_dashboard(run_dir)
    with db:
        head = api.headline(db, n_resamples=10).filter(pl.col("pair") == dapi.default_pair())
    row = head.row(0, named=True)
    n = round(row["disagreement_per_seed"] * row["n_seeds"])
    assert n == count(run_dir, pair=dapi.default_pair()) > 0
    assert f"**{n:,} disagreement tokens**" in texts(at.markdown)


def test_disagreements_filter_changes_the_table(app_for, run_dir: Path) -> None:
    at = app_for(run_dir, "Disagreements")
    before = at.dataframe[0].value
    next(s for s in at.selectbox if s.label == "Pair").select_index(0).run()  # any
    next(s for s in at.selectbox if s.label == "Family").select_index(2).run()  # TV
    assert_clean(at)
    n_tv = count(run_dir, family="tv")
    assert f"**{n_tv:,} disagreement tokens**" in texts(at.markdown)
    after = at.dataframe[0].value
    assert set(after["family"]) == {"tv"} and not before.equals(after)
    next(s for s in at.selectbox if s.label == "Sign of ΔD").select_index(1).run()  # ΔD > 0
    n_unsafe = count(run_dir, family="tv", delta_sign=1)
    assert f"**{n_unsafe:,} disagreement tokens**" in texts(at.markdown)
    assert n_unsafe < n_tv and (at.dataframe[0].value["delta_d"] > 0).all()


def test_disagreements_sort_and_paging(app_for, run_dir: Path) -> None:
    at = app_for(run_dir, "Disagreements")
    next(s for s in at.selectbox if s.label == "Pair").select_index(0).run()  # any
    next(s for s in at.selectbox if s.label == "Sort by").select("d_pre").run()
    at.toggle[0].set_value(True).run()
    at.selectbox(key="f_size").select(25).run()
    assert_clean(at)
    page1 = at.dataframe[0].value
    assert list(page1["d_pre"]) == sorted(page1["d_pre"], reverse=True)
    assert len(page1) == 25
    at.number_input(key="dis_page").set_value(2).run()
    page2 = at.dataframe[0].value
    assert page2["d_pre"].max() <= page1["d_pre"].min()
    n = count(run_dir)  # the count is the full filtered set's
    assert f"**{n:,} disagreement tokens**" in texts(at.markdown)


def test_disagreements_token_choice_changes_the_detail(app_for, run_dir: Path) -> None:
    at = app_for(run_dir, "Disagreements")
    rows = at.dataframe[0].value
    next(s for s in at.selectbox if s.label.startswith("Token detail")).select_index(1).run()
    assert_clean(at)
    second = rows.iloc[1]
    assert any(s.value == f"Token detail: {second['sample_id']} · pos {second['pos']} · seed "
               f"{second['seed']}" for s in at.subheader)


def test_divergence_histograms_terms_and_sample_size(app_for, run_dir: Path) -> None:
    at = app_for(run_dir, "Divergence")
    assert_clean(at)
    assert len(at.get("vega_lite_chart")) == 3  # two histograms and the scatter
    caption = next(c.value for c in at.caption if "tokens shown" in c.value)
    at.select_slider(key="div_limit").set_value(1000).run()
    assert_clean(at)
    smaller = next(c.value for c in at.caption if "tokens shown" in c.value)
    shown = lambda c: int(c.split()[0].replace(",", ""))  # noqa: E731
    assert shown(smaller) <= 1000 and shown(smaller) <= shown(caption)
    predictors = set(at.dataframe[0].value["predictor"])
    assert {"ratio", "predictive_agg", "predictive_uniform"} <= predictors
    # the heading names the updates its rows are under, in their order
    bases = list(dict.fromkeys(at.dataframe[0].value["basis"]))
    heading = next(s.value for s in at.subheader if s.value.startswith("Sign accuracy"))
    assert [b for b in ("actual", "none") if f"`{b}`" in heading] == bases


def test_estimators_page(app_for, run_dir: Path) -> None:
    at = app_for(run_dir, "Estimators")
    assert_clean(at)
    accuracy = at.dataframe[0].value
    assert set(accuracy["estimator"]) == {"agg", "uniform"}
    assert {"all", "out_of_region", "disagreement"} <= set(accuracy["scope"])
    # the synthetic run has exact slopes but no logged-vs-reloaded µ gap columns
    assert any("logged-vs-reloaded µ gap" in i.value for i in at.info)
    assert len(at.get("vega_lite_chart")) == 1
    at.select_slider(key="est_limit").set_value(1000).run()
    assert any(c.value.startswith("1,000 tokens") or "tokens (fixed" in c.value
               for c in at.caption)


def test_log_health_page(app_for, run_dir: Path) -> None:
    at = app_for(run_dir, "Log health")
    assert_clean(at)
    assert {"Tokens", "Mass overflow", "Recompute deviation (max)"} <= {m.label for m in at.metric}
    quantiles = at.dataframe[0].value
    assert list(quantiles["distribution"]) == ["mu_mass", "pi_mass"]
    assert ((quantiles["min"] >= 0) & (quantiles["max"] <= 1 + 1e-6)).all()
    assert "Validation of the rollout log" in texts(at.subheader)


def test_log_health_validates_the_log_on_demand(app_for, run_dir: Path, tmp_path: Path) -> None:
    run = Path(shutil.copytree(run_dir, tmp_path / "run"))
    log = write_synthetic_log(tmp_path / "log.parquet", SyntheticLogConfig(n_samples=3))
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "config": {"log": str(log)}}))
    at = app_for(run, "Log health")
    assert_clean(at)
    assert not at.success  # validation runs only when asked
    at.button[0].click().run()
    assert_clean(at)
    assert at.success[0].value.startswith("OK: 1 file(s), 3 samples")


def test_disagreements_detail_charts_every_support_token(app_for, run_dir: Path) -> None:
    at = app_for(run_dir, "Disagreements")
    assert_clean(at)
    first = at.dataframe[0].value.iloc[0]
    db, _ = dapi.connect_dashboard(run_dir)
    with db:
        dist = dapi.support_distribution(db, int(first["seed"]), first["sample_id"],
                                         int(first["pos"]),
                                         update_masks=["dppo_topk_kl", "pdm_kl_agg", "none"])
    ids = dist.filter(dist["token_id"].is_not_null())["token_id"].unique().to_list()
    assert len(ids) >= 2 and int(first["token_id"]) == dist["token_id"][0]
    assert {"µ", "π_pre"} <= set(dist["distribution"]) and any(
        d.startswith("π_post[") for d in dist["distribution"])
    chart = at.get("vega_lite_chart")[0].proto
    spec = json.loads(chart.spec)
    assert spec["encoding"]["x"]["field"] == "label"
    shown = pa.ipc.open_stream(chart.datasets[0].data.data).read_all()
    assert set(shown["distribution"].to_pylist()) == set(dist["distribution"])
    tok = load_tokenizer(tokenizer_candidates(discover_run(run_dir))).tokenizer
    k_text = token_texts(tok, [int(first["token_id"])])[0]
    labels = set(shown["label"].to_pylist())
    assert f"0: {k_text!r} (k)" in labels and "tail (outside S)" in labels
    assert len(labels) == len(ids) + 1
    assert not any("not each atom of S" in c.value for c in at.caption)


def test_disagreements_detail_falls_back_without_support_lists(app_for, run_dir: Path,
                                                               tmp_path: Path) -> None:
    old = tmp_path / "old_run"
    shutil.copytree(run_dir, old)
    for kind, drop in (("tokens", ["support_ids", "support_logp_behavior", "support_logp_pre"]),
                       ("updates", ["support_logp_post"])):
        for f in (old / kind).rglob("*.parquet"):
            pq.write_table(pq.read_table(f).drop_columns(drop), f)
    at = app_for(old, "Disagreements")
    assert_clean(at)
    assert len(at.get("vega_lite_chart")) == 1
    assert any("not each atom of S" in c.value for c in at.caption)
