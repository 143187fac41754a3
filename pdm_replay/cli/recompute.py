"""``pdm-replay recompute``: fill a log's train columns from each row's step checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from pdm_replay.cli.app import app
from pdm_replay.cli.common import PlainHelpCommand, choices, console, fail, progress_bar, value
from pdm_replay.names import DTYPES, ENGINES

if TYPE_CHECKING:
    from pdm_replay.commands.recompute import RecomputeSummary

Engine = choices("Engine", ENGINES)
Dtype = choices("Dtype", DTYPES)

Log = Annotated[Path, typer.Argument(help="Rollout log (file or directory) with prompt_ids.")]
Checkpoint = Annotated[Path, typer.Option(
    "--checkpoint", help="The policy θ_t that scores each row: a save_pretrained directory, "
    "or a template filled from the row's logged step, e.g. ckpt/global_step_{step}.")]
Out = Annotated[Path, typer.Option("--out", "-o", help="rollout/v1 Parquet file to write "
                                   "(the log with its train columns recomputed).")]
EngineOpt = Annotated[Engine, typer.Option(  # type: ignore[valid-type]
    "--engine", help="local: this process computes every step's rows in turn (--device, "
    "--threads). ray: Ray Data batch inference, a pool of model-holding actors (--workers, "
    "--num-gpus) on the cluster at --ray-address or RAY_ADDRESS, else on a local Ray "
    "instance sized to the usable CPUs; the log and the checkpoints must be at the same path "
    "on every node. Both give the same output.")]
DtypeOpt = Annotated[Dtype, typer.Option(  # type: ignore[valid-type]
    "--dtype", help="Weight dtype of the checkpoint; statistics are float32/float64 "
    "regardless. Recorded in the output's footer.")]
Device = Annotated[str, typer.Option("--device", help="torch device of the local engine, "
                                     "e.g. cpu, cuda:0 (Ray actors use their GPU).")]
MicroBatch = Annotated[int, typer.Option("--micro-batch-size", min=1, help=(
    "Samples per forward pass, as replay's (the same micro-batches give the same bits)."))]
ChunkTokens = Annotated[int, typer.Option("--chunk-tokens", min=1, help=(
    "Tokens per LM-head chunk: memory is one (chunk, vocabulary) float32 block."))]
TaskRows = Annotated[int, typer.Option("--task-rows", min=1, help=(
    "Rows of one step per work unit (rounded up to whole micro-batches)."))]
Threads = Annotated[int, typer.Option("--threads", min=1, help="torch intra-op threads "
                                      "per worker (each Ray CPU actor reserves as many CPUs).")]
Workers = Annotated[Optional[int], typer.Option("--workers", min=1, help=(
    "ray: model actors (default: as many as the cluster's GPUs, or its CPUs / --threads, "
    "allow; at most one per work unit)."))]
NumGpus = Annotated[Optional[float], typer.Option("--num-gpus", min=0, help=(
    "ray: GPUs per actor (0.5 puts two actors on a GPU; default 1 when the cluster has "
    "GPUs, else 0: CPU actors)."))]
RayAddress = Annotated[Optional[str], typer.Option("--ray-address", help=(
    "ray: the cluster to join (default: RAY_ADDRESS, else a local instance)."))]
Resume = Annotated[bool, typer.Option("--resume", help=(
    "After a killed run (either engine): redo only the work units it had not finished "
    "(each finished unit is kept in .<out>.pdm-partial until the output is written); the "
    "output is the one an uninterrupted run writes."))]


def print_summary(s: RecomputeSummary) -> None:
    console.print(f"recomputed train_logprobs / train_topk_logprobs of {s.rows} rows "
                  f"({s.tokens} tokens, {s.steps} steps, {s.units} work units, engine "
                  f"{s.engine}) -> {s.out} ({s.seconds:.1f} s)")


@app.command(cls=PlainHelpCommand)
def recompute(log: Log, checkpoint: Checkpoint, out: Out,
              engine: EngineOpt = Engine.local,  # type: ignore[attr-defined]
              dtype: DtypeOpt = Dtype.float32,  # type: ignore[attr-defined]
              device: Device = "cpu", micro_batch_size: MicroBatch = 8,
              chunk_tokens: ChunkTokens = 1024, task_rows: TaskRows = 256,
              threads: Threads = 1, workers: Workers = None, num_gpus: NumGpus = None,
              ray_address: RayAddress = None, resume: Resume = False) -> None:
    """Fill train_logprobs and train_topk_logprobs (π at µ's logged support: the sampled
    token and the logged top-K ids) of every row from its step's checkpoint, as replay's
    pre-update recompute does (chunked LM head), and write the log again, atomically, with
    the checkpoint and dtype in its footer: `pdm-replay masks` then runs on it. Rows are
    grouped by step (log order within a step); each worker loads a step's checkpoint once.
    Finished work units are kept until the output is written: --resume continues a
    killed run.
    """
    # torch, transformers and Ray load when the command runs, not for --help.
    from pdm_replay.commands.recompute import RecomputeConfig, run_recompute
    try:
        cfg = RecomputeConfig(
            log=log, checkpoint=checkpoint, out=out, engine=value(engine),
            dtype=value(dtype), device=device, micro_batch_size=micro_batch_size,
            chunk_tokens=chunk_tokens, task_rows=task_rows, threads=threads,
            workers=workers, num_gpus=num_gpus, ray_address=ray_address, resume=resume)
        with progress_bar("recompute", None, "rows") as bar:
            def tick(rows: int, tokens: int) -> None:
                bar.update(bar.task_ids[0], completed=rows, rate=f"{tokens:,} tokens")
            summary = run_recompute(cfg, on_progress=tick)
    except (ValueError, FileNotFoundError) as exc:
        fail(exc)
    print_summary(summary)
