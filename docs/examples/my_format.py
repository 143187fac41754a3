"""An ingest format of your own: one JSON object per line holding the sampled tokens, their
log-probs and, per position, the top-K as ``[id, log-prob]`` pairs (genuine top-K first,
the sampled token after them when it is outside: ``plus_sampled``)::

    {"id": "q1-0", "step": 3, "advantage": 0.5, "tokens": [11, 4],
     "logprobs": [-0.5, -0.1], "top": [[[11, -0.5], [4, -1.2]], [[4, -0.1]]]}

    pdm-replay ingest --format-module docs/examples/my_format.py --from my-jsonl \
        runs/*.jsonl --out rollouts.parquet --vocab-size 32000

The parser has the signature of every format, ``parse(path, ctx)``; ``json_rows`` streams
the lines and turns a line that does not parse, or a record ``row`` fails on, into a
reject naming file and line; ``sample_fields`` reads the per-sample fields every JSON
format shares (``advantage(s)``, ``step``, ``reward``, ``group_id``, ...).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from pdm_replay.ingest import IngestFormat, ParseContext, Reject, Rows, register_format
from pdm_replay.ingest.parsing import json_rows, sample_fields


def row(rec: dict[str, Any]) -> dict[str, Any]:
    """One rollout/v1 row from one line."""
    tokens = [int(k) for k in rec["tokens"]]
    out = sample_fields(rec, {}, len(tokens))
    out.update(response_ids=tokens, behavior_logprobs=[float(lp) for lp in rec["logprobs"]],
               topk_ids=[[int(k) for k, _ in pos] for pos in rec["top"]],
               topk_logprobs=[[float(lp) for _, lp in pos] for pos in rec["top"]])
    if rec.get("id") is not None:
        out["sample_id"] = str(rec["id"])
    return out


def parse(path: Path, ctx: ParseContext) -> Iterator[Rows | Reject]:
    """Rows and rejects of one JSONL file (one sample per line)."""
    return json_rows(path, lambda rec: [rec], lambda rec, *_: row(rec), "sample")


register_format(IngestFormat(
    "my-jsonl", parse, "JSONL of tokens, their log-probs and top-K [id, log-prob] pairs",
    (".jsonl",), topk_convention="plus_sampled", logprobs_mode="raw"))
