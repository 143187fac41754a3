"""The benchmark scripts that must keep running without their hardware or their hours: the
GPU check on CPU (``gpu_check.sh --smoke --device cpu``) and the Qwen3-0.6B section of
``bench_replay.py`` on a tiny shape (``--qwen3-0.6b --smoke``), so neither can rot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    # the scripts run `python`: make it this interpreter even when the venv is not activated
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def test_gpu_check_runs_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check.json"
    env = _env()
    subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--smoke", "--device",
                    "cpu", "--repeats", "1", "--update-masks", "none", "--json", str(out)],
                   check=True, capture_output=True, text=True, cwd=ROOT, env=env)
    figures = json.loads(out.read_text())
    ratio, replay = figures["pass"], figures["replay"]
    assert ratio["response_tokens"] == 8 * 32  # SMOKE: 8 samples x 32 response tokens
    assert ratio["plain_s"] > 0 and ratio["recompute_s"] > 0 and ratio["exact_s"] > 0
    assert ratio["plain_peak_gib"] is None  # peak memory is a CUDA figure
    assert replay["tokens"] == 8 * 32 and set(replay["stages_s"]) >= {"update_none_s"}


def test_bench_replay_real_size_runs_on_a_tiny_shape() -> None:
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_replay.py"),
                          "--threads", "1", "--repeats", "1", "--qwen3-0.6b", "--smoke"],
                         check=True, capture_output=True, text=True, cwd=ROOT, env=_env())
    real = json.loads(res.stdout.strip().splitlines()[-1])["real"]
    assert real["shape"]["vocab"] == 4096 and real["seeds"] == len(real["per_seed_s"]) == 3
    assert real["response_tokens"] == 2 * 48  # one micro-batch: 2 samples x 48 response tokens
    assert real["heap"]["heap_reuse"] in (True, False) and real["heap"]["heap_reason"]
    assert len(real["per_mask_s"]) == len(real["masks"]) == len(real["per_mask_cpu_s"])
    assert all(t > 0 for t in (real["fwd_bwd_fwd_s"], real["fwd_bwd_fwd_reuse_s"],
                                real["recompute_s"], real["seeds_s"], *real["per_mask_s"]))
    assert "Qwen3 of hidden 128, 2 layers, vocabulary 4,096" in res.stdout


@pytest.mark.slow  # a local Ray instance starts (~30 s here) and runs four small jobs
def test_bench_ray_smoke(tmp_path: Path) -> None:
    pytest.importorskip("ray.data")
    out = tmp_path / "bench_ray.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_ray.py"), "--smoke",
                    "--json", str(out)], check=True, capture_output=True, text=True,
                   cwd=ROOT, env={**_env(), "PYTHONPATH": str(ROOT)})
    figures = json.loads(out.read_text())
    assert figures["tokens"] == 8 * 64 and figures["ray_cpus"] >= 1
    assert all(figures[k] > 0 for k in ("local_s", "ray1_s", "ray2_s", "task_overhead_s",
                                        "ray1_per_local_core", "ray2_per_ray1"))
