"""``pdm-replay masks``: log-only divergences and mask decisions for every token."""

from __future__ import annotations

import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.table import Table

from pdm_replay.cli.app import app
from pdm_replay.cli.common import console, fail, progress_bar
from pdm_replay.cli.mask_options import (ClipRatioC, MaskModules, MaskParams,
                                         load_mask_modules, parse_mask_params)
from pdm_replay.masks import Thresholds
from pdm_replay.replay.config import MASK_NAMES_HELP

if TYPE_CHECKING:
    from pdm_replay.commands.masks import MasksConfig, MasksSummary



def parse_mask_list(text: Optional[str]) -> list[str] | None:
    """``"a,b"`` -> ``["a", "b"]``; None/empty -> None (all masks)."""
    if not text:
        return None
    return [n.strip() for n in text.split(",") if n.strip()]


# The threshold options of every command that decides masks (masks, replay), declared once;
# defaults come from Thresholds, so the CLI cannot drift from the library.
THRESHOLD_DEFAULTS = Thresholds()
DeltaKL = Annotated[float, typer.Option("--delta-kl", help="δ of the KL trust region.")]
DeltaTV = Annotated[float, typer.Option("--delta-tv", help="δ of the TV trust region.")]
Eps = Annotated[float, typer.Option("--eps", help="ε of ppo_clip.")]
EpsLow = Annotated[float, typer.Option("--eps-low", help="ε_low of clip_higher.")]
EpsHigh = Annotated[float, typer.Option("--eps-high", help="ε_high of clip_higher.")]


def threshold_options(eps: float, eps_low: float, eps_high: float, delta_kl: float,
                      delta_tv: float, clip_ratio_c: float = 0.0,
                      params: dict[str, float] | None = None) -> Thresholds:
    return Thresholds(eps=eps, eps_low=eps_low, eps_high=eps_high, delta_kl=delta_kl,
                      delta_tv=delta_tv, clip_ratio_c=clip_ratio_c, **(params or {}))


def print_summary(summary: MasksSummary, seconds: float) -> None:
    t = Table(title=f"{summary.tokens} tokens -> {summary.out} ({seconds:.1f} s)")
    t.add_column("mask")
    t.add_column("keep fraction", justify="right")
    t.add_column("masked tokens", justify="right")
    for name, frac in summary.keep_fraction.items():
        t.add_row(name, f"{frac:.4f}", str(round((1 - frac) * summary.tokens)))
    console.print(t)
    for key, n in summary.out_of_region.items():
        console.print(f"out of region ({key}'s region): {n} tokens")
    for key, n in summary.disagreements.items():
        console.print(f"ratio vs predictive disagreements ({key}): {n} tokens")
    console.print(f"mass overflow (logged top-K mass > 1): {summary.mass_overflow} tokens")


Log = Annotated[list[str], typer.Argument(  # str: a Path would fold s3:// into s3:/
    help="Rollout log with train_logprobs and train_topk_logprobs (file or directory); "
    "--engine ray takes several, and pyarrow filesystem URIs (s3://...).")]
Out = Annotated[Path, typer.Option("--out", "-o", help="tokens/v1 Parquet file to write "
                                   "(--engine ray: a directory, step=<t>/part-*.parquet, "
                                   "summary.parquet and manifest.json).")]


class Engine(str, Enum):
    local = "local"
    ray = "ray"


EngineOpt = Annotated[Engine, typer.Option(
    "--engine", help="local: threads in this process, one output file. ray: Ray Data "
    "tasks on a Ray cluster (read_parquet, then the same per-batch work in map_batches), "
    "one part file per step and block, a per-step summary.parquet, committed whole; "
    "needs pip install -e \".[ray]\".")]
RayAddress = Annotated[Optional[str], typer.Option(
    "--ray-address", help="--engine ray: the cluster to join (auto, host:6379, "
    "ray://host:10001); default RAY_ADDRESS, else a local Ray instance on the usable "
    "CPUs.")]
Resume = Annotated[bool, typer.Option(
    "--resume", help="--engine ray: after a killed run, redo only the input files it had "
    "not finished (its staging directory .<out>.pdm-partial is kept until commit).")]
MaskNames = Annotated[Optional[str], typer.Option("--masks", help=MASK_NAMES_HELP)]
VocabSize = Annotated[Optional[int], typer.Option(
    "--vocab-size", min=1, help="n for the uniform-tail estimators (default: the log's "
    "footer).")]
BatchRows = Annotated[Optional[int], typer.Option(
    "--batch-rows", min=1, help="At most this many samples per record batch read (default "
    "512); fewer for long responses (about 131,072 tokens per batch). Bounds memory. "
    "--engine ray: at most this many rows per map_batches batch, which a task computes "
    "and writes (its part files) alone (default: each whole block Ray reads).")]
Workers = Annotated[Optional[int], typer.Option(
    "--workers", min=1, help="Work items (record batches cut to at most 65,536 tokens) "
    "validated and computed in parallel (default: the usable CPUs, at most 8). Each holds "
    "about 50 MB of arrays. --engine ray: Ray tasks at once (default: the cluster's "
    "CPUs).")]
Threads = Annotated[int, typer.Option("--threads", min=1,
                                      help="torch intra-op threads per worker.")]


def _run(cfg: "MasksConfig") -> "MasksSummary":
    from pdm_replay.commands.masks import open_logs, run_masks
    from pdm_replay.commands.masks_ray import run_masks_ray
    start = time.perf_counter()
    logs = open_logs(cfg)  # once: the checks, the row total, then the run itself
    with progress_bar("masks", sum(log.n_rows for log in logs) or None, "samples") as bar:
        def tick(rows: int, tokens: int | None = None) -> None:
            elapsed = max(time.perf_counter() - start, 1e-9)
            rate = f"{(tokens or rows) / elapsed:,.0f} {'tok' if tokens else 'rows'}/s"
            bar.update(bar.task_ids[0], completed=rows, rate=rate)
        if cfg.engine == Engine.ray.value:
            return run_masks_ray(cfg, on_progress=tick, logs=logs)
        return run_masks(cfg, on_progress=tick, log=logs[0])


@app.command()
def masks(
    log: Log, out: Out, mask_names: MaskNames = None,
    delta_kl: DeltaKL = THRESHOLD_DEFAULTS.delta_kl,
    delta_tv: DeltaTV = THRESHOLD_DEFAULTS.delta_tv,
    eps: Eps = THRESHOLD_DEFAULTS.eps,
    eps_low: EpsLow = THRESHOLD_DEFAULTS.eps_low,
    eps_high: EpsHigh = THRESHOLD_DEFAULTS.eps_high,
    clip_ratio_c: ClipRatioC = THRESHOLD_DEFAULTS.clip_ratio_c,
    mask_param: MaskParams = None, mask_module: MaskModules = None,
    vocab_size: VocabSize = None, batch_rows: BatchRows = None, workers: Workers = None,
    threads: Threads = 1, engine: EngineOpt = Engine.local, ray_address: RayAddress = None,
    resume: Resume = False,
) -> None:
    """Compute, per token, top-K/binary KL and TV, the direction slopes (ratio and
    predictive, aggregated and uniform tail) and every mask's keep decision, from the
    logged behavior AND training log-probs alone (no model). Writes tokens/v1 atomically:
    --engine local one file, --engine ray a directory partitioned by step.
    """
    # Imported when the command runs: torch and the readers are not needed for --help.
    from pdm_replay.commands.masks import MasksConfig, check_engine_logs
    try:
        load_mask_modules(mask_module)
        cfg = MasksConfig(log=check_engine_logs(log, engine.value), out=out,
                          masks=parse_mask_list(mask_names),
                          thresholds=threshold_options(eps, eps_low, eps_high, delta_kl,
                                                       delta_tv, clip_ratio_c,
                                                       parse_mask_params(mask_param)),
                          vocab_size=vocab_size, batch_rows=batch_rows, workers=workers,
                          threads=threads, engine=engine.value, ray_address=ray_address,
                          resume=resume, mask_modules=tuple(mask_module) if mask_module
                          else None)
        start = time.perf_counter()
        summary = _run(cfg)
    except (ValueError, FileNotFoundError, ImportError) as exc:
        fail(exc)
    print_summary(summary, time.perf_counter() - start)
