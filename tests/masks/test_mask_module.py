"""--mask-module: a user's file registers a mask that every command then knows."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
from typer.testing import CliRunner

from pdm_replay.cli.app import app
from pdm_replay.testing.fixtures import write_synthetic_log
from pdm_replay.masks import MASK_SPECS, load_mask_module, mask_pairs

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "my_masks.py"


def test_example_module_mask_joins_masks_and_its_pair(tmp_path: Path,
                                                      user_registry: None) -> None:
    log = write_synthetic_log(tmp_path / "log.parquet", n_samples=16)
    out = tmp_path / "tokens.parquet"
    res = CliRunner().invoke(app, ["masks", str(log), "--out", str(out), "--mask-module",
                                   str(EXAMPLE), "--masks", "icepop,icepop_ratio,icepop_pdm_tv",
                                   "--mask-param", "icepop_high=1.05",
                                   "--mask-param", "icepop_low=0.95"])
    assert res.exit_code == 0, res.output
    assert "disagreements (icepop_ratio vs icepop_pdm_tv)" in " ".join(res.output.split())
    table = pq.read_table(out)
    assert {"keep_icepop", "keep_icepop_ratio", "keep_icepop_pdm_tv"} <= set(table.column_names)
    load_mask_module(EXAMPLE)  # a second load is a no-op, not a duplicate registration
    assert MASK_SPECS["icepop_pdm_tv"].proximity == "icepop"
    pairs = [(p.base, p.other) for p in mask_pairs(["icepop_ratio", "icepop_pdm_tv"])]
    assert pairs == [("icepop_ratio", "icepop_pdm_tv")]
    # the band is narrow: the symmetric IcePop drops more than either directional mask
    drop = {n: int((~table.column(f"keep_{n}").to_numpy()).sum())
            for n in ("icepop", "icepop_ratio", "icepop_pdm_tv")}
    assert drop["icepop"] >= max(drop["icepop_ratio"], drop["icepop_pdm_tv"]) > 0


def test_bad_mask_param_and_module_are_one_line_errors(tmp_path: Path) -> None:
    log = write_synthetic_log(tmp_path / "log.parquet", n_samples=2)
    for extra, needle in ((["--mask-param", "nope=1"], "FIELD=VALUE"),
                          (["--mask-module", str(tmp_path / "none.py")], "no such file")):
        res = CliRunner().invoke(app, ["masks", str(log), "--out", str(tmp_path / "t.parquet"),
                                       *extra])
        assert res.exit_code != 0 and needle in " ".join(res.output.split()), res.output


def test_a_mask_module_that_fails_to_import_is_named(tmp_path: Path) -> None:
    """The loader --format-module shares (pdm_replay.user_modules): an exception while the
    file runs is a one-line error naming the option and the file, not a traceback."""
    log = write_synthetic_log(tmp_path / "log.parquet", n_samples=2)
    broken = tmp_path / "broken_masks.py"
    broken.write_text("from pdm_replay.masks import register\nregister(None)\n")
    res = CliRunner().invoke(app, ["masks", str(log), "--out", str(tmp_path / "t.parquet"),
                                   "--mask-module", str(broken)])
    said = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert f"--mask-module {broken.resolve()}: cannot be imported (AttributeError" in said


def test_report_sql_and_dashboard_know_the_user_mask(tmp_path: Path, user_registry: None) -> None:
    from pdm_replay.dashboard_app import ENV_MASK_MODULES
    from pdm_replay.commands.dashboard import DashboardConfig, streamlit_env

    log = write_synthetic_log(tmp_path / "log.parquet", n_samples=16)
    out = tmp_path / "tokens.parquet"
    runner = CliRunner()
    args = ["--mask-module", str(EXAMPLE)]
    res = runner.invoke(app, ["masks", str(log), "--out", str(out), *args,
                              "--masks", "none,icepop_ratio,icepop_pdm_tv"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["sql", str(out), "SELECT name, doc, proximity FROM masks "
                              "WHERE name = 'icepop_pdm_tv'", "--format", "csv", *args])
    assert res.exit_code == 0, res.output
    assert "IcePop's band with the predictive TV direction" in res.output and "icepop" in res.output
    res = runner.invoke(app, ["report", str(out), *args])
    assert res.exit_code == 0, res.output
    assert "icepop_pdm_tv" in res.output
    # the user pair is a comparison of the direction analysis, on its own band
    res = runner.invoke(app, ["report", str(out), "--format", "json", *args])
    assert res.exit_code == 0, res.output
    (row,) = [r for r in json.loads(res.stdout)["headline"]
              if r["pair"] == "icepop_ratio vs icepop_pdm_tv"]
    assert (row["family"], row["region"]) == ("tv", "ratio ∉ [0.5, 5.0]")
    env = streamlit_env(DashboardConfig(run=out, mask_modules=(EXAMPLE,)), {})
    assert env[ENV_MASK_MODULES] == str(EXAMPLE.resolve())
