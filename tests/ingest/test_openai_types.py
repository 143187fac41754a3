"""``--from openai`` on responses built from the ``openai`` package's own types.

Token ids, word-level text, and byte-level BPE text (a real ``tokenizers`` ByteLevel BPE
trained offline), with ``bytes`` as SGLang's chat server writes them (the token's true
bytes) and as vLLM's writes them (the UTF-8 of the displayed text, lossy for fragments).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from pdm_replay.commands.ingest import IngestConfig, IngestError, ingest
from pdm_replay.ingest.tokenizer import BYTE_DECODER, TokenMapper
from pdm_replay.commands.validate import validate_log

openai_types = pytest.importorskip(
    "openai.types.chat", reason="the openai package is not installed: pip install -e "
    "'.[integrations]'")
from openai.types.chat import (ChatCompletion, ChatCompletionMessage,  # noqa: E402
                               ChatCompletionTokenLogprob)
from openai.types.chat.chat_completion import Choice, ChoiceLogprobs  # noqa: E402
from openai.types.chat.chat_completion_token_logprob import TopLogprob  # noqa: E402

CORPUS = ["café é é naïve hello world 𠮷"] * 20


@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory):
    """(tokenizer dir, tokenizers.Tokenizer): byte-level BPE as Qwen / Llama 3 use it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"], show_progress=False))
    path = tmp_path_factory.mktemp("bpe")
    tok.save(str(path / "tokenizer.json"))
    return path, tok


def true_bytes(tok, i: int) -> list[int]:
    """A token's bytes through the byte-level alphabet (SGLang's ``token_id_to_bytes``)."""
    piece = tok.id_to_token(i)
    return list(piece.encode()) if piece == "<|endoftext|>" else [BYTE_DECODER[c] for c in piece]


def completion(ids: list[int], entry, pool: list[int], k: int = 3,
               seed: int = 0) -> ChatCompletion:
    """A chat completion whose position t sampled ``ids[t]``; ``entry(i)`` -> (text, bytes)
    of token i; top_logprobs: the sampled token and k - 1 others drawn from ``pool``, by
    descending log-prob."""
    rng = np.random.default_rng(seed)
    content = []
    for i in ids:
        others = [j for j in rng.permutation(pool)[:k + 2].tolist() if j != i][:k - 1]
        lps = np.sort(-rng.random(k) * 3 - 0.01)[::-1].tolist()
        tops = [TopLogprob(token=entry(j)[0], bytes=entry(j)[1], logprob=lp)
                for j, lp in zip([i, *others], lps)]
        content.append(ChatCompletionTokenLogprob(token=entry(i)[0], bytes=entry(i)[1],
                                                  logprob=lps[0], top_logprobs=tops))
    return ChatCompletion(
        id="chatcmpl-1", object="chat.completion", created=0, model="m",
        choices=[Choice(index=0, finish_reason="stop",
                        message=ChatCompletionMessage(role="assistant", content=""),
                        logprobs=ChoiceLogprobs(content=content))])


def _write(path: Path, responses: list[ChatCompletion]) -> Path:
    path.write_text("".join(json.dumps({"advantage": 1.0, "response": r.model_dump()}) + "\n"
                            for r in responses))
    return path


def _ids_of(out: Path) -> tuple[list[int], list[list[int]]]:
    row = pq.read_table(out).to_pylist()[0]
    return row["response_ids"], row["topk_ids"]


def test_byte_level_text_maps_through_bytes_not_pieces(tmp_path: Path, bpe) -> None:
    """The issue's case: "é" (bytes c3 a9) is the piece "Ã©", not the lone-byte piece "é"."""
    path, tok = bpe
    vocab = tok.get_vocab()
    mapper = TokenMapper(path)
    assert mapper.to_id("é") == mapper.to_id("é", [0xC3, 0xA9]) == vocab["Ã©"] != vocab["é"]
    assert mapper.to_id("café") == vocab["cafÃ©"] and mapper.to_id("<|endoftext|>") == 0
    with pytest.raises(IngestError, match="matches no token"):
        mapper.to_id("zzzz")


def test_sglang_bytes_recover_every_id_even_fragments(tmp_path: Path, bpe) -> None:
    path, tok = bpe
    ids = tok.encode("𠮷 é café naïve").ids
    fragments = [i for i in ids if tok.decode([i]) == "\ufffd"]
    assert fragments  # 𠮷's four bytes are split over two tokens: both display as U+FFFD
    resp = completion(ids, lambda i: (tok.decode([i]), true_bytes(tok, i)),
                      pool=list(range(tok.get_vocab_size())))  # fragments among the tops too
    src = _write(tmp_path / "sgl.jsonl", [resp])
    ingest(IngestConfig("openai", (src,), tmp_path / "log.parquet", tokenizer=path))
    got, tops = _ids_of(tmp_path / "log.parquet")
    assert got == ids and [t[0] for t in tops] == ids
    assert validate_log(tmp_path / "log.parquet").ok


def test_vllm_lossy_fragment_is_rejected_naming_line_and_position(tmp_path: Path,
                                                                   bpe) -> None:
    path, tok = bpe
    ids = tok.encode("é café").ids + tok.encode("𠮷").ids
    pos = next(t for t, i in enumerate(ids) if tok.decode([i]) == "\ufffd")
    vllm = lambda i: (tok.decode([i]), list(tok.decode([i]).encode("utf-8", "replace")))  # noqa: E731
    whole = [i for i in range(tok.get_vocab_size()) if "\ufffd" not in tok.decode([i])]
    good = completion(tok.encode("é café").ids, vllm, whole)
    src = _write(tmp_path / "v.jsonl", [good, completion(ids, vllm, whole, seed=1)])
    with pytest.raises(IngestError, match=rf"v\.jsonl: line 2.*pos {pos}: token '\ufffd' "
                       r"\(bytes \[239, 191, 189\]\) is ambiguous: \d+ ids"):
        ingest(IngestConfig("openai", (src,), tmp_path / "log.parquet", tokenizer=path))
    s = ingest(IngestConfig("openai", (src,), tmp_path / "log.parquet", tokenizer=path,
                            on_error="skip"))
    assert s.rows == 1 and s.rejected == 1
    assert _ids_of(tmp_path / "log.parquet")[0] == tok.encode("é café").ids


def test_word_level_text_and_token_ids(tmp_path: Path, word_tokenizer: Path) -> None:
    ids = [3, 17, 0, 39]
    words = completion(ids, lambda i: (f"w{i}", list(f"w{i}".encode())), list(range(40)))
    as_ids = completion(ids, lambda i: (f"token_id:{i}", None), list(range(40)))
    for name, resp, tok in (("w", words, word_tokenizer), ("t", as_ids, None)):
        src = _write(tmp_path / f"{name}.jsonl", [resp])
        out = tmp_path / f"{name}.parquet"
        ingest(IngestConfig("openai", (src,), out, tokenizer=tok, vocab_size=40))
        got, tops = _ids_of(out)
        assert got == ids and [t[0] for t in tops] == ids and validate_log(out).ok
