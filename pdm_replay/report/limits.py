"""DuckDB resource defaults, in a module of their own so the CLI's ``--help`` (which shows
them) loads neither DuckDB nor the report code."""

from __future__ import annotations

DEFAULT_MEMORY_LIMIT = "1GB"  # per connection; DuckDB spills to a temp directory beyond it
