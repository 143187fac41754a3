"""``openai``: JSONL of OpenAI-compatible completion / chat-completion responses.

As served by vLLM and SGLang. One response per line, either the response object itself
or ``{"response": {...}, ...}``; the per-sample fields of the README (``step``,
``advantage(s)``, ``prompt_ids``, ``reward``, ``sample_id``, ``group_id``,
``train_logprobs``, ``per_sample``, ``sampling``) sit at the top level of the line.

Chat (the ``openai`` package's ``ChatCompletion``: ``choices[i].logprobs.content[t]`` a
``ChatCompletionTokenLogprob`` ``{token, bytes, logprob, top_logprobs: [TopLogprob
{token, bytes, logprob}]}``). Completions: ``choices[i].logprobs = {tokens,
token_logprobs, top_logprobs: [{token: logprob}]}`` (no bytes). ``choices[i].token_ids``
(vLLM ``return_token_ids``) gives the sampled ids directly; token strings ``token_id:N``
(vLLM ``return_tokens_as_token_ids``) map without a tokenizer; other strings map through
``--tokenizer`` by their ``bytes`` (see :mod:`pdm_replay.ingest.tokenizer`). A token that
maps to no id or to several is an error naming the position (and the top-logprob slot).

Each position's entries are sorted by log-prob. vLLM's server
(``vllm/entrypoints/openai/serving_chat.py``, ``OpenAIServingChat._create_chat_logprobs``
and ``_get_top_logprobs``) lists the first K items of the engine's per-position dict,
which holds the sampled token first and then the top-K: a sampled token outside the
top-K displaces the K-th entry, so the log records ``replace_last``. SGLang's server
(``sglang/srt/entrypoints/openai/serving_chat.py``, ``_build_token_logprobs_from_raw``)
lists the true top-K: ``replace_last`` is only conservative there, and
``--topk-convention plus_sampled`` is exact.

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

from pdm_replay.ingest.formats import ParseContext
from pdm_replay.ingest.parsing import (IngestError, IngestFieldError, Reject, Rows, json_rows,
                                       per_sample, sample_fields, sampling_of, sort_topk)
from pdm_replay.ingest.tokenizer import TokenMapper

# vLLM's chat/completion top_logprobs are the first K entries of {sampled, top-K...}: the
# sampled token may stand in for the K-th entry. replace_last (this format's convention in
# pdm_replay.ingest.formats.FORMATS) never trusts that slot.


Entry = tuple[Any, Any, Any]  # (token text, bytes or None, logprob)


def _entries(logprobs: Mapping) -> tuple[list[Entry], list[list[Entry]]]:
    """(sampled entries, per-position top entries) of one choice; an entry is
    (token, bytes, logprob), bytes None where the layout has none (legacy completions)."""
    if logprobs.get("content") is not None:  # chat completion
        content = logprobs["content"]
        def entry(e):
            return (e.get("token"), e.get("bytes"), e.get("logprob"))
        return ([entry(c) for c in content],
                [[entry(e) for e in (c.get("top_logprobs") or [])] for c in content])
    if logprobs.get("tokens") is not None:  # legacy completion
        tokens = logprobs["tokens"]
        lps = list(logprobs.get("token_logprobs") or [])
        top = logprobs.get("top_logprobs") or [None] * len(tokens)
        return ([(tok, None, lps[t] if t < len(lps) else None) for t, tok in enumerate(tokens)],
                [[(tok, None, lp) for tok, lp in (d or {}).items()] for d in top])
    raise IngestError("logprobs holds neither content[] (chat) nor tokens[] (completion)")


def _map(mapper: TokenMapper, entry: Entry, pos: int, slot: int | None = None) -> int:
    try:
        return mapper.to_id(entry[0], entry[1])
    except IngestError as exc:  # the cause's fields stay fields (the CLI shows them as flags)
        where = f"pos {pos}" + ("" if slot is None else f", top_logprobs[{slot}]")
        raise IngestFieldError("{where}: {cause}", where=where, cause=exc) from None


def choice_row(obj: Mapping, response: Mapping, choice: Mapping, index: int, count: int,
               mapper: TokenMapper) -> dict[str, Any]:
    """One rollout/v1 row from ``choice`` (``index`` of ``count``) of ``response``."""
    if not choice.get("logprobs"):
        raise IngestError("missing logprobs: the choice has none; request logprobs=true "
                          "(chat) or logprobs=K (completion), and top_logprobs=K")
    sampled, tops = _entries(choice["logprobs"])
    missing = next((t for t, e in enumerate(sampled) if e[2] is None), None)
    if missing is not None:
        raise IngestError(f"missing logprobs: no log-prob for the sampled token at pos "
                          f"{missing}")
    ids = choice.get("token_ids")
    if ids is None:
        ids = [_map(mapper, e, t) for t, e in enumerate(sampled)]
    elif len(ids) != len(sampled):
        raise IngestError(f"token_ids has {len(ids)} entries but logprobs has {len(sampled)}")
    extra = per_sample(obj, index, count)
    row = sample_fields(obj, extra, len(ids))
    row.update(response_ids=list(ids), behavior_logprobs=[e[2] for e in sampled],
               topk_ids=[[_map(mapper, e, t, j) for j, e in enumerate(top)]
                         for t, top in enumerate(tops)],
               topk_logprobs=[[e[2] for e in top] for top in tops])
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


def parse(path: Path, ctx: ParseContext) -> Iterator[Rows | Reject]:
    """Rows and rejects of one JSONL file of OpenAI-compatible responses (token strings
    mapped by ``ctx.mapper``)."""
    return json_rows(path, _choices, lambda rec, choice, i, n: choice_row(
        rec, rec.get("response", rec), choice, i, n, ctx.mapper), "choice",
        lambda rec: sampling_of(rec, "sampling", "sampling_params"))
