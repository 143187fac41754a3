"""Errors that mean "the input is bad", and the file context every one of them carries.

A user-facing failure is one or two lines: what is wrong, the file, the sample and
position where known, and how to fix it. Library code raises :class:`InputError` (a
``ValueError``, so existing ``except ValueError`` callers keep working); readers wrap
their file access in :func:`reading`, which turns pyarrow's, the OS's and JSON's errors
about a file's *content* (corrupt page headers, truncated footers, bad JSON) into an
:class:`InputError` that names the file. The CLI (:mod:`pdm_replay.cli.errors`) prints
these without a traceback and exits 2.

An error about a setting is a :class:`FieldError`: its message (and fix) name the setting by
its config field, ``{threads}``, never by a command-line flag. ``str()`` spells a field as
its name (what a library caller sets); :meth:`InputError.render` spells it any other way,
and the CLI spells it as the running command's flag (``cli.errors.error_text``, the one
place field names become flags). A field error that must also be caught as another error
class is one class deriving from both, ``FieldError`` first (``IngestFieldError``,
``CheckpointFieldError``, ``SampleExists``).

Examples
--------
>>> str(InputError("top-K row has 30 entries, the footer's top_k is 20", file="log.parquet",
...                sample="s1", pos=3, fix="re-log with K = 20"))
"log.parquet: sample 's1' pos 3: top-K row has 30 entries, the footer's top_k is 20; re-log with K = 20"
>>> err = FieldError("{threads} {n}: expected at least 1", n=0)
>>> str(err), err.fields, err.render(lambda f: "--" + f)
('threads 0: expected at least 1', ('threads',), '--threads 0: expected at least 1')
>>> import tempfile, pathlib
>>> bad = pathlib.Path(tempfile.mkdtemp()) / "x.parquet"
>>> _ = bad.write_bytes(b"not parquet")
>>> import pyarrow.parquet as pq
>>> try:
...     with reading(bad):
...         pq.read_schema(bad)
... except InputError as exc:
...     print(str(exc).startswith(str(bad)))
True
"""

from __future__ import annotations

import json
import string
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

CORRUPT_FIX = "the file is corrupt or truncated: write it again (or restore it from a copy)"


class InputError(ValueError):
    """Bad user input, with where it is (file, sample, position) and how to fix it."""

    fields: tuple[str, ...] = ()  # the config fields the message names (FieldError)

    def __init__(self, message: str, *, file: Path | str | None = None,
                 sample: str | None = None, pos: int | None = None,
                 fix: str | None = None) -> None:
        self.file, self.sample, self.pos = file, sample, pos
        self._parts = (message, fix)
        self.message, self.fix = self._fill(message, field_name), self._fill(fix, field_name)
        super().__init__(self.render())

    def __reduce__(self) -> tuple:
        # pickle / copy rebuild the error as it is: its text is no template to re-parse
        message, fix = self._parts
        context = {"file": self.file, "sample": self.sample, "pos": self.pos, "fix": fix}
        return (_restore, (type(self), message, {**context, **getattr(self, "values", {})}))

    def _fill(self, text: str | None, name: Callable[..., str]) -> str | None:
        return text  # a plain message names no field

    def render(self, name: Callable[..., str] | None = None) -> str:
        """The error's text with each config field it names spelled ``name(field)``; a
        switch the message says to turn off (``{field:off}``) ``name(field, off=True)``."""
        message, fix = (self._fill(t, name or field_name) for t in self._parts)
        where = [] if self.file is None else [str(self.file)]
        if self.sample is not None:
            where.append(f"sample {self.sample!r}" + ("" if self.pos is None
                                                       else f" pos {self.pos}"))
        text = ": ".join([*where, message or ""])
        return f"{text}; {fix}" if fix else text


def _restore(cls: type[InputError], message: str, keywords: dict) -> InputError:
    return cls(message, **keywords)


_FORMAT = string.Formatter()


def field_name(field: str, off: bool = False) -> str:
    """A config field as a library caller sets it: ``threads``; ``resume=False`` (off)."""
    return f"{field}=False" if off else field


class FieldError(InputError):
    """An invalid setting, named by its config field.

    ``message`` and ``fix`` are constant templates: a placeholder named in ``values`` is
    filled with that value (an :class:`InputError` value with its own fields spelled the
    same way; ``!r`` and format specs apply), every other placeholder ``{name}`` names
    the config field ``name`` (``fields``, ``field`` the first); ``{name:off}`` says the
    boolean field set to False (``name=False``; the CLI's ``--no-...`` switch). Literal
    braces are doubled. Values never go into the template itself, so a path holding
    braces (``ckpt/{step}``) is shown as it is.
    """

    def __init__(self, message: str, *, file: Path | str | None = None,
                 sample: str | None = None, pos: int | None = None,
                 fix: str | None = None, **values: Any) -> None:
        self.values = values
        named = [key for text in (message, fix) if text
                 for _, key, _, _ in _FORMAT.parse(text) if key is not None]
        unknown = [k for k in named if not k.isidentifier()]
        if unknown:
            raise TypeError(f"FieldError template placeholders must be names: {unknown}")
        self.fields = tuple(dict.fromkeys(k for k in named if k not in values))
        self.field = self.fields[0] if self.fields else None
        super().__init__(message, file=file, sample=sample, pos=pos, fix=fix)

    def _fill(self, text: str | None, name: Callable[..., str]) -> str | None:
        if text is None:
            return None
        out = []
        for literal, key, spec, conversion in _FORMAT.parse(text):
            out.append(literal)
            if key is None:
                continue
            if key not in self.values:
                out.append(name(key, off=True) if spec == "off" else name(key))
                continue
            value = self.values[key]
            if isinstance(value, InputError):
                value = value.render(name)
            out.append(format(_FORMAT.convert_field(value, conversion), spec or ""))
        return "".join(out)


def printable(text: str) -> str:
    """``text`` with control characters (a corrupt file's bytes echoed back) shown as ?.

    >>> printable("type: \x0f")
    'type: ?'
    """
    return "".join(c if c.isprintable() else "?" for c in text)


def _names(exc: BaseException, path: Path | str) -> bool:
    return str(path) in str(exc)


@contextmanager
def reading(path: Path | str, what: str = "Parquet file") -> Iterator[None]:
    """Turn errors about ``path``'s content into an :class:`InputError` naming it.

    ``FileNotFoundError`` and ``PermissionError`` pass through unchanged (their message
    already names the file); so do errors that are already :class:`InputError`.
    """
    import pyarrow as pa  # here, not at the top: threads and masks import this module light
    try:
        yield
    except (InputError, FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except (pa.ArrowException, OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        detail = printable(str(exc).strip().splitlines()[0] if str(exc).strip()
                           else type(exc).__name__)
        if _names(exc, path):
            raise InputError(f"cannot read this {what}: {detail}", fix=CORRUPT_FIX) from exc
        raise InputError(f"cannot read this {what}: {detail}", file=path,
                         fix=CORRUPT_FIX) from exc
