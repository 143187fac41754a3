"""Per-step paths: ``--checkpoint ckpt/global_step_{step}`` and friends.

A log spanning several trainer steps is replayed row by row against its own step's
checkpoints. The path options (``--checkpoint``, ``--next-checkpoint``,
``--behavior-checkpoint``, ``--optimizer-state``) accept two fields, filled from the
row's logged ``step``: ``{step}`` and ``{next_step}`` (= step + 1), e.g.
``--checkpoint ckpt/global_step_{step} --next-checkpoint ckpt/global_step_{next_step}``.
A path without a field is the same for every step.

Examples
--------
>>> from pathlib import Path
>>> resolve(Path("ckpt/global_step_{next_step}"), 7).as_posix()
'ckpt/global_step_8'
>>> is_template(Path("ckpt/policy")), resolve(Path("ckpt/policy"), 7).as_posix()
(False, 'ckpt/policy')
>>> try:
...     check_template(Path("ckpt/{epoch}"), "checkpoint")
... except ValueError as exc:
...     print(exc)
checkpoint ckpt/{epoch}: unknown field {epoch}; a path template may use {step} and {next_step}
"""

from __future__ import annotations

import string
from pathlib import Path

from pdm_replay.errors import FieldError

FIELDS = ("step", "next_step")


def template_fields(path: Path | str) -> list[str]:
    """The ``{field}`` names of a path (``[]`` for a plain path)."""
    try:
        return [f for _, f, _, _ in string.Formatter().parse(str(path)) if f is not None]
    except ValueError as exc:  # a lone "{" or "}"
        raise ValueError(f"{path}: not a valid path template ({exc}); write braces only "
                         "around {step} or {next_step}") from exc


def is_template(path: Path | str | None) -> bool:
    return path is not None and bool(template_fields(path))


def check_template(path: Path | str, field: str) -> None:
    """Raise a :class:`FieldError` naming config field ``field`` (``checkpoint``, ...)
    for a template field other than ``{step}`` / ``{next_step}``."""
    for name in template_fields(path):
        if name not in FIELDS:
            raise FieldError("{" + field + "} {path}: unknown field {{{name}}}; a path "
                             "template may use {{step}} and {{next_step}}", path=path,
                             name=name)


def resolve(path: Path, step: int | None) -> Path:
    """``path`` with its fields filled for logged step ``step`` (a plain path as is)."""
    if not is_template(path):
        return path
    if step is None:
        raise ValueError(f"{path}: a path template needs the row's logged step")
    return Path(str(path).format(step=step, next_step=step + 1))
