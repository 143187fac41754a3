"""One place where every command's failures become a message and an exit code.

Exit codes: 0 success; 1 ``validate`` found problems; 2 a usage or input error (bad
option, missing or unreadable file, a log that fails the checks, a refused SQL statement,
a run directory another process is writing); 3 an unexpected error (a bug: please report
it with the ``--debug`` traceback); 130 interrupted (Ctrl-C).

Without ``--debug`` (or ``PDM_REPLAY_DEBUG=1``) no traceback is printed: a bad input is one
or two lines naming the file, sample and position where known, and the fix.

Library errors name settings by their config field (:class:`pdm_replay.errors.FieldError`);
:func:`error_text` is the one place they become the running command's flags, read from
the command's own parameters (the field's parameter, or the option spelled ``--field``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Mapping

import typer
from rich.console import Console
from rich.markup import escape
from typer import core as typer_core
from typer.core import TyperGroup

from pdm_replay.errors import InputError, field_name

# The click Typer runs on: its own vendored copy (typer >= 0.24), else click itself.
click = getattr(typer_core, "_click", None) or __import__("click")
PASS_THROUGH: tuple[type[BaseException], ...] = (
    typer.Exit, typer.Abort, SystemExit, click.exceptions.ClickException)
USAGE, INTERNAL, INTERRUPTED = 2, 3, 130
DEBUG_ENV = "PDM_REPLAY_DEBUG"
DEBUG_KEY = "pdm_replay.debug"
# Errors about the inputs or the environment, not bugs: message only, exit 2.
INPUT_ERRORS: tuple[type[BaseException], ...] = (
    InputError, ValueError, OSError, json.JSONDecodeError, ImportError, UnicodeDecodeError)


def _is_library_error(exc: BaseException) -> bool:
    """A DuckDB error (bad SQL, a refused statement) or a pyarrow ``ArrowException`` (a
    file that is not the Parquet it claims), without importing either here: ``--help``
    loads neither, and an exception of a module not loaded cannot have been raised."""
    return any(c.__module__.split(".")[0] in ("duckdb", "_duckdb")
               or (c.__module__ == "pyarrow.lib" and c.__name__ == "ArrowException")
               for c in type(exc).__mro__)


def debug_enabled(ctx: Any | None = None) -> bool:
    """``--debug`` on the command line (``ctx``: a Typer context; default the current one)
    or ``PDM_REPLAY_DEBUG`` set."""
    if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
        return True
    ctx = ctx or click.globals.get_current_context(silent=True)
    return ctx is not None and bool(ctx.meta.get(DEBUG_KEY))


def _spelling(param: Any) -> str:
    """How a user types ``param``: its long flag, or an argument's metavar (RUN)."""
    if param.param_type_name == "argument":
        return getattr(param, "metavar", None) or param.name.upper()
    longs = [o for o in param.opts if o.startswith("--")]
    return (longs or param.opts)[0]


def field_flags(command: Any) -> Callable[..., str]:
    """Config field name -> how ``command`` (a click command) spells it: the parameter of
    that name (``replay``'s are its config's fields), else the option spelled
    ``--field-name`` (``report``'s ``fmt`` is ``--format``), a list field's singular
    included (``mask_modules``: the repeatable ``--mask-module``), else the field's own
    name (a setting the command has no option for). ``off``: the switch's ``--no-...``
    side."""
    params = {p.name: p for p in command.params}
    params.update({o: p for p in command.params for o in p.opts if o not in params})

    def spell(field: str, off: bool = False) -> str:
        names = dict.fromkeys((field, field.removesuffix("s")))
        param = next((params[k] for n in names for k in (n, "--" + n.replace("_", "-"))
                      if k in params), None)
        if param is None:
            return field_name(field, off)
        if off:
            return (getattr(param, "secondary_opts", None) or [f"{_spelling(param)} false"])[0]
        return _spelling(param)
    return spell


def error_text(exc: BaseException, ctx: Any | None = None) -> str:
    """``exc`` as the CLI says it: the config fields a library error names spelled as the
    flags of ``ctx``'s command (default: the running one)."""
    ctx = ctx or click.globals.get_current_context(silent=True)
    if isinstance(exc, InputError) and exc.fields and ctx is not None:
        return exc.render(field_flags(ctx.command))
    return str(exc)


def _message(exc: BaseException, ctx: Any | None = None) -> str:
    text = error_text(exc, ctx).strip()
    if isinstance(exc, KeyError) or not text:  # KeyError's str is just the quoted key
        return f"{type(exc).__name__}: {text or 'no message'}"
    if isinstance(exc, OSError) and exc.filename and str(exc.filename) not in text:
        return f"{exc.filename}: {text}"
    return text


def _print(console: Console, label: str, text: str) -> None:
    console.print(f"[bold red]{label}:[/] {escape(text)}", highlight=False, soft_wrap=True)


def interrupt_note(command: str, params: Mapping[str, Any]) -> str:
    """What an interrupted ``command`` kept, and how to continue."""
    out = params.get("out")
    if command == "replay" and out is not None:
        from pdm_replay.replay.manifest import RunLayout
        layout = RunLayout(Path(out))
        if not layout.manifest.exists():
            return f"no run was started in {out}: run the same command again"
        done = layout.finished_seeds()
        kept = (f"{len(done)} finished seed(s) ({', '.join(map(str, done))})" if done
                else "no finished seed")
        return (f"{out} keeps {kept}; the seed in progress is redone: continue with the "
                "same command plus --resume")
    if command in ("masks", "ingest") and out is not None:
        return f"nothing was written to {out} (the partial temp file was removed): run the " \
               "same command again"
    if command == "make-sample":
        return "the sample directory may be incomplete: run again with --force"
    return "nothing was written"


def run_guarded(ctx: Any, command: str) -> Any:
    """Invoke ``ctx``'s command, turning every failure into a message and an exit code."""
    err = Console(stderr=True)
    debug = debug_enabled(ctx)
    try:
        return ctx.command.invoke(ctx)
    except PASS_THROUGH:
        raise
    except KeyboardInterrupt:
        _print(err, "interrupted", f"pdm-replay {command} stopped by Ctrl-C; "
               + interrupt_note(command, ctx.params))
        raise typer.Exit(INTERRUPTED)
    except BaseException as exc:
        if debug:
            raise
        if isinstance(exc, INPUT_ERRORS) or _is_library_error(exc):
            _print(err, "error", _message(exc, ctx))
            raise typer.Exit(USAGE)
        _print(err, "internal error", f"{type(exc).__name__}: {_message(exc)} (unexpected: "
               f"rerun as `pdm-replay --debug {command} ...` and report the traceback)")
        raise typer.Exit(INTERNAL)


def untyped_flags(params: list[Any]) -> None:
    """Give each on/off flag of ``params`` an empty metavar: Typer's rich help would show
    ``<bool>`` beside it, a value the flag does not take (``--force``, not
    ``--force true``)."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""


class GuardedGroup(TyperGroup):
    """The app's command group: runs the chosen command through :func:`run_guarded`.

    ``TyperGroup.invoke`` re-done with the sub-context in reach, so the interrupt note
    can read the command's options (``--out``).
    """

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command, its on/off flags without Typer's ``<bool>`` type in ``--help``."""
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None:
            untyped_flags([*cmd.params, cmd.get_help_option(ctx)])
        return cmd

    def format_help(self, ctx: Any, formatter: Any) -> None:
        untyped_flags(self.get_params(ctx))  # the app's own --debug and --help
        super().format_help(ctx, formatter)

    def invoke(self, ctx: Any) -> Any:
        protected = getattr(ctx, "_protected_args", None)
        if not protected:
            return super().invoke(ctx)
        args = [*protected, *ctx.args]
        ctx.args, ctx._protected_args = [], []
        with ctx:
            name, cmd, args = self.resolve_command(ctx, args)
            assert cmd is not None and name is not None
            ctx.invoked_subcommand = name
            super(TyperGroup, self).invoke(ctx)  # the group's own callback: --debug
            sub_ctx = cmd.make_context(name, args, parent=ctx)
            with sub_ctx:
                return run_guarded(sub_ctx, name)

