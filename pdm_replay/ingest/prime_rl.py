"""``prime-rl``: prime-rl's trainer token exports (``token_exports/step_N/rank_R.jsonl``).

Read from PrimeIntellect-ai/prime-rl (2026-08), ``src/prime_rl/trainer/rl/token_export.py``:
with ``enable_token_export`` on, ``TokenExporter.export`` writes one JSON object per
training sequence (prompt and completion, one sample of a packed micro-batch) to
``<output_dir>/token_exports/step_<step>/rank_<rank>.jsonl``, and ``mark_stable`` touches
``STABLE`` in the step directory once every rank flushed. A line holds
``schema_version`` (1), ``step``, ``rank``, ``micro_step``, ``micro_sequence_idx``,
``export_sequence_idx`` (per file), ``env_name`` and per-token lists (``_export_columns``):
``token_ids``, ``position_ids``, ``loss_mask``, ``advantages``, ``inference_logprobs``,
``trainer_logprobs``, ``entropy``, ``mismatch_kl``, ``log_importance_ratio``,
``importance_ratio``, ``prob_delta``, ``is_masked``/``_high``/``_low`` and the optional
weight streams ``rl_weights``, ``ce_weights``, ``ref_kl_weights``. Floats are float32
values (``_tensor_to_floats``), non-finite ones written as ``null`` (``_json_float``).

Mapping to rollout/v1: the inference engine's log-probs are µ (``behavior_logprobs``),
the trainer's are π (``train_logprobs``), aligned with ``token_ids`` (prime-rl shifts its
log-probs so position i is log p(token i | < i)). The prompt is everything before the
first loss token, the response the rest, its ``loss_mask`` kept (multi-turn environment
tokens stay masked). Tokens whose action came from no sampler (``rl_weights`` and
``ref_kl_weights`` both 0: cross-entropy tokens; prime-rl's ``train.py`` leaves them out
of ``mismatch_kl`` the same way) are masked too. The export has no top-K: the support is
the sampled token (ratio and binary masks are exact; top-K ones see K = 0). prime-rl's
inference defaults vLLM to ``logprobs_mode=processed_logprobs``
(``prime_rl/configs/inference.py``), hence ``processed``. ``sample_id`` is
``step<N>/rank<R>/<export_sequence_idx>``.

Examples
--------
>>> rec = {"schema_version": 1, "step": 3, "rank": 0, "export_sequence_idx": 7,
...        "token_ids": [5, 6, 7, 8], "loss_mask": [False, False, True, True],
...        "advantages": [0.0, 0.0, 1.5, 1.5], "inference_logprobs": [None, 0.0, -0.5, -1.0],
...        "trainer_logprobs": [-2.0, -1.0, -0.4, -1.1]}
>>> row = record_row(rec)
>>> row["sample_id"], row["prompt_ids"], row["response_ids"], row["behavior_logprobs"]
('step3/rank0/7', [5, 6], [7, 8], [-0.5, -1.0])
>>> row["train_logprobs"], row["loss_mask"], row["advantages"], row["topk_ids"]
([-0.4, -1.1], [True, True], [1.5, 1.5], [[], []])
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

from pdm_replay.ingest.formats import ParseContext
from pdm_replay.ingest.parsing import NOTES, IngestError, Reject, Rows, json_rows

SCHEMA_VERSION = 1  # prime-rl token_export.SCHEMA_VERSION
NULL_MASKED = "null log-probs at masked positions (read as 0)"
COLUMNS = ("token_ids", "loss_mask", "advantages", "inference_logprobs", "trainer_logprobs")


def _columns(rec: Mapping) -> dict[str, list]:
    """The per-token lists, checked for presence and equal length."""
    if rec.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
        raise IngestError(f"schema_version {rec.get('schema_version')!r}: this reader knows "
                          f"prime-rl's token export schema {SCHEMA_VERSION}")
    missing = [c for c in COLUMNS if not isinstance(rec.get(c), list)]
    if missing:
        raise IngestError(f"no {', '.join(missing)}: expected a prime-rl token export line "
                          "(token_exports/step_N/rank_R.jsonl, enable_token_export)")
    cols = {c: rec[c] for c in COLUMNS}
    for c in ("rl_weights", "ref_kl_weights"):
        if isinstance(rec.get(c), list):
            cols[c] = rec[c]
    lengths = {c: len(v) for c, v in cols.items()}
    if len(set(lengths.values())) != 1:
        raise IngestError(f"per-token lists of different lengths {lengths}; the line is not "
                          "one exported sequence")
    return cols


def _sampled(cols: Mapping[str, list]) -> list[bool]:
    """Loss tokens whose action a sampler drew (prime-rl train.py's ``mismatch_mask``)."""
    mask = [bool(m) for m in cols["loss_mask"]]
    rl, ref = cols.get("rl_weights"), cols.get("ref_kl_weights")
    if rl is None and ref is None:
        return mask
    rl = rl if rl is not None else [1.0 if m else 0.0 for m in mask]
    ref = ref if ref is not None else [0.0] * len(mask)
    return [m and ((a or 0.0) != 0 or (b or 0.0) != 0) for m, a, b in zip(mask, rl, ref)]


def _logprobs(values: list, mask: list[bool], name: str, start: int) -> tuple[list[float], int]:
    """``values`` as floats; a null at a loss token is an error, elsewhere 0 (counted)."""
    out, filled = [], 0
    for pos, (v, m) in enumerate(zip(values, mask)):
        if v is None:
            if m:
                raise IngestError(f"{name} is null (non-finite in the export) at response pos "
                                  f"{pos} (sequence position {start + pos}), a loss token; "
                                  "drop the line or re-export the step")
            v, filled = 0.0, filled + 1
        out.append(float(v))
    return out, filled


def record_row(rec: Mapping) -> dict[str, Any]:
    """One rollout/v1 row from one prime-rl token export line."""
    cols = _columns(rec)
    sampled = _sampled(cols)
    if not any(sampled):
        raise IngestError("no sampled loss token (every loss token has rl_weights 0): "
                          "nothing to replay in this sequence")
    start = next(i for i, m in enumerate(cols["loss_mask"]) if m)
    mask = sampled[start:]
    mu, n_mu = _logprobs(cols["inference_logprobs"][start:], mask, "inference_logprobs", start)
    pi, n_pi = _logprobs(cols["trainer_logprobs"][start:], mask, "trainer_logprobs", start)
    t = len(mask)
    row: dict[str, Any] = {
        "sample_id": f"step{rec.get('step', 0)}/rank{rec.get('rank', 0)}/"
                     f"{rec.get('export_sequence_idx', 0)}",
        "step": int(rec.get("step", 0)), "prompt_ids": [int(x) for x in cols["token_ids"][:start]],
        "response_ids": [int(x) for x in cols["token_ids"][start:]],
        "advantages": [float(a or 0.0) for a in cols["advantages"][start:]],
        "behavior_logprobs": mu, "train_logprobs": pi, "loss_mask": mask,
        "topk_ids": [[] for _ in range(t)], "topk_logprobs": [[] for _ in range(t)],
        "train_topk_logprobs": [[] for _ in range(t)]}
    if n_mu + n_pi:
        row[NOTES] = {NULL_MASKED: n_mu + n_pi}
    return row


def parse(path: Path, ctx: ParseContext) -> Iterator[Rows | Reject]:
    """Rows and rejects of one ``rank_R.jsonl`` export file (one sequence per line)."""
    return json_rows(path, lambda rec: [rec], lambda rec, _, i, n: record_row(rec), "sequence",
                     sampling=lambda rec: {})
