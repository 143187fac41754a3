"""``pdm-replay ingest``: read rollouts in the format a stack writes, write rollout/v1."""

from __future__ import annotations

import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, List, Optional

import typer

from pdm_replay.cli.app import app
from pdm_replay.cli.common import console, err_console, fail, progress_bar
from pdm_replay.ingest.formats import FORMATS
from pdm_replay.names import ON_ERROR

if TYPE_CHECKING:
    from pdm_replay.commands.ingest import IngestSummary

OnError = Enum("OnError", {name: name for name in ON_ERROR}, type=str)  # type: ignore[misc]


class Convention(str, Enum):
    plus_sampled = "plus_sampled"
    replace_last = "replace_last"


class Mode(str, Enum):
    raw = "raw"
    processed = "processed"


# The built-in formats' help; a --format-module's formats are resolved when the command
# runs, so --from is a name checked against the registry then (unknown: the known listed).
FORMATS_HELP = "; ".join(f"{f.name}: {f.doc}" for f in FORMATS.values())


def print_summary(s: IngestSummary, seconds: float) -> None:
    meta = s.meta
    console.print(f"wrote {s.rows} samples, {s.tokens} tokens from {s.files} file(s) -> "
                  f"{s.out} ({seconds:.1f} s)", highlight=False)
    if meta is not None:
        console.print(f"footer: vocab_size={meta.vocab_size} top_k={meta.top_k} "
                      f"topk_convention={meta.topk_convention} "
                      f"logprobs_mode={meta.logprobs_mode} temperature={meta.temperature} "
                      f"top_p={meta.top_p} top_k_sampling={meta.top_k_sampling}",
                      highlight=False)
    if s.rejects_path is not None:
        console.print(f"rejected {s.rejected} record(s) -> {s.rejects_path}", highlight=False)
        for reason, n in s.reasons.most_common(10):
            console.print(f"  {n:>7}  {reason}", highlight=False)
    for w in s.warnings:
        err_console.print(f"[bold yellow]warning:[/] {w}", highlight=False)


# The options, one alias each (the command's signature lists them by name).
Inputs = Annotated[List[Path], typer.Argument(help="Input files or directories.")]
From = Annotated[str, typer.Option(
    "--from", metavar="|".join(FORMATS), help=f"Input format. {FORMATS_HELP}; or a format "
    "a --format-module registers.")]
FormatModules = Annotated[Optional[List[Path]], typer.Option(
    "--format-module", help="A Python file that registers ingest formats of its own with "
    "register_format from pdm_replay.ingest (repeatable); loaded before --from is "
    "resolved.")]
Out = Annotated[Path, typer.Option("--out", "-o", help="rollout/v1 Parquet file to write.")]
Tokenizer = Annotated[Optional[Path], typer.Option(
    "--tokenizer", help="Tokenizer (tokenizer.json or a model directory): maps "
    "token strings to ids (openai format) and gives the vocabulary size.")]
VocabSize = Annotated[Optional[int], typer.Option(
    "--vocab-size", min=1, help="Vocabulary size n (the logits width); default: "
    "config.json next to --tokenizer, else the tokenizer's size.")]
OnErrorOpt = Annotated[OnError, typer.Option(
    "--on-error", help="fail: stop at the first bad record, leave no "
    "output. skip: list bad records in a rejects file and go on.")]
Mapping = Annotated[Optional[Path], typer.Option(
    "--mapping", help="TOML column mapping (--from columns), or a shipped one by "
    "name: open-instruct.")]
Rejects = Annotated[Optional[Path], typer.Option(
    "--rejects", help="Rejects file (default: OUT with suffix .rejects.jsonl).")]
TopkConvention = Annotated[Optional[Convention], typer.Option(
    "--topk-convention", help="Override the format's top-K convention.")]
LogprobsMode = Annotated[Optional[Mode], typer.Option(
    "--logprobs-mode", help="Override: raw (before temperature/truncation) or "
    "processed (after).")]
TopK = Annotated[Optional[int], typer.Option(
    "--top-k", min=0, help="K of the logged top-K (default: from the data).")]
Temperature = Annotated[Optional[float], typer.Option(
    "--temperature", help="Sampling temperature of the rollouts.")]
TopP = Annotated[Optional[float], typer.Option("--top-p", help="Sampler top-p.")]
TopKSampling = Annotated[Optional[int], typer.Option(
    "--top-k-sampling", min=0, help="Sampler top-k (0 = off).")]
ChunkRows = Annotated[int, typer.Option(
    "--chunk-rows", min=1, help="Samples per checked and written chunk (bounds memory).")]


@app.command("ingest")
def ingest_command(
    inputs: Inputs, fmt: From, out: Out, tokenizer: Tokenizer = None,
    vocab_size: VocabSize = None, on_error: OnErrorOpt = OnError.fail,
    mapping: Mapping = None, rejects: Rejects = None,
    topk_convention: TopkConvention = None, logprobs_mode: LogprobsMode = None,
    top_k: TopK = None, temperature: Temperature = None, top_p: TopP = None,
    top_k_sampling: TopKSampling = None, chunk_rows: ChunkRows = 512,
    format_module: FormatModules = None,
) -> None:
    """Convert rollouts logged by vLLM / SGLang servers, vLLM offline, SGLang, verl /
    Stable-RL batch dumps or any table (with a column mapping) into one rollout/v1 log,
    streaming and atomically (nothing is left under OUT unless the run succeeds).
    """
    options = {k: v.value if isinstance(v, Enum) else v for k, v in locals().items()}
    from pdm_replay.commands.ingest import IngestConfig, IngestError, ingest  # on run
    modules = options.pop("format_module")
    options["format_modules"] = tuple(modules) if modules else None
    cfg = IngestConfig(**{**options, "inputs": tuple(inputs)})  # fields named as the options
    start = time.perf_counter()
    try:
        with progress_bar("ingest", None, "files") as bar:
            def tick(files: int, rows: int) -> None:
                bar.update(bar.task_ids[0], completed=files, rate=f"{rows} samples")
            summary = ingest(cfg, on_progress=tick)
    except (IngestError, FileNotFoundError) as exc:
        fail(exc)
    print_summary(summary, time.perf_counter() - start)
