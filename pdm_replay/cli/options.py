"""Typer parameters generated from a config dataclass's option fields
(:func:`pdm_replay.replay.config.opt`): each option is declared once, on its field."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Optional

import typer

from pdm_replay.cli.common import choices
from pdm_replay.replay.config import OPTION, field_flag


def _annotation(f: dataclasses.Field, hint: Any) -> Any:
    """The type Typer parses: choices as an Enum, mask-name lists as one string."""
    spec = f.metadata[OPTION]
    optional = f.default is None
    if "choices" in spec:
        enum = choices(f.name.title().replace("_", ""), spec["choices"])
        return Optional[enum] if optional else enum
    if spec.get("names"):
        return Optional[str] if optional else str
    if "cli" in spec:
        return type(spec["cli"])
    return hint


def _parameter(f: dataclasses.Field, hint: Any, shared: dict[str, Any]) -> inspect.Parameter:
    spec = dict(f.metadata[OPTION])
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    if spec.get("shared"):  # declared once for several commands (cli.mask_options)
        return inspect.Parameter(f.name, kind, default=None, annotation=shared[f.name])
    if spec.get("argument"):
        return inspect.Parameter(f.name, kind, annotation=hint,
                                 default=typer.Argument(..., help=spec["help"]))
    default = spec.get("cli", f.default if f.default is not dataclasses.MISSING else ...)
    extra = {}
    if spec.get("names") and f.default:
        default, extra["show_default"] = ",".join(f.default), ", ".join(f.default)
    decls = [field_flag(f) + (f"/{spec['secondary']}" if "secondary" in spec else "")]
    decls += [spec["short"]] if "short" in spec else []
    bounds = {k: spec[k] for k in ("min", "max") if k in spec}
    option = typer.Option(default, *decls, help=spec["help"], **bounds, **extra)
    return inspect.Parameter(f.name, kind, default=option, annotation=_annotation(f, hint))


def with_options(cls: type, after: dict[str, list[inspect.Parameter]],
                 shared: dict[str, Any]) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command ``fn(**options)`` the options of ``cls``'s option fields, in field
    order, with the command's own parameters ``after[name]`` placed after field ``name``
    and the ``shared`` annotated types of fields declared for several commands."""
    import typing
    hints = typing.get_type_hints(cls)

    def wrap(fn: Callable[..., None]) -> Callable[..., None]:
        params = []
        for f in dataclasses.fields(cls):
            if OPTION in f.metadata:
                params.append(_parameter(f, _plain(hints[f.name]), shared))
            params.extend(after.get(f.name, ()))
        fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        fn.__annotations__ = {p.name: p.annotation for p in params}
        return fn
    return wrap


def _plain(hint: Any) -> Any:
    """``Path | None`` as ``Optional[Path]`` (what Typer reads)."""
    args = [a for a in getattr(hint, "__args__", ()) if a is not type(None)]
    if type(None) in getattr(hint, "__args__", ()) and len(args) == 1:
        return Optional[args[0]]
    return hint


def cli_param(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    """A command parameter that is not a config field (e.g. a threshold option)."""
    return inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                             default=default, annotation=annotation)

