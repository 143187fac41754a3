"""The Ray engine's pieces without a cluster: the map function (what a Ray task runs),
its retry behavior, its errors, the resume bookkeeping, and the driver-side checks of
``pdm-replay masks --engine ray`` (they fail before Ray is started). The engine on a real
two-node cluster: tests/test_masks_ray_cluster.py."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.commands.masks import MASK_INPUT_COLUMNS, MasksConfig, run_masks
from pdm_replay.commands.masks_ray import (_clear_unfinished, plan_job, process_block,
                                           summary_of)
from pdm_replay.testing.fixtures import write_synthetic_log
from pdm_replay.io.staged import open_staging, staging_path
from pdm_replay.run_summary import combine

SORT = [("sample_id", "ascending"), ("pos", "ascending")]


def _block(files: list[Path], rows: slice | None = None) -> pa.Table:
    """Rows of ``files`` as Ray's read_parquet(include_paths=True) hands them over."""
    tables = []
    for f in files:
        t = pq.read_table(f, columns=list(MASK_INPUT_COLUMNS))
        t = t.slice(rows.start, rows.stop - rows.start) if rows else t
        tables.append(t.append_column("path", pa.array([str(f.resolve())] * t.num_rows)))
    return pa.concat_tables(tables)


def _parts(stage: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted(stage.glob("step=*/*.parquet"))]
                            ).sort_by(SORT)


@pytest.fixture
def two_files(tmp_path: Path) -> Path:
    log = tmp_path / "log"
    write_synthetic_log(log / "a.parquet", n_samples=24, response_len=20, rng_seed=1)
    write_synthetic_log(log / "b.parquet", n_samples=16, response_len=33, rng_seed=2)
    # distinct sample ids across the files, as a real log has
    t = pq.read_table(log / "b.parquet")
    ids = pc.binary_join_element_wise("b-", t.column("sample_id"), "")
    pq.write_table(t.set_column(0, t.schema.field("sample_id"), ids), log / "b.parquet")
    return log


def test_a_block_gives_the_local_rows_and_a_retry_overwrites_its_own_parts(
        tmp_path: Path, two_files: Path) -> None:
    local = tmp_path / "local.parquet"
    expected = run_masks(MasksConfig(log=two_files, out=local))
    cfg = MasksConfig(log=(two_files,), out=tmp_path / "ray", engine="ray")
    stage = open_staging(cfg.out, resume=False)
    plan = plan_job(cfg, stage)
    block = _block(sorted(two_files.glob("*.parquet")))
    first = process_block(block, plan.ctx)
    again = process_block(block, plan.ctx)  # what a retried task does
    assert first.equals(again) and first.column("error").null_count == 2
    got = _parts(stage)
    assert got.schema.equals(pq.read_schema(local), check_metadata=True)
    assert got.equals(pq.read_table(local).sort_by(SORT))  # bit for bit, no duplicate
    summary = combine([pa.ipc.open_stream(b).read_all() for b in first["summary"].to_pylist()])
    assert summary_of(cfg.out, summary) == expected.__class__(**{**vars(expected),
                                                                 "out": cfg.out})


def test_a_problem_in_a_task_is_the_local_message_with_file_rows(tmp_path: Path,
                                                                 two_files: Path) -> None:
    bad = two_files / "a.parquet"
    t = pq.read_table(bad)
    lp = t.column("train_logprobs").to_pylist()
    lp[13] = None
    i = t.schema.get_field_index("train_logprobs")
    t = t.set_column(i, t.schema.field(i), pa.array(lp, t.schema.field(i).type))
    pq.write_table(t, bad)
    with pytest.raises(ValueError) as local:
        run_masks(MasksConfig(log=two_files, out=tmp_path / "l.parquet"))
    cfg = MasksConfig(log=(two_files,), out=tmp_path / "ray", engine="ray")
    plan = plan_job(cfg, open_staging(cfg.out, resume=False))
    result = process_block(_block([bad], slice(8, 20)), plan.ctx)  # a block from row 8
    err = pickle.loads(result["error"][0].as_py())
    assert type(err) is type(local.value) and str(err) == str(local.value)
    assert "(row 13)" in str(err)


def test_resume_keeps_finished_files_and_clears_the_rest(tmp_path: Path) -> None:
    stage = open_staging(tmp_path / "out", resume=False)
    for name in ("step=1/part-a-1-0123456789abcdef.parquet",
                 "step=1/part-b-2-0123456789abcdef.parquet",
                 "step=2/.part-a-1-x.parquet.123-ab.pdm.tmp"):
        (stage / name).parent.mkdir(exist_ok=True)
        (stage / name).write_bytes(b"x")
    _clear_unfinished(stage, {"a-1"})
    assert [p.name for p in stage.glob("step=*/*")] == ["part-a-1-0123456789abcdef.parquet"]
    assert open_staging(tmp_path / "out", resume=True) == stage
    assert (stage / "step=1").exists()
    open_staging(tmp_path / "out", resume=False)
    assert not (stage / "step=1").exists()


def _invoke(args: list[str]):
    return CliRunner().invoke(app, ["masks", *args], env={"COLUMNS": "200"})


@pytest.mark.parametrize("case", ["not a rollout log", "missing column"])
def test_bad_input_fails_as_local_and_leaves_nothing(tmp_path: Path, two_files: Path,
                                                     case: str) -> None:
    t = pq.read_table(two_files / "b.parquet")
    if case == "not a rollout log":
        pq.write_table(pa.table({"x": [1, 2]}), two_files / "c.parquet")
    else:
        pq.write_table(t.drop_columns(["advantages"]).replace_schema_metadata(
            t.schema.metadata), two_files / "c.parquet")
    local = _invoke([str(two_files), "--out", str(tmp_path / "l.parquet")])
    ray = _invoke([str(two_files), "--out", str(tmp_path / "r"), "--engine", "ray"])
    assert local.exit_code == ray.exit_code != 0
    assert "c.parquet" in local.output and local.output == ray.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log"]
    assert not staging_path(tmp_path / "r").exists()


def test_the_local_engine_reads_one_log(tmp_path: Path, two_files: Path) -> None:
    res = _invoke([str(two_files / "a.parquet"), str(two_files / "b.parquet"), "--out",
                   str(tmp_path / "l.parquet")])
    assert res.exit_code != 0 and "--engine local reads one log" in " ".join(res.output.split())


def test_an_id_repeated_across_blocks_is_the_local_error(tmp_path: Path,
                                                         two_files: Path) -> None:
    from pdm_replay.commands.masks_ray import Progress, _take
    from pdm_replay.commands.sample_ids import check_unique
    t = pq.read_table(two_files / "b.parquet")
    ids = t.column("sample_id").to_pylist()
    ids[5] = pq.read_table(two_files / "a.parquet").column("sample_id")[7].as_py()
    pq.write_table(t.set_column(0, t.schema.field("sample_id"),
                                pa.array(ids, pa.string())), two_files / "b.parquet")
    with pytest.raises(ValueError) as local:
        run_masks(MasksConfig(log=two_files, out=tmp_path / "l.parquet"))
    cfg = MasksConfig(log=(two_files,), out=tmp_path / "ray", engine="ray")
    stage = open_staging(cfg.out, resume=False)
    plan, progress = plan_job(cfg, stage), Progress()
    for f in sorted(two_files.glob("*.parquet")):  # one block per file: each alone is fine
        for result in process_block(_block([f]), plan.ctx).to_pylist():
            _take(plan, stage, result, progress)
    with pytest.raises(ValueError) as ray:
        check_unique(stage, plan.files, plan.keys)
    assert str(ray.value) == str(local.value) and "repeated (row 5)" in str(ray.value)


def test_a_filesystem_uri_is_planned_like_its_path(tmp_path: Path, two_files: Path) -> None:
    from pdm_replay.commands.masks import check_engine_logs
    uri = f"file://{two_files.resolve()}"
    logs = check_engine_logs([uri, str(two_files)], "ray")
    assert logs == (uri, two_files)  # a Path would fold file:// into file:/
    by_uri = plan_job(MasksConfig(log=(uri,), out=tmp_path / "u", engine="ray"),
                      open_staging(tmp_path / "u", resume=False))
    by_path = plan_job(MasksConfig(log=(two_files,), out=tmp_path / "p", engine="ray"),
                       open_staging(tmp_path / "p", resume=False))
    assert [f.removeprefix("file://") for f in by_uri.files] == by_path.files
    assert list(by_uri.rows.values()) == list(by_path.rows.values()) == [24, 16]
    assert by_uri.ctx.keys.keys() == by_path.ctx.keys.keys()  # as Ray's path column names them


def test_a_task_loads_the_mask_modules_itself(tmp_path: Path, two_files: Path,
                                              user_registry: None) -> None:
    """--mask-module with --engine ray: a task runs in a worker process whose registry
    holds only the built-in masks, so it loads the modules before it builds the masks."""
    import sys

    from pdm_replay.masks import MASK_SPECS, load_mask_module
    example = Path(__file__).resolve().parent.parent / "docs" / "examples" / "my_masks.py"
    names = ["icepop", "icepop_ratio", "icepop_pdm_tv"]
    load_mask_module(example)  # the driver (the CLI loads every --mask-module first)
    local = run_masks(MasksConfig(log=two_files, out=tmp_path / "local.parquet", masks=names,
                                  mask_modules=(example,)))
    cfg = MasksConfig(log=(two_files,), out=tmp_path / "ray", engine="ray", masks=names,
                      mask_modules=(example,))
    stage = open_staging(cfg.out, resume=False)
    plan = plan_job(cfg, stage)
    # now the task's process: no user mask registered, the module not imported
    for name in [n for n in MASK_SPECS if n.startswith("icepop_pdm")]:
        del MASK_SPECS[name]
    for key in [k for k in sys.modules if k.startswith("pdm_replay_user_masks_")]:
        del sys.modules[key]
    result = process_block(_block(sorted(two_files.glob("*.parquet"))), plan.ctx)
    assert result.column("error").null_count == result.num_rows
    assert _parts(stage).equals(pq.read_table(local.out).sort_by(SORT))


def test_logs_that_disagree_on_their_footers_are_refused_naming_both(tmp_path: Path,
                                                                      two_files: Path) -> None:
    other = write_synthetic_log(tmp_path / "other.parquet", n_samples=4, vocab_size=999)
    res = _invoke([str(two_files), str(other), "--out", str(tmp_path / "r"), "--engine", "ray"])
    said = " ".join(res.output.split())
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert str(other) in said and str(two_files / "a.parquet") in said
    assert "vocab_size/top_k/topk_convention 999/20/plus_sampled differ" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log", "other.parquet"]


@pytest.mark.parametrize("case", ["not a rollout log", "missing column"])
def test_a_uri_log_gets_the_file_level_checks(tmp_path: Path, two_files: Path,
                                              case: str) -> None:
    from pdm_replay.commands.masks_ray import run_masks_ray
    bad = two_files / "c.parquet"
    if case == "not a rollout log":
        pq.write_table(pa.table({"x": [1, 2]}), bad)
    else:
        t = pq.read_table(two_files / "b.parquet")
        pq.write_table(t.drop_columns(["advantages"]), bad)
    with pytest.raises(ValueError) as local:
        run_masks(MasksConfig(log=two_files, out=tmp_path / "l.parquet"))
    with pytest.raises(ValueError) as by_uri:  # before Ray starts
        run_masks_ray(MasksConfig(log=(f"file://{two_files}",), out=tmp_path / "r",
                                  engine="ray"))
    assert str(by_uri.value) == str(local.value).replace(str(bad), f"file://{bad}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log"]


def test_batch_rows_is_the_size_of_each_task_batch(tmp_path: Path, two_files: Path) -> None:
    """--batch-rows under ray: map_batches' batch_size (None: whole blocks); a block
    processed in batches of that many rows gives the local rows, one part per batch
    and step."""
    local = run_masks(MasksConfig(log=two_files, out=tmp_path / "local.parquet"))
    assert plan_job(MasksConfig(log=(two_files,), out=tmp_path / "w", engine="ray"),
                    open_staging(tmp_path / "w", resume=False)).batch_rows is None
    cfg = MasksConfig(log=(two_files,), out=tmp_path / "ray", engine="ray", batch_rows=5)
    stage = open_staging(cfg.out, resume=False)
    plan = plan_job(cfg, stage)
    assert plan.batch_rows == 5
    block = _block(sorted(two_files.glob("*.parquet")))
    for start in range(0, block.num_rows, plan.batch_rows):  # what map_batches hands over
        process_block(block.slice(start, plan.batch_rows), plan.ctx)
    parts = sorted(stage.glob("step=*/*.parquet"))
    assert max(len(pq.read_table(p)["sample_id"].unique()) for p in parts) <= 5
    assert _parts(stage).equals(pq.read_table(local.out).sort_by(SORT))
