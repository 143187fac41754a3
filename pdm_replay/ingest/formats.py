"""The registry of ingest formats: one :class:`IngestFormat` entry per ``--from`` name.

Every parser has one signature, ``parse(path, ctx) -> Iterator[Rows | Reject]``
(:data:`Parser`): ``path`` is one input file, ``ctx`` (:class:`ParseContext`) what the
run offers beyond it (the token mapper of ``tokenizer``, the column mapping, the chunk
size, the file's index among the inputs). A format is one :func:`register_format` call:
the built-in ones below, a user's from a module of their own (:func:`load_format_module`,
``--format-module``), which joins ``ingest`` as a mask module joins the other commands.

The built-in parsers import pyarrow and NumPy, so their entries name them as
``"module:function"`` and import one when a file is parsed: ``pdm-replay --help`` (which
lists the formats) loads neither.

Examples
--------
>>> sorted(FORMATS)
['columns', 'openai', 'prime-rl', 'sglang', 'verl', 'vllm']
>>> FORMATS["sglang"].logprobs_mode, FORMATS["vllm"].topk_convention
('processed', 'plus_sampled')
>>> FORMATS["verl"].topk_convention, FORMATS["verl"].logprobs_mode
('replace_last', 'processed')
>>> resolve_format("parquet")
Traceback (most recent call last):
...
pdm_replay.ingest.parsing.IngestError: unknown format 'parquet'; known: openai, vllm, sglang, verl, prime-rl, columns
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Union

from pdm_replay.user_modules import load_user_module, resolve

if TYPE_CHECKING:  # the parsers load pyarrow and NumPy: imported when a file is parsed
    from types import ModuleType

    from pdm_replay.ingest.parsing import Reject, Rows
    from pdm_replay.ingest.tokenizer import TokenMapper


@dataclass(frozen=True)
class ParseContext:
    """What a parser may use beyond its file (one per input file)."""

    mapper: TokenMapper  # token strings (and bytes) -> ids, through the run's tokenizer
    # the run's column mapping, a pdm_replay.ingest.columns.ColumnMapping (formats with
    # needs_mapping; None otherwise); typed Any since the columns parser imports this module
    mapping: Any
    chunk_rows: int  # samples per chunk, for formats that read tables in chunks
    index: int = 0  # the file's position among the inputs (a default step)


Parser = Callable[[Path, ParseContext], Iterator[Union["Rows", "Reject"]]]


@dataclass(frozen=True)
class IngestFormat:
    """One ``--from`` format: its parser, what the help says, its files and footer defaults.

    ``parser`` is the function (:data:`Parser`) or ``"module:function"``, imported on first
    use. ``suffixes`` select a directory's files; ``topk_convention`` / ``logprobs_mode``
    are the producer's, recorded in the footer unless the records or the run say
    otherwise. ``needs_mapping``: the run must give a column mapping (``ctx.mapping``).
    """

    name: str
    parser: Parser | str
    doc: str
    suffixes: tuple[str, ...]
    topk_convention: str = "plus_sampled"
    logprobs_mode: str = "raw"
    needs_mapping: bool = False

    def parse(self, path: Path, ctx: ParseContext) -> Iterator[Rows | Reject]:
        """The rows and rejects of one input file."""
        return resolve(self.parser)(path, ctx)


FORMATS: dict[str, IngestFormat] = {}
# sys.modules names of the --format-module files loaded: this prefix plus a hash of the path
USER_MODULE_PREFIX = "pdm_replay_user_formats_"


def register_format(fmt: IngestFormat) -> IngestFormat:
    """Add ``fmt`` to :data:`FORMATS`; a second format of the same name is rejected."""
    if not fmt.name or not isinstance(fmt.name, str):
        raise ValueError(f"a format needs a name, got {fmt.name!r}")
    if fmt.name in FORMATS:
        raise ValueError(f"format {fmt.name!r} is already registered")
    if not (callable(fmt.parser) or (isinstance(fmt.parser, str) and ":" in fmt.parser)):
        raise ValueError(f"format {fmt.name!r}: parser must be a function "
                         "parse(path, ctx) or 'module:function'")
    if isinstance(fmt.suffixes, str) or not all(
            isinstance(s, str) and s.startswith(".") for s in fmt.suffixes):
        raise ValueError(f"format {fmt.name!r}: suffixes must be a tuple like ('.jsonl',), "
                         f"got {fmt.suffixes!r}")
    FORMATS[fmt.name] = fmt
    return fmt


def load_format_module(path: str | Path) -> ModuleType:
    """Import the user's Python file ``path`` (it calls :func:`register_format`); its
    formats then join ``ingest``. Loading the same file twice is a no-op."""
    return load_user_module(path, USER_MODULE_PREFIX, "format_modules",
                            "pdm_replay.ingest.register_format")


def resolve_format(name: str) -> IngestFormat:
    """The registered format ``name``; an error listing the known ones otherwise."""
    if name not in FORMATS:
        from pdm_replay.ingest.parsing import IngestError
        raise IngestError(f"unknown format {name!r}; known: {', '.join(FORMATS)}")
    return FORMATS[name]


def expand_inputs(inputs: tuple[Path, ...], fmt: IngestFormat) -> list[Path]:
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


# The built-in formats, one entry each. The conventions are the producers' (each parser
# module's docstring cites the code that writes them): vLLM and SGLang return the sampled
# token beside its top-K ("plus_sampled"); an OpenAI-compatible server and verl put it in
# the K-th slot ("replace_last").
for _fmt in (
    IngestFormat("openai", "pdm_replay.ingest.openai:parse",
                 "JSONL of OpenAI-compatible (chat) completion responses (vLLM, SGLang "
                 "servers)", (".jsonl", ".json"), "replace_last", "raw"),
    IngestFormat("vllm", "pdm_replay.ingest.vllm:parse",
                 "vLLM offline RequestOutput serialized to JSON", (".jsonl", ".json"),
                 "plus_sampled", "raw"),
    IngestFormat("sglang", "pdm_replay.ingest.sglang:parse",
                 "SGLang /generate responses with meta_info log-probs", (".jsonl", ".json"),
                 "plus_sampled", "processed"),
    IngestFormat("verl", "pdm_replay.ingest.verl:parse",
                 "verl / sail-sg/Stable-RL batch dumps (torch.save dict or .npz)",
                 (".pt", ".pth", ".npz"), "replace_last", "processed"),
    IngestFormat("prime-rl", "pdm_replay.ingest.prime_rl:parse",
                 "prime-rl trainer token exports (step_N/rank_R.jsonl files, no top-K)",
                 (".jsonl",), "plus_sampled", "processed"),
    IngestFormat("columns", "pdm_replay.ingest.columns:parse",
                 "any Parquet/JSONL table plus a TOML column mapping",
                 (".parquet", ".jsonl", ".json"), "plus_sampled", "raw", needs_mapping=True),
):
    register_format(_fmt)
BUILTIN: tuple[str, ...] = tuple(FORMATS)  # the package's own formats
