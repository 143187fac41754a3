"""Ingest rollouts from trainers and rollout engines into rollout/v1 (``pdm-replay ingest``).

One small module per input format (``openai``, ``vllm``, ``sglang``, ``verl``,
``columns``), each a parser yielding rows and rejects; :mod:`.padded` holds the one
padding rule every format goes through. The command's work (stream, check, write) is
:mod:`pdm_replay.commands.ingest`.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Each public name and its module, imported on first use (`pdm-replay ingest --help`
# needs only the format registry).
_HOME = {"FORMATS": "formats", "IngestError": "parsing"}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(import_module(f"pdm_replay.ingest.{_HOME[name]}"), name)
    raise AttributeError(f"module 'pdm_replay.ingest' has no attribute {name!r}")
