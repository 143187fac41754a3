"""Cost of Parquet page checksums: write with/without ``write_page_checksum``, read with/
without ``page_checksum_verification``, on a synthetic rollout/v1 log (K = 20).

Each repeat measures both variants back to back (alternating which goes first), and the
script prints the median of the paired ratios (checksums / none), so the machine's load
cancels out as far as it can.

    python benchmarks/bench_checksums.py --tokens 1000000 --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

RESPONSE_LEN = 128


def _log(tokens: int) -> pa.Table:
    from pdm_replay.testing.fixtures import SyntheticLogConfig, iter_synthetic_chunks
    cfg = SyntheticLogConfig(n_samples=tokens // RESPONSE_LEN, response_len=RESPONSE_LEN,
                             vocab_size=512, top_k=20, mismatch=0.5, chunk_samples=256)
    return pa.concat_tables(iter_synthetic_chunks(cfg))


def _write(table: pa.Table, path: Path, checksum: bool) -> float:
    from pdm_replay.io.atomic import ZSTD_LEVEL, writer_options
    options = {**writer_options(table.schema), "write_page_checksum": checksum}
    start = time.perf_counter()
    with pq.ParquetWriter(path, table.schema, compression="zstd",
                          compression_level=ZSTD_LEVEL, **options) as writer:
        writer.write_table(table, row_group_size=1 << 20)
    return time.perf_counter() - start


def _read(path: Path, verify: bool) -> float:
    start = time.perf_counter()
    pf = pq.ParquetFile(path, pre_buffer=False, page_checksum_verification=verify)
    for _ in pf.iter_batches(batch_size=512):
        pass
    return time.perf_counter() - start


def _paired(a, b, repeats: int) -> tuple[float, float, float]:
    """Median of a/b over ``repeats`` alternating pairs, and the medians of each."""
    ta, tb = [], []
    for i in range(repeats):
        if i % 2:
            tb.append(b())
            ta.append(a())
        else:
            ta.append(a())
            tb.append(b())
    ratios = [x / y for x, y in zip(ta, tb)]
    return statistics.median(ratios), statistics.median(ta), statistics.median(tb)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    table = _log(args.tokens)
    with tempfile.TemporaryDirectory() as tmp:
        on, off = Path(tmp) / "on.parquet", Path(tmp) / "off.parquet"
        ratio, t_on, t_off = _paired(lambda: _write(table, on, True),
                                     lambda: _write(table, off, False), args.repeats)
        print(f"write: checksums {t_on:.3f} s, none {t_off:.3f} s, paired ratio "
              f"{ratio:.3f} (files {on.stat().st_size / 1e6:.1f} MB vs "
              f"{off.stat().st_size / 1e6:.1f} MB)")
        ratio, t_on, t_off = _paired(lambda: _read(on, True), lambda: _read(on, False),
                                     args.repeats)
        print(f"read all columns: verified {t_on:.3f} s, unverified {t_off:.3f} s, paired "
              f"ratio {ratio:.3f}")


if __name__ == "__main__":
    main()
