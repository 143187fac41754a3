"""The log a replay reads, indexed: its files' row counts (global row indices run over every
file, in sorted file order) and each row's logged step.

Which rows a seed reads is :mod:`~pdm_replay.replay.seeds`' business, reading them
:mod:`~pdm_replay.replay.data`'s; the footer's sampling temperature is
:meth:`~pdm_replay.io.log.RolloutLog.sampling_temperature`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pdm_replay.io.log import RolloutLog
from pdm_replay.io.reader import read_table


@dataclass(frozen=True)
class LogIndex:
    """Row counts of every file of a log, for global row indices."""

    files: tuple[Path, ...]
    rows: tuple[int, ...]

    @property
    def n_rows(self) -> int:
        return sum(self.rows)

    @classmethod
    def of(cls, log: RolloutLog) -> "LogIndex":
        """The index of an opened log (its files and footer row counts, read once)."""
        return cls(tuple(Path(f) for f in log.files), log.rows)


def log_steps(index: LogIndex) -> np.ndarray:
    """The logged ``step`` of every global row ``(n_rows,)`` int64."""
    parts = [read_table(f, columns=["step"])["step"].to_numpy() for f in index.files]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)

