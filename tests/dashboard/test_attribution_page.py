"""The Attribution page (page_scripts/sign_attribution.py) through Streamlit's AppTest."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pdm_replay.report import attribution_report as attr
from pdm_replay.report.db import connect
from pdm_replay.testing.synthetic_run import write_synthetic_run
from dashboard_fixtures import app_for, run_dir, tokenizer_dir  # noqa: F401 (fixtures)

PAGE = "page_scripts/sign_attribution.py"


@pytest.fixture(scope="module")
def attribution_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic replay whose updates carry attribution columns: the linear term is ΔD
    plus noise; under `none` every second token has a self term (an SGD sample)."""
    run = write_synthetic_run(tmp_path_factory.mktemp("attr") / "run", seeds=(0, 1),
                              rows_per_seed=600, tokens_per_sample=20)
    rng = np.random.default_rng(0)
    for part in sorted((run / "updates").rglob("*.parquet")):
        t = pq.read_table(part)
        real = t["delta_kl_topk"].to_numpy()
        lin = real + rng.normal(0, 0.5 * np.abs(real).mean() + 1e-9, real.size)
        sampled = (np.arange(real.size) % 2 == 0) & (t["update_mask"].to_numpy(
            zero_copy_only=False) == "none")
        own = np.where(sampled, lin * rng.uniform(-0.5, 1.5, real.size), np.nan)
        cols = {"delta_kl_lin": lin, "delta_kl_curv": real - lin, "delta_kl_self": own,
                "delta_kl_cross": lin - own}
        for name, values in cols.items():
            i = t.schema.get_field_index(name)
            t = t.set_column(i, t.schema.field(i),
                             pa.array(values, pa.float64(), from_pandas=True))
        pq.write_table(t, part)
    return run


def test_page_shows_split_chart_and_points(app_for, attribution_run: Path) -> None:
    at = app_for(attribution_run, "Overview").switch_page(PAGE).run()
    assert not at.exception and not at.error
    assert at.title[0].value == "Attribution"
    assert at.selectbox(key="attr_update").value == "none"
    with connect(attribution_run) as db:
        split = attr.attribution_split(db)
    shown = at.dataframe[0].value
    expected = split.filter(split["scope"] == "out_of_region")
    assert list(shown["predictor"]) == expected["predictor"].to_list()
    assert list(shown["n_geometry"]) == expected["n_geometry"].to_list()
    assert expected["n_errors_self"].sum() > 0
    assert len(at.get("vega_lite_chart")) == 3  # stage shares, realized vs lin, lin vs self
    at.radio(key="attr_scope").set_value("disagreement").run()
    assert not at.exception
    narrowed = at.dataframe[0].value
    assert (narrowed["n_tokens"].to_numpy() <= shown["n_tokens"].to_numpy()).all()
    assert set(narrowed["scope"]) == {"disagreement"}


def test_page_explains_a_run_without_attribution(app_for, run_dir: Path) -> None:
    at = app_for(run_dir, "Overview").switch_page(PAGE).run()
    assert not at.exception and not at.error
    assert any("--attribution" in i.value for i in at.info)
