"""``sglang``: SGLang ``/generate`` responses (one JSON object per line).

Layout (request with ``return_logprob=true, top_logprobs_num=K``)::

    {"text": "...", "output_ids": [...],
     "meta_info": {"id": "...",
                   "output_token_logprobs": [[logprob, token_id, text_or_null], ...],
                   "output_top_logprobs": [[[logprob, token_id, text], ...] or null, ...]},
     "sampling_params": {...the request's...}, "prompt_ids": [...],
     ...per-sample fields of the README...}

Read from SGLang 0.5.23's source (``sglang/srt/managers/tokenizer_manager.py``):
``TokenizerManager.detokenize_logprob_tokens`` makes the ``(logprob, id, text)``
triples and ``detokenize_top_logprobs_tokens`` one list per position, ``None`` where the
scheduler sent an empty row; such a row is read as an empty top-K (the support is the
sampled token) and counted in a warning. The entries are ``torch.topk`` of the
log-probs (``get_top_logprobs_raw``, ``sglang/srt/layers/logprob_processor.py``):
the true top-K by descending log-prob, the sampled token separately
(``plus_sampled``). With ``return_flat_raw_output_top_logprobs`` the response carries,
instead of ``output_top_logprobs``, ``output_top_logprobs_val_flat`` /
``_idx_flat`` (or their little-endian float32 / int32 ``_b64`` forms),
``output_top_logprobs_shape = [rows, k]`` and ``output_top_logprobs_null_prefix``: the
first ``null_prefix`` positions have no row, position ``i`` after them holds
``flat[(i - null_prefix) * k : (i - null_prefix + 1) * k]``
(``_build_flat_top_logprobs_fields``). By default SGLang returns log-probs of the
temperature-scaled, untruncated distribution (``processed``);
``SGLANG_RETURN_ORIGINAL_LOGPROB=1`` makes them ``raw`` (pass ``--logprobs-mode raw``).
A request's ``input_ids`` are used as ``prompt_ids`` when that field is absent.

Examples
--------
>>> rec = {"advantage": 1.0, "meta_info": {"id": "q1",
...        "output_token_logprobs": [[-0.5, 11, None], [-0.1, 4, None]],
...        "output_top_logprobs": [[[-0.5, 11, None], [-1.2, 4, None]], None]}}
>>> row = record_row(rec)
>>> row["sample_id"], row["response_ids"], row["topk_ids"], row["__notes__"]
('q1', [11, 4], [[11, 4], []], {'positions without a top-logprob row (SGLang null rows)': 1})
>>> flat = {"output_top_logprobs_val_flat": [-0.1, -2.0], "output_top_logprobs_idx_flat":
...         [4, 9], "output_top_logprobs_shape": [1, 2], "output_top_logprobs_null_prefix": 1}
>>> flat_rows(flat, 2)
[[], [(-0.1, 4), (-2.0, 9)]]
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from pdm_replay.ingest.formats import ParseContext
from pdm_replay.ingest.parsing import (NOTES, IngestError, Reject, Rows, json_rows,
                                       sample_fields)

NULL_ROWS = "positions without a top-logprob row (SGLang null rows)"
FLAT = "output_top_logprobs_"


def _tuples(value: Any, what: str, pos: int | None = None) -> list[tuple[float, int]]:
    where = f" at pos {pos}" if pos is not None else ""
    if not isinstance(value, list):
        raise IngestError(f"missing logprobs: meta_info.{what}{where} is "
                          f"{type(value).__name__}; request return_logprob=true"
                          + (", top_logprobs_num=K" if "top" in what else ""))
    return [(e[0], int(e[1])) for e in value]


def _flat_values(meta: Mapping, name: str, dtype: str) -> np.ndarray | None:
    if meta.get(FLAT + name) is not None:
        return np.asarray(meta[FLAT + name], dtype=np.float64 if dtype == "f" else np.int64)
    packed = meta.get(f"{FLAT}{name}_b64")
    if packed is None:
        return None
    marker = meta.get(f"{FLAT}{name}_b64_dtype", "float32" if dtype == "f" else "int32")
    return np.frombuffer(base64.b64decode(packed), dtype=np.dtype(marker).newbyteorder("<"))


def flat_rows(meta: Mapping, t: int) -> list[list[tuple[float, int]]] | None:
    """The per-position top-K of SGLang's flat layout (``None`` if the response has none)."""
    vals, idx = _flat_values(meta, "val_flat", "f"), _flat_values(meta, "idx_flat", "i")
    if vals is None and idx is None:
        return None
    shape, prefix = meta.get(FLAT + "shape"), int(meta.get(FLAT + "null_prefix") or 0)
    if vals is None or idx is None or not isinstance(shape, list) or len(shape) != 2:
        raise IngestError("flat top logprobs need output_top_logprobs_val_flat, _idx_flat "
                          "and _shape [rows, k]")
    rows, k = int(shape[0]), int(shape[1])
    if vals.size != rows * k or idx.size != rows * k or prefix + rows != t:
        raise IngestError(f"flat top logprobs: shape {shape} and null_prefix {prefix} do not "
                          f"fit {vals.size} values, {idx.size} ids and {t} tokens")
    v, i = vals.reshape(rows, k).tolist(), idx.reshape(rows, k).tolist()
    return [[] for _ in range(prefix)] + [list(zip(a, b)) for a, b in zip(v, i)]


def _top_rows(meta: Mapping, t: int) -> tuple[list[list[tuple[float, int]]], int]:
    """(per-position top-K, null rows read as empty) of one response of ``t`` tokens."""
    flat = flat_rows(meta, t)
    if flat is not None:
        return flat, 0
    tops_raw = meta.get("output_top_logprobs")
    if tops_raw is None:
        return [[] for _ in range(t)], 0
    if not isinstance(tops_raw, list) or len(tops_raw) != t:
        raise IngestError(f"missing logprobs: output_top_logprobs has "
                          f"{len(tops_raw) if isinstance(tops_raw, list) else 'no'} positions "
                          f"for {t} tokens")
    rows = [[] if e is None else _tuples(e, "output_top_logprobs", p)
            for p, e in enumerate(tops_raw)]
    return rows, sum(e is None for e in tops_raw)


def record_row(rec: Mapping) -> dict[str, Any]:
    """One rollout/v1 row from an SGLang ``/generate`` response."""
    meta = rec.get("meta_info")
    if not isinstance(meta, Mapping):
        raise IngestError("no meta_info: expected an SGLang /generate response")
    sampled = _tuples(meta.get("output_token_logprobs"), "output_token_logprobs")
    if any(lp is None for lp, _ in sampled):
        raise IngestError("missing logprobs: output_token_logprobs has null log-probs")
    tops, null_rows = _top_rows(meta, len(sampled))
    row = sample_fields(rec, {}, len(sampled))
    row.update(response_ids=[k for _, k in sampled], behavior_logprobs=[lp for lp, _ in sampled],
               topk_ids=[[k for _, k in top] for top in tops],
               topk_logprobs=[[lp for lp, _ in top] for top in tops])
    if null_rows:
        row[NOTES] = {NULL_ROWS: null_rows}
    if "prompt_ids" not in row and rec.get("input_ids") is not None:
        row["prompt_ids"] = rec["input_ids"]
    if meta.get("id") is not None:
        row.setdefault("sample_id", str(meta["id"]))
    return row


def parse(path: Path, ctx: ParseContext) -> Iterator[Rows | Reject]:
    """Rows and rejects of one JSONL file of SGLang responses (one sample per line)."""
    return json_rows(path, lambda rec: [rec], lambda rec, _, i, n: record_row(rec), "sample")
