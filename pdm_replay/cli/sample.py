"""``pdm-replay make-sample``: regenerate the shipped sample data (or a scaled variant)."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from pdm_replay.cli.app import app
from pdm_replay.cli.common import console, fail, progress_bar

if TYPE_CHECKING:
    from pdm_replay.commands.make_sample import SampleResult


class Size(str, enum.Enum):
    small = "small"
    tiny = "tiny"


def print_result(result: SampleResult) -> None:
    stats = result.stats.as_dict()
    table = Table(title=f"sample written to {result.out_dir}")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    for name, value in stats.items():
        table.add_row(name, f"{value:.4g}" if isinstance(value, float) else str(value))
    console.print(table)
    for name, ok in result.stats.checks().items():
        console.print(f"check {name}: " + ("[green]pass[/]" if ok else "[yellow]FAIL[/]"))
    console.print("time: " + ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items()))


@app.command("make-sample")
def make_sample_cmd(
    out_dir: Path = typer.Argument(..., help="Directory to write checkpoints/, rollouts/ "
                                   "and README.md into."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random choice (same seed, "
                             "same data)."),
    size: Size = typer.Option(Size.small, "--size", help="small: the shipped sample "
                              "(measured 22 minutes on one CPU thread, 2026-12-02: sft "
                              "676.5 s, rl 652.2 s, statistics 14.1 s, as its README "
                              "records); "
                              "tiny: seconds, for tests."),
    force: bool = typer.Option(False, "--force", help="Replace an existing sample in "
                               "OUT_DIR."),
) -> None:
    """Train a small Qwen3 policy on a sorting task (SFT, then GRPO steps whose rollouts
    come from a bfloat16 engine refreshed every few steps, so stale by 0..7 steps), log the
    last steps' batches (µ's top-20 log-probs, the trainer's float32 log-probs) as
    rollout/v1 with θ_t of every logged step, the last θ and the trainer's AdamW state,
    and print statistics.
    """
    # Imported here: the training code pulls in transformers (~2 s), which every other
    # command, and `pdm-replay --help`, would otherwise pay for.
    from pdm_replay.commands.make_sample import SampleConfig, make_sample
    cfg = SampleConfig(seed=seed, size=size.value, force=force)
    try:
        with progress_bar("make-sample", None, "steps") as bar:
            task = bar.task_ids[0]

            def tick(stage: str, done: int, total: int) -> None:
                bar.update(task, description=stage, completed=done, total=total)
            result = make_sample(out_dir, cfg, progress=tick)
    except (ValueError, FileExistsError) as exc:
        fail(exc)
    print_result(result)
