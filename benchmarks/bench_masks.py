"""Benchmark `pdm-replay masks` end to end against reading the same columns with pyarrow.

Builds synthetic rollout logs (K = 20) of the requested sizes, then, for each size, in
fresh child processes (so peak RSS is per measurement):
  baseline: pyarrow reads every column `masks` needs, batch by batch, flattening the lists;
  masks:    run_masks() end to end (read, validate, metrics, 11 masks, write tokens/v1).
Prints wall times, the ratio masks/baseline (target <= 3x), CPU seconds of all threads and
peak RSS (target <= 1.5 GB, flat as the log grows).

    python benchmarks/bench_masks.py --tokens 2000000 8000000
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import tempfile
import time
from pathlib import Path

RESPONSE_LEN = 128


def _build(path: Path, tokens: int) -> None:
    from pdm_replay.fixtures import SyntheticLogConfig, write_synthetic_log
    cfg = SyntheticLogConfig(n_samples=tokens // RESPONSE_LEN, response_len=RESPONSE_LEN,
                             vocab_size=512, top_k=20, mismatch=0.5, chunk_samples=256)
    write_synthetic_log(path, cfg)


def _baseline(path: str) -> float:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pdm_replay.run_masks import MASK_INPUT_COLUMNS
    start = time.perf_counter()
    for batch in pq.ParquetFile(path, pre_buffer=False).iter_batches(
            batch_size=512, columns=list(MASK_INPUT_COLUMNS)):
        for col in batch.columns:  # materialise the values as the real run must
            while hasattr(col.type, "value_type"):
                col = pc.list_flatten(col)
            col.to_numpy(zero_copy_only=False)
    return time.perf_counter() - start


def _masks(path: str) -> float:
    from pdm_replay.run_masks import MasksConfig, run_masks
    start = time.perf_counter()
    run_masks(MasksConfig(log=Path(path), out=Path(path).with_suffix(".tokens.parquet")))
    return time.perf_counter() - start


def peak_rss_gib() -> float:
    """This process's peak RSS. VmHWM belongs to the address space, so it starts afresh at
    exec; ru_maxrss (the fallback off Linux) keeps the high-water mark of the process that
    forked us, e.g. a parent that just built an 8M-token log."""
    try:
        with open("/proc/self/status") as status:
            kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 1024 ** 2


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


def _child(fn_name: str, path: str, queue: mp.Queue) -> None:
    import pyarrow.parquet  # noqa: F401  imports stay out of both clocks
    import pdm_replay.run_masks  # noqa: F401
    cpu = _cpu_seconds()
    seconds = globals()[fn_name](path)
    queue.put((seconds, _cpu_seconds() - cpu, peak_rss_gib()))


def measure(fn_name: str, path: Path) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds of all threads, peak RSS in GiB) of ``fn_name`` run in
    a fresh process. CPU seconds vary less than wall time on a shared machine, and show
    how much of the cores a run keeps busy."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(fn_name, str(path), queue))
    proc.start()
    result = queue.get()
    proc.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[2_000_000, 8_000_000])
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_masks_"))
    print(f"{'tokens':>10} {'read s':>8} {'masks s':>8} {'ratio':>6} {'read CPU':>9} "
          f"{'masks CPU':>9} {'read RSS':>9} {'masks RSS':>9}")
    for tokens in args.tokens:
        log = workdir / f"log_{tokens}.parquet"
        if not log.exists():  # in a child too: building holds the whole log in memory
            ctx = mp.get_context("spawn")
            proc = ctx.Process(target=_build, args=(log, tokens))
            proc.start()
            proc.join()
            if proc.exitcode:
                raise SystemExit(f"building {log} failed (exit code {proc.exitcode})")
        read_s, read_cpu, read_rss = measure("_baseline", log)
        masks_s, masks_cpu, masks_rss = measure("_masks", log)
        print(f"{tokens:>10} {read_s:>8.2f} {masks_s:>8.2f} {masks_s / read_s:>5.2f}x "
              f"{read_cpu:>8.2f}s {masks_cpu:>8.2f}s {read_rss:>7.2f}GB {masks_rss:>7.2f}GB",
              flush=True)


if __name__ == "__main__":
    main()
