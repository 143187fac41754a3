"""Which rollout rows are accepted: the one pipeline of ``ingest`` and ``RolloutLogger``.

Rows arrive padded (a :class:`~pdm_replay.ingest.padded.PaddedRollouts`) or ragged (a
rollout/v1-typed Arrow table, padded by :func:`~pdm_replay.ingest.ragged.table_to_padded`,
which names samples whose per-token lists disagree in length). Both then go through the
padding rule (:func:`~pdm_replay.ingest.padded.padded_to_table`: shape checks, top-K slot
padding, conflicting log-probs of one id), are cast to rollout/v1, and the rows still
standing get ``validate``'s checks (:func:`~pdm_replay.ingest.ragged.row_problems`:
sample ids used before, non-finite values, ids outside the vocabulary, top-K rows wider
than ``max_topk``). A row keeps its first reason: structural, then padding, then checks.

Examples
--------
>>> import numpy as np
>>> from pdm_replay.schema import RolloutMeta
>>> b = PaddedRollouts(sample_id=["a", "b"], step=np.array([0, 0]),
...                    response_ids=np.array([[3, 4], [3, 99]]), lengths=np.array([2, 2]),
...                    advantages=np.array([1.0, 1.0]),
...                    behavior_logprobs=np.array([[-0.1, -0.2], [-0.1, -0.2]]))
>>> out = accept_rows(b, RolloutMeta(vocab_size=10, top_k=0), zero_padded=True, seen=set())
>>> out.kept, out.table.num_rows, out.problems
((0,), 1, {1: 'pos 1: token-id-range: response token id outside [0, 10)'})
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from pdm_replay.ingest.padded import PaddedRollouts, padded_to_table
from pdm_replay.ingest.ragged import row_problems, table_to_padded
from pdm_replay.io.rollouts import rows_to_table
from pdm_replay.schema import RolloutMeta


@dataclass(frozen=True)
class Accepted:
    """The outcome of :func:`accept_rows` on B input rows."""

    rows: pa.Table  # all B input rows, rollout/v1-typed (names the rejected ones)
    table: pa.Table  # the accepted rows, rollout/v1-typed, in input order
    kept: tuple[int, ...]  # input row of each accepted row
    problems: dict[int, str]  # input row -> reason, for every rejected row


def accept_rows(rows: PaddedRollouts | pa.Table, meta: RolloutMeta, *, zero_padded: bool,
                seen: set[str], max_topk: int | None = None) -> Accepted:
    """Accept or reject each row of ``rows`` (a padded batch or rollout/v1-typed table).

    ``meta`` types the rows and gives the vocabulary; ``zero_padded`` selects the zero
    padding rule of top-K slots; ``seen`` holds the sample ids accepted so far and gains
    those of the rows checked here; ``max_topk`` bounds the entries of a top-K row
    (None: no bound). ``padded_to_table`` raises ``ValueError`` on shapes that do not fit.
    """
    if isinstance(rows, PaddedRollouts):
        batch, structural = rows, {}
    else:
        batch, structural = table_to_padded(rows)
    padded, conflicts = padded_to_table(batch, zero_padded)
    problems = {**conflicts, **structural}
    typed = rows_to_table(padded, meta)
    kept = tuple(i for i in range(typed.num_rows) if i not in problems)
    table = typed.take(pa.array(kept, pa.int64()))
    if table.num_rows:
        checked = row_problems(table, meta.vocab_size, seen, max_topk)
        if checked:
            problems.update({kept[i]: reason for i, reason in checked.items()})
            kept = tuple(i for i in kept if i not in problems)
            table = typed.take(pa.array(kept, pa.int64()))
    return Accepted(typed, table, kept, problems)
