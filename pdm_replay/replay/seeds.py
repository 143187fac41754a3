"""Which log rows each replay seed reads (SPEC §6): independent seeds by default.

Seeds are the units the report's per-seed statistics (sign test, Wilcoxon) treat as
independent samples, so by default no log row is in two seeds:

- ``by="sample"`` (default): the log's rows are shuffled once (a fixed generator, not the
  seed) and seed ``s`` takes the ``s``-th slice of ``batch_size`` rows. ``n_rows //
  batch_size`` seeds fit (1 when the batch is at least the log: it takes every row). With
  ``allow_overlap`` further seeds start a new round, a new shuffle (generator seeded by the
  round): seeds of one round are disjoint, seeds of different rounds may share rows.
- ``by="step"``: seed ``s`` is the ``s``-th logged step (ascending): its rows, or
  ``batch_size`` of them drawn from a generator seeded by ``s`` when the step holds more.
  As many seeds fit as the log has steps; overlap cannot help.

A seed's rows depend only on the seed, the log and these options, never on how many seeds
the run has, so ``--resume`` with more seeds extends a run. Rows come back sorted. The
replay seed ``s`` is the batch's number; the generators are seeded by words derived from
it (``[STEP_STREAM, s]``) or from the shuffle's round.

Examples
--------
>>> plan = SeedPlan(n_rows=10, batch_size=4)
>>> plan.capacity, plan.rows(0).tolist(), plan.rows(1).tolist()
(2, [0, 1, 6, 8], [4, 5, 7, 9])
>>> try:
...     plan.check(3)
... except ValueError as exc:
...     print(exc)
3 seeds of 4 samples need 12 distinct rows, the log has 10: 2 seeds fit; lower seeds
or batch_size, or pass allow_overlap (seeds then share samples)
>>> steps = np.array([1, 1, 2, 2, 2, 3])
>>> SeedPlan(6, 64, by="step", steps=steps).rows(1).tolist()
[2, 3, 4]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pdm_replay.errors import FieldError
from pdm_replay.names import SEED_BY

SHUFFLE_STREAM = 0x5EED  # first seed word of the shuffles (rounds / steps are the second)
STEP_STREAM = 0x57E9


def draw_rows(n_rows: int, batch_size: int, seed: int) -> np.ndarray:
    """Sorted rows of seed ``seed`` (``by="sample"``): a slice of the round's shuffle.

    >>> a, b = draw_rows(100, 30, 0), draw_rows(100, 30, 1)
    >>> len(set(a) | set(b)) == 60, draw_rows(3, 8, seed=0).tolist()
    (True, [0, 1, 2])
    """
    if batch_size >= n_rows:
        return np.arange(n_rows)
    per_round = n_rows // batch_size
    shuffle_round, slot = divmod(seed, per_round)
    order = np.random.default_rng([SHUFFLE_STREAM, shuffle_round]).permutation(n_rows)
    return np.sort(order[slot * batch_size:(slot + 1) * batch_size])


@dataclass(frozen=True, eq=False)
class SeedPlan:
    """The rows of every seed; ``steps`` ``(n_rows,)`` is each global row's logged step
    (needed by ``by="step"`` and by :meth:`groups`)."""

    n_rows: int
    batch_size: int
    by: str = "sample"
    allow_overlap: bool = False
    steps: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.by not in SEED_BY:
            raise FieldError("{seed_by} {by!r}: expected one of {known}", by=self.by,
                             known=", ".join(SEED_BY))
        if self.by == "step" and self.steps is None:
            raise FieldError("{seed_by} step needs the log's step column")

    @property
    def distinct_steps(self) -> np.ndarray:
        """The logged steps, ascending ``(S,)``."""
        return np.unique(self.steps) if self.steps is not None else np.zeros(0, np.int64)

    @property
    def capacity(self) -> int:
        """How many seeds fit without sharing a row."""
        if self.by == "step":
            return len(self.distinct_steps)
        return 1 if self.batch_size >= self.n_rows else self.n_rows // self.batch_size

    def check(self, seeds: int) -> None:
        """Raise ``ValueError`` saying how many seeds fit when ``seeds`` do not."""
        fit = self.capacity
        if seeds <= fit:
            return
        if self.by == "step":
            raise FieldError("{seed_by} step replays one seed per logged step and the log "
                             "holds {fit} step(s): pass {seeds} {fit} or fewer", fit=fit)
        if not self.allow_overlap:
            raise FieldError(
                "{n} seeds of {size} samples need {rows} distinct rows, the log has "
                "{have}: {fit} seed{s} fit; lower {seeds} or {batch_size}, or pass "
                "{allow_overlap} (seeds then share samples)", n=seeds, size=self.batch_size,
                rows=seeds * self.batch_size, have=self.n_rows, fit=fit,
                s="s" if fit != 1 else "")

    def rows(self, seed: int) -> np.ndarray:
        """Sorted global row indices of ``seed``'s batch."""
        if self.by == "sample":
            return draw_rows(self.n_rows, self.batch_size, seed)
        step = self.distinct_steps[seed]
        rows = np.flatnonzero(self.steps == step)
        if rows.size > self.batch_size:
            rng = np.random.default_rng([STEP_STREAM, seed])
            rows = np.sort(rng.choice(rows, size=self.batch_size, replace=False))
        return rows

    def step_of(self, seed: int) -> int | None:
        """The logged step a ``by="step"`` seed replays (None for ``by="sample"``)."""
        return int(self.distinct_steps[seed]) if self.by == "step" else None

    def groups(self, rows: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """``rows`` split by logged step, ascending: ``[(step, sorted rows), ...]``."""
        if self.steps is None:
            raise ValueError("splitting a batch by step needs the log's step column")
        steps = self.steps[rows]
        return [(int(s), rows[steps == s]) for s in np.unique(steps)]

    def step_groups(self, seed: int, per_step: bool) -> list[tuple[int | None, np.ndarray]]:
        """``seed``'s rows, split by logged step when the models are per step (``{step}``
        path templates), else one group of step ``None``."""
        rows = self.rows(seed)
        return list(self.groups(rows)) if per_step else [(None, rows)]

    def steps_needed(self, seeds: int, per_step: bool) -> list[int | None]:
        """The logged steps whose models seeds ``0..seeds-1`` need (``[None]``: one set)."""
        return sorted({step for s in range(seeds) for step, _ in self.step_groups(s, per_step)},
                      key=lambda step: -1 if step is None else step)

    def overlap(self, seeds: int) -> dict:
        """How seeds ``0..seeds-1`` share rows: the manifest's ``seed_overlap``."""
        counts = np.bincount(np.concatenate([self.rows(s) for s in range(seeds)]),
                             minlength=self.n_rows) if seeds else np.zeros(0, np.int64)
        shared = int((counts > 1).sum())
        return {"overlap": shared > 0, "samples_in_several_seeds": shared,
                "max_seeds_per_sample": int(counts.max()) if counts.size else 0,
                "distinct_samples": int((counts > 0).sum()), "disjoint_capacity": self.capacity}
