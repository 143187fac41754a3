"""Benchmark `pdm-replay masks` end to end against reading the same columns with pyarrow.

Builds synthetic rollout logs (K = 20) of the requested sizes, then, for each size, in
fresh child processes (so peak RSS is per measurement):
  baseline: pyarrow reads every column `masks` needs, batch by batch, flattening the lists;
  paper:    run_masks() with the paper's 12 masks (PAPER_MASKS, the registry before the
            field's masks joined);
  masks:    run_masks() end to end with the full registry (read, validate, metrics, every
            registered mask, write tokens/v1).
Prints wall times, the ratios masks/baseline (target <= 3x) and masks/paper (issue 16:
target <= 1.2x; the per-token statistics are shared, a mask is a few elementwise ops),
CPU seconds of all threads and peak RSS (target <= 1.5 GB, flat as the log grows).
``--repeat N`` measures each size N times, alternating paper and full runs, and prints
the median of the paired ratios.

    python benchmarks/bench_masks.py --tokens 2000000 8000000
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import statistics
import tempfile
import time
from pathlib import Path

RESPONSE_LEN = 128


def _build(path: Path, tokens: int) -> None:
    from pdm_replay.testing.fixtures import SyntheticLogConfig, write_synthetic_log
    cfg = SyntheticLogConfig(n_samples=tokens // RESPONSE_LEN, response_len=RESPONSE_LEN,
                             vocab_size=512, top_k=20, mismatch=0.5, chunk_samples=256)
    write_synthetic_log(path, cfg)


def _baseline(path: str) -> float:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pdm_replay.commands.masks import MASK_INPUT_COLUMNS
    start = time.perf_counter()
    for batch in pq.ParquetFile(path, pre_buffer=False).iter_batches(
            batch_size=512, columns=list(MASK_INPUT_COLUMNS)):
        for col in batch.columns:  # materialise the values as the real run must
            while hasattr(col.type, "value_type"):
                col = pc.list_flatten(col)
            col.to_numpy(zero_copy_only=False)
    return time.perf_counter() - start


PAPER_MASKS = ("none", "ppo_clip", "clip_higher", "dppo_binary_kl", "dppo_topk_kl",
               "pdm_kl_agg", "pdm_kl_uniform", "dppo_binary_tv", "dppo_topk_tv", "pdm_tv_agg",
               "pdm_tv_uniform", "pdm_kl_certified")


def _run(path: str, masks: tuple[str, ...] | None) -> float:
    from pdm_replay.commands.masks import MasksConfig, run_masks
    start = time.perf_counter()
    run_masks(MasksConfig(log=Path(path), out=Path(path).with_suffix(".tokens.parquet"),
                          masks=masks))
    return time.perf_counter() - start


def _masks(path: str) -> float:
    return _run(path, None)


def _paper(path: str) -> float:
    return _run(path, PAPER_MASKS)


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
    import pdm_replay.commands.masks  # noqa: F401
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
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_masks_"))
    print(f"{'tokens':>10} {'read s':>8} {'paper s':>8} {'masks s':>8} {'m/read':>6} "
          f"{'m/paper':>7} {'paper CPU':>9} {'masks CPU':>9} {'CPU m/p':>7} {'masks RSS':>9}")
    for tokens in args.tokens:
        log = workdir / f"log_{tokens}.parquet"
        if not log.exists():  # in a child too: building holds the whole log in memory
            ctx = mp.get_context("spawn")
            proc = ctx.Process(target=_build, args=(log, tokens))
            proc.start()
            proc.join()
            if proc.exitcode:
                raise SystemExit(f"building {log} failed (exit code {proc.exitcode})")
        wall, cpu = [], []
        for _ in range(args.repeat):
            read_s, _, _ = measure("_baseline", log)
            paper_s, paper_cpu, _ = measure("_paper", log)
            masks_s, masks_cpu, masks_rss = measure("_masks", log)
            wall.append(masks_s / paper_s)
            cpu.append(masks_cpu / paper_cpu)
            print(f"{tokens:>10} {read_s:>8.2f} {paper_s:>8.2f} {masks_s:>8.2f} "
                  f"{masks_s / read_s:>5.2f}x {wall[-1]:>6.2f}x {paper_cpu:>8.2f}s "
                  f"{masks_cpu:>8.2f}s {cpu[-1]:>6.2f}x {masks_rss:>7.2f}GB", flush=True)
        print(f"{tokens:>10} full registry / 12 masks, median of {len(wall)} paired runs: "
              f"wall {statistics.median(wall):.3f}x, CPU {statistics.median(cpu):.3f}x",
              flush=True)


if __name__ == "__main__":
    main()
