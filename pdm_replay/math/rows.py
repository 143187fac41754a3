"""Per-token records restricted to some of their tokens: one rule for all of them.

A per-token record is a dataclass whose fields are arrays (torch tensors or numpy arrays)
with the tokens on their first axis, ``(N, ...)``, or ``None``. :func:`take_rows` is the one
way to cut such a record: :class:`~pdm_replay.math.support.Support`,
:class:`~pdm_replay.math.support.Reduced`, :class:`~pdm_replay.math.attribution.KLWeights`
and :class:`~pdm_replay.io.reader.FlatTokens` expose it as ``.take(index)``.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, TypeVar

R = TypeVar("R")


def take_rows(record: R, index: Any) -> R:
    """``record`` with every field indexed by ``index`` on its first (token) axis.

    ``index`` is anything the fields accept as a first-axis index: a slice (views, no copy),
    an ``(N,)`` bool mask or integer positions (copies). ``None`` fields stay ``None``.

    >>> import torch
    >>> from pdm_replay.math.support import Support
    >>> s = Support(ids=torch.tensor([[5, 1], [7, -1], [2, 3]]),
    ...             valid=torch.tensor([[True, True], [True, False], [True, True]]))
    >>> take_rows(s, slice(1, 3)).ids.tolist()
    [[7, -1], [2, 3]]
    >>> take_rows(s, torch.tensor([True, False, True])).size.tolist()
    [2, 2]
    """
    return replace(record, **{f.name: _index(getattr(record, f.name), index)
                              for f in fields(record) if f.init})  # type: ignore[arg-type]


def _index(value: Any, index: Any) -> Any:
    return None if value is None else value[index]
