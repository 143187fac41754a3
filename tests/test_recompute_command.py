"""`pdm-replay recompute` (issue 38, item 2) on a subset of the shipped sample: it
reproduces the trainer's logged train columns, equals replay's pre-update recompute of the
same rows bit for bit, gives a log `masks` accepts, and fails clearly on bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.commands.recompute import RecomputeConfig, run_recompute
from pdm_replay.names import ENGINES
from pdm_replay.schema import RECOMPUTE_CHECKPOINT_KEY, RECOMPUTE_DTYPE_KEY
from tolerances import SAMPLE_RECOMPUTE_VS_LOGGED

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"
TEMPLATE = SAMPLE / "checkpoints" / "step_{step}"
ROWS_PER_STEP = 24  # 2 steps x 24 rows: 3 micro-batches of 8 per step, ~290 tokens
runner = CliRunner()


def sample_subset(target: Path, steps: tuple[int, ...] = (8, 9)) -> Path:
    """The first rows of ``steps`` of the sample log, its footer's tokenizer made absolute
    (the shipped one is relative to sample_data/rollouts)."""
    table = pq.read_table(SAMPLE / "rollouts")
    logged = table["step"].to_numpy()
    rows = np.concatenate([np.flatnonzero(logged == s)[:ROWS_PER_STEP] for s in steps])
    md = dict(table.schema.metadata)
    md[b"tokenizer"] = str(SAMPLE / "checkpoints" / "step_8").encode()
    pq.write_table(table.take(pa.array(rows)).replace_schema_metadata(md), target)
    return target


@pytest.fixture(scope="module")
def subset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sample_subset(tmp_path_factory.mktemp("recompute") / "log.parquet")


@pytest.fixture(scope="module")
def recomputed(subset: Path) -> Path:
    out = subset.with_name("recomputed.parquet")
    res = runner.invoke(app, ["recompute", str(subset), "--checkpoint", str(TEMPLATE),
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


def flat(table: pa.Table, name: str) -> np.ndarray:
    col = pc.list_flatten(table[name])
    return (pc.list_flatten(col) if pa.types.is_list(col.type) else col).to_numpy()


def test_reproduces_the_logged_train_columns(subset: Path, recomputed: Path) -> None:
    logged, mine = pq.read_table(subset), pq.read_table(recomputed)
    assert mine.num_rows == logged.num_rows
    for name in ("sample_id", "step", "response_ids", "topk_ids", "topk_logprobs"):
        assert mine[name].equals(logged[name]), name
    for name in ("train_logprobs", "train_topk_logprobs"):
        assert pc.list_value_length(mine[name]).equals(pc.list_value_length(logged[name]))
        gap = np.abs(flat(mine, name) - flat(logged, name))
        assert gap.max() < SAMPLE_RECOMPUTE_VS_LOGGED, (name, gap.max())  # tolerances.py
    inner = pc.list_flatten(mine["train_topk_logprobs"])
    assert pc.list_value_length(inner).equals(
        pc.list_value_length(pc.list_flatten(logged["topk_ids"])))
    md = mine.schema.metadata
    assert md[RECOMPUTE_CHECKPOINT_KEY.encode()].decode() == str(TEMPLATE)
    assert md[RECOMPUTE_DTYPE_KEY.encode()] == b"float32"
    assert md[b"pdm_replay.schema"] == b"rollout/v1" and md[b"top_k"] == b"20"


def _replay_pre(subset: Path, run: Path) -> pa.Table:
    res = runner.invoke(app, [
        "replay", str(subset), "--checkpoint", str(TEMPLATE), "--out", str(run),
        "--seed-by", "step", "--seeds", "2", "--batch-size", str(ROWS_PER_STEP),
        "--micro-batch-size", "8", "--chunk-tokens", "1024", "--threads", "1",
        "--update-masks", "none", "--no-attribution"])
    assert res.exit_code == 0, res.output
    cols = ["sample_id", "pos", "logp_train", "support_ids", "support_logp_pre"]
    return pa.concat_tables(pq.read_table(f, columns=cols)
                            for f in sorted((run / "tokens").rglob("*.parquet")))


def test_equals_replays_pre_update_recompute(subset: Path, recomputed: Path,
                                             tmp_path: Path) -> None:
    """Same rows, same micro-batches of 8, same LM-head chunks, the same code: equal bits
    (replay keeps log π in float64 / its support lists in float32; ours is float32)."""
    pre = _replay_pre(subset, tmp_path / "run").to_pylist()
    mine = pq.read_table(recomputed).to_pylist()
    at = {(r["sample_id"], r["pos"]): r for r in pre}
    assert len(at) == sum(len(r["response_ids"]) for r in mine)
    for row in mine:
        for t, (lp_k, ids, lp_top) in enumerate(zip(row["train_logprobs"], row["topk_ids"],
                                                    row["train_topk_logprobs"])):
            theirs = at[(row["sample_id"], t)]
            assert lp_k == np.float32(theirs["logp_train"])
            on_support = dict(zip(theirs["support_ids"], theirs["support_logp_pre"]))
            assert lp_top == [on_support[i] for i in ids]


def test_masks_accepts_the_output(recomputed: Path, tmp_path: Path) -> None:
    out = tmp_path / "tokens.parquet"
    res = runner.invoke(app, ["masks", str(recomputed), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert pq.read_metadata(out).num_rows == flat(pq.read_table(recomputed),
                                                  "response_ids").size


def test_cli_choices_are_the_engines() -> None:
    res = runner.invoke(app, ["recompute", "--help"])
    assert "<local|ray>" in res.output and ENGINES == ("local", "ray")


def _error(args: list) -> str:
    res = runner.invoke(app, ["recompute", *map(str, args)])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    return " ".join(res.output.split())


def test_a_missing_step_checkpoint_names_the_step_and_path(subset: Path, tmp_path: Path
                                                           ) -> None:
    ckpt = tmp_path / "ckpt"
    (ckpt).mkdir()
    (ckpt / "step_8").symlink_to(SAMPLE / "checkpoints" / "step_8")
    out = tmp_path / "out.parquet"
    said = _error([subset, "--checkpoint", ckpt / "step_{step}", "--out", out])
    assert f"--checkpoint {ckpt}/step_{{step}} for logged step 9: {ckpt}/step_9: not a " \
           "directory" in said
    assert not out.exists()


def test_missing_prompt_ids_names_the_file(subset: Path, tmp_path: Path) -> None:
    log = tmp_path / "noprompt.parquet"
    table = pq.read_table(subset)
    pq.write_table(table.drop_columns(["prompt_ids"]), log)
    said = _error([log, "--checkpoint", TEMPLATE, "--out", tmp_path / "out.parquet"])
    assert f"{log}: no prompt_ids column" in said
    assert not (tmp_path / "out.parquet").exists()


def test_a_bad_row_late_in_the_log_leaves_nothing_behind(subset: Path, tmp_path: Path
                                                         ) -> None:
    """A NaN in the last step's rows fails after the first step's rows were written: the
    error names the file and sample, and no output (nor temp file) is left."""
    rows = pq.read_table(subset).to_pylist()
    rows[-1]["topk_logprobs"][2][0] = float("nan")
    log = tmp_path / "bad.parquet"
    table = pa.Table.from_pylist(rows, schema=pq.read_schema(subset))
    pq.write_table(table, log)
    said = _error([log, "--checkpoint", TEMPLATE, "--out", tmp_path / "out.parquet",
                   "--task-rows", "8"])
    assert str(log) in said and repr(rows[-1]["sample_id"]) in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.parquet"]


def test_a_footer_temperature_of_0_is_refused_before_any_output(subset: Path,
                                                                tmp_path: Path) -> None:
    """π is recomputed at µ's sampling temperature (RolloutLog.sampling_temperature)."""
    table = pq.read_table(subset)
    log = tmp_path / "t0.parquet"
    pq.write_table(table.replace_schema_metadata(
        {**table.schema.metadata, b"temperature": b"0"}), log)
    said = _error([log, "--checkpoint", TEMPLATE, "--out", tmp_path / "out.parquet"])
    assert f"{log}: footer temperature=0.0; π is recomputed at the sampling" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t0.parquet"]


def test_an_existing_output_is_refused(subset: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    out.write_text("keep me")
    said = _error([subset, "--checkpoint", TEMPLATE, "--out", out])
    assert f"--out {out} exists; choose a new --out or remove it" in said
    assert out.read_text() == "keep me"


def test_config_errors_name_fields(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="^task_rows 0: expected at least 1$"):
        RecomputeConfig(log=tmp_path, checkpoint=tmp_path, out=tmp_path / "o", task_rows=0)
    with pytest.raises(ValueError, match="^checkpoint ckpt/{epoch}: unknown field"):
        run_recompute(RecomputeConfig(log=tmp_path, checkpoint=Path("ckpt/{epoch}"),
                                      out=tmp_path / "o"))


def test_each_steps_checkpoint_is_loaded_once(subset: Path, tmp_path: Path) -> None:
    """Units of 8 rows (3 per step) in step order: a worker loads step 8, then step 9."""
    from pdm_replay.commands.recompute import StepRecomputer, plan
    cfg = RecomputeConfig(log=subset, checkpoint=TEMPLATE, out=tmp_path / "o.parquet",
                          task_rows=5)  # rounded up to one micro-batch of 8
    p = plan(cfg)
    assert [(u.step, len(u.rows)) for u in p.units] == [(8, 8)] * 3 + [(9, 8)] * 3
    work = StepRecomputer(cfg, p, "cpu")
    for unit in p.units:
        work(unit)
    assert work.loads == [8, 9]


def test_resume_redoes_only_the_unfinished_units(subset: Path, recomputed: Path,
                                                 tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that dies after 2 of its 6 units leaves no output, only its staging
    directory; --resume computes the other 4 and writes the uninterrupted run's bytes."""
    from pdm_replay.commands.recompute import StepRecomputer
    from pdm_replay.io.staged import staging_path
    out, clean = tmp_path / "out.parquet", tmp_path / "clean.parquet"
    args = ["recompute", str(subset), "--checkpoint", str(TEMPLATE), "--task-rows", "8"]
    res = runner.invoke(app, [*args, "--out", str(clean)])
    assert res.exit_code == 0, res.output
    computed: list[int] = []
    real = StepRecomputer.__call__

    def dies_after_two(self, unit):
        if len(computed) == 2:
            raise RuntimeError("killed")
        computed.append(unit.step)
        return real(self, unit)

    monkeypatch.setattr(StepRecomputer, "__call__", dies_after_two)
    with pytest.raises(RuntimeError, match="killed"):
        run_recompute(RecomputeConfig(log=subset, checkpoint=TEMPLATE, out=out, task_rows=8))
    assert not out.exists() and [p.name for p in tmp_path.iterdir()
                                 if p.name.startswith(".")] == [staging_path(out).name]

    def counted(self, unit):
        computed.append(unit.step)
        return real(self, unit)

    monkeypatch.setattr(StepRecomputer, "__call__", counted)
    res = runner.invoke(app, [*args, "--out", str(out), "--resume"])
    assert res.exit_code == 0, res.output
    assert computed == [8, 8, 8, 9, 9, 9]  # 2 before the crash, the other 4 on resume
    assert "of 48 rows" in " ".join(res.output.split())
    assert out.read_bytes() == clean.read_bytes()
    assert pq.read_table(clean).equals(pq.read_table(recomputed))  # units of 8 or 24: same
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clean.parquet", "out.parquet"]


def test_the_unit_sink_stages_each_unit_whatever_the_engine_cuts(subset: Path,
                                                                 tmp_path: Path) -> None:
    """Ray may hand the units' rows over in blocks that do not follow unit boundaries: each
    unit still gets exactly its rows, staged with its marker, in order."""
    from pdm_replay.commands.recompute import UNITS_DIR, Unit, UnitSink
    from pdm_replay.io.staged import open_staging, read_markers
    table = pq.read_table(subset).slice(0, 20)
    units = [(f"u{i}", Unit(8, np.arange(n))) for i, n in enumerate((8, 5, 7))]
    stage = open_staging(tmp_path / "o.parquet", resume=False)
    (stage / UNITS_DIR).mkdir()
    done: list[int] = []
    sink = UnitSink(stage, list(units), lambda rows, tokens: done.append(rows))
    for start, stop in ((0, 3), (3, 12), (12, 13), (13, 20)):
        sink.add(table.slice(start, stop - start))
    assert done == [8, 5, 7] and sorted(read_markers(stage)) == ["u0", "u1", "u2"]
    parts = [pq.read_table(stage / UNITS_DIR / f"{key}.parquet") for key, _ in units]
    assert pa.concat_tables(parts).equals(table)
