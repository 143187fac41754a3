"""The benchmark scripts that must keep running without their hardware: the GPU check on
CPU (``gpu_check.sh --smoke --device cpu``), so it cannot rot on machines without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_gpu_check_runs_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check.json"
    # the script runs `python`: make it this interpreter even when the venv is not activated
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--smoke", "--device",
                    "cpu", "--repeats", "1", "--update-masks", "none", "--json", str(out)],
                   check=True, capture_output=True, text=True, cwd=ROOT, env=env)
    figures = json.loads(out.read_text())
    ratio, replay = figures["pass"], figures["replay"]
    assert ratio["response_tokens"] == 8 * 32  # SMOKE: 8 samples x 32 response tokens
    assert ratio["plain_s"] > 0 and ratio["recompute_s"] > 0 and ratio["exact_s"] > 0
    assert ratio["plain_peak_gib"] is None  # peak memory is a CUDA figure
    assert replay["tokens"] == 8 * 32 and set(replay["stages_s"]) >= {"update_none_s"}
