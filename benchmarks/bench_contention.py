"""Replay next to a CPU hog: the OpenMP wait policy and thread choice (issue 20).

Each measurement is one child process replaying one seed of the shipped sample
(``sample_data``; ``--batch-size`` samples, updates ``none`` and ``pdm_kl_agg``, no
attribution) and reporting the seed loop's seconds (manifest ``timings.seeds_s``: the work,
not the imports). Variants:

- ``before``: what a replay did until now: libgomp's defaults (``OMP_WAIT_POLICY`` and
  ``GOMP_SPINCOUNT`` unset: idle threads spin ~300,000 iterations) and torch's own thread
  count;
- ``after``: what ``pdm-replay replay`` does now: :func:`pdm_replay.threads.apply_wait_policy`
  before torch loads, threads from :func:`pdm_replay.threads.cpu_budget`;
- ``spin10k``: ``OMP_WAIT_POLICY=PASSIVE`` with ``GOMP_SPINCOUNT=10000`` (a short spin
  before sleeping), the alternative measured against ``after``.

"Loaded" runs start ``--hogs`` busy-loop processes first (default: one per usable CPU: a
process keeping every core busy, as a training job next to the replay would). Rounds
interleave quiet and loaded runs of every variant, so slow drifts of the shared machine
hit all of them alike; the figures are medians over rounds of ratios within a round:

- loaded / quiet of each variant (target for ``after``: <= 2.5; a fair share of 2 CPUs
  between the replay's threads and 2 hogs is ~2);
- quiet ``after`` / quiet ``before`` (target: <= 1.05).

Usage: ``python benchmarks/bench_contention.py [--rounds 3] [--batch-size 8]
[--variants before,after,spin10k] [--json out.json]``. It keeps every core busy while it
runs (about a minute per round on 2 cores): run it when others can spare the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_data"
WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
HOG = "while True:\n    pass\n"


def child(variant: str, out: Path, batch_size: int) -> None:
    """One replay in this process; prints ``{"seeds_s": ..., "threads": ...}``."""
    if variant == "after":
        from pdm_replay.threads import apply_wait_policy
        apply_wait_policy()
    import torch  # after the environment is final: libgomp reads it when it loads

    from pdm_replay.replay.config import ReplayConfig
    from pdm_replay.commands.replay import run_replay
    cfg = ReplayConfig(log=SAMPLE / "rollouts", checkpoint=SAMPLE / "checkpoints" / "step_8",
                       out=out,
                       seeds=1, batch_size=batch_size, lr=1e-3, attribution=False,
                       update_masks=("none", "pdm_kl_agg"),
                       threads=None if variant == "after" else torch.get_num_threads())
    manifest = run_replay(cfg).manifest
    print(json.dumps({"seeds_s": manifest["timings"]["seeds_s"],
                      "threads": manifest["threads"]}))


def measure(variant: str, batch_size: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in WAIT_VARS}
    if variant == "spin10k":
        env.update(OMP_WAIT_POLICY="PASSIVE", GOMP_SPINCOUNT="10000")
    with tempfile.TemporaryDirectory() as tmp:
        res = subprocess.run([sys.executable, __file__, "--child", variant,
                              "--out", str(Path(tmp) / "run"), "--batch-size", str(batch_size)],
                             env=env, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def start_hogs(n: int) -> list[subprocess.Popen]:
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(n)]
    time.sleep(0.5)  # let them reach the loop
    return hogs


def stop_hogs(hogs: list[subprocess.Popen]) -> None:
    for h in hogs:
        h.kill()
        h.wait()


def run_rounds(variants: list[str], rounds: int, hogs: int, batch_size: int) -> list[dict]:
    results = []
    for r in range(rounds):
        quiet = {v: measure(v, batch_size)["seeds_s"] for v in variants}
        running = start_hogs(hogs)
        try:
            loaded = {v: measure(v, batch_size)["seeds_s"] for v in variants}
        finally:
            stop_hogs(running)
        results.append({"round": r, "quiet": quiet, "loaded": loaded,
                        "loadavg": os.getloadavg()[0]})
        print(json.dumps(results[-1]), flush=True)
    return results


def summarize(results: list[dict], variants: list[str]) -> dict:
    med = lambda xs: statistics.median(xs)  # noqa: E731
    out = {f"{v}_loaded_over_quiet": med([r["loaded"][v] / r["quiet"][v] for r in results])
           for v in variants}
    out.update({f"{v}_quiet_s": med([r["quiet"][v] for r in results]) for v in variants})
    out.update({f"{v}_loaded_s": med([r["loaded"][v] for r in results]) for v in variants})
    if "before" in variants:
        out.update({f"{v}_quiet_over_before_quiet":
                    med([r["quiet"][v] / r["quiet"]["before"] for r in results])
                    for v in variants if v != "before"})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--hogs", type=int, default=None,
                    help="busy-loop processes (default: the usable CPUs)")
    ap.add_argument("--variants", default="before,after,spin10k")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.out, args.batch_size)
    sys.path.insert(0, str(ROOT))
    from pdm_replay.threads import cpu_budget
    variants = args.variants.split(",")
    hogs = args.hogs or cpu_budget().cpus
    print(f"cpus {cpu_budget()}, hogs {hogs}, load average before {os.getloadavg()}")
    results = run_rounds(variants, args.rounds, hogs, args.batch_size)
    summary = summarize(results, variants)
    for k, v in summary.items():
        print(f"{k:40s} {v:.3f}")
    if args.json:
        args.json.write_text(json.dumps({"rounds": results, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
