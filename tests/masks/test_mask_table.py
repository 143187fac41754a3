"""The README's mask table is the registry's (regenerate: python -m pdm_replay.masks.table)."""

from pdm_replay.masks.table import README, with_table
from pdm_replay.masks import BUILTIN


def test_readme_mask_table_matches_the_registry() -> None:
    text = README.read_text()
    assert with_table(text) == text, "README mask table drifted: python -m pdm_replay.masks.table"
    assert all(f"| `{name}` |" in text for name in BUILTIN)
