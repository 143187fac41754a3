"""`RolloutLog`: a log opened once, with validate's file-level checks, for a local path and
for the same files through a pyarrow filesystem URI (file://)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pdm_replay.errors import InputError
from pdm_replay.io.log import RolloutLog, check_logs_agree
from pdm_replay.io.reader import iter_record_batches
from pdm_replay.testing.fixtures import write_synthetic_log


@pytest.fixture
def two_files(tmp_path: Path) -> Path:
    log = tmp_path / "log"
    write_synthetic_log(log / "a.parquet", n_samples=6, response_len=4, rng_seed=1)
    write_synthetic_log(log / "b.parquet", n_samples=3, response_len=7, rng_seed=2)
    (log / ".hidden").mkdir()
    write_synthetic_log(log / ".hidden" / "c.parquet", n_samples=2)  # skipped
    return log


def _batches(batches) -> list[tuple[str, int, pa.Table]]:
    return [(Path(str(f).removeprefix("file://")).name, first, b)
            for f, first, b in batches]


@pytest.mark.parametrize("as_uri", [False, True])
def test_files_footers_and_batches_as_the_path_reader(two_files: Path, as_uri: bool) -> None:
    log = RolloutLog.open(f"file://{two_files}" if as_uri else two_files)
    names = [Path(str(f).removeprefix("file://")).name for f in log.files]
    assert names == ["a.parquet", "b.parquet"]
    assert all(isinstance(f, str) and f.startswith("file:///") for f in log.files) == as_uri
    assert log.rows == (6, 3) and log.n_rows == 9
    assert (log.vocab_size, log.top_k, log.topk_convention) == (1000, 20, "plus_sampled")
    assert log.max_topk_entries == 21 and "train_logprobs" in log.columns
    got = _batches(log.iter_batches(["sample_id", "step"], batch_rows=4))
    want = _batches(iter_record_batches(two_files, ["sample_id", "step"], batch_rows=4))
    assert [(f, first) for f, first, _ in got] == [("a.parquet", 0), ("a.parquet", 4),
                                                   ("b.parquet", 0)]
    assert [(f, first) for f, first, _ in got] == [(f, first) for f, first, _ in want]
    assert all(a.equals(b) for (_, _, a), (_, _, b) in zip(got, want))


def _error(source: Path | str) -> str:
    with pytest.raises(InputError) as exc:
        RolloutLog.open(source)
    return str(exc.value)


@pytest.mark.parametrize("case", ["not parquet", "no footer", "missing column", "bad type"])
def test_file_level_problems_name_the_file_for_paths_and_uris(two_files: Path,
                                                              case: str) -> None:
    bad = two_files / "c.parquet"
    table = pq.read_table(two_files / "b.parquet")
    if case == "not parquet":
        bad.write_bytes(b"not parquet")
    elif case == "no footer":
        pq.write_table(table.replace_schema_metadata({}), bad)
    elif case == "missing column":
        pq.write_table(table.drop_columns(["advantages"]), bad)
    else:
        i = table.schema.get_field_index("step")
        pq.write_table(table.set_column(i, "step", table["step"].cast(pa.string())), bad)
    said = _error(two_files)
    assert said.startswith(f"{bad}: ")
    expected = {"not parquet": "cannot read this Parquet file",
                "no footer": "footer metadata pdm_replay.schema=None",
                "missing column": "missing-column: required column 'advantages'",
                "bad type": "column-type: column 'step' is string"}[case]
    assert expected in said
    by_uri = _error(f"file://{two_files}")
    assert by_uri.startswith(f"file://{bad}: ") and expected in by_uri


def test_files_of_one_log_must_agree_on_vocab_and_convention(two_files: Path) -> None:
    write_synthetic_log(two_files / "c.parquet", n_samples=2, vocab_size=999)
    assert _error(two_files) == (
        f"{two_files / 'c.parquet'}: vocab_size/topk_convention 999/plus_sampled differ "
        f"from {two_files / 'a.parquet'} (1000/plus_sampled); split the log")


def test_logs_of_one_run_must_agree_on_vocab_and_top_k(tmp_path: Path) -> None:
    a = RolloutLog.open(write_synthetic_log(tmp_path / "a.parquet", n_samples=2))
    b = RolloutLog.open(write_synthetic_log(tmp_path / "b.parquet", n_samples=2, top_k=8))
    check_logs_agree([a, a])
    with pytest.raises(InputError) as exc:
        check_logs_agree([a, b])
    assert str(exc.value) == (
        f"{tmp_path / 'b.parquet'}: vocab_size/top_k/topk_convention 1000/8/plus_sampled "
        f"differ from {tmp_path / 'a.parquet'} (1000/20/plus_sampled); run them "
        "separately, one output per vocabulary and top-K")


def test_a_missing_log_is_file_not_found(tmp_path: Path) -> None:
    for source in (tmp_path / "nope", f"file://{tmp_path}/nope"):
        with pytest.raises(FileNotFoundError, match="no such file or directory"):
            RolloutLog.open(source)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no .parquet files"):
        RolloutLog.open(f"file://{tmp_path}/empty")


def _with_temperature(log: Path, temperature: str | None, out: Path) -> Path:
    """``log`` rewritten with its footer's temperature set (None: removed)."""
    table = pq.read_table(log)
    md = {k: v for k, v in table.schema.metadata.items() if k != b"temperature"}
    if temperature is not None:
        md[b"temperature"] = temperature.encode()
    pq.write_table(table.replace_schema_metadata(md), out)
    return out


@pytest.mark.parametrize("recorded, expected", [("0.7", 0.7), (None, 1.0)])
def test_the_sampling_temperature_is_the_footers_or_1(tmp_path: Path, recorded: str | None,
                                                       expected: float) -> None:
    log = write_synthetic_log(tmp_path / "a.parquet", n_samples=2)
    log = _with_temperature(log, recorded, tmp_path / "t.parquet")
    assert RolloutLog.open(log).sampling_temperature() == expected


@pytest.mark.parametrize("recorded", ["0", "-1"])
def test_a_sampling_temperature_not_above_0_names_the_log(tmp_path: Path,
                                                          recorded: str) -> None:
    log = write_synthetic_log(tmp_path / "a.parquet", n_samples=2)
    log = _with_temperature(log, recorded, tmp_path / "t.parquet")
    with pytest.raises(InputError, match=f"footer temperature={float(recorded)}") as err:
        RolloutLog.open(log).sampling_temperature()
    assert err.value.file == log and "re-ingest" in str(err.value)
