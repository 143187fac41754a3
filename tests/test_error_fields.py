"""Errors name settings by config field, never by command-line flag (issue 21).

:class:`pdm_replay.errors.FieldError` keeps the field names apart from the values, so
``str()`` says the field (a library caller's spelling) and the CLI maps the same fields to
its flags (``tests/cli/test_field_flags.py``). The source test below holds every library
raise site outside ``pdm_replay/cli/`` to that.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from pdm_replay.errors import FieldError, InputError
from pdm_replay.ingest.parsing import IngestError, IngestFieldError
from pdm_replay.replay.config import FieldError as ConfigFieldError
from pdm_replay.commands.make_sample import SampleExists

PACKAGE = Path(__file__).resolve().parents[1] / "pdm_replay"
# A flag as a user types it; not a third-party tool's own (torchrun's --nproc_per_node).
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*(?![\w])")
# A command line to type, quoted: another command's flags are literal there ("run
# `pdm-replay replay ... --resume`" in the dashboard), as are `--help` pointers.
COMMAND_LINE = re.compile(r"`pdm-replay [^`]*`")
ERROR_NAME = re.compile(r"(Error|Exists|Refused|Locked|Exception)$")


def _callee(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def _message_nodes(tree: ast.AST):
    """The expressions that make an error's text: what is raised, every exception built
    (``XError(...)`` anywhere), and every ``fix=`` hint."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            yield node.exc
        elif isinstance(node, ast.Call):
            if ERROR_NAME.search(_callee(node)):
                yield node
            yield from (k.value for k in node.keywords if k.arg == "fix")


def flag_sites(root: Path) -> list[str]:
    """``file:line: flags`` for each string constant of an error message under ``root``
    (``cli/`` excepted) that spells a ``--flag``."""
    found = set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] == "cli":
            continue
        for expr in _message_nodes(ast.parse(path.read_text(), str(path))):
            for node in ast.walk(expr):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    flags = FLAG.findall(COMMAND_LINE.sub("", node.value))
                    if flags:
                        found.add(f"{rel}:{node.lineno}: {', '.join(flags)}")
    return sorted(found)


def test_no_library_error_spells_a_flag() -> None:
    sites = flag_sites(PACKAGE)
    assert sites == [], ("library errors name config fields ({threads}, FieldError); the "
                         "CLI maps them to its flags (cli.errors.error_text):\n"
                         + "\n".join(sites))


@pytest.mark.parametrize("source, found", [
    ('raise ValueError(f"--threads {n}: expected at least 1")\n', ["--threads"]),
    ('raise X("a")\nerr = IngestError("pass --tokenizer PATH")\n', ["--tokenizer"]),
    ('raise InputError("exists", file=p, fix="pass --resume to continue it")\n',
     ["--resume"]),
    ('e = DirLocked("busy", fix="choose another " "--out")\n', ["--out"]),
    ('raise ValueError("run `pdm-replay replay ... --resume`; lower --nproc_per_node")\n',
     []),
    ('print("use --wide for every column")\n', []),
])
def test_the_source_check_finds_a_planted_flag(tmp_path: Path, source: str,
                                               found: list[str]) -> None:
    (tmp_path / "mod.py").write_text(source)
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "cmd.py").write_text('raise ValueError("--threads 0")\n')
    assert [s.split(": ", 1)[1] for s in flag_sites(tmp_path)] == [", ".join(found)] * bool(found)


def test_a_field_error_keeps_fields_and_values_apart() -> None:
    err = FieldError("{checkpoint} {path}: unknown field {{{name}}}", path="ckpt/{step}",
                     name="epoch")
    assert err.fields == ("checkpoint",) and err.field == "checkpoint"
    assert str(err) == "checkpoint ckpt/{step}: unknown field {epoch}"  # braces as given
    assert err.render(lambda f: "--" + f.replace("_", "-")) == \
        "--checkpoint ckpt/{step}: unknown field {epoch}"


def test_file_context_fix_and_a_switch_turned_off() -> None:
    err = FieldError("run directory exists", file="runs/a", fix="pass {resume} or "
                     "{tokenizer_check:off}")
    assert str(err) == "runs/a: run directory exists; pass resume or tokenizer_check=False"
    assert err.fields == ("resume", "tokenizer_check")
    assert (err.message, err.fix) == ("run directory exists",
                                      "pass resume or tokenizer_check=False")
    flags = {"resume": "--resume", "tokenizer_check": "--tokenizer-check"}
    spelled = err.render(lambda f, off=False: "--no-tokenizer-check" if off else flags[f])
    assert spelled == "runs/a: run directory exists; pass --resume or --no-tokenizer-check"


def test_an_error_value_is_spelled_the_same_way() -> None:
    cause = IngestFieldError("token {token!r} needs a tokenizer: pass {tokenizer} PATH",
                             token="hi")
    err = IngestFieldError("{where}: {cause}; or run with {on_error} skip",
                           where="a.jsonl: line 3", cause=cause)
    assert str(err) == "a.jsonl: line 3: token 'hi' needs a tokenizer: pass tokenizer " \
                       "PATH; or run with on_error skip"
    assert err.fields == ("on_error",)  # its own; the cause's render with it
    assert err.render(lambda f: f"--{f}") == "a.jsonl: line 3: token 'hi' needs a " \
                                             "tokenizer: pass --tokenizer PATH; or run " \
                                             "with --on_error skip"


def test_field_errors_stay_what_callers_catch() -> None:
    assert ConfigFieldError is FieldError  # still importable beside ReplayConfig
    assert issubclass(FieldError, InputError) and issubclass(FieldError, ValueError)
    assert issubclass(IngestFieldError, IngestError)
    exists = SampleExists("already holds README.md; pass {force}", file="s")
    assert isinstance(exists, FileExistsError) and str(exists) == \
        "s: already holds README.md; pass force"
    plain = InputError("a {brace} stays", fix="as {written}")
    assert plain.fields == () and str(plain) == "a {brace} stays; as {written}"


def test_a_template_placeholder_must_be_a_name() -> None:
    with pytest.raises(TypeError, match="must be names"):
        FieldError("{0} is positional")


def test_a_field_error_survives_pickling() -> None:
    import pickle
    err = SampleExists("already holds {taken}; pass {force}", file="s/{x}", taken="a")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is SampleExists and str(back) == str(err) == \
        "s/{x}: already holds a; pass force"
    assert back.fields == ("force",) and back.render(lambda f: "--" + f) == \
        "s/{x}: already holds a; pass --force"
