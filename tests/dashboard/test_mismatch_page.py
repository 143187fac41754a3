"""The Mismatch over training page through ``AppTest``: one chart per metric of the
report's ``mismatch`` table, grouped by trainer, and a mask's keep statistics."""

from __future__ import annotations

import json
from pathlib import Path

from pdm_replay.report import dashboard_api as dapi
from dashboard_fixtures import app_for, run_dir, tokenizer_dir  # noqa: F401 (fixtures)
from test_pages import assert_clean


def test_mismatch_page_charts_every_metric(app_for, run_dir: Path) -> None:
    at = app_for(run_dir, "Mismatch over training")
    assert_clean(at)
    assert at.title[0].value == "Mismatch over training"
    with dapi.connect_dashboard(run_dir)[0] as db:
        mismatch, keep = dapi.mismatch_over_training(db)
    charts = at.get("vega_lite_chart")
    titles = [json.loads(c.proto.spec)["title"]["text"] for c in charts]
    metrics = [c for c in mismatch.columns if c != "step"]
    assert {"rollout_corr/kl", "sampling/importance_sampling_ratio/max"} <= set(metrics)
    # one panel per metric (titled with the trainer's name), then the first mask's panels
    assert sorted(titles[:len(metrics)]) == sorted(metrics)
    assert titles[0] == "rollout_corr/training_ppl"  # verl's off-policy metrics first
    assert len(charts) > len(metrics)
    labels = [e.label for e in at.expander]
    assert any(lab.startswith("verl: off-policy metrics") for lab in labels)
    assert any(lab.startswith("TRL: sampling/*") for lab in labels)
    # the page opens on the first mask that drops a token, not on `none`'s zeros
    first = keep.filter(keep["masked_fraction"] > 0)["mask"][0]
    assert first != "none" and at.selectbox(key="mismatch_mask").value == first
    table = at.dataframe[-1].value
    assert set(table["mask"]) == {first} and len(table) == keep["step"].n_unique()
    other = next(m for m in keep["mask"].unique(maintain_order=True) if m != first)
    at.selectbox(key="mismatch_mask").set_value(other).run()
    assert_clean(at)
    assert set(at.dataframe[-1].value["mask"]) == {other}
