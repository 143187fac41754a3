"""The registry of input formats: defaults each format records, and how to parse a file.

Examples
--------
>>> sorted(FORMATS)
['columns', 'openai', 'prime-rl', 'sglang', 'verl', 'vllm']
>>> FORMATS["sglang"].logprobs_mode, FORMATS["vllm"].topk_convention
('processed', 'plus_sampled')
>>> FORMATS["verl"].topk_convention, FORMATS["verl"].logprobs_mode
('replace_last', 'processed')
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:  # the parsers load pyarrow and NumPy: imported when a file is parsed
    from pdm_replay.ingest.columns import ColumnMapping
    from pdm_replay.ingest.parsing import Reject, Rows
    from pdm_replay.ingest.tokenizer import TokenMapper


@dataclass(frozen=True)
class ParseContext:
    """What parsers may need beyond the file: a token mapper, a column mapping."""

    mapper: TokenMapper
    mapping: ColumnMapping | None
    chunk_rows: int


Parser = Callable[[Path, int, ParseContext], Iterator["Rows | Reject"]]


@dataclass(frozen=True)
class Format:
    """One input format: its default footer settings, file suffixes and parser."""

    name: str
    topk_convention: str
    logprobs_mode: str
    suffixes: tuple[str, ...]
    parse: Parser
    doc: str


# Each parser module imports pyarrow/NumPy, so the registry names them and imports one
# when a file is parsed: `pdm-replay --help` (which lists the formats) loads neither.
# The conventions are the producers' (each module's docstring cites the code that writes
# them): vLLM and SGLang return the sampled token beside its top-K ("plus_sampled"); an
# OpenAI-compatible server and verl put it in the K-th slot ("replace_last").
def _openai(path: Path, index: int, ctx: ParseContext) -> Iterator[Rows | Reject]:
    from pdm_replay.ingest import openai
    return openai.parse(path, ctx.mapper)


def _vllm(path: Path, index: int, ctx: ParseContext) -> Iterator[Rows | Reject]:
    from pdm_replay.ingest import vllm
    return vllm.parse(path)


def _sglang(path: Path, index: int, ctx: ParseContext) -> Iterator[Rows | Reject]:
    from pdm_replay.ingest import sglang
    return sglang.parse(path)


def _verl(path: Path, index: int, ctx: ParseContext) -> Iterator[Rows | Reject]:
    from pdm_replay.ingest import verl
    return verl.parse(path, index)


def _prime_rl(path: Path, index: int, ctx: ParseContext) -> Iterator[Rows | Reject]:
    from pdm_replay.ingest import prime_rl
    return prime_rl.parse(path)


def _columns(path: Path, index: int, ctx: ParseContext) -> Iterator[Rows | Reject]:
    from pdm_replay.ingest import columns
    from pdm_replay.ingest.parsing import IngestFieldError
    if ctx.mapping is None:
        raise IngestFieldError("{fmt} columns needs {mapping} MAP.toml")
    return columns.parse(path, ctx.mapping, ctx.chunk_rows)


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("openai", "replace_last", "raw", (".jsonl", ".json"), _openai,
           "JSONL of OpenAI-compatible (chat) completion responses (vLLM, SGLang servers)"),
    Format("vllm", "plus_sampled", "raw", (".jsonl", ".json"), _vllm,
           "vLLM offline RequestOutput serialised to JSON"),
    Format("sglang", "plus_sampled", "processed", (".jsonl", ".json"), _sglang,
           "SGLang /generate responses with meta_info log-probs"),
    Format("verl", "replace_last", "processed", (".pt", ".pth", ".npz"), _verl,
           "verl / sail-sg/Stable-RL batch dumps (torch.save dict or .npz)"),
    Format("prime-rl", "plus_sampled", "processed", (".jsonl",), _prime_rl,
           "prime-rl trainer token exports (step_N/rank_R.jsonl files, no top-K)"),
    Format("columns", "plus_sampled", "raw", (".parquet", ".jsonl", ".json"), _columns,
           "any Parquet/JSONL table plus a TOML column mapping"),
)}


def expand_inputs(inputs: tuple[Path, ...], fmt: Format) -> list[Path]:
    """Input files: each path itself, or a directory's files with the format's suffixes."""
    from pdm_replay.ingest.parsing import IngestError
    files: list[Path] = []
    for path in inputs:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in fmt.suffixes
                           and not any(part.startswith(".") for part in
                                       p.relative_to(path).parts))
            if not found:
                raise IngestError(f"{path}: directory holds no {'/'.join(fmt.suffixes)} files")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise IngestError(f"{path}: no such file or directory")
    return files
