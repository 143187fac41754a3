"""``openai``: JSONL of OpenAI-compatible completion / chat-completion responses.

As served by vLLM and SGLang. One response per line, either the response object itself
or ``{"response": {...}, ...}``; the per-sample fields of the README (``step``,
``advantage(s)``, ``prompt_ids``, ``reward``, ``sample_id``, ``group_id``,
``train_logprobs``, ``per_sample``, ``sampling``) sit at the top level of the line.

Chat: ``choices[i].logprobs.content[t] = {token, logprob, top_logprobs: [{token,
logprob}]}``. Completions: ``choices[i].logprobs = {tokens, token_logprobs,
top_logprobs: [{token: logprob}]}``. ``choices[i].token_ids`` (vLLM ``return_token_ids``)
gives the sampled ids directly; token strings ``token_id:N`` (vLLM
``return_tokens_as_token_ids``) map without a tokenizer. Each position's entries are
sorted by log-prob; vLLM puts the sampled token first and keeps K entries, so it may
displace the K-th top entry: the log records ``replace_last``.

Examples
--------
>>> line = {"advantage": 1.0, "choices": [{"logprobs": {"content": [
...     {"token": "token_id:7", "logprob": -0.2, "top_logprobs": [
...         {"token": "token_id:7", "logprob": -0.2}, {"token": "token_id:3", "logprob": -1.9}]}]}}]}
>>> row = choice_row(line, line, line["choices"][0], 0, 1, TokenMapper(None))
>>> row["response_ids"], row["topk_ids"], row["advantages"]
([7], [[7, 3]], [1.0])
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

from pdm_replay.ingest.records import (IngestError, Reject, Rows, json_rows, per_sample,
                                       sample_fields, sampling_of, sort_topk)
from pdm_replay.ingest.tokenizer import TokenMapper

# vLLM's chat/completion top_logprobs are the first K entries of {sampled, top-K...}: the
# sampled token may stand in for the K-th entry. replace_last never trusts that slot.
CONVENTION = "replace_last"
LOGPROBS_MODE = "raw"


def _entries(logprobs: Mapping) -> tuple[list, list, list[list[tuple[Any, Any]]]]:
    """(token strings, sampled log-probs, per-position [(token, logprob)]) of one choice."""
    if logprobs.get("content") is not None:  # chat completion
        content = logprobs["content"]
        tops = [[(e.get("token"), e.get("logprob")) for e in (c.get("top_logprobs") or [])]
                for c in content]
        return [c.get("token") for c in content], [c.get("logprob") for c in content], tops
    if logprobs.get("tokens") is not None:  # legacy completion
        tokens = logprobs["tokens"]
        top = logprobs.get("top_logprobs") or [None] * len(tokens)
        return (tokens, list(logprobs.get("token_logprobs") or []),
                [list((d or {}).items()) for d in top])
    raise IngestError("logprobs holds neither content[] (chat) nor tokens[] (completion)")


def _map(mapper: TokenMapper, token: Any, pos: int) -> int:
    try:
        return mapper.to_id(token)
    except IngestError as exc:
        raise IngestError(f"pos {pos}: {exc}") from None


def choice_row(obj: Mapping, response: Mapping, choice: Mapping, index: int, count: int,
               mapper: TokenMapper) -> dict[str, Any]:
    """One rollout/v1 row from ``choice`` (``index`` of ``count``) of ``response``."""
    if not choice.get("logprobs"):
        raise IngestError("missing logprobs: the choice has none; request logprobs=true "
                          "(chat) or logprobs=K (completion), and top_logprobs=K")
    tokens, lps, tops = _entries(choice["logprobs"])
    if len(lps) != len(tokens) or any(lp is None for lp in lps):
        pos = next((t for t, lp in enumerate(lps) if lp is None), len(lps))
        raise IngestError(f"missing logprobs: no log-prob for the sampled token at pos {pos}")
    ids = choice.get("token_ids")
    if ids is None:
        ids = [_map(mapper, tok, t) for t, tok in enumerate(tokens)]
    elif len(ids) != len(tokens):
        raise IngestError(f"token_ids has {len(ids)} entries but logprobs has {len(tokens)}")
    extra = per_sample(obj, index, count)
    row = sample_fields(obj, extra, len(ids))
    row.update(response_ids=list(ids), behavior_logprobs=lps,
               topk_ids=[[_map(mapper, tok, t) for tok, _ in top] for t, top in enumerate(tops)],
               topk_logprobs=[[lp for _, lp in top] for top in tops])
    sort_topk(row, row["topk_logprobs"])
    prompt = response.get("prompt_token_ids") or choice.get("prompt_token_ids")
    if "prompt_ids" not in row and prompt is not None:
        row["prompt_ids"] = prompt
    rid = response.get("id")
    if rid:
        row.setdefault("sample_id", f"{rid}/{choice.get('index', index)}")
        if count > 1:
            row.setdefault("group_id", str(rid))
    return row


def _choices(rec: dict) -> list:
    response = rec.get("response", rec)
    choices = response.get("choices") if isinstance(response, dict) else None
    if not isinstance(choices, list) or not choices:
        raise IngestError("no choices[]: each line must be a (chat) completion response or "
                          "{\"response\": <response>, ...}")
    return choices


def parse(path: Path, mapper: TokenMapper) -> Iterator[Rows | Reject]:
    """Rows and rejects of one JSONL file of OpenAI-compatible responses."""
    return json_rows(path, _choices, lambda rec, choice, i, n: choice_row(
        rec, rec.get("response", rec), choice, i, n, mapper), "choice",
        lambda rec: sampling_of(rec, "sampling", "sampling_params"))
