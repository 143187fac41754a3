"""Which rollout rows are accepted: the one pipeline of ``ingest`` and ``RolloutLogger``.

Rows arrive padded (a :class:`~pdm_replay.ingest.padded.PaddedRollouts`, laid out as
rollout/v1 columns once by :func:`~pdm_replay.ingest.padded.padded_to_table`) or ragged
(a rollout/v1-typed Arrow table, kept as it is: :func:`~pdm_replay.ingest.ragged.
structural_problems` names samples whose per-token lists disagree in length, and
:func:`~pdm_replay.ingest.ragged.compact_topk` puts the others' top-K slots through the
same padding rule, :func:`~pdm_replay.ingest.padded.slot_columns`: top-K slot padding,
conflicting log-probs of one id). The rows still standing get ``validate``'s checks
(:func:`~pdm_replay.ingest.ragged.row_problems`: sample ids used before, non-finite
values, ids outside the vocabulary, top-K rows wider than ``max_topk``). A row keeps its
first reason: structural, then padding, then checks.

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
from pdm_replay.ingest.ragged import compact_topk, row_problems, structural_problems
from pdm_replay.io.rollouts import rows_to_table
from pdm_replay.schema import RolloutMeta


@dataclass(frozen=True)
class Accepted:
    """The outcome of :func:`accept_rows` on B input rows."""

    rows: pa.Table  # all B input rows, rollout/v1-typed (names the rejected ones)
    table: pa.Table  # the accepted rows, rollout/v1-typed, in input order
    kept: tuple[int, ...]  # input row of each accepted row
    problems: dict[int, str]  # input row -> reason, for every rejected row


def _clean(rows: PaddedRollouts | pa.Table, meta: RolloutMeta, zero_padded: bool
           ) -> tuple[pa.Table, pa.Table, list[int], dict[int, str]]:
    """(all rows typed, the rows through the padding rule, their input rows, problems)."""
    if isinstance(rows, PaddedRollouts):
        padded, problems = padded_to_table(rows, zero_padded)
        typed = rows_to_table(padded, meta)
        return typed, typed, list(range(typed.num_rows)), problems
    problems = structural_problems(rows)
    whole = [i for i in range(rows.num_rows) if i not in problems]
    table, conflicts = compact_topk(rows.take(pa.array(whole, pa.int64())), zero_padded)
    problems.update({whole[i]: reason for i, reason in conflicts.items()})
    return rows, rows_to_table(table, meta), whole, problems


def accept_rows(rows: PaddedRollouts | pa.Table, meta: RolloutMeta, *, zero_padded: bool,
                seen: set[str], max_topk: int | None = None) -> Accepted:
    """Accept or reject each row of ``rows`` (a padded batch or rollout/v1-typed table).

    ``meta`` types the rows and gives the vocabulary; ``zero_padded`` selects the zero
    padding rule of top-K slots; ``seen`` holds the sample ids accepted so far and gains
    those of the rows checked here; ``max_topk`` bounds the entries of a top-K row
    (None: no bound). ``padded_to_table`` raises ``ValueError`` on shapes that do not fit.
    """
    typed, cleaned, source, problems = _clean(rows, meta, zero_padded)
    at = {row: i for i, row in enumerate(source)}  # input row -> row of ``cleaned``

    def pick(kept: tuple[int, ...]) -> pa.Table:
        return cleaned.take(pa.array([at[i] for i in kept], pa.int64()))
    kept = tuple(i for i in source if i not in problems)
    table = pick(kept)
    if table.num_rows:
        checked = row_problems(table, meta.vocab_size, seen, max_topk)
        if checked:
            problems.update({kept[i]: reason for i, reason in checked.items()})
            kept = tuple(i for i in kept if i not in problems)
            table = pick(kept)
    return Accepted(typed, table, kept, problems)
