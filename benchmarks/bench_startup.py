"""Start-up cost of the CLI (issue 20): ``--help`` of every command, and how long a 1-seed
replay of the shipped sample takes before its first seed starts.

1. ``pdm-replay [COMMAND] --help``: wall time of a fresh ``python -m pdm_replay`` process,
   median of ``--repeats`` (target <= 0.5 s), beside ``python -c pass`` measured in the
   same run (the interpreter's own start).
2. Before the first seed: a child process runs ``pdm_replay.cli.main`` on
   ``replay sample_data/rollouts --checkpoint sample_data/checkpoints/step_8
   --behavior-checkpoint sample_data/behavior/step_8 --seeds 1`` with
   ``ReplayRecipe.run_seed`` wrapped to print the wall clock when it is first called; the
   figure is that instant minus the moment the parent launched the process (interpreter
   start, imports, checkpoint and log loading, checks; target <= 3 s). The child's imports
   are then listed by cost (``-X importtime``) so the floor (torch, transformers' modeling
   stack) is visible.

Usage: ``python benchmarks/bench_startup.py [--repeats 5] [--baseline /work/main]
[--json out.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ("", "validate", "masks", "ingest", "replay", "report", "sql", "make-sample",
            "dashboard")
# What `pdm-replay replay` does, with ReplayRecipe.run_seed wrapped: the wait policy first
# (as main() does), the replay module imported ahead of the command (those imports count
# either way).
CHILD = """
import sys, time
from pdm_replay.threads import apply_wait_policy
apply_wait_policy()
import pdm_replay.commands.replay as run
first = run.ReplayRecipe.run_seed
def timed(*args, **kwargs):
    if not getattr(timed, "seen", False):
        timed.seen = True
        print("FIRST_SEED_AT", time.time(), file=sys.stderr, flush=True)
        print("LOADED", ",".join(m for m in ("polars", "duckdb", "pandas", "scipy", "streamlit")
                                 if m in sys.modules), file=sys.stderr, flush=True)
    return first(*args, **kwargs)
run.ReplayRecipe.run_seed = timed
from pdm_replay.cli import main
sys.argv = ["pdm-replay", *sys.argv[1:]]
main()
"""


def wall(cmd: list[str], repo: Path = ROOT) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=repo, capture_output=True, check=True,
                   env={**os.environ, "PYTHONPATH": str(repo)})
    return time.perf_counter() - t0


def help_times(repeats: int, baseline: Path | None) -> dict[str, dict[str, float]]:
    """Median seconds per command; with ``baseline`` (another checkout, e.g. the main
    branch) each repeat also runs there, in turns, so load changes hit both alike."""
    out: dict[str, dict[str, float]] = {}
    for name in ("pass", *COMMANDS):
        cmd = [sys.executable, "-c", "pass"] if name == "pass" else \
            [sys.executable, "-m", "pdm_replay", *([name] if name else []), "--help"]
        runs = [(wall(cmd), wall(cmd, baseline) if baseline else None) for _ in range(repeats)]
        label = "python -c pass" if name == "pass" else f"pdm-replay {name} --help"
        out[label.replace("  ", " ")] = {
            "s": statistics.median(r[0] for r in runs),
            **({"baseline_s": statistics.median(r[1] for r in runs)} if baseline else {})}
    return out


def replay_args(out: Path) -> list[str]:
    s = ROOT / "sample_data"
    return ["replay", str(s / "rollouts"), "--checkpoint", str(s / "checkpoints" / "step_8"),
            "--behavior-checkpoint", str(s / "behavior" / "step_8"), "--out", str(out),
            "--seeds", "1",
            "--batch-size", "64", "--lr", "1e-3"]


def launch_to_first_seed(*flags: str) -> tuple[float, str]:
    """Seconds from launch to the first ``ReplayRecipe.run_seed`` call, and the child's stderr."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        res = subprocess.run([sys.executable, *flags, "-c", CHILD,
                              *replay_args(Path(tmp) / "run")], cwd=ROOT, capture_output=True,
                             text=True, check=True)
    return float(re.search(r"FIRST_SEED_AT (\S+)", res.stderr).group(1)) - t0, res.stderr


# The floor: the interpreter, torch and the transformers modeling stack a Qwen3 checkpoint
# needs, which every replay imports whatever pdm_replay does.
FLOOR = "import torch, transformers.models.qwen3.modeling_qwen3"


def import_floor() -> float:
    return wall([sys.executable, "-c", FLOOR])


def costliest_imports() -> list[tuple[str, float]]:
    """The top-level imports of the same child by cumulative seconds (-X importtime)."""
    _, stderr = launch_to_first_seed("-X", "importtime")
    imports = []
    for line in stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\s*)(\S+)", line)
        if m and len(m.group(2)) <= 2:  # top-level imports (and their first children)
            imports.append((m.group(3), int(m.group(1)) / 1e6))
    return sorted(imports, key=lambda x: -x[1])[:8]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another checkout (e.g. of main) whose --help is timed alongside")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    helps = help_times(args.repeats, args.baseline)
    for name, t in helps.items():
        base = f"   baseline {t['baseline_s']:6.3f} s" if "baseline_s" in t else ""
        print(f"{name:36s} {t['s']:6.3f} s{base}")
    runs = [launch_to_first_seed() for _ in range(max(1, args.repeats // 2))]
    firsts = [t for t, _ in runs]
    first = statistics.median(firsts)
    print(f"1-seed replay, launch to first seed  {first:6.2f} s (median of {len(firsts)}, "
          f"load average {os.getloadavg()[0]:.1f})")
    loaded = re.search(r"LOADED (.*)", runs[0][1])
    print(f"  loaded by the first seed: {(loaded.group(1) if loaded else '') or 'none'} "
          "(of polars, duckdb, pandas, scipy, streamlit)")
    floor = statistics.median(import_floor() for _ in firsts)
    print(f"  of which the import floor ({FLOOR}) {floor:6.2f} s")
    imports = costliest_imports()
    for name, s in imports:
        print(f"  import {name:32s} {s:6.2f} s (cumulative)")
    if args.json:
        args.json.write_text(json.dumps({"help_s": helps, "before_first_seed_s": first,
                                         "import_floor_s": floor,
                                         "imports_s": imports}, indent=1))


if __name__ == "__main__":
    main()
