"""Ingest rollouts from trainers and rollout engines into rollout/v1 (``pdm-replay ingest``).

One small module per input format (``openai``, ``vllm``, ``sglang``, ``verl``,
``columns``), each a parser yielding rows and rejects; :mod:`.padded` holds the one
padding rule every format goes through; :mod:`.driver` streams, checks and writes.
"""

from pdm_replay.ingest.driver import IngestConfig, IngestSummary, footer_warnings, ingest
from pdm_replay.ingest.formats import FORMATS
from pdm_replay.ingest.records import IngestError

__all__ = ["FORMATS", "IngestConfig", "IngestError", "IngestSummary", "footer_warnings",
           "ingest"]
