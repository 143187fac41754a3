"""Token strings (and their ``bytes``) -> ids for OpenAI-style logprobs; a log's vocab size.

OpenAI-compatible servers name tokens by their text. vLLM's
``return_tokens_as_token_ids`` turns them into ``"token_id:1234"``, which maps without a
tokenizer; anything else needs ``--tokenizer`` and must map to exactly one id.

**Byte-level BPE** (GPT-2 family: Qwen, Llama 3; the tokenizer's decoder is
``ByteLevel``): vocabulary pieces are written in the byte-level alphabet (byte 0xE9 is the
piece ``é``, the character é = bytes c3 a9 is the piece ``Ã©``), so a token's *text* is
never looked up as a piece. Its byte sequence is: the entry's ``bytes`` when given,
else the UTF-8 of its text, mapped to the one id whose piece decodes to exactly those
bytes (added tokens by their content). A token shown as U+FFFD whose bytes are just that
character's UTF-8 is the display of a partial UTF-8 sequence (vLLM's
``_create_chat_logprobs`` writes ``bytes=list(text.encode("utf-8", errors="replace"))``);
every id that could have produced it is a candidate and more than one is an error.
SGLang's chat server sends the true bytes (``token_id_to_bytes`` in
``sglang/srt/entrypoints/openai/utils.py``), which resolve fragments.

**Other tokenizers** (word level, SentencePiece): the ids whose piece equals the text or
whose decoded text equals it; exactly one, or an error listing them.

Examples
--------
>>> TokenMapper(None).to_id("token_id:1234")
1234
>>> TokenMapper(None).to_id("hello")
Traceback (most recent call last):
...
pdm_replay.ingest.parsing.IngestFieldError: token string 'hello' needs a tokenizer: pass tokenizer PATH, or serve with return_tokens_as_token_ids=true
>>> BYTE_DECODER["é"], BYTE_DECODER["Ã"], BYTE_DECODER["Ġ"]
(233, 195, 32)
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from pdm_replay.ingest.parsing import IngestError, IngestFieldError

TOKEN_ID_PREFIX = "token_id:"
REPLACEMENT = "\ufffd"
HINT = "serve with return_tokens_as_token_ids=true to log ids instead of text"


def _byte_alphabet() -> dict[str, int]:
    """The byte-level BPE alphabet, character -> byte: printable Latin-1 bytes stand for
    themselves, the other 68 bytes for the code points 256, 257, ... in byte order."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    shifted = [b for b in range(256) if b not in kept]
    return {**{chr(b): b for b in kept}, **{chr(256 + n): b for n, b in enumerate(shifted)}}


BYTE_DECODER = _byte_alphabet()


def _is_byte_level(doc: dict) -> bool:
    """The tokenizer.json decoder is ``ByteLevel`` (alone or in a ``Sequence``)."""
    dec = doc.get("decoder") or {}
    parts = dec.get("decoders", []) if dec.get("type") == "Sequence" else [dec]
    return any((p or {}).get("type") == "ByteLevel" for p in parts)


def _load_tokenizer(path: Path, file: Path) -> Any:
    """A ``tokenizers.Tokenizer`` from ``file`` (tokenizer.json) or the model directory
    ``path``; any failure is an :class:`IngestError` naming the file."""
    try:
        if file.is_file() and file.suffix == ".json":
            from tokenizers import Tokenizer
            return Tokenizer.from_file(str(file))
        from transformers import AutoTokenizer
        tok = getattr(AutoTokenizer.from_pretrained(str(path)), "backend_tokenizer", None)
    except IngestError:
        raise
    # tokenizers raises a bare Exception ("data did not match any variant ..."),
    # transformers OSError/ValueError/JSONDecodeError: all mean the files are unusable.
    except Exception as exc:  # noqa: BLE001
        where = file if file.is_file() else path
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise IngestError(f"tokenizer {where}: cannot be loaded ({detail}); pass a valid "
                          "tokenizer.json or the model directory it came with") from None
    if tok is None:
        raise IngestError(f"tokenizer {path}: not a fast tokenizer; pass the "
                          "directory of its tokenizer.json")
    return tok


class _Backend:
    """The few tokenizer facts we need, from a ``tokenizers`` tokenizer (tokenizer.json,
    or a transformers fast tokenizer's backend)."""

    def __init__(self, path: Path) -> None:
        file = path / "tokenizer.json" if path.is_dir() else path
        tok = _load_tokenizer(path, file)
        self.vocab: dict[str, int] = tok.get_vocab(with_added_tokens=True)
        self.added = {t.content: i for i, t in tok.get_added_tokens_decoder().items()}
        self.size = max(len(self.vocab), max(self.vocab.values(), default=-1) + 1)
        self.byte_level = _is_byte_level(json.loads(tok.to_str()))
        self.decode = lambda i: tok.decode([i], skip_special_tokens=False)

    def piece_bytes(self, piece: str) -> bytes:
        """The bytes a vocabulary piece stands for (byte-level tokenizers)."""
        if piece in self.added or any(ch not in BYTE_DECODER for ch in piece):
            return piece.encode("utf-8")
        return bytes(BYTE_DECODER[ch] for ch in piece)


class TokenMapper:
    """Maps a logged token (text, optional ``bytes``) to its id; ``tokenizer`` is a path."""

    def __init__(self, tokenizer: Path | str | None) -> None:
        self.path = Path(tokenizer) if tokenizer else None
        self._backend: _Backend | None = None
        self._by_bytes: dict[bytes, list[int]] | None = None
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

    def _bytes_table(self) -> dict[bytes, list[int]]:
        if self._by_bytes is None:
            table: dict[bytes, list[int]] = defaultdict(list)
            for piece, i in self.backend.vocab.items():
                table[self.backend.piece_bytes(piece)].append(i)
            self._by_bytes = dict(table)
        return self._by_bytes

    def _decoded(self) -> dict[str, list[int]]:
        """Decoded text of every id -> ids (built once: a decode per vocabulary entry)."""
        if self._by_text is None:
            table: dict[str, list[int]] = defaultdict(list)
            for i in range(self.backend.size):
                table[self.backend.decode(i)].append(i)
            self._by_text = dict(table)
        return self._by_text

    def candidates(self, token: str, token_bytes: Sequence[int] | None = None) -> list[int]:
        """Every id the logged token could be (see the module); sorted, unique."""
        b = self.backend
        if not b.byte_level:
            ids = set(self._decoded().get(token, []))
            return sorted(ids | ({b.vocab[token]} if token in b.vocab else set()))
        raw = bytes(token_bytes) if token_bytes is not None else token.encode("utf-8")
        ids = set(self._bytes_table().get(raw, []))
        if REPLACEMENT in token and raw == token.encode("utf-8"):
            ids |= set(self._decoded().get(token, []))  # a lossy display: any fragment
        return sorted(ids)

    def to_id(self, token: Any, token_bytes: Sequence[int] | None = None) -> int:
        """The id of ``token``: ``token_id:N``, or the one id its bytes / text name."""
        if not isinstance(token, str):
            raise IngestError(f"token {token!r} is not a string")
        if token.startswith(TOKEN_ID_PREFIX):
            try:
                return int(token[len(TOKEN_ID_PREFIX):])
            except ValueError:
                raise IngestError(f"token string {token!r} is not token_id:<integer>") from None
        if self.path is None:
            raise IngestFieldError("token string {token!r} needs a tokenizer: pass {tokenizer} "
                                   "PATH, or serve with return_tokens_as_token_ids=true",
                                   token=token)
        if token_bytes is not None and (not isinstance(token_bytes, (list, tuple)) or any(
                not isinstance(v, int) or not 0 <= v < 256 for v in token_bytes)):
            raise IngestError(f"token {token!r}: bytes {token_bytes!r} is not a list of 0..255")
        ids = self.candidates(token, token_bytes)
        if len(ids) == 1:
            return ids[0]
        shown = f"token {token!r}" + (f" (bytes {list(token_bytes)})" if token_bytes else "")
        if not ids:
            raise IngestError(f"{shown} matches no token of tokenizer {self.path}; {HINT}")
        why = (" (U+FFFD is how a partial UTF-8 character is displayed)"
               if REPLACEMENT in token else "")
        raise IngestError(f"{shown} is ambiguous: {len(ids)} ids {ids[:8]} of tokenizer "
                          f"{self.path} could have produced it{why}; {HINT}")


def resolve_vocab_size(vocab_size: int | None, tokenizer: Path | str | None) -> int:
    """``vocab_size`` if given; else the model's ``config.json`` next to the tokenizer
    (the logits width, often padded above the tokenizer's size); else the tokenizer's size.
    """
    if vocab_size is not None:
        if vocab_size < 1:
            raise IngestFieldError("{vocab_size} must be positive, got {got}", got=vocab_size)
        return vocab_size
    if tokenizer is None:
        raise IngestFieldError("the vocabulary size is required (it is n in the uniform-tail "
                               "estimators): pass {vocab_size} N or {tokenizer} PATH")
    path = Path(tokenizer)
    config = (path if path.is_dir() else path.parent) / "config.json"
    if config.is_file():
        try:
            doc = json.loads(config.read_text())
            size = doc.get("vocab_size") or (doc.get("text_config") or {}).get("vocab_size")
            if size:
                return int(size)
        except (ValueError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            raise IngestFieldError("{config}: not a usable model config.json ({exc}); fix it, "
                                   "or pass {vocab_size} N", config=config, exc=exc) from None
    return TokenMapper(path).backend.size
