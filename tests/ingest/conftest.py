"""Fixtures of the ingest tests; the layouts themselves live in ``ingest_layouts``."""

from __future__ import annotations

from pathlib import Path

import pytest
from ingest_layouts import VOCAB, Truth, make_truth


@pytest.fixture
def truth() -> Truth:
    return make_truth()


@pytest.fixture
def word_tokenizer(tmp_path: Path) -> Path:
    """A word-level tokenizer whose token i is the string ``w<i>`` (no download)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    tok = Tokenizer(WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    path = tmp_path / "tok" / "tokenizer.json"
    path.parent.mkdir()
    tok.save(str(path))
    return path.parent
