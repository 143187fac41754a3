from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
from typer.testing import CliRunner

from pdm_replay.cli import app

runner = CliRunner()


def test_validate_clean_exit_0(small_log: Path) -> None:
    res = runner.invoke(app, ["validate", str(small_log)])
    assert res.exit_code == 0, res.output
    assert "OK" in res.output and "samples" in res.output


def test_validate_errors_exit_1(tmp_path: Path, small_log: Path) -> None:
    t = pq.read_table(small_log).drop_columns(["advantages"])
    pq.write_table(t, tmp_path / "x.parquet")
    res = runner.invoke(app, ["validate", str(tmp_path / "x.parquet")])
    assert res.exit_code == 1 and "missing-column" in res.output


def test_validate_missing_path_exits_2_naming_it_once(tmp_path: Path) -> None:
    """No log to check is an input error (README: exit 2), not a finding: no summary
    table of zeros, the path said once."""
    (tmp_path / "empty").mkdir()
    for path, why in ((tmp_path / "absent.parquet", "no such file or directory"),
                      (tmp_path / "empty", "holds no .parquet files")):
        res = runner.invoke(app, ["validate", str(path)])
        said = " ".join(res.output.split())
        assert res.exit_code == 2, res.output
        assert said.count(str(path)) == 1 and why in said, said
        assert "samples" not in said and "rollout log" not in said, said


def test_masks_cli_writes_tokens_and_prints_summary(tmp_path: Path, small_log: Path) -> None:
    out = tmp_path / "t.parquet"
    res = runner.invoke(app, ["masks", str(small_log), "--out", str(out), "--masks",
                              "none,dppo_topk_kl,pdm_kl_agg", "--delta-kl", "0.01"])
    assert res.exit_code == 0, res.output
    assert "pdm_kl_agg" in res.output and "disagreements (dppo_topk_kl vs pdm_kl_agg)" in res.output
    assert pl.read_parquet(out).columns[-3:] == ["keep_none", "keep_dppo_topk_kl",
                                                 "keep_pdm_kl_agg"]


def test_masks_cli_bad_mask_is_clear_error(tmp_path: Path, small_log: Path) -> None:
    res = runner.invoke(app, ["masks", str(small_log), "--out", str(tmp_path / "t.parquet"),
                              "--masks", "ppo,none"])
    assert res.exit_code == 2 and "unknown mask(s) ppo" in res.output
    assert not (tmp_path / "t.parquet").exists()


def test_error_messages_keep_square_brackets(capsys) -> None:
    import pytest
    import typer

    from pdm_replay.cli.common import fail
    with pytest.raises(typer.Exit):
        fail("pip install 'pdm_replay[dashboard]'")
    assert "pdm_replay[dashboard]" in capsys.readouterr().err
