"""The registry of input formats: defaults each format records, and how to parse a file.

Examples
--------
>>> sorted(FORMATS)
['columns', 'openai', 'sglang', 'verl', 'vllm']
>>> FORMATS["sglang"].logprobs_mode, FORMATS["vllm"].topk_convention
('processed', 'plus_sampled')
>>> FORMATS["verl"].topk_convention, FORMATS["verl"].logprobs_mode
('replace_last', 'processed')
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from pdm_replay.ingest import columns, openai, sglang, verl, vllm
from pdm_replay.ingest.parsing import IngestError, IngestFieldError, Reject, Rows
from pdm_replay.ingest.tokenizer import TokenMapper


@dataclass(frozen=True)
class ParseContext:
    """What parsers may need beyond the file: a token mapper, a column mapping."""

    mapper: TokenMapper
    mapping: columns.ColumnMapping | None
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


def _columns(path: Path, index: int, ctx: ParseContext) -> Iterator[Rows | Reject]:
    if ctx.mapping is None:
        raise IngestFieldError("{fmt} columns needs {mapping} MAP.toml")
    return columns.parse(path, ctx.mapping, ctx.chunk_rows)


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("openai", openai.CONVENTION, openai.LOGPROBS_MODE, (".jsonl", ".json"),
           lambda p, i, c: openai.parse(p, c.mapper),
           "JSONL of OpenAI-compatible (chat) completion responses (vLLM, SGLang servers)"),
    Format("vllm", vllm.CONVENTION, vllm.LOGPROBS_MODE, (".jsonl", ".json"),
           lambda p, i, c: vllm.parse(p),
           "vLLM offline RequestOutput serialised to JSON"),
    Format("sglang", sglang.CONVENTION, sglang.LOGPROBS_MODE, (".jsonl", ".json"),
           lambda p, i, c: sglang.parse(p),
           "SGLang /generate responses with meta_info log-probs"),
    Format("verl", verl.CONVENTION, verl.LOGPROBS_MODE, (".pt", ".pth", ".npz"),
           lambda p, i, c: verl.parse(p, i),
           "verl / sail-sg/Stable-RL batch dumps (torch.save dict or .npz)"),
    Format("columns", columns.CONVENTION, columns.LOGPROBS_MODE, (".parquet", ".jsonl", ".json"),
           _columns, "any Parquet/JSONL table plus a TOML column mapping"),
)}


def expand_inputs(inputs: tuple[Path, ...], fmt: Format) -> list[Path]:
    """Input files: each path itself, or a directory's files with the format's suffixes."""
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
