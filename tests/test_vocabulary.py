"""One name per concept: the glossary of docs/architecture.md, held over the source.

The glossary's last column lists retired names: an identifier in backticks (`lmu`) fails
this test when it is a name in the package's Python (a variable, argument, attribute,
function or class) or a word of its SQL outside comments and string literals; a phrase in
double quotes ("keep-all") fails it in the package's strings, comments and SQL, in
``README.md`` and under ``docs/`` (the glossary itself excepted). Random number generators
are seeded from an ``rng_seed`` (or a ``*_STREAM`` constant deriving a stream from a
replay batch ``seed``), never from a bare ``seed``: the replay batch is SPEC's ``seed``.
Spelling is American (``normalize``, ``color``, ``labeled``) in every text file of the project
but the shipped sample's data.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pdm_replay"
GLOSSARY = ROOT / "docs" / "architecture.md"
IDENTIFIER = re.compile(r"`([A-Za-z_]\w*)`")
PHRASE = re.compile(r'"([^"]+)"')
SQL_SPLIT = re.compile(r"(--[^\n]*|'(?:[^']|'')*')")
# British forms of the words this codebase uses (and their kin); "analyses" (the plural
# noun) is American too, so only "analyse(d|s)" as a verb is caught.
BRITISH = re.compile(
    r"(?i)\b\w*((colour|behaviour|favour|honour)\w*|centred|centre\b|analys(e|ed|ing)\b"
    r"|(normal|initial|serial|summar|vector|optim|organ|recogn|util|minim|maxim|standard"
    r"|custom|token|parallel|real|special|general|visual|categor|prioriti)is(e|ed|er|ers|es"
    r"|ing|ation|ations|able)\b|(label|model|cancel|travel|signal)l(ed|ing)\b)")
SOURCE_FOLDERS = ("pdm_replay", "tests", "docs", "benchmarks", "dashboards", "schemas", ".ci")
SKIP_PARTS = {"venv", ".venv", "__pycache__", ".pytest_cache", ".hypothesis"}
TEXT_SUFFIXES = {".py", ".md", ".sql", ".toml", ".sh", ".json", ".txt", ".yml", ".yaml"}
RNG_CALLS = {"manual_seed", "default_rng", "Random", "RandomState", "seed"}
# make-sample's --seed stays a public flag (the shipped sample's footer records the
# command line), so SampleConfig.seed seeds its generators.
RNG_EXCEPTIONS = {("commands/make_sample.py", "seed")}


def glossary_rows(text: str) -> list[list[str]]:
    """The cells of each row of the table under ``## Glossary``."""
    section = text.split("## Glossary", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip().strip("|").split(" | ") for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| concept")]
    return [[c.strip() for c in row] for row in rows]


def retired(text: str) -> tuple[set[str], set[str]]:
    """``(names, phrases)`` retired by the glossary ``text``."""
    cells = [row[-1] for row in glossary_rows(text)]
    return ({m for c in cells for m in IDENTIFIER.findall(c)},
            {m for c in cells for m in PHRASE.findall(c)})


def _tokens(path: Path) -> list[tokenize.TokenInfo]:
    return list(tokenize.generate_tokens(io.StringIO(path.read_text()).readline))


def _sql_code_and_text(path: Path) -> tuple[str, str]:
    parts = SQL_SPLIT.split(path.read_text())
    return "".join(parts[0::2]), "".join(parts[1::2])


def name_sites(root: Path, names: set[str]) -> list[str]:
    """``file:line: name`` for each retired name used in ``root``'s Python or SQL."""
    found = []
    for path in sorted(root.rglob("*.py")):
        found += [f"{path.relative_to(root)}:{t.start[0]}: {t.string}" for t in _tokens(path)
                  if t.type == tokenize.NAME and t.string in names]
    for path in sorted(root.rglob("*.sql")):
        code, _ = _sql_code_and_text(path)
        found += [f"{path.relative_to(root)}: {w}" for w in sorted(set(re.findall(r"\w+", code))
                                                                   & names)]
    return found


def _texts(path: Path) -> list[str]:
    if path.suffix == ".py":
        return [t.string for t in _tokens(path) if t.type in (tokenize.STRING, tokenize.COMMENT)]
    if path.suffix == ".sql":
        return [path.read_text()]
    text = path.read_text()
    return [text.split("## Glossary", 1)[0]] if path == GLOSSARY else [text]


def phrase_sites(paths: list[Path], phrases: set[str]) -> list[str]:
    """``file: phrase`` for each retired phrase (any case) in the texts of ``paths``."""
    found = []
    for p in paths:
        text = "\n".join(_texts(p)).lower()  # each file read and tokenized once
        name = p.relative_to(ROOT) if p.is_relative_to(ROOT) else p.name
        found += [f"{name}: {ph}" for ph in sorted(phrases) if ph.lower() in text]
    return found


def _leaf(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id  # type: ignore[attr-defined]


def _owned(name: ast.Name, tree: ast.AST) -> bool:
    """Whether ``name`` is the object of an attribute (``cfg`` in ``cfg.rng_seed``)."""
    return any(isinstance(n, ast.Attribute) and n.value is name for n in ast.walk(tree))


def _seed_names(call: ast.Call) -> list[str]:
    """The bare names seeding ``call`` other than an ``rng_seed`` (and a replay batch
    ``seed`` mixed with one); none where a ``*_STREAM`` constant keys the stream."""
    names = [_leaf(n) for a in call.args for n in ast.walk(a)
             if isinstance(n, ast.Attribute) or (isinstance(n, ast.Name) and not _owned(n, a))]
    if any(n.endswith("_STREAM") for n in names):
        return []  # a stream derived from a replay batch's indices, not a user's RNG seed
    keyed = any("rng_seed" in n for n in names)
    return [n for n in names if "rng_seed" not in n and not (n == "seed" and keyed)
            and not n.isupper()]


def rng_seed_sites(root: Path) -> list[str]:
    """``file:line: name`` for each RNG seeded from a name other than ``rng_seed``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            callee = getattr(getattr(node, "func", None), "attr", None) or getattr(
                getattr(node, "func", None), "id", None)
            if isinstance(node, ast.Call) and callee in RNG_CALLS:
                found += [f"{rel}:{node.lineno}: {n}" for n in _seed_names(node)
                          if (rel, n) not in RNG_EXCEPTIONS]
    return found


def british_sites(paths: list[Path]) -> list[str]:
    """``file:line: word`` for each British spelling in ``paths``."""
    return [f"{p.relative_to(ROOT) if p.is_relative_to(ROOT) else p.name}:{i}: {m.group(0)}"
            for p in paths for i, line in enumerate(p.read_text().splitlines(), 1)
            for m in BRITISH.finditer(line)]


def project_texts() -> list[Path]:
    """The project's text files: the top level's and those under its source folders (no
    git needed: CI may test a copy), the shipped sample's data and build output excepted."""
    found = [p for p in ROOT.iterdir() if p.is_file()]
    for folder in SOURCE_FOLDERS:
        found += [p for p in (ROOT / folder).rglob("*") if p.is_file()
                  and not SKIP_PARTS & set(p.relative_to(ROOT).parts)]
    return sorted(p for p in found if p.suffix in TEXT_SUFFIXES
                  and p != Path(__file__).resolve())  # this file spells them to catch them


def test_glossary_lists_retired_names() -> None:
    names, phrases = retired(GLOSSARY.read_text())
    assert {"lmu", "logp_mu", "MASKS", "record_masks"} <= names
    assert {"keep-all", "reference update"} <= phrases


def test_no_retired_name_in_code_or_sql() -> None:
    assert name_sites(PACKAGE, retired(GLOSSARY.read_text())[0]) == []


def test_no_retired_phrase_in_code_sql_or_docs() -> None:
    paths = (sorted(PACKAGE.rglob("*.py")) + sorted(PACKAGE.rglob("*.sql"))
             + [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md")))
    assert phrase_sites(paths, retired(GLOSSARY.read_text())[1]) == []


def test_rngs_are_seeded_from_rng_seed() -> None:
    assert rng_seed_sites(PACKAGE) == []


def test_spelling_is_american() -> None:
    paths = project_texts()
    assert ROOT / "pdm_replay" / "schema.py" in paths  # the listing found the tree
    assert british_sites(paths) == []


def test_checkers_catch_each_kind(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def f(lmu):\n    # the keep-all update\n"
                                   "    return np.random.default_rng(seed)\n"
                                   "torch.manual_seed(2 * cfg.rng_seed + 1)\n"
                                   "def g(rng_seed, seed):\n"
                                   "    return np.random.default_rng([seed, SAMPLE_STREAM])\n"
                                   "x = 'lmu'  # a string: not a name\n")
    (tmp_path / "q.sql").write_text("-- lmu in a comment\nSELECT lmu, 'lmu' FROM t;\n")
    assert name_sites(tmp_path, {"lmu"}) == ["m.py:1: lmu", "q.sql: lmu"]
    assert phrase_sites([tmp_path / "m.py"], {"Keep-All"}) == ["m.py: Keep-All"]
    assert rng_seed_sites(tmp_path) == ["m.py:3: seed"]  # cfg.rng_seed (4), line 6 pass
    rows = retired("## Glossary\n\n| concept | name | col | retired |\n|---|---|---|---|\n"
                   '| a | `x` | | `old`, "old words" |\n\n## Next\n| b | `y` | | `z` |\n')
    assert rows == ({"old"}, {"old words"})
    (tmp_path / "b.md").write_text("Colours are normalised; a labelled model's behaviour.\n"
                                   "The analyses are normalized, colored and labeled.\n")
    assert [s.split(": ")[1] for s in british_sites([tmp_path / "b.md"])] == [
        "Colours", "normalised", "labelled", "behaviour"]
