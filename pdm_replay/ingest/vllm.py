"""``vllm``: vLLM offline ``RequestOutput`` objects serialized to JSON (one per line).

Layout (``LLM.generate`` with ``SamplingParams(logprobs=K)``)::

    {"request_id": "7", "prompt_token_ids": [...],
     "outputs": [{"index": 0, "token_ids": [...],
                  "logprobs": [{"<token_id>": {"logprob": -0.1, "rank": 1,
                                               "decoded_token": "a"}, ...}, ...]}],
     "sampling_params": {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "logprobs": 5,
                         "logprobs_mode": "raw_logprobs"},
     ...per-sample fields of the README...}

Each position's dict holds the top-K tokens plus the sampled token (K or K+1 entries:
``plus_sampled``): ``vllm/v1/engine/logprobs.py``, ``LogprobsProcessor.
_update_sample_logprobs``, builds it from the sampler's (K + 1) rows, the sampled token
first, into ``Logprob(logprob, rank, decoded_token)`` (``vllm/logprobs.py``). A logprob
may also be a bare number. Entries are reordered by rank (top-K first, an outside sampled
token last). vLLM's default ``logprobs_mode`` is ``raw_logprobs`` (before temperature and
truncation).

Examples
--------
>>> rec = {"request_id": "r", "advantage": 0.5, "outputs": [{"index": 0, "token_ids": [9],
...        "logprobs": [{"4": {"logprob": -0.3, "rank": 1}, "9": {"logprob": -2.0, "rank": 3}}]}]}
>>> row = output_row(rec, rec["outputs"][0], 0, 1)
>>> row["sample_id"], row["behavior_logprobs"], row["topk_ids"]
('r/0', [-2.0], [[4, 9]])
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

from pdm_replay.ingest.formats import ParseContext
from pdm_replay.ingest.parsing import (IngestError, Reject, Rows, json_rows, per_sample,
                                       sample_fields, sort_topk)



def _logprob(value: Any) -> float:
    return float(value["logprob"] if isinstance(value, Mapping) else value)


def _position(entry: Any, token: int, pos: int
              ) -> tuple[float, list[int], list[float], list[float]]:
    """(log-prob of ``token``, ids, log-probs, sort scores) of one position, in the dict's
    order (the order ``train_topk_logprobs`` of the record follows); the scores put the
    top-K first by rank (by log-prob without ranks) and an outside sampled token last."""
    if not isinstance(entry, Mapping) or not entry:
        raise IngestError(f"missing logprobs at pos {pos}: expected a {{token_id: logprob}} "
                          "dict (request SamplingParams(logprobs=K))")
    ids = [int(k) for k in entry]
    lps = [_logprob(v) for v in entry.values()]
    if token not in ids:
        raise IngestError(f"pos {pos}: the sampled token {token} is not in its logprobs dict")
    ranks = [v.get("rank") if isinstance(v, Mapping) else None for v in entry.values()]
    scores = ([-float(r) for r in ranks] if all(r is not None for r in ranks) else lps)
    return lps[ids.index(token)], ids, lps, scores


def output_row(rec: Mapping, out: Mapping, index: int, count: int) -> dict[str, Any]:
    """One rollout/v1 row from ``rec["outputs"][index]`` (of ``count``)."""
    ids = out.get("token_ids")
    logprobs = out.get("logprobs")
    if ids is None:
        raise IngestError("the output has no token_ids")
    if not isinstance(logprobs, list) or len(logprobs) != len(ids):
        raise IngestError(f"missing logprobs: outputs[{index}].logprobs has "
                          f"{len(logprobs) if isinstance(logprobs, list) else 'no'} positions "
                          f"for {len(ids)} tokens; request SamplingParams(logprobs=K)")
    parts = [_position(e, int(k), t) for t, (e, k) in enumerate(zip(logprobs, ids))]
    row = sample_fields(rec, per_sample(rec, index, count), len(ids))
    row.update(response_ids=[int(k) for k in ids],
               behavior_logprobs=[p[0] for p in parts],
               topk_ids=[p[1] for p in parts], topk_logprobs=[p[2] for p in parts])
    sort_topk(row, [p[3] for p in parts])
    if "prompt_ids" not in row and rec.get("prompt_token_ids") is not None:
        row["prompt_ids"] = rec["prompt_token_ids"]
    rid = rec.get("request_id")
    if rid is not None:
        row.setdefault("sample_id", f"{rid}/{out.get('index', index)}")
        if count > 1:
            row.setdefault("group_id", str(rid))
    return row


def _outputs(rec: dict) -> list:
    outputs = rec.get("outputs")
    if not isinstance(outputs, list) or not outputs:
        raise IngestError("no outputs[]: expected a serialized vllm RequestOutput")
    return outputs


def parse(path: Path, ctx: ParseContext) -> Iterator[Rows | Reject]:
    """Rows and rejects of one JSONL (or .json) file of serialized ``RequestOutput``."""
    return json_rows(path, _outputs, lambda rec, out, i, n: output_row(rec, out, i, n),
                     "output")
