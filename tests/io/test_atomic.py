from pathlib import Path

import pyarrow as pa
import pytest

import pyarrow.parquet as pq

from pdm_replay.io.atomic import (AtomicParquetWriter, dictionary_columns, float_columns,
                                  write_table_atomic)


def test_exception_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "out.parquet"
    with pytest.raises(RuntimeError):
        with AtomicParquetWriter(target, pa.schema([("x", pa.int64())])) as w:
            w.write(pa.table({"x": [1]}))
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_replaces_existing_file_atomically(tmp_path: Path) -> None:
    target = tmp_path / "out.parquet"
    write_table_atomic(target, pa.table({"x": [1]}))
    write_table_atomic(target, pa.table({"x": [2, 3]}))
    assert pa.parquet.read_table(target).column("x").to_pylist() == [2, 3]
    assert [p.name for p in tmp_path.iterdir()] == ["out.parquet"]


def test_output_has_ordinary_permissions(tmp_path: Path) -> None:
    import os
    import stat
    target = write_table_atomic(tmp_path / "out.parquet", pa.table({"x": [1]}))
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask


def _column_meta(path: Path) -> dict:
    meta = pq.ParquetFile(path).metadata
    return {meta.row_group(0).column(i).path_in_schema: meta.row_group(0).column(i)
            for i in range(meta.num_columns)}


def test_floats_split_bytes_without_statistics_others_dictionary_with_statistics(
        tmp_path: Path) -> None:
    table = pa.table({"sample_id": ["a", "b"] * 50, "ids": [[1, 2], [3]] * 50,
                      "logp": [[-0.5, -1.0], [-2.0]] * 50, "kl": [0.1, 0.2] * 50})
    assert dictionary_columns(table.schema) == ["sample_id", "ids.list.element"]
    assert float_columns(table.schema) == ["logp.list.element", "kl"]
    out = write_table_atomic(tmp_path / "t.parquet", table)
    cols = _column_meta(out)
    for name in ("sample_id", "ids.list.element"):
        assert "RLE_DICTIONARY" in cols[name].encodings and cols[name].is_stats_set
    for name in ("logp.list.element", "kl"):
        assert "BYTE_STREAM_SPLIT" in cols[name].encodings
        assert "RLE_DICTIONARY" not in cols[name].encodings and not cols[name].is_stats_set
    assert pq.read_table(out).equals(table)


def test_other_codecs_take_no_zstd_level(tmp_path: Path) -> None:
    schema = pa.schema([("x", pa.float64())])
    for codec, stored in (("none", "UNCOMPRESSED"), ("snappy", "SNAPPY"), ("lz4", "LZ4")):
        with AtomicParquetWriter(tmp_path / f"{codec}.parquet", schema, compression=codec) as w:
            w.write(pa.table({"x": [1.5, 2.5]}))
        assert _column_meta(tmp_path / f"{codec}.parquet")["x"].compression == stored


def test_stale_temps_of_dead_writers_only(tmp_path) -> None:
    """A writer removes its target's temps whose PID is gone, never a live writer's, another
    target's or a file it did not name."""
    import os

    from pdm_replay.io.atomic import temp_path_for
    dead, live = 2 ** 22 + 12345, os.getppid()  # above pid_max's default: never running
    names = [f".t.parquet.{dead}-abc.pdm.tmp", f".t.parquet.{live}-abc.pdm.tmp",
             f".other.parquet.{dead}-abc.pdm.tmp", ".t.parquet.notes.tmp",
             f".t.parquet.{dead}-abc.tmp"]
    for n in names:
        (tmp_path / n).write_text("x")
    mine = temp_path_for(tmp_path / "t.parquet")
    assert mine.name.startswith(f".t.parquet.{os.getpid()}-") and mine.name.endswith(".pdm.tmp")
    left = sorted(p.name for p in tmp_path.iterdir() if p != mine)
    assert left == sorted(names[1:])
