from pathlib import Path

import pyarrow as pa
import pytest

import pyarrow.parquet as pq

from pdm_replay.io.atomic import AtomicParquetWriter, dictionary_columns, write_table_atomic


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


def test_dictionary_encoding_only_for_columns_that_are_not_floats(tmp_path: Path) -> None:
    table = pa.table({"sample_id": ["a", "b"] * 50, "ids": [[1, 2], [3]] * 50,
                      "logp": [[-0.5, -1.0], [-2.0]] * 50, "kl": [0.1, 0.2] * 50})
    assert dictionary_columns(table.schema) == ["sample_id", "ids.list.element"]
    meta = pq.ParquetFile(write_table_atomic(tmp_path / "t.parquet", table)).metadata
    encodings = {meta.row_group(0).column(i).path_in_schema: meta.row_group(0).column(i).encodings
                 for i in range(meta.num_columns)}
    assert "RLE_DICTIONARY" in encodings["sample_id"]
    assert "RLE_DICTIONARY" in encodings["ids.list.element"]
    assert "RLE_DICTIONARY" not in encodings["logp.list.element"]
    assert "RLE_DICTIONARY" not in encodings["kl"]
