"""Fixtures of the ingest tests; the layouts themselves live in ``ingest_layouts``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest
from ingest_layouts import VOCAB, Truth, make_truth

from pdm_replay.ingest.formats import FORMATS, USER_MODULE_PREFIX


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


@pytest.fixture
def user_formats() -> Iterator[None]:
    """Undo a test's format registrations (and its --format-module imports) afterwards:
    the registry is per process."""
    before, modules = dict(FORMATS), set(sys.modules)
    yield
    FORMATS.clear()
    FORMATS.update(before)
    for name in set(sys.modules) - modules:
        if name.startswith(USER_MODULE_PREFIX):
            del sys.modules[name]
