"""Benchmark `pdm-replay masks --engine ray` against the local command (issue 38).

Builds a synthetic rollout log (K = 20) of ``--tokens`` response tokens in ``--files``
files under a temp directory (one generated file, copied with new sample ids and one
step per file), then, in this one run:
  local:    run_masks() with one worker thread (the local command's per-core rate);
  ray x1:   run_masks_ray() on a local Ray instance of 2 CPUs, one map task at a time;
  ray x2:   the same with two map tasks at once;
  overhead: Ray's per-task cost: a job over ``--files`` files of 8 rows of 8 tokens,
            its wall time over the file count (every task still reads, checks and
            writes its parts), after a warm-up job that starts the worker processes.
Prints (and with ``--json`` writes) the rates and the issue's two ratios: per-worker
throughput ray x1 / local (target >= 0.8) and ray x2 / ray x1 (target >= 1.7), from wall
time; and tokens per CPU second (this process, plus the ``ray::`` worker processes of the
Ray instance it started), which a machine shared with other jobs distorts less than wall
time (a worker that exits between two readings takes its CPU seconds with it).
``--smoke`` runs a tiny log (tests/test_benchmarks.py).

    python benchmarks/bench_ray.py --tokens 20000000 --files 16
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

RESPONSE_LEN = 1024


def build_log(d: Path, tokens: int, files: int, response_len: int) -> Path:
    """``files`` files of ``tokens / files`` tokens: one generated, the rest copies with
    their own sample ids (``c<i>-``) and step ``i``."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pdm_replay.testing.fixtures import SyntheticLogConfig, write_synthetic_log
    seed = d / "seed.parquet"
    cfg = SyntheticLogConfig(n_samples=max(1, tokens // files // response_len),
                             response_len=response_len, vocab_size=512, top_k=20,
                             mismatch=0.5, chunk_samples=64)
    write_synthetic_log(seed, cfg)
    table, log = pq.read_table(seed), d / "log"
    log.mkdir()
    for i in range(files):
        ids = pc.binary_join_element_wise(f"c{i}-", table.column("sample_id"), "")
        steps = pa.array([i] * table.num_rows, pa.int64())
        t = (table.set_column(0, table.schema.field("sample_id"), ids)
             .set_column(1, table.schema.field("step"), steps))
        pq.write_table(t, log / f"part-{i:04d}.parquet", compression="zstd")
    seed.unlink()
    return log


def _ray_worker_cpu() -> float:
    """CPU seconds so far of this process's Ray workers (``ray::`` processes below the
    local instance it started; another user's Ray on the machine is not counted)."""
    import psutil
    total = 0.0
    for proc in psutil.Process().children(recursive=True):
        try:
            if " ".join(proc.cmdline()).startswith("ray::"):
                times = proc.cpu_times()
                total += times.user + times.system
        except psutil.Error:  # exited meanwhile
            continue
    return total


def _timed(fn, *args) -> tuple[float, float, object]:
    """Wall seconds, CPU seconds (this process and the Ray workers) and the result."""
    start, cpu = time.perf_counter(), time.process_time() + _ray_worker_cpu()
    out = fn(*args)
    return (time.perf_counter() - start, time.process_time() + _ray_worker_cpu() - cpu,
            out)


def measure(log: Path, tiny: Path, work: Path) -> dict:
    """Wall seconds of the local command (1 worker), Ray with 1 and 2 tasks at once, and
    the tiny job's (Ray's per-task cost)."""
    from pdm_replay.cluster.ray_engine import connected
    from pdm_replay.commands.masks import MasksConfig, run_masks
    from pdm_replay.commands.masks_ray import run_masks_ray
    local_s, local_cpu, summary = _timed(run_masks, MasksConfig(
        log=log, out=work / "local.parquet", workers=1))
    (work / "local.parquet").unlink()
    out: dict = {"tokens": summary.tokens, "local_s": local_s, "local_cpu_s": local_cpu}
    start = time.perf_counter()
    with connected(None) as conn:
        out["ray_init_s"], out["ray_cpus"] = time.perf_counter() - start, conn.cpus
        # warm-up: the first job starts the worker processes (each imports torch)
        out["warmup_s"], _, _ = _timed(run_masks_ray, MasksConfig(
            log=(tiny,), out=work / "warm", engine="ray"))
        for workers in (1, 2):
            cfg = MasksConfig(log=(log,), out=work / f"ray{workers}", engine="ray",
                              workers=workers)
            out[f"ray{workers}_s"], out[f"ray{workers}_cpu_s"], _ = _timed(run_masks_ray,
                                                                          cfg)
            shutil.rmtree(cfg.out)
        files = len(list(tiny.glob("*.parquet")))
        tiny_s, _, _ = _timed(run_masks_ray, MasksConfig(log=(tiny,), out=work / "tiny",
                                                         engine="ray", workers=1))
        out["task_overhead_s"] = tiny_s / files
    return out


def ratios(m: dict) -> dict:
    """Rates (tokens/s) and the issue's ratios."""
    rate = {k: m["tokens"] / m[f"{k}_s"] for k in ("local", "ray1", "ray2")}
    per_cpu = {k: m["tokens"] / m[f"{k}_cpu_s"] for k in ("local", "ray1", "ray2")}
    return {**{f"{k}_tok_s": v for k, v in rate.items()},
            **{f"{k}_tok_per_cpu_s": v for k, v in per_cpu.items()},
            "ray1_per_local_core": rate["ray1"] / rate["local"],
            "ray2_per_ray1": rate["ray2"] / rate["ray1"],
            "ray1_per_local_cpu_s": per_cpu["ray1"] / per_cpu["local"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=20_000_000)
    p.add_argument("--files", type=int, default=16)
    p.add_argument("--smoke", action="store_true", help="a tiny log (the test's size)")
    p.add_argument("--json", type=Path, help="write the figures here too")
    args = p.parse_args()
    tokens, files, length = ((8 * 64, 4, 16) if args.smoke
                             else (args.tokens, args.files, RESPONSE_LEN))
    with tempfile.TemporaryDirectory(prefix="bench_ray_") as tmp:
        d = Path(tmp)
        log = build_log(d, tokens, files, length)
        (d / "tiny").mkdir()
        tiny = build_log(d / "tiny", 8 * files, files, 8)
        figures = measure(log, tiny, d)
    figures.update(ratios(figures))
    print(json.dumps(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
