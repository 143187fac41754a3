"""Every Parquet the package writes carries page checksums and its readers verify them:
a flipped byte in a float page is an error naming the file, not plausible wrong numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.errors import InputError
from pdm_replay.testing.fixtures import write_synthetic_log
from pdm_replay.io.atomic import AtomicParquetWriter
from pdm_replay.io.reader import iter_record_batches, read_table


def flip_float_byte(path: Path, column: int) -> Path:
    """Flip one bit near the end of ``column``'s first data page (float values)."""
    meta = pq.ParquetFile(path).metadata.row_group(0).column(column)
    raw = bytearray(path.read_bytes())
    raw[meta.data_page_offset + meta.total_compressed_size - 64] ^= 0x01
    bad = path.with_name("flipped_" + path.name)
    bad.write_bytes(bytes(raw))
    return bad


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_flipped_float_byte_is_an_error_naming_the_file(tmp_path: Path,
                                                         compression: str) -> None:
    x = np.random.default_rng(0).standard_normal(20_000)
    table = pa.table({"x": x})
    with AtomicParquetWriter(tmp_path / "t.parquet", table.schema,
                             compression=compression) as writer:
        writer.write(table)
    bad = flip_float_byte(tmp_path / "t.parquet", 0)
    # without verification an uncompressed page decodes to wrong numbers, silently
    if compression == "none":
        assert not np.array_equal(pq.read_table(bad)["x"].to_numpy(), x)
    with pytest.raises(InputError, match="flipped_t.parquet") as err:
        read_table(bad)
    assert "corrupt" in str(err.value)


def test_corrupt_log_page_through_validate_and_masks(tmp_path: Path) -> None:
    log = write_synthetic_log(tmp_path / "log.parquet", n_samples=64)
    names = pq.read_schema(log).names
    bad = flip_float_byte(log, names.index("behavior_logprobs"))  # one leaf per column
    with pytest.raises(InputError, match="flipped_log.parquet"):
        for _ in iter_record_batches(bad):
            pass
    res = CliRunner().invoke(app, ["masks", str(bad), "--out", str(tmp_path / "t.parquet")])
    assert res.exit_code == 2 and "flipped_log.parquet" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "t.parquet").exists()
