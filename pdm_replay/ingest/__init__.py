"""Read rollouts from trainers and rollout engines as rollout/v1 rows (``pdm-replay ingest``).

One small module per input format (``openai``, ``vllm``, ``sglang``, ``verl``,
``prime_rl``, ``columns``), each a parser ``parse(path, ctx)`` yielding rows and rejects,
registered in :mod:`.formats` (``register_format``; a user's formats come from a
``--format-module`` file); :mod:`.accept` holds the one pipeline every row goes through
(the padding rule of :mod:`.padded`, ``validate``'s checks). The command that streams,
checks and writes is :mod:`pdm_replay.commands.ingest`.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Each public name and its module, imported on first use (the parsers pull in pyarrow and
# NumPy; `pdm-replay ingest --help` needs only the format registry).
_HOME = {"FORMATS": "formats", "IngestFormat": "formats", "ParseContext": "formats",
         "load_format_module": "formats", "register_format": "formats",
         "IngestError": "parsing", "IngestFieldError": "parsing", "Location": "parsing",
         "Reject": "parsing", "Rows": "parsing"}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(import_module(f"pdm_replay.ingest.{_HOME[name]}"), name)
    raise AttributeError(f"module 'pdm_replay.ingest' has no attribute {name!r}")
