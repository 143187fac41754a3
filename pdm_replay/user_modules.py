"""Code a registry loads: a user's Python file as a module (the one loader of
``--mask-module`` and ``--format-module``), and a ``"module:function"`` reference that a
registry entry names to import on first use (:func:`resolve`: report sections, ingest
formats).

A user module registers things when it runs (masks with ``pdm_replay.masks.register``,
ingest formats with ``pdm_replay.ingest.register_format``). It is imported once per
process under a name derived from its resolved path, so loading the same file twice is
a no-op (a second run would register its names twice). A file that is missing or fails
to import is a :class:`~pdm_replay.errors.FieldError` naming the setting and the file.

Examples
--------
>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "mine.py").write_text("VALUE = 3\\n")
>>> load_user_module(d / "mine.py", "doc_user_", "modules", "f").VALUE
3
>>> _ = (d / "bad.py").write_text("import no_such_package_here\\n")
>>> try:
...     load_user_module(d / "bad.py", "doc_user_", "modules", "f")
... except FieldError as exc:
...     print(str(exc).replace(str(d), "D"))
modules D/bad.py: cannot be imported (ModuleNotFoundError: No module named 'no_such_package_here'); fix the file, or run `python D/bad.py` to see where it fails
>>> resolve("pdm_replay.names:sql_names")()["own"]
'own'
"""

from __future__ import annotations

import importlib.util
import sys
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from pdm_replay.errors import FieldError


def load_user_module(path: str | Path, prefix: str, field: str, registers: str) -> ModuleType:
    """Import the user's Python file ``path`` once per process (``sys.modules`` key
    ``<prefix><hash of the resolved path>``). ``field`` names the setting that lists such
    files (``mask_modules``), ``registers`` the function the file should call, for the
    message of a missing file. Any exception the file raises while it runs becomes a
    :class:`FieldError` naming the file (its module entry is removed again)."""
    path = Path(path).resolve()
    if not path.is_file():
        raise FieldError("{%s} {path}: no such file; pass a .py file that calls "
                         "{registers}(...)" % field, path=path, registers=registers)
    key = f"{prefix}{abs(hash(str(path)))}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[key] = module
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except Exception as exc:
        del sys.modules[key]
        raise FieldError("{%s} {path}: cannot be imported ({error}); fix the file, or run "
                         "`python {path}` to see where it fails" % field, path=path,
                         error=f"{type(exc).__name__}: {exc}") from exc
    except BaseException:
        del sys.modules[key]
        raise
    return module


def resolve(ref: Callable[..., Any] | str) -> Callable[..., Any]:
    """A function, or the one a ``"package.module:function"`` reference names (imported
    now: a registry entry so named loads none of its code until it is used)."""
    if callable(ref):
        return ref
    module, _, name = ref.partition(":")
    return getattr(import_module(module), name)
