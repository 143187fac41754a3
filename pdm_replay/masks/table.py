"""The README's mask table, generated from the registry (``python -m pdm_replay.masks.table``
rewrites it in place; ``tests/masks/test_mask_table.py`` fails when it drifts).

>>> "| `verl_vanilla` |" in mask_table()
True
"""

from __future__ import annotations

import sys
from pathlib import Path

from pdm_replay.masks import BUILTIN, MASK_SPECS, Thresholds

START, END = "<!-- mask-table:start -->", "<!-- mask-table:end -->"
README = Path(__file__).resolve().parents[2] / "README.md"


def _params(fields: tuple[str, ...]) -> str:
    t = Thresholds()
    return ", ".join(f"`{f}`={getattr(t, f):g}" for f in fields) or "—"


def mask_table() -> str:
    """Markdown table of the package's masks (:data:`~pdm_replay.masks.BUILTIN`), registry
    order."""
    rows = ["| name | region × direction | direction | granularity | weight | parameters (default) "
            "| reproduces | reference |", "|---|---|---|---|---|---|---|---|"]
    for s in (MASK_SPECS[n] for n in BUILTIN):
        direction = s.direction + (f" ({s.estimator})" if s.estimator else "")
        rows.append(f"| `{s.name}` | {s.doc} | {direction} | {s.granularity} | {s.weight} | "
                    f"{_params(s.thresholds)} | {s.reproduces or '—'} | {s.source or '—'} |")
    return "\n".join(rows)


def with_table(text: str) -> str:
    """``text`` with the block between the markers replaced by :func:`mask_table`."""
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{mask_table()}\n{END}{tail}"


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else README
    path.write_text(with_table(path.read_text()))
