"""The registry of report sections: what grows when the report shows one more table.

A :class:`ReportSection` is one spec of everything a section is: the SQL file of its views
and named query, the function computing its frame from a report connection, how its cells
read (labels, percent and signed columns, the columns a 100-column terminal shows), the
note on why cells are empty, its legend terms, its plot and its dashboard page. The report
(:mod:`.build`), every format (:mod:`.render`: table, Markdown, JSON, HTML), the legend
(:mod:`.legend`), the plots (:mod:`.plots`), the connection's views (:mod:`.db`) and the
dashboard (:func:`pdm_replay.report.dashboard_api.section_frame`, the page list of
:mod:`pdm_replay.dashboard_app`) iterate over :data:`SECTIONS` instead of naming sections.

The built-in sections are registered in :mod:`.section_catalog`. A new section touches at
most three files: ``pdm_replay/sql/<its views and query>.sql``, a module with its frame (and
plot) functions where the named query alone is not the frame, and one ``register_section``
entry in :mod:`.section_catalog` (or a register call of its own, as the tests do).

This module is plain metadata (no polars, DuckDB or matplotlib at import): ``pdm-replay
dashboard --help`` lists the section pages. A spec's functions may be given as
``"module:function"`` references, imported only when called, so that registering a
section loads none of its code (:func:`pdm_replay.user_modules.resolve`).

Examples
--------
>>> spec = ReportSection(name="demo", title="Demo", sql="views_demo.sql", after="mask_summary")
>>> spec.query_name, spec.page is None
('demo', True)
>>> ordered(("headline", "mask_summary", "log_health"), [spec])
['headline', 'mask_summary', 'demo', 'log_health']
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol

from pdm_replay.user_modules import resolve

if TYPE_CHECKING:
    import polars as pl


class SectionDB(Protocol):
    """What a section reads: :class:`pdm_replay.report.db.ReportDB` (not imported: the
    connection registers the sections' views, so it imports this registry)."""

    def named(self, name: str, params: Mapping[str, Any] | None = None, *,
              sql_file: str | Path = "queries.sql") -> "pl.DataFrame": ...


@dataclass(frozen=True)
class SectionPage:
    """A section's dashboard page: ``script`` under ``dashboard_app/page_scripts/`` (None:
    the generic section page, its table, plot and legend terms), title and icon."""

    title: str
    icon: str
    script: str | None = None


@dataclass(frozen=True)
class ReportSection:
    """One report section, everything the report, the formats and the dashboard need.

    ``name``: the report's key (JSON key, ``Report`` attribute, plot and page name);
    ``title``: the heading every format prints; ``sql``: the SQL file of its views
    followed by its ``-- name:`` query blocks (the views are registered on every report
    connection; None: the section reads existing views); ``query``: the named query of
    ``sql`` (default ``name``); ``frame``: ``frame(db, **params) -> DataFrame`` (None: the
    named query with ``params``); ``note``: ``note(frame, db) -> str | None``, why some
    cells are empty; ``labels``: ``{column: label}``, the shown columns under their labels
    (None: every column under its own name, snake_case relabeled on the terminal);
    ``headers``: print the column names as they are (trainers' metric names; default:
    snake_case relabeled on the terminal); ``percent`` / ``signed``: columns printed as
    percent / with their sign; ``narrow``: the labels a 100-column terminal shows
    (``--wide``: all); ``legend``: ``(term, text)``
    lines of the legend; ``plot``: ``plot(frame) -> PNG bytes`` and ``plot_title``;
    ``page``: its dashboard page; ``after``: the section it is printed after (None: last);
    ``hide_empty``: leave the section out of the report when it has no rows.
    """

    name: str
    title: str
    sql: str | Path | None = None
    query: str | None = None
    frame: Callable[..., Any] | str | None = None
    note: Callable[..., Any] | str | None = None
    labels: Mapping[str, str] | None = None
    headers: bool = False
    percent: tuple[str, ...] = ()
    signed: tuple[str, ...] = ()
    narrow: tuple[str, ...] = ()
    legend: tuple[tuple[str, str], ...] = ()
    plot: Callable[..., Any] | str | None = None
    plot_title: str | None = None
    page: SectionPage | None = None
    after: str | None = None
    hide_empty: bool = False

    @property
    def query_name(self) -> str:
        return self.query or self.name

    def compute(self, db: SectionDB, **params: Any) -> "pl.DataFrame":
        """The section's frame on ``db`` (``params``: its query's, e.g. a filter)."""
        if self.frame is not None:
            return resolve(self.frame)(db, **params)
        if self.sql is None:
            raise ValueError(f"section {self.name!r}: neither a frame function nor its sql")
        return db.named(self.query_name, params, sql_file=self.sql)

    def why_empty(self, frame: "pl.DataFrame", db: SectionDB) -> str | None:
        """The note shown under the section's table (None: nothing to explain)."""
        return resolve(self.note)(frame, db) if self.note is not None else None

    def png(self, frame: "pl.DataFrame") -> bytes:
        """The section's plot of ``frame`` as PNG bytes (``plot`` must be set)."""
        if self.plot is None:
            raise ValueError(f"section {self.name!r} has no plot")
        return resolve(self.plot)(frame)


# Every registered section by name, in registration order (print order: :func:`ordered`).
SECTIONS: dict[str, ReportSection] = {}


def register_section(spec: ReportSection) -> ReportSection:
    """Add ``spec`` to :data:`SECTIONS`; a second section of the same name is rejected."""
    if spec.name in SECTIONS:
        raise ValueError(f"report section {spec.name!r} is already registered")
    SECTIONS[spec.name] = spec
    return spec


def ordered(core: Iterable[str], specs: Iterable[ReportSection]) -> list[str]:
    """The print order: the ``core`` keys, each spec right after its ``after`` section
    (after the sections placed there before it), or last."""
    keys = list(core)
    for spec in specs:
        if spec.after in keys:
            at = keys.index(spec.after) + 1
            while at < len(keys) and keys[at] in SECTIONS and SECTIONS[keys[at]].after == \
                    spec.after:
                at += 1
            keys.insert(at, spec.name)
        else:
            keys.append(spec.name)
    return keys


def view_files() -> list[str | Path]:
    """The SQL files of every registered section's views (registration order)."""
    return [s.sql for s in SECTIONS.values() if s.sql is not None]


def legend_terms() -> list[tuple[str, str]]:
    """Every registered section's legend lines, registration order."""
    return [term for s in SECTIONS.values() for term in s.legend]


def percent_columns() -> frozenset[str]:
    return frozenset(c for s in SECTIONS.values() for c in s.percent)


def signed_columns() -> frozenset[str]:
    return frozenset(c for s in SECTIONS.values() for c in s.signed)
