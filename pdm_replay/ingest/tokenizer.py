"""Token strings -> ids (OpenAI-style logprobs), and the vocabulary size of a log.

OpenAI-compatible servers name tokens by their text. vLLM's
``return_tokens_as_token_ids`` turns them into ``"token_id:1234"``, which maps without a
tokenizer; anything else needs ``--tokenizer`` and must map to exactly one id.

Examples
--------
>>> TokenMapper(None).to_id("token_id:1234")
1234
>>> TokenMapper(None).to_id("hello")
Traceback (most recent call last):
...
pdm_replay.ingest.records.IngestError: token string 'hello' needs a tokenizer: pass --tokenizer PATH, or serve with return_tokens_as_token_ids=true
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from pdm_replay.ingest.records import IngestError

TOKEN_ID_PREFIX = "token_id:"


class _Backend:
    """The few tokenizer calls we need, over ``tokenizers`` or ``transformers``."""

    def __init__(self, path: Path) -> None:
        file = path / "tokenizer.json" if path.is_dir() else path
        if file.is_file() and file.suffix == ".json":
            from tokenizers import Tokenizer
            tok = Tokenizer.from_file(str(file))
            vocab = tok.get_vocab(with_added_tokens=True)
        else:
            from transformers import AutoTokenizer
            tok = AutoTokenizer.from_pretrained(str(path))
            vocab = tok.get_vocab()
        self.size = max(len(vocab), max(vocab.values(), default=-1) + 1)
        self.piece_to_id = vocab.get
        self.decode = lambda i: tok.decode([i], skip_special_tokens=False)

class TokenMapper:
    """Maps a logged token string to its id; ``tokenizer`` is a path (or None)."""

    def __init__(self, tokenizer: Path | str | None) -> None:
        self.path = Path(tokenizer) if tokenizer else None
        self._backend: _Backend | None = None
        self._by_text: dict[str, list[int]] | None = None

    @property
    def backend(self) -> _Backend:
        if self._backend is None:
            if self.path is None:
                raise IngestError("no tokenizer")
            if not self.path.exists():
                raise IngestError(f"tokenizer {self.path} does not exist")
            self._backend = _Backend(self.path)
        return self._backend

    def _decoded(self) -> dict[str, list[int]]:
        """Decoded text of every id -> ids (built once: a decode per vocabulary entry)."""
        if self._by_text is None:
            table: dict[str, list[int]] = defaultdict(list)
            for i in range(self.backend.size):
                table[self.backend.decode(i)].append(i)
            self._by_text = dict(table)
        return self._by_text

    def to_id(self, token: Any) -> int:
        """The id of ``token``: ``token_id:N``, a vocabulary piece, or unique decoded text."""
        if not isinstance(token, str):
            raise IngestError(f"token {token!r} is not a string")
        if token.startswith(TOKEN_ID_PREFIX):
            try:
                return int(token[len(TOKEN_ID_PREFIX):])
            except ValueError:
                raise IngestError(f"token string {token!r} is not token_id:<integer>") from None
        if self.path is None:
            raise IngestError(f"token string {token!r} needs a tokenizer: pass --tokenizer "
                              "PATH, or serve with return_tokens_as_token_ids=true")
        piece = self.backend.piece_to_id(token)
        if piece is not None:
            return int(piece)
        ids = self._decoded().get(token, [])
        if len(ids) == 1:
            return ids[0]
        why = "matches no token" if not ids else f"decodes from {len(ids)} ids {ids[:5]}"
        raise IngestError(f"token string {token!r} {why} of tokenizer {self.path}; serve with "
                          "return_tokens_as_token_ids=true to log ids instead of text")


def resolve_vocab_size(vocab_size: int | None, tokenizer: Path | str | None) -> int:
    """``vocab_size`` if given; else the model's ``config.json`` next to the tokenizer
    (the logits width, often padded above the tokenizer's size); else the tokenizer's size.
    """
    if vocab_size is not None:
        if vocab_size < 1:
            raise IngestError(f"--vocab-size must be positive, got {vocab_size}")
        return vocab_size
    if tokenizer is None:
        raise IngestError("the vocabulary size is required (it is n in the uniform-tail "
                          "estimators): pass --vocab-size N or --tokenizer PATH")
    path = Path(tokenizer)
    config = (path if path.is_dir() else path.parent) / "config.json"
    if config.is_file():
        doc = json.loads(config.read_text())
        size = doc.get("vocab_size") or (doc.get("text_config") or {}).get("vocab_size")
        if size:
            return int(size)
    return TokenMapper(path).backend.size
