import json
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from pdm_replay.masks import MASK_SPECS, Thresholds
from pdm_replay.commands.masks import MasksConfig, run_masks
from pdm_replay.schema import THRESHOLDS_KEY


def test_output_matches_summary_and_footer(tmp_path: Path, small_log: Path) -> None:
    out = tmp_path / "tokens.parquet"
    th = Thresholds(delta_kl=0.05, delta_tv=0.1)
    s = run_masks(MasksConfig(log=small_log, out=out, thresholds=th, batch_rows=3))
    df = pl.read_parquet(out)
    assert df.height == s.tokens == 48
    assert [c for c in df.columns if c.startswith("keep_")] == [f"keep_{m}" for m in MASK_SPECS]
    for name, frac in s.keep_fraction.items():
        assert frac == pytest.approx(df[f"keep_{name}"].mean())
    kl_out = df.filter(pl.col("kl_topk") > 0.05)
    assert s.out_of_region["dppo_topk_kl vs pdm_kl_agg"] == kl_out.height > 0
    assert s.disagreements["dppo_topk_kl vs pdm_kl_agg"] == kl_out.filter(
        pl.col("keep_dppo_topk_kl") != pl.col("keep_pdm_kl_agg")).height
    md = pq.read_schema(out).metadata
    assert json.loads(md[THRESHOLDS_KEY.encode()])["delta_kl"] == 0.05
    # ratio column really is pi_k / mu_k
    assert (df["ratio"] - (df["logp_train"] - df["logp_behavior"]).exp()).abs().max() < 1e-12


def test_loss_mask_false_tokens_are_not_written(tmp_path: Path, small_log: Path,
                                                small_rows: list[dict]) -> None:
    from pdm_replay.io.reader import read_meta
    from pdm_replay.io.rollouts import write_rollouts
    small_rows[0]["loss_mask"] = [True, False, True, False, True, False]
    log = write_rollouts(tmp_path / "lm.parquet", small_rows, read_meta(small_log))
    s = run_masks(MasksConfig(log=log, out=tmp_path / "t.parquet", masks=["none"]))
    assert s.tokens == 45
    assert pl.read_parquet(tmp_path / "t.parquet").filter(
        pl.col("sample_id") == small_rows[0]["sample_id"])["pos"].to_list() == [0, 2, 4]


def test_missing_train_columns_named(tmp_path: Path, small_log: Path) -> None:
    t = pq.read_table(small_log).drop_columns(["train_logprobs", "train_topk_logprobs"])
    pq.write_table(t, tmp_path / "notrain.parquet")
    with pytest.raises(ValueError, match="needs train_logprobs, train_topk_logprobs"):
        run_masks(MasksConfig(log=tmp_path / "notrain.parquet", out=tmp_path / "o.parquet"))
    assert not (tmp_path / "o.parquet").exists()


def test_unknown_mask_rejected(tmp_path: Path, small_log: Path) -> None:
    with pytest.raises(ValueError, match="unknown mask"):
        run_masks(MasksConfig(log=small_log, out=tmp_path / "o.parquet", masks=["nope"]))


def test_parallel_workers_write_the_same_bytes_in_log_order(tmp_path: Path,
                                                            small_log: Path) -> None:
    one = tmp_path / "one.parquet"
    run_masks(MasksConfig(log=small_log, out=one, batch_rows=1, workers=1))
    many = tmp_path / "many.parquet"
    run_masks(MasksConfig(log=small_log, out=many, batch_rows=1, workers=3))
    assert one.read_bytes() == many.read_bytes()
    order = pq.read_table(small_log, columns=["sample_id"])["sample_id"].to_pylist()
    written = pl.read_parquet(many)["sample_id"].unique(maintain_order=True).to_list()
    assert written == order  # the log's order, not the workers' finishing order


def test_parallel_workers_report_the_first_problem_in_log_order(
        tmp_path: Path, small_log: Path, small_rows: list[dict]) -> None:
    from pdm_replay.io.reader import read_meta
    from pdm_replay.io.rollouts import write_rollouts
    small_rows[2]["topk_logprobs"][1][0] = 0.5  # positive log-prob in sample 2, pos 1
    small_rows[6]["response_ids"][0] = 10_000  # out of vocab in sample 6
    log = write_rollouts(tmp_path / "bad.parquet", small_rows, read_meta(small_log))
    out = tmp_path / "t.parquet"
    with pytest.raises(ValueError, match=f"sample '{small_rows[2]['sample_id']}' pos 1"):
        run_masks(MasksConfig(log=log, out=out, batch_rows=1, workers=4))
    assert not list(tmp_path.glob("t.parquet*")) and not list(tmp_path.glob(".t.parquet*"))


def test_batches_cut_to_the_token_budget_give_the_same_rows(
        tmp_path: Path, small_log: Path, small_rows: list[dict],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import pdm_replay.commands.masks as rm
    from pdm_replay.io.reader import read_meta
    from pdm_replay.io.rollouts import write_rollouts
    whole = tmp_path / "whole.parquet"
    run_masks(MasksConfig(log=small_log, out=whole, workers=2))
    monkeypatch.setattr(rm, "WORK_TOKENS", 10)  # 6-token samples: one per work item
    cut = tmp_path / "cut.parquet"
    run_masks(MasksConfig(log=small_log, out=cut, workers=2))
    assert pl.read_parquet(whole).equals(pl.read_parquet(cut))
    assert pq.ParquetFile(cut).metadata.num_row_groups == 8  # really cut: one per sample
    small_rows[5]["advantages"] = small_rows[5]["advantages"][:-1]  # errors still say row 5
    bad = write_rollouts(tmp_path / "bad.parquet", small_rows, read_meta(small_log))
    with pytest.raises(ValueError, match=r"advantages has 5 entries .*\(row 5\)"):
        run_masks(MasksConfig(log=bad, out=tmp_path / "t.parquet", workers=2))


def test_default_workers_follow_the_usable_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import pdm_replay.commands.masks as rm
    import pdm_replay.threads as threads
    monkeypatch.setattr(threads, "cgroup_quota", lambda: None)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert rm.default_workers() == 3
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    assert rm.default_workers() == 8  # capped: one reader and one writer feed them


def test_default_workers_follow_the_cgroup_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import pdm_replay.commands.masks as rm
    import pdm_replay.threads as threads
    # 64 CPUs in the mask but a container limit of 2.5 CPUs: two workers, not eight
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    monkeypatch.setattr(threads, "cgroup_quota", lambda: 2.5)
    assert rm.default_workers() == 2
    monkeypatch.setattr(threads, "cgroup_quota", lambda: 0.5)  # below one CPU: still one
    assert rm.default_workers() == 1
