"""The report's SQL never spells a basis name (issue 36): ``actual``, ``none`` and ``own``
reach it as ``$actual`` / ``$none`` / ``$own`` (``names.sql_names()``) in the
``report_run`` variable, so the names are defined once, in ``pdm_replay.names``."""

from __future__ import annotations

import re
from importlib.resources import files

from pdm_replay.names import ACTUAL, NONE, OWN, sql_names
from pdm_replay.report.db import connect
from pdm_replay.testing.synthetic_run import example_run

LITERAL = re.compile(r"'(actual|none|own)'")


def _code(text: str) -> str:
    """``text`` without its ``--`` comments."""
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def test_no_sql_file_spells_a_basis_name() -> None:
    sql = files("pdm_replay").joinpath("sql")
    found = {}
    for path in sql.iterdir():
        if not path.name.endswith(".sql"):
            continue
        code = _code(path.read_text(encoding="utf-8"))
        if path.name == "report_run.sql":  # the struct's field names, filled by parameters
            code = re.sub(r"'(actual|none|own)': \$\1", "", code)
        hits = LITERAL.findall(code)
        if hits:
            found[path.name] = hits
    assert found == {}


def test_the_connection_holds_the_names_of_pdm_replay_names() -> None:
    assert sql_names() == {ACTUAL: ACTUAL, NONE: NONE, OWN: OWN}
    with connect(example_run()) as db:
        row = db.query("SELECT getvariable('report_run').actual AS a, "
                       "getvariable('report_run').none AS n, "
                       "getvariable('report_run').own AS o").row(0)
        assert row == (ACTUAL, NONE, OWN)
        bases = set(db.named("alignment_by_seed")["basis"].to_list())
    assert bases == {OWN, NONE}  # the example run: own and none updates, no actual step
