"""``report`` on the directory ``masks --engine ray`` writes: every row when small, a
bounded, seeded subset of parts when big (saying which), and the whole-run counts from
``summary.parquet``. The directory is built by the engine's own map function and driver
bookkeeping, without a cluster (tests/test_masks_ray_cluster.py runs the real one)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from pdm_replay.commands.masks import MasksConfig, run_masks
from pdm_replay.report import api
from pdm_replay.report.build import _whole_run
from pdm_replay.report.db import connect
from pdm_replay.report.masks_output import chosen_parts, masks_manifest, whole_run
from pdm_replay.report.run_info import discover_run
from ray_outputs import SAMPLE, ray_output

@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("masks_output")
    run_masks(MasksConfig(log=SAMPLE, out=d / "local.parquet"))
    return ray_output(SAMPLE, d / "ray", rows_per_block=3000), d / "local.parquet"


def test_small_output_is_read_whole_and_says_so(outputs) -> None:
    ray, local = outputs
    info = discover_run(ray)
    assert info.kind == "masks" and info.summary == ray / "summary.parquet"
    assert len(info.tokens_files) == len(masks_manifest(ray)["parts"])
    assert any("report read every row (87,167 tokens" in n for n in info.notes)
    with connect(ray) as db_ray, connect(local) as db_local:
        got, want = api.mask_summary(db_ray), api.mask_summary(db_local)
        section = _whole_run(db_ray)  # the report's whole-run section
    assert got.equals(want)
    kept = section.filter(pl.col("kind") == "kept")
    assert kept.select("name", "count").rows() == want.select("mask", "n_kept").rows()


def test_big_output_reads_a_bounded_seeded_sample(outputs) -> None:
    ray, _ = outputs
    manifest = masks_manifest(ray)
    files, note = chosen_parts(ray, manifest, max_tokens=20_000, rng_seed=3)
    again, _ = chosen_parts(ray, manifest, max_tokens=20_000, rng_seed=3)
    assert files == again and 0 < len(files) < len(manifest["parts"])
    read = sum(manifest["parts"][str(f.relative_to(ray))] for f in files)
    biggest = max(manifest["parts"].values())
    assert 20_000 <= read < 20_000 + biggest  # bounded: stops at the first part past it
    assert f"seeded subset (seed 3) of {len(files)} of {len(manifest['parts'])}" in note


def test_whole_run_by_step_sums_to_the_run(outputs) -> None:
    ray, _ = outputs
    summary = ray / "summary.parquet"
    run = whole_run(summary)
    steps = pl.read_parquet(summary)["step"].unique().to_list()
    per_step = pl.concat([whole_run(summary, s) for s in steps])
    total = per_step.group_by("kind", "name", maintain_order=True).agg(pl.col("count").sum())
    assert total.rows() == run.select("kind", "name", "count").rows()

