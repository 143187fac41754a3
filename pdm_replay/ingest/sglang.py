"""``sglang``: SGLang ``/generate`` responses (one JSON object per line).

Layout (request with ``return_logprob=true, top_logprobs_num=K``)::

    {"text": "...", "output_ids": [...],
     "meta_info": {"id": "...",
                   "output_token_logprobs": [[logprob, token_id, text_or_null], ...],
                   "output_top_logprobs": [[[logprob, token_id, text], ...], ...]},
     "sampling_params": {...the request's...}, "prompt_ids": [...],
     ...per-sample fields of the README...}

``output_top_logprobs`` is the true top-K; the sampled token comes separately
(``plus_sampled``). By default SGLang returns log-probs of the temperature-scaled,
untruncated distribution (``processed``); ``SGLANG_RETURN_ORIGINAL_LOGPROB=1`` makes them
``raw`` (pass ``--logprobs-mode raw``). A request's ``input_ids`` are used as
``prompt_ids`` when that field is absent.

Examples
--------
>>> rec = {"advantage": 1.0, "meta_info": {"id": "q1",
...        "output_token_logprobs": [[-0.5, 11, None]],
...        "output_top_logprobs": [[[-0.5, 11, None], [-1.2, 4, None]]]}}
>>> row = record_row(rec)
>>> row["sample_id"], row["response_ids"], row["topk_ids"]
('q1', [11], [[11, 4]])
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

from pdm_replay.ingest.records import IngestError, Reject, Rows, json_rows, sample_fields

CONVENTION = "plus_sampled"
LOGPROBS_MODE = "processed"


def _tuples(value: Any, what: str, pos: int | None = None) -> list[tuple[float, int]]:
    where = f" at pos {pos}" if pos is not None else ""
    if not isinstance(value, list):
        raise IngestError(f"missing logprobs: meta_info.{what}{where} is "
                          f"{type(value).__name__}; request return_logprob=true"
                          + (", top_logprobs_num=K" if "top" in what else ""))
    return [(e[0], int(e[1])) for e in value]


def record_row(rec: Mapping) -> dict[str, Any]:
    """One rollout/v1 row from an SGLang ``/generate`` response."""
    meta = rec.get("meta_info")
    if not isinstance(meta, Mapping):
        raise IngestError("no meta_info: expected an SGLang /generate response")
    sampled = _tuples(meta.get("output_token_logprobs"), "output_token_logprobs")
    tops_raw = meta.get("output_top_logprobs")
    if tops_raw is None:
        tops: list[list[tuple[float, int]]] = [[] for _ in sampled]
    elif not isinstance(tops_raw, list) or len(tops_raw) != len(sampled):
        raise IngestError(f"missing logprobs: output_top_logprobs has "
                          f"{len(tops_raw) if isinstance(tops_raw, list) else 'no'} positions "
                          f"for {len(sampled)} tokens")
    else:
        tops = [_tuples(e, "output_top_logprobs", t) for t, e in enumerate(tops_raw)]
    if any(lp is None for lp, _ in sampled):
        raise IngestError("missing logprobs: output_token_logprobs has null log-probs")
    row = sample_fields(rec, {}, len(sampled))
    row.update(response_ids=[k for _, k in sampled], behavior_logprobs=[lp for lp, _ in sampled],
               topk_ids=[[k for _, k in top] for top in tops],
               topk_logprobs=[[lp for lp, _ in top] for top in tops])
    if "prompt_ids" not in row and rec.get("input_ids") is not None:
        row["prompt_ids"] = rec["input_ids"]
    if meta.get("id") is not None:
        row.setdefault("sample_id", str(meta["id"]))
    return row


def parse(path: Path) -> Iterator[Rows | Reject]:
    """Rows and rejects of one JSONL file of SGLang responses (one sample per line)."""
    return json_rows(path, lambda rec: [rec], lambda rec, _, i, n: record_row(rec), "sample")
