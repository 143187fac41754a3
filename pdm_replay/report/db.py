"""A DuckDB connection with every report view registered over a run, read in place.

The SQL lives in ``pdm_replay/sql/*.sql`` (package data). Values reach it only as ``$name``
parameters; the file lists and thresholds sit in one DuckDB variable (``report_run``) that
the views read with ``getvariable``. With ``sandbox=True`` (the default) the connection may
read the run's Parquet files and nothing else, and cannot write files or change settings,
so ad-hoc ``pdm-replay sql`` queries are harmless.

Views: ``tokens``, ``updates``, ``settings``, ``seeds``, ``masks``, ``mask_pairs``,
``comparisons`` (pair × threshold setting, :mod:`pdm_replay.report.comparisons`),
``bases``, ``mask_variants`` (the names mask@value of a sweep and their masks),
``regions``, ``out_of_region``, ``slope_values``, ``direction_pairs``,
``pair_disagreements``, ``disagreements`` (over ``disagreements_live``,
or its materialized copy after :meth:`ReportDB.cache_disagreements`), ``alignment_by_seed``,
``seed_rates``, ``kept_measured``, ``cluster_counts``, ``realized``, ``realized_none``,
``sign_accuracy``, ``estimator_accuracy``,
``direction_terms``, ``mask_summary_by_seed``, ``mask_summary``, ``log_health``,
``attribution_tokens``, ``attribution_signs``, ``attribution_split_by_seed``,
``comparison_region``, ``comparison_decisions``, ``comparison_totals``,
``comparison_deltas``, ``mask_comparison`` (:mod:`pdm_replay.report.mask_comparison`).

Examples
--------
>>> import tempfile, pathlib
>>> from pdm_replay.testing.synthetic_run import write_synthetic_run
>>> run = write_synthetic_run(pathlib.Path(tempfile.mkdtemp()) / "run", seeds=(0, 1),
...                           rows_per_seed=500)
>>> with connect(run) as db:
...     db.query("SELECT count(*) AS n FROM tokens WHERE seed = $s", {"s": 1})
shape: (1, 1)
┌─────┐
│ n   │
│ --- │
│ i64 │
╞═════╡
│ 500 │
└─────┘
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Mapping

import duckdb
import polars as pl
import pyarrow as pa

from pdm_replay.errors import FieldError, InputError
from pdm_replay.masks import MASK_SPECS, comparison_pairs
from pdm_replay.report.comparisons import (Comparison, bases, bases_table,
                                           comparisons_table, mask_region, plan,
                                           region_columns)
from pdm_replay.names import DEFAULT_MEMORY_LIMIT, sql_names
from pdm_replay.report.run_info import RunInfo, discover_run
from pdm_replay.report.section_catalog import view_files
from pdm_replay.schema import UPDATES_V1, keep_column, tokens_schema

# the core views, in dependency order; each report section's views follow
# (report.sections: its spec's ``sql`` file, the part before its first named query)
VIEW_FILES = ("views_core.sql", "views_alignment.sql", "views_accuracy.sql",
              "views_summary.sql", "views_attribution.sql")
QUERY_MARK = "-- name:"


def load_sql(name: str | Path) -> str:
    """The text of ``pdm_replay/sql/<name>`` (a :class:`~pathlib.Path`: that file, a
    report section's own).

    >>> "CREATE OR REPLACE VIEW tokens" in load_sql("base_tokens.sql")
    True
    """
    if isinstance(name, Path):
        return name.read_text(encoding="utf-8")
    return files("pdm_replay").joinpath("sql", name).read_text(encoding="utf-8")


def view_statements(name: str | Path) -> str:
    """The statements of a section's SQL file before its first ``-- name:`` query block.

    >>> "-- name:" in view_statements("views_mask_comparison.sql")
    False
    """
    text = load_sql(name)
    at = text.find("\n" + QUERY_MARK)
    return text if at < 0 else text[:at + 1]


@lru_cache(maxsize=None)
def named_queries(name: str | Path = "queries.sql") -> dict[str, str]:
    """The ``-- name: <query>`` blocks of a packaged SQL file (or a section's file), by name.

    >>> "mask_summary" in named_queries()
    True
    """
    queries: dict[str, str] = {}
    current: str | None = None
    for line in load_sql(name).splitlines():
        if line.startswith(QUERY_MARK):
            current = line.split(":", 1)[1].strip()
            queries[current] = ""
        elif current is not None:
            queries[current] += line + "\n"
    return {k: v.strip() for k, v in queries.items()}


class ReportDB:
    """An open DuckDB connection over one run; use :func:`connect` to make one.

    ``con`` is the raw ``duckdb.DuckDBPyConnection``; ``info`` describes the run.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, info: RunInfo,
                 temp_dir: Path | None = None, layout: Layout | None = None) -> None:
        self.con = con
        self.info = info
        self._temp_dir = temp_dir
        self._cached = False
        self.layout = layout or Layout((), (), ())
        self._shared: int | None = None
        self._memo: dict[str, Any] = {}

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> pl.DataFrame:
        """Run ``sql`` with ``$name`` parameters bound from ``params``; a polars DataFrame."""
        table = self.con.sql(sql, params=dict(params) if params else None).to_arrow_table()
        return pl.DataFrame(pl.from_arrow(table))

    def named(self, name: str, params: Mapping[str, Any] | None = None, *,
              sql_file: str | Path = "queries.sql") -> pl.DataFrame:
        """Run the query ``name`` of ``pdm_replay/sql/<sql_file>`` with ``params``."""
        return self.query(named_queries(sql_file)[name], params)

    def once(self, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, run once per connection under ``key`` (several report sections of
        one computation, e.g. :func:`pdm_replay.report.mismatch.step_metrics`'s two tables,
        read by the report and its plots alike); the run must not change meanwhile."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def shared_samples(self) -> int:
        """How many samples have tokens in several seeds (counted once per connection)."""
        if self._shared is None:
            self._shared = int(self.named("shared_samples")["n"][0])
        return self._shared

    def seeds_independent(self) -> bool:
        """A replay whose seeds share no sample, by its tokens and by its manifest."""
        return (self.info.kind == "replay" and not self.info.seeds_overlap
                and self.shared_samples() == 0)

    def arrow_batches(self, sql: str, params: Mapping[str, Any] | None = None,
                      batch_rows: int = 65536) -> pa.RecordBatchReader:
        """Stream the result of ``sql`` as Arrow record batches (bounded memory)."""
        relation = self.con.sql(sql, params=dict(params) if params else None)
        return relation.to_arrow_reader(batch_rows)

    def cache_disagreements(self) -> None:
        """Compute the disagreement set once and let every view read the copy.

        Worth it before several reports on one connection (``build_report`` calls it); the
        run must not change while the connection is open.
        """
        if not self._cached:
            self.con.execute(load_sql("cache_disagreements.sql"))
            self._cached = True

    def close(self) -> None:
        self.con.close()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def __enter__(self) -> "ReportDB":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


@dataclass(frozen=True)
class Layout:
    """What the direction analysis of a connection compares (``comparisons``, ``bases``)
    and which updates the run holds."""

    updates: tuple[str, ...]
    comparisons: tuple[Comparison, ...]
    bases: tuple[str, ...]
    notes: tuple[str, ...] = ()  # registered pairs left out of the direction analysis


def connect(source: Path | str | RunInfo, *, memory_limit: str = DEFAULT_MEMORY_LIMIT,
            threads: int | None = None, sandbox: bool = True,
            thresholds: Mapping[str, float] | None = None,
            step: int | None = None) -> ReportDB:
    """Open an in-memory DuckDB with every report view over ``source``.

    ``source`` is a replay run directory, a ``pdm-replay masks`` tokens file, or the
    :class:`RunInfo` of one. ``memory_limit`` bounds DuckDB's buffers (it spills to a
    private temp directory beyond it); ``threads`` defaults to DuckDB's choice.
    ``thresholds`` (``delta_kl`` / ``delta_tv``) re-threshold the direction analysis at
    report time; ``step`` keeps one logged step's tokens.
    """
    info = source if isinstance(source, RunInfo) else discover_run(source)
    temp_dir = Path(tempfile.mkdtemp(prefix="pdm_replay_duckdb_"))
    config: dict[str, Any] = {"memory_limit": memory_limit, "temp_directory": str(temp_dir)}
    if threads:
        config["threads"] = threads
    con = duckdb.connect(":memory:", config=config)
    try:
        layout = _register(con, info, thresholds or {}, step)
        if sandbox:
            _lock_down(con, info, temp_dir)
    except BaseException:
        con.close()
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    return ReportDB(con, info, temp_dir, layout)


def _registry_tables(info: RunInfo) -> tuple[pa.Table, pa.Table]:
    """The ``masks`` (registry + presence) and ``mask_pairs`` tables."""
    present = set(info.masks)
    names = list(MASK_SPECS) + [m for m in info.masks if m not in MASK_SPECS]
    specs = [MASK_SPECS.get(n) for n in names]
    # a family mask's own region at the run's thresholds (its out-of-region count)
    regions = [mask_region(n, info.thresholds) if s and s.family else None
               for n, s in zip(names, specs)]
    masks = pa.table({
        "ord": pa.array(range(len(names)), pa.int32()),
        "name": names,
        "family": [s.family if s else None for s in specs],
        "direction": [s.direction if s else None for s in specs],
        "estimator": [s.estimator if s else None for s in specs],
        "proximity": [s.proximity if s else None for s in specs],
        "granularity": [s.granularity if s else None for s in specs],
        "weight": [s.weight if s else None for s in specs],
        "present": [n in present for n in names],
        "stat": pa.array([r[0] if r else None for r in regions], pa.string()),
        "low": pa.array([r[1] if r else None for r in regions], pa.float64()),
        "high": pa.array([r[2] if r else None for r in regions], pa.float64()),
        "doc": [s.doc if s else "not in this version's registry" for s in specs],
    })
    pairs = comparison_pairs(list(MASK_SPECS))
    mask_pairs = pa.table({
        "ord": pa.array(range(len(pairs)), pa.int32()),
        "family": [p[0] for p in pairs], "estimator": [p[1] for p in pairs],
        "ratio_mask": [p[2] for p in pairs], "predictive_mask": [p[3] for p in pairs],
        "ratio_keep": [keep_column(p[2]) for p in pairs],
        "predictive_keep": [keep_column(p[3]) for p in pairs],
        "present": [p[2] in present and p[3] in present for p in pairs],
    })
    return masks, mask_pairs


def _register(con: duckdb.DuckDBPyConnection, info: RunInfo,
              thresholds: Mapping[str, float], step: int | None) -> Layout:
    masks, mask_pairs = _registry_tables(info)
    # Registered Arrow objects become views of these names; templates carry every column
    # of the contracts so that the SQL never depends on which columns a run has.
    con.register("tokens_template", tokens_schema(list(MASK_SPECS), replay=True,
                                                  exact=True).empty_table())
    con.register("updates_template", UPDATES_V1.empty_table())
    con.register("masks", masks)
    con.register("mask_pairs", mask_pairs)
    t = info.thresholds
    con.execute(load_sql("report_run.sql"), {
        "kind": info.kind,
        "tokens_files": [str(p.resolve()) for p in info.tokens_files],
        "updates_files": [str(p.resolve()) for p in info.updates_files] or [""],
        "hive_partitioning": info.kind == "replay",
        "eps": t.eps, "eps_low": t.eps_low, "eps_high": t.eps_high,
        "delta_kl": t.delta_kl, "delta_tv": t.delta_tv,
        "thresholds_source": info.thresholds_source, "step": step, **sql_names(),
    })
    con.execute(load_sql("base_tokens.sql"))
    con.execute(load_sql("base_updates.sql" if info.has_updates else "base_updates_empty.sql"))
    updates = tuple(r[0] for r in con.sql(
        "SELECT DISTINCT update_mask FROM updates ORDER BY 1").fetchall())
    found, left_out = plan(info, updates, thresholds=thresholds)
    cs = tuple(found)
    names = tuple(bases(updates, has_updates=info.has_updates))
    con.register("comparisons", comparisons_table(list(cs), has_updates=info.has_updates))
    stats = [s for s in masks.column("stat").to_pylist() if s]
    con.execute(load_sql("report_regions.sql"), region_columns(list(cs), stats))
    con.register("mask_variants", pa.table({
        "name": pa.array(list(info.mask_variants), pa.string()),
        "mask": pa.array([str(v["mask"]) for v in info.mask_variants.values()], pa.string())}))
    con.register("bases", bases_table(list(names)))
    for name in VIEW_FILES:
        con.execute(load_sql(name))
    for name in view_files():
        con.execute(view_statements(name))
    return Layout(updates, cs, names, tuple(left_out))


class SqlRefused(InputError):
    """A user query that is not one read-only statement."""


class SqlFieldRefused(FieldError, SqlRefused):
    """A refused query or output whose message names `pdm-replay sql`'s config fields
    (``commands.report.SqlConfig``: ``format``, ``out``)."""


def read_only_query(sql: str) -> str:
    """``sql`` if DuckDB's own parser finds exactly one SELECT statement in it (``SELECT``,
    ``WITH``, ``FROM``, ``VALUES``, ``DESCRIBE``, ``SUMMARIZE``, ``SHOW``); else
    :class:`SqlRefused`.

    The connection's controls (:func:`_lock_down`) refuse other files, settings and
    extensions, but ``allowed_paths`` grants write access as well as read to the run's
    own files (``COPY ... TO 'RUN/tokens/...' (USE_TMP_FILE false)`` replaced one in
    duckdb 2.0.1), and DDL would change the views: so user SQL is parsed first and only a
    query is run.

    >>> read_only_query("FROM tokens LIMIT 1")
    'FROM tokens LIMIT 1'
    >>> read_only_query("COPY tokens TO 'x.csv'")
    Traceback (most recent call last):
    ...
    pdm_replay.report.db.SqlFieldRefused: COPY statement refused: ...
    """
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise SqlRefused(f"SQL does not parse: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1:
        raise SqlRefused(f"{len(statements)} statements given; `pdm-replay sql` runs exactly "
                         "one query")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise SqlFieldRefused("{kind} statement refused: the SQL sandbox runs one read-only "
                              "query (SELECT, WITH, FROM, DESCRIBE, SUMMARIZE); write results "
                              "with {format} csv|json|parquet {out} FILE", kind=kind.name)
    return sql


def _lock_down(con: duckdb.DuckDBPyConnection, info: RunInfo, temp_dir: Path) -> None:
    """Allow reading the run's files only; no other file access, no setting changes.

    After this, DuckDB refuses (verified on 2.0.1, tests/report/test_sql_sandbox.py): any
    file outside ``allowed_paths`` (reads, COPY, EXPORT, ATTACH of a file), secrets and
    extensions (INSTALL, LOAD), and every SET / RESET / PRAGMA of a setting.
    """
    paths = [str(p.resolve()) for p in (*info.tokens_files, *info.updates_files)]
    con.execute("SET allowed_paths = $paths", {"paths": paths})
    con.execute("SET allowed_directories = $dirs", {"dirs": [str(temp_dir)]})
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
