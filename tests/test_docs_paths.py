"""The project's reference documents cite only files the repository holds (issue 35:
docs/SPEC.md cited `reference/paper-summary.txt`, which is not part of it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# a backticked relative path with a file extension, e.g. `pdm_replay/masks/registry.py`
CITED = re.compile(r"`([\w.-]+(?:/[\w.-]+)*\.(?:py|md|sql|toml|json|txt|yaml|png))`")
DOCS = ["docs/SPEC.md", "docs/architecture.md", "docs/masks.md"]


def missing(doc: Path) -> list[str]:
    """Cited paths found neither from the root, nor the package, nor the document's folder."""
    bases = (ROOT, ROOT / "pdm_replay", doc.parent)
    return [m.group(1) for m in CITED.finditer(doc.read_text())
            if not any((b / m.group(1)).exists() for b in bases)]


@pytest.mark.parametrize("doc", DOCS)
def test_every_cited_file_exists(doc: str) -> None:
    assert missing(ROOT / doc) == []


def test_the_check_sees_a_missing_file(tmp_path: Path) -> None:
    (tmp_path / "d.md").write_text("see `reference/paper-summary.txt` and `d.md`")
    assert missing(tmp_path / "d.md") == ["reference/paper-summary.txt"]
