"""DuckDB resource defaults and the output formats, in a module of their own so the CLI's
``--help`` (which shows them) loads neither DuckDB nor the report code."""

from __future__ import annotations

DEFAULT_MEMORY_LIMIT = "1GB"  # per connection; DuckDB spills to a temp directory beyond it
FORMATS = ("table", "markdown", "json", "html")  # pdm-replay report --format
SQL_FORMATS = ("table", "csv", "json", "parquet")  # pdm-replay sql --format
BY = ("step",)  # pdm-replay report --by
