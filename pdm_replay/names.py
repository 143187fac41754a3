"""The package's shared vocabularies: each closed set of names a config field, a CLI
choice, a building block and an SQL query agree on, defined once.

A building block validates against these tuples and the CLI offers them as choices, so
neither imports the other's module; the report's SQL receives the basis names as
``$actual`` / ``$none`` / ``$own`` parameters (:func:`sql_names`) instead of spelling them.
The glossary in ``docs/architecture.md`` says what each concept is called everywhere.

>>> ACTUAL, NONE, BASES
('actual', 'none', ('own', 'actual', 'none'))
>>> sql_names()["actual"]
'actual'
"""

from __future__ import annotations

# The basis of a ΔD: the update whose realized divergence change is measured. A row of
# updates/v1 names it in the column `update_mask` (SPEC's name): a registered mask's
# simulated step, or ACTUAL. NONE is the registered mask that keeps every token, so its
# update is the one every token sees alike; OWN (report only) is each mask's own update.
ACTUAL = "actual"  # the trainer's real step: the next checkpoint
NONE = "none"  # the simulated step with every token kept
OWN = "own"  # each mask's own simulated step
BASES = (OWN, ACTUAL, NONE)  # the report's order

DTYPES = ("float32", "bfloat16", "float16")  # weight dtypes: torch.<name>
OPTIMIZERS = ("adam", "sgd")  # the simulated step's optimizer
SEED_BY = ("sample", "step")  # replay seeds: disjoint sample batches, or one per step
ENGINES = ("local", "ray")  # masks / recompute: threads in this process, or Ray Data
ON_ERROR = ("fail", "skip")  # a bad input record: stop with its error, or drop it and warn

REPORT_FORMATS = ("table", "markdown", "json", "html")  # pdm-replay report --format
SQL_FORMATS = ("table", "csv", "json", "parquet")  # pdm-replay sql --format
REPORT_BY = ("step",)  # pdm-replay report --by
DEFAULT_MEMORY_LIMIT = "1GB"  # DuckDB, per connection; it spills to a temp directory beyond


def sql_names() -> dict[str, str]:
    """The basis names as the report's SQL parameters (``$actual``, ``$none``, ``$own``)."""
    return {ACTUAL: ACTUAL, NONE: NONE, OWN: OWN}
