"""The package's layers (docs/architecture.md) and function sizes, checked over its source.

The import graph is built with ``ast`` from every ``import`` in a module, at module level
and inside functions (the CLI and the logger import lazily), ``TYPE_CHECKING`` blocks
included. A module may import modules of its own layer or of a lower one, never a higher.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterable, Mapping

PACKAGE = Path(__file__).resolve().parents[1] / "pdm_replay"

# Lowest first. A unit is a subpackage or a top-level module of pdm_replay (``__init__``
# is "pdm_replay"). Keep in step with docs/architecture.md.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("math",),
    ("errors", "names", "user_modules", "threads", "heap", "masks", "cluster"),
    ("schema",),
    ("io",),
    ("checks", "tokens", "testing", "run_summary"),
    ("ingest", "logger", "integrations"),
    ("report",),
    ("replay", "loss", "sample"),
    ("commands",),
    ("dashboard_app",),
    ("cli", "__main__", "pdm_replay"),
)
# Known upward edges, each to be removed by the change named beside it (none today).
ALLOWED_UPWARD: set[tuple[str, str]] = set()
MATH_FORBIDDEN = ("pyarrow", "polars", "duckdb", "transformers", "streamlit", "pandas",
                  "pdm_replay.io")

MAX_FUNCTION_LINES = 40  # full span: from the `def` line to the last line of the body
LONG_FUNCTIONS: set[tuple[str, str]] = set()  # exceptions, each with its reason


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(tree: ast.AST, module: str, is_package: bool,
                     known: Iterable[str]) -> set[str]:
    """Every pdm_replay module ``module`` imports anywhere (relative imports resolved;
    ``from pkg import name`` is ``pkg.name`` when that is a module)."""
    known = set(known)
    package = module if is_package else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            subs = {f"{base}.{a.name}" for a in node.names} & known
            out.update(subs or {base})
    return {m for m in out if m == "pdm_replay" or m.startswith("pdm_replay.")}


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}`` for every module under ``root``."""
    files = sorted(root.rglob("*.py"))
    names = {module_name(f, root) for f in files}
    return {module_name(f, root): imported_modules(ast.parse(f.read_text()), module_name(
        f, root), f.name == "__init__.py", names) for f in files}


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_violations(graph: Mapping[str, set[str]], layers: Iterable[Iterable[str]],
                     allowed: set[tuple[str, str]] = frozenset()) -> list[str]:
    """``importer -> imported`` for each import of a higher layer (or of no layer)."""
    rank = {u: i for i, group in enumerate(layers) for u in group}
    bad = []
    for src, targets in sorted(graph.items()):
        for dst in sorted(targets):
            if unit(src) not in rank or unit(dst) not in rank:
                bad.append(f"{src} -> {dst} (a unit with no layer)")
            elif rank[unit(dst)] > rank[unit(src)] and (src, dst) not in allowed:
                bad.append(f"{src} -> {dst} (layer {rank[unit(src)]} imports layer "
                           f"{rank[unit(dst)]})")
    return bad


def test_no_lower_layer_imports_a_higher_one() -> None:
    assert layer_violations(import_graph(), LAYERS, ALLOWED_UPWARD) == []


def import_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Each set of modules that import one another in a cycle (Tarjan's strongly connected
    components of more than one module), sorted. Function-level imports count: a lazy
    import that closes a cycle still ties the modules together. A module importing itself
    (``python -m``'s ``__main__`` re-importing its own name, so pickles name it) is not one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = [stack.pop()]
            while comp[-1] != v:
                comp.append(stack.pop())
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_cycle() -> None:
    assert import_cycles(import_graph()) == []


def test_cycle_check_sees_a_cycle_inside_a_layer() -> None:
    graph = {"pdm_replay.report.a": {"pdm_replay.report.b"},
             "pdm_replay.report.b": {"pdm_replay.report.c"},
             "pdm_replay.report.c": {"pdm_replay.report.a", "pdm_replay.math.x"},
             "pdm_replay.math.x": set()}
    assert layer_violations(graph, LAYERS) == []  # same layer: the layer check is silent
    assert import_cycles(graph) == [["pdm_replay.report.a", "pdm_replay.report.b",
                                     "pdm_replay.report.c"]]


def test_allowed_upward_edges_still_exist() -> None:
    graph = import_graph()
    assert all(dst in graph.get(src, ()) for src, dst in ALLOWED_UPWARD), \
        "an allowed upward import is gone: remove it from ALLOWED_UPWARD"


def test_checker_catches_a_violation() -> None:
    graph = {"pdm_replay.math.sums": {"pdm_replay.io.reader"},
             "pdm_replay.report.db": {"pdm_replay.math.sums", "pdm_replay.commands.masks"},
             "pdm_replay.commands.masks": {"pdm_replay.report.db"},
             "pdm_replay.cli.app": {"pdm_replay.nowhere"}}
    assert layer_violations(graph, LAYERS) == [
        "pdm_replay.cli.app -> pdm_replay.nowhere (a unit with no layer)",
        "pdm_replay.math.sums -> pdm_replay.io.reader (layer 0 imports layer 3)",
        "pdm_replay.report.db -> pdm_replay.commands.masks (layer 6 imports layer 8)"]
    assert layer_violations(graph, LAYERS, {("pdm_replay.report.db",
                                             "pdm_replay.commands.masks")})[2:] == []


def test_graph_sees_lazy_and_relative_imports() -> None:
    code = ("from . import padded\nfrom .ragged import row_problems\ndef f():\n"
            "    from pdm_replay.commands.masks import run_masks\n    import pdm_replay.io\n")
    known = {"pdm_replay.ingest.padded", "pdm_replay.ingest.ragged", "pdm_replay.commands.masks"}
    assert imported_modules(ast.parse(code), "pdm_replay.ingest.driver", False, known) == {
        "pdm_replay.ingest.padded", "pdm_replay.ingest.ragged", "pdm_replay.commands.masks",
        "pdm_replay.io"}


def _external_imports(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            out.add(node.module or "")
    return out


def test_math_does_no_io() -> None:
    found = {f"{f.name}: {m}" for f in (PACKAGE / "math").rglob("*.py")
             for m in _external_imports(ast.parse(f.read_text()))
             if any(m == x or m.startswith(x + ".") for x in MATH_FORBIDDEN)}
    assert found == set()


def long_functions(root: Path = PACKAGE, limit: int = MAX_FUNCTION_LINES
                   ) -> dict[tuple[str, str], int]:
    """``{(file, function): lines}`` of functions spanning more than ``limit`` lines."""
    out = {}
    for f in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                span = node.end_lineno - node.lineno + 1
                if span > limit:
                    out[(f.relative_to(root).as_posix(), node.name)] = span
    return out


def test_functions_stay_short() -> None:
    over = long_functions()
    assert {k: n for k, n in over.items() if k not in LONG_FUNCTIONS} == {}
    assert LONG_FUNCTIONS <= set(over), "a listed function got short: drop it from the list"


def test_long_function_check_counts_the_full_span(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(38))
    (tmp_path / "m.py").write_text(f'def ok():\n    """Doc."""\n{body}\n\n'
                                   f'def long():\n    """Doc."""\n{body}\n    return 1\n')
    assert long_functions(tmp_path) == {("m.py", "long"): 41}


def duplicate_test_basenames(root: Path) -> dict[str, list[Path]]:
    """Test modules sharing a file name under ``root``: the suite has no ``__init__.py``
    files, so pytest's default import mode imports each by its bare name and refuses the
    second (``import file mismatch``) on a clean clone, where no ``__pycache__`` hides it."""
    seen: dict[str, list[Path]] = {}
    for path in sorted(root.rglob("test_*.py")):
        seen.setdefault(path.name, []).append(path)
    return {name: paths for name, paths in seen.items() if len(paths) > 1}


def test_test_module_names_are_unique() -> None:
    assert duplicate_test_basenames(Path(__file__).parent) == {}


def test_duplicate_basename_check_sees_nested_twins(tmp_path: Path) -> None:
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "test_x.py").write_text("")
    assert list(duplicate_test_basenames(tmp_path)) == ["test_x.py"]
