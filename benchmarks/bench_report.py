"""Benchmark: the full `pdm-replay report` over a synthetic run directory, against a bare
DuckDB scan of the same files, with peak RSS.

Generates a run (``--rows`` token rows over ``--seeds`` seeds, updates for every update
mask) into a temp directory (or reuses ``--dir``), then runs each phase in a fresh child
process and reads that process's peak RSS (VmHWM), so each figure is that phase's alone:

1. ``count(*)`` over the tokens and updates files (the issue's baseline; DuckDB answers it
   from Parquet metadata, so it is nearly free);
2. a bare scan: one pass summing every column the report reads (a fairer floor: it
   decodes what the report decodes, without joins or grouping);
3. the full report (every view, the seed statistics; JSON), with DuckDB's memory_limit;
4. optionally (``--html``) the same with the three plots rendered into HTML.

    python benchmarks/bench_report.py                  # 20M token rows x 8 seeds
    python benchmarks/bench_report.py --rows 2000000   # scaled down
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCAN_SQL = """
SELECT count(*), sum(seed), sum(pos), sum(length(sample_id)), sum(advantage), sum(ratio),
       sum(kl_topk), sum(tv_topk), sum(dkl_local), sum(dkl_agg), sum(dkl_uniform),
       sum(dtv_agg), sum(dtv_uniform)
FROM read_parquet($tokens, hive_partitioning = true);
SELECT count(*), sum(seed), sum(pos), sum(length(sample_id)), sum(length(update_mask)),
       sum(delta_kl_topk), sum(delta_tv_topk), sum(kl_topk_post), sum(tv_topk_post)
FROM read_parquet($updates, hive_partitioning = true);
"""


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM). Not ru_maxrss: on Linux a child's
    ru_maxrss also counts the memory of the parent it was forked from before exec."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(phase: str, run: str, memory_limit: str, threads: int | None) -> None:
    """Run one phase in this (child) process and print its result as JSON."""
    import duckdb

    start = time.perf_counter()
    tokens, updates = f"{run}/tokens/*/*.parquet", f"{run}/updates/*/*.parquet"
    if phase in ("count", "scan"):
        con = duckdb.connect(config={"memory_limit": memory_limit,
                                     **({"threads": threads} if threads else {})})
        if phase == "count":
            rows = [con.execute("SELECT count(*) FROM read_parquet($p)", {"p": p}).fetchone()[0]
                    for p in (tokens, updates)]
        else:
            rows = []
            for stmt in [s for s in SCAN_SQL.split(";") if s.strip()]:
                params = {k: v for k, v in (("tokens", tokens), ("updates", updates))
                          if f"${k}" in stmt}
                rows.append(con.execute(stmt, params).fetchone()[0])
        result = {"rows": rows}
    else:
        from pdm_replay.report.build import ReportConfig
        from pdm_replay.commands.report import produce_report
        fmt = "html" if phase == "html" else "json"
        report, text = produce_report(ReportConfig(source=Path(run), format=fmt,
                                                   memory_limit=memory_limit, threads=threads))
        result = {"headline": report.headline.select(
            "basis", "family", "estimator", "delta", "n_seeds", "out_of_region_per_seed",
            "disagreement_per_seed", "wins").rows(), "bytes": len(text)}
    result["seconds"] = time.perf_counter() - start
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result, default=str))


def run_phase(phase: str, args: argparse.Namespace, run: Path) -> dict:
    """Run ``phase`` in a fresh child process; its wall time (process start and imports
    included), the phase's own time, its peak RSS and result."""
    cmd = [sys.executable, __file__, "--child", phase, "--dir", str(run),
           "--memory-limit", args.memory_limit]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"phase {phase} failed (exit {proc.returncode}):\n{proc.stdout}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"phase": phase, "wall_s": wall, "inner_s": result["seconds"],
            "peak_rss_mb": result["peak_rss_mb"], "result": result}


def generate(args: argparse.Namespace, run: Path) -> float:
    from pdm_replay.testing.synthetic_run import write_synthetic_run
    import torch

    torch.set_num_threads(1)
    seeds = tuple(range(args.seeds))
    start = time.perf_counter()
    write_synthetic_run(run, seeds=seeds, rows_per_seed=args.rows // args.seeds,
                        part_rows=args.part_rows)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=20_000_000, help="token rows in all")
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--part-rows", type=int, default=250_000, help="rows per Parquet part")
    p.add_argument("--memory-limit", default="1GB", help="DuckDB memory_limit")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--dir", type=Path, default=None,
                   help="run directory to reuse (generated there if absent; kept)")
    p.add_argument("--html", action="store_true", help="also time the HTML report (plots)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return _child(args.child, str(args.dir), args.memory_limit, args.threads)
    tmp = None
    run = args.dir
    if run is None:
        tmp = Path(tempfile.mkdtemp(prefix="bench_report_"))
        run = tmp / "run"
    try:
        gen_s = generate(args, run) if not (run / "tokens").exists() else 0.0
        size_mb = sum(f.stat().st_size for f in run.rglob("*.parquet")) / 2**20
        print(f"run: {run} ({size_mb:,.0f} MiB of Parquet; generated in {gen_s:.1f} s)")
        phases = ["count", "scan", "report"] + (["html"] if args.html else [])
        results = [run_phase(ph, args, run) for ph in phases]
        base = results[0]["wall_s"]
        scan = results[1]["wall_s"]
        print(f"{'phase':8} {'wall s':>8} {'phase s':>8} {'x count':>8} {'x scan':>8} "
              f"{'peak RSS MiB':>13}")
        for r in results:
            print(f"{r['phase']:8} {r['wall_s']:8.2f} {r['inner_s']:8.2f} "
                  f"{r['wall_s'] / base:8.1f} {r['wall_s'] / scan:8.2f} "
                  f"{r['peak_rss_mb']:13.0f}")
        print("rows (tokens, updates):", results[0]["result"]["rows"])
        print("headline:", json.dumps(results[2]["result"]["headline"]))
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
