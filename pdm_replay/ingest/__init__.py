"""Ingest rollouts from trainers and rollout engines into rollout/v1 (``pdm-replay ingest``).

One small module per input format (``openai``, ``vllm``, ``sglang``, ``verl``,
``columns``), each a parser yielding rows and rejects; :mod:`.padded` holds the one
padding rule every format goes through; :mod:`.driver` streams, checks and writes.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Each public name and its module, imported on first use (the driver pulls in the
# validator and torch; `pdm-replay ingest --help` needs only the format registry).
_HOME = {"FORMATS": "formats", "IngestConfig": "driver", "IngestError": "parsing",
         "IngestSummary": "driver", "footer_warnings": "driver", "ingest": "driver"}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(import_module(f"pdm_replay.ingest.{_HOME[name]}"), name)
    raise AttributeError(f"module 'pdm_replay.ingest' has no attribute {name!r}")
