"""Scale benchmark on CPU: 1 vs 2 processes replaying ``sample_data/`` with torchrun (gloo).

Every configuration runs, in a fresh run directory,
``python -m torch.distributed.run --nproc_per_node P -m pdm_replay replay sample_data/rollouts
--checkpoint sample_data/checkpoints/step_8 ...`` with ``OMP_NUM_THREADS=T`` (loopback only). Figures
come from the run's own records: the seed loop's time (``manifest.timings.seeds_s``: no
imports, no model loading), the command's wall time, loss tokens per second of the seed
loop, and each rank's peak resident set (``done/seed=<s>.json`` ``ranks[].peak_memory``).
Baselines are measured in the same run: 1 process × T threads. Configurations run in
turns, best of ``--repeats``, so a load change on the machine hits all of them alike.

Usage: ``python benchmarks/bench_scale.py [--seeds 2] [--batch-size 32] [--repeats 2]``
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data"
MiB = 1024 ** 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def replay(procs: int, threads: int, out: Path, args: argparse.Namespace) -> dict:
    """One torchrun replay; returns its figures."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(procs),
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
           "-m", "pdm_replay", "replay", str(SAMPLE / "rollouts"),
           "--checkpoint", str(SAMPLE / "checkpoints" / "step_8"), "--out", str(out),
           "--seeds", str(args.seeds), "--batch-size", str(args.batch_size),
           "--micro-batch-size", str(args.micro_batch_size), "--lr", "1e-3",
           *args.extra]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "GLOO_SOCKET_IFNAME": "lo"}
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"{procs} process(es) failed:\n{res.stderr[-3000:]}")
    manifest = json.loads((out / "manifest.json").read_text())
    last = json.loads((out / "done" / f"seed={args.seeds - 1}.json").read_text())
    seeds_s = manifest["timings"]["seeds_s"]
    return {"procs": procs, "threads": threads, "wall_s": wall, "seeds_s": seeds_s,
            "tokens": manifest["tokens"], "tokens_per_s": manifest["tokens"] / seeds_s,
            "peak_rss_mib": [r["peak_memory"]["rss_bytes"] / MiB for r in last["ranks"]]}


def best_of(configs: list[tuple[int, int]], args: argparse.Namespace) -> list[dict]:
    best: dict[tuple[int, int], dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for procs, threads in configs:
                out = Path(tmp) / f"p{procs}t{threads}r{rep}"
                fig = replay(procs, threads, out, args)
                print(f"  run {rep}: {procs} proc x {threads} thr: seeds {fig['seeds_s']:.1f} s,"
                      f" wall {fig['wall_s']:.1f} s", flush=True)
                key = (procs, threads)
                if key not in best or fig["seeds_s"] < best[key]["seeds_s"]:
                    best[key] = fig
    return [best[c] for c in configs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--micro-batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1, help="threads per process")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("extra", nargs="*", help="more replay options (after --)")
    args = ap.parse_args()
    t = args.threads
    configs = [(1, t), (2, t), (1, 2 * t)]
    print(f"sample_data: {args.seeds} seeds x {args.batch_size} samples, "
          f"cpu cores {os.cpu_count()}, best of {args.repeats}")
    figs = best_of(configs, args)
    base, two, wide = figs
    print("\n| processes x threads | seed loop | wall | loss tokens/s | peak RSS per rank |")
    print("|---|---:|---:|---:|---|")
    for f in figs:
        rss = ", ".join(f"{m:,.0f} MiB" for m in f["peak_rss_mib"])
        print(f"| {f['procs']} x {f['threads']} | {f['seeds_s']:.2f} s | {f['wall_s']:.1f} s "
              f"| {f['tokens_per_s']:,.0f} | {rss} |")
    print(f"\nspeedup 2x{t} vs 1x{t} (seed loop): {base['seeds_s'] / two['seeds_s']:.2f}x; "
          f"vs 1x{2 * t} (same cores): {wide['seeds_s'] / two['seeds_s']:.2f}x")
    print(f"wall-time speedup 2x{t} vs 1x{t}: {base['wall_s'] / two['wall_s']:.2f}x")
    assert base["tokens"] == two["tokens"] == wide["tokens"]


if __name__ == "__main__":
    main()
