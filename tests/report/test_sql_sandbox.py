"""The SQL sandbox: no statement of `pdm-replay sql` can write, create or delete a file,
change a setting, or read outside the run (duckdb 2.0.1's real behavior).

Every attempt below is refused, and afterwards the run's files are byte-identical and no
file appeared in or beside the run.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.report.db import SqlRefused, connect
from pdm_replay.commands.report import SqlConfig, run_sql
from pdm_replay.testing.synthetic_run import write_synthetic_run

PART = "{run}/tokens/seed=0/part-0000.parquet"
# Statements that write, create or delete files, change settings or escape the run. The
# first is the hole the issue found: it replaced the part and exited 0.
ATTEMPTS = [
    f"COPY (SELECT 42 AS x) TO '{PART}' (FORMAT parquet, USE_TMP_FILE false)",
    f"COPY (SELECT 42 AS x) TO '{PART}' (FORMAT parquet)",
    f"COPY (SELECT 42 AS x) TO '{PART}' (FORMAT csv, OVERWRITE true)",
    "COPY (SELECT 42 AS x) TO '{run}/tokens' (FORMAT parquet, PARTITION_BY (x), "
    "OVERWRITE_OR_IGNORE)",
    "COPY (SELECT 42 AS x) TO '{run}/new.json' (FORMAT json)",
    "COPY (SELECT 42 AS x) TO '{outside}/new.csv'",
    "COPY tokens FROM '{run}/manifest.json'",
    "EXPORT DATABASE '{run}/export'",
    "EXPORT DATABASE '{outside}/export' (FORMAT parquet)",
    "IMPORT DATABASE '{run}'",
    "ATTACH '{run}/new.duckdb' AS other",
    "ATTACH ':memory:' AS other",
    "DETACH memory",
    "CREATE SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')",
    "CREATE PERSISTENT SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')",
    "INSTALL httpfs",
    "LOAD httpfs",
    "LOAD '{outside}/evil.duckdb_extension'",
    "SET enable_external_access = true",
    "RESET enable_external_access",
    "SET allowed_paths = ['/']",
    "SET lock_configuration = false",
    "SET temp_directory = '{outside}'",
    "SET profiling_output = '{outside}/profile.json'",
    "PRAGMA enable_profiling",
    "PRAGMA memory_limit = '100GB'",
    "CALL enable_logging()",
    "CREATE TABLE t AS SELECT * FROM tokens",
    "CREATE VIEW v AS SELECT 1",
    "CREATE OR REPLACE VIEW tokens AS SELECT 1 AS x",
    "DROP VIEW tokens",
    "INSERT INTO masks VALUES (1)",
    "CHECKPOINT",
    "VACUUM",
    "EXPLAIN ANALYZE COPY (SELECT 1) TO '{run}/x.csv'",
    "SELECT 1; COPY (SELECT 42 AS x) TO '" + PART + "' (FORMAT parquet, USE_TMP_FILE false)",
    "PIVOT tokens ON seed USING count(*)",
    # reads outside the run
    "SELECT * FROM read_text('{outside}/secret.txt')",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM glob('{outside}/*')",
    "SELECT * FROM read_parquet('{outside}/other.parquet')",
    "SELECT * FROM query('COPY (SELECT 1) TO ''{outside}/q.csv''')",
]


@pytest.fixture
def run(tmp_path: Path) -> Path:
    run = write_synthetic_run(tmp_path / "run", seeds=(0,), rows_per_seed=50)
    (tmp_path / "secret.txt").write_text("secret")
    return run


def _snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (the run and what lies beside it)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("statement", ATTEMPTS)
def test_every_write_or_escape_is_refused(run: Path, statement: str) -> None:
    sql = statement.format(run=run, outside=run.parent)
    before = _snapshot(run.parent)
    with pytest.raises((SqlRefused, duckdb.Error)):
        run_sql(SqlConfig(source=run, query=sql, format="csv"))
    assert _snapshot(run.parent) == before


def test_the_connection_itself_refuses_files_settings_and_extensions(run: Path) -> None:
    """Defence in depth: DuckDB's own controls (enable_external_access=false,
    allowed_paths = the run's files, lock_configuration) refuse these even without the
    parse check; the run's own files stay writable to DuckDB (allowed_paths means read
    and write), which is why user SQL must parse as one SELECT first."""
    outside = run.parent
    before = _snapshot(outside)
    with connect(run) as db:
        for sql in ("COPY (SELECT 1) TO '{o}/x.csv'", "EXPORT DATABASE '{o}/e'",
                    "ATTACH '{o}/x.duckdb'", "INSTALL httpfs", "LOAD httpfs",
                    "CREATE SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')",
                    "SET enable_external_access = true", "SET threads = 1",
                    "RESET allowed_paths", "PRAGMA enable_profiling",
                    "SELECT * FROM read_text('{o}/secret.txt')"):
            with pytest.raises(duckdb.Error):
                db.con.execute(sql.format(o=outside))
    assert _snapshot(outside) == before


def test_queries_still_run(run: Path) -> None:
    for sql in ("SELECT count(*) AS n FROM tokens", "SELECT seed, pos FROM updates LIMIT 1",
                "WITH a AS (SELECT seed FROM tokens) SELECT DISTINCT seed FROM a",
                "DESCRIBE tokens", "SUMMARIZE SELECT kl_topk FROM tokens"):
        assert run_sql(SqlConfig(source=run, query=sql, format="csv"))


def test_out_may_not_replace_the_runs_files(run: Path) -> None:
    before = _snapshot(run.parent)
    part = Path(PART.format(run=run))
    for out in (part, run / "result.csv"):
        with pytest.raises(SqlRefused, match="inside the run"):
            run_sql(SqlConfig(source=run, query="SELECT 1 AS x", format="csv", out=out))
    assert _snapshot(run.parent) == before


def test_cli_refusal_is_one_line_exit_2(run: Path) -> None:
    sql = ATTEMPTS[0].format(run=run, outside=run.parent)
    before = _snapshot(run.parent)
    res = CliRunner().invoke(app, ["sql", str(run), sql])
    assert res.exit_code == 2, res.output
    assert "COPY statement refused" in res.output and "Traceback" not in res.output
    assert _snapshot(run.parent) == before
    assert CliRunner().invoke(app, ["report", str(run)]).exit_code == 0
