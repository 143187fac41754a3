"""``columns``: any Parquet or JSONL table, plus a TOML mapping from its columns to ours.

Mapping file (``--mapping map.toml``)::

    [columns]                 # rollout/v1 name = column name in the input
    sample_id = "id"
    step = "iteration"
    response_ids = "completion_ids"
    advantages = "adv"        # a list per token, or one number per sample (broadcast)
    behavior_logprobs = "sampler_logp"
    topk_ids = "top_ids"
    topk_logprobs = "top_logp"

    group_id = ["step", "prompt_idx"]  # several columns: their values joined by "/"

    [defaults]                # constants for rollout/v1 columns the input lacks
    step = 0

    [meta]                    # footer metadata (CLI options override)
    topk_convention = "replace_last"
    logprobs_mode = "raw"
    zero_padded_topk = false  # true: (id 0, log-prob 0.0) top-K slots are padding
    temperature = 1.0
    top_p = 1.0
    top_k = 0                 # the sampler's top-k (0 = off)

Without ``topk_ids`` / ``topk_logprobs`` every position gets an empty top-K (the support is
the sampled token: only the ratio and binary masks are informative). ``--mapping NAME``
also takes a shipped mapping by name (:data:`SHIPPED`, in ``pdm_replay/ingest/mappings/``).

Examples
--------
>>> m = ColumnMapping(columns={"response_ids": "ids", "advantages": "adv"}, defaults={"step": 3})
>>> m.apply_row({"ids": [5, 6], "adv": 0.5})
{'response_ids': [5, 6], 'advantages': [0.5, 0.5], 'step': 3, 'topk_ids': [[], []], 'topk_logprobs': [[], []]}
>>> ColumnMapping(columns={"sample_id": ["step", "idx"]}).apply_row({"step": 2, "idx": 7})
{'sample_id': '2/7'}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pdm_replay.errors import reading
from pdm_replay.ingest.formats import ParseContext
from pdm_replay.ingest.parsing import (IngestError, IngestFieldError, Location, Reject, Rows,
                                       json_rows, sampling_of)
from pdm_replay.io.reader import open_parquet
from pdm_replay.schema import ROLLOUT_V1

JOINABLE = ("sample_id", "group_id")  # may name several columns, joined by "/"
TOPK = ("topk_ids", "topk_logprobs")
ID_COLUMNS = ("prompt_ids", "response_ids", "topk_ids")  # token ids: integers, never cast
MAPPINGS = Path(__file__).with_name("mappings")
SHIPPED = ("open-instruct",)  # --mapping NAME: mappings/<name with _>.toml


@dataclass(frozen=True)
class ColumnMapping:
    """A parsed mapping file: ours -> theirs, constants, and footer settings."""

    columns: dict[str, str | list[str]]
    defaults: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def sources(self) -> list[str]:
        """The input columns the mapping reads."""
        return sorted({c for v in self.columns.values() for c in ([v] if isinstance(v, str)
                                                                   else v)})

    @property
    def zero_padded(self) -> bool:
        return bool(self.meta.get("zero_padded_topk", False))

    def sampling(self) -> dict[str, Any]:
        out = sampling_of({"meta": self.meta}, "meta")
        if self.meta.get("topk_convention"):
            out["topk_convention"] = self.meta["topk_convention"]
        return out

    def apply_row(self, rec: Mapping) -> dict[str, Any]:
        """One input record -> rollout/v1 names; a scalar advantage is broadcast."""
        row = {ours: rec.get(theirs) if isinstance(theirs, str) else _joined(rec, theirs)
               for ours, theirs in self.columns.items()}
        for ours in ID_COLUMNS:
            _check_ids(row.get(ours), ours, self.columns.get(ours))
        row.update({k: v for k, v in self.defaults.items() if row.get(k) is None})
        adv, ids = row.get("advantages"), row.get("response_ids")
        if isinstance(adv, (int, float)) and isinstance(ids, list):
            row["advantages"] = [float(adv)] * len(ids)
        if isinstance(ids, list) and not any(name in self.columns for name in TOPK):
            row.update({name: [[] for _ in ids] for name in TOPK})
        return row

    def apply_table(self, table: pa.Table) -> pa.Table:
        """An input table -> rollout/v1 names; a numeric ``advantages`` column is broadcast."""
        cols = {ours: (table.column(theirs) if isinstance(theirs, str) else
                       pc.binary_join_element_wise(*[pc.cast(table.column(c), pa.string())
                                                     for c in theirs], "/"))
                for ours, theirs in self.columns.items()}
        for name, value in self.defaults.items():
            if name not in cols:
                typ = ROLLOUT_V1.field(name).type if name in ROLLOUT_V1.names else None
                cols[name] = pa.array([value] * table.num_rows, type=typ)
        adv = cols.get("advantages")
        if adv is not None and not pa.types.is_list(adv.type) and "response_ids" in cols:
            lengths = pc.fill_null(pc.list_value_length(cols["response_ids"]), 0)
            lengths = lengths.to_numpy(zero_copy_only=False)
            values = np.repeat(adv.to_numpy(zero_copy_only=False).astype(np.float32), lengths)
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
            cols["advantages"] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
        if "response_ids" in cols and not any(name in self.columns for name in TOPK):
            lengths = pc.fill_null(pc.list_value_length(cols["response_ids"]), 0)
            offsets = np.concatenate([[0], np.cumsum(lengths.to_numpy(zero_copy_only=False))])
            empty = pa.ListArray.from_arrays(pa.array(np.zeros(int(offsets[-1]) + 1, np.int32)),
                                             pa.array([], pa.int32()))
            cols["topk_ids"] = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), empty)
            cols["topk_logprobs"] = pa.ListArray.from_arrays(
                pa.array(offsets.astype(np.int32)), empty.cast(pa.list_(pa.float32())))
        return pa.table(cols)


def _check_ids(value: Any, ours: str, theirs: Any) -> None:
    """Raise :class:`IngestError` unless every id in ``value`` (nested lists) is an integer:
    a JSON record's ids are never converted from texts ("12") or floats (13.5)."""
    if isinstance(value, list):
        for item in value:
            _check_ids(item, ours, theirs)
    elif value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise IngestError(f"mapped column {theirs!r} ({ours}) holds {type(value).__name__} "
                          f"{value!r}, not integer token ids; map the column of token ids "
                          "(tokenize texts first): ids are never converted")


def _joined(rec: Mapping, names: list[str]) -> str | None:
    values = [rec.get(c) for c in names]
    return None if any(v is None for v in values) else "/".join(map(str, values))


def load_mapping(path: Path | str | None) -> ColumnMapping:
    """Parse and check a mapping TOML file."""
    if path is None:
        raise IngestFieldError("{fmt} columns needs {mapping} MAP.toml (see `pdm-replay "
                               "ingest --help` and the README)")
    if str(path) in SHIPPED and not Path(path).exists():
        path = MAPPINGS / f"{str(path).replace('-', '_')}.toml"
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the tomli backport has the same API
        import tomli as tomllib
    try:
        doc = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise IngestError(f"{path}: cannot read the mapping: {exc}") from None
    columns = doc.get("columns", {})
    unknown = sorted((set(columns) | set(doc.get("defaults", {}))) - set(ROLLOUT_V1.names))
    if unknown:
        raise IngestError(f"{path}: {', '.join(unknown)} are not rollout/v1 columns; "
                          f"known: {', '.join(ROLLOUT_V1.names)}")
    bad = sorted(k for k, v in columns.items() if not isinstance(v, str) and (
        k not in JOINABLE or not isinstance(v, list) or not all(isinstance(c, str) for c in v)))
    if bad:
        raise IngestError(f"{path}: [columns] {', '.join(bad)} must name one column (a "
                          f"string); only {' and '.join(JOINABLE)} may join several (a list)")
    return ColumnMapping(columns=dict(columns), defaults=dict(doc.get("defaults", {})),
                         meta=dict(doc.get("meta", {})))


def _parquet(path: Path, mapping: ColumnMapping, chunk_rows: int) -> Iterator[Rows | Reject]:
    pf = open_parquet(path)
    missing = sorted(set(mapping.sources) - set(pf.schema_arrow.names))
    if missing:
        yield Reject(Location(str(path), "file"),
                     f"mapped columns {', '.join(missing)} are not in the file; it has "
                     f"{', '.join(pf.schema_arrow.names)}")
        return
    for problem in non_integer_ids(pf.schema_arrow, mapping):
        yield Reject(Location(str(path), "file"), problem)
        return
    with reading(path):  # a corrupt page fails mid-file: an error naming it
        yield from _parquet_rows(path, pf, mapping, chunk_rows)


def non_integer_ids(schema: pa.Schema, mapping: ColumnMapping) -> list[str]:
    """Why each mapped id column (``prompt_ids``, ``response_ids``, ``topk_ids``) of an
    input ``schema`` cannot be token ids: its values are not integers. Casting would turn
    token texts ("12", or words) or floats into ids that look valid and are wrong, so the
    file is refused instead.

    >>> m = ColumnMapping(columns={"response_ids": "text"})
    >>> non_integer_ids(pa.schema([("text", pa.list_(pa.string()))]), m)[0][:43]
    "mapped column 'text' (response_ids) holds s"
    >>> non_integer_ids(pa.schema([("text", pa.list_(pa.int64()))]), m)
    []
    """
    out = []
    for ours in ID_COLUMNS:
        theirs = mapping.columns.get(ours)
        if not isinstance(theirs, str) or theirs not in schema.names:
            continue
        value = schema.field(theirs).type
        while pa.types.is_list(value) or pa.types.is_large_list(value) or \
                pa.types.is_fixed_size_list(value):
            value = value.value_type
        if not (pa.types.is_integer(value) or pa.types.is_null(value)):
            out.append(f"mapped column {theirs!r} ({ours}) holds {value} values, not integer "
                       f"token ids ({schema.field(theirs).type}); map the column of token "
                       "ids (tokenize texts first): ids are never converted from "
                       f"{value}")
    return out


def _parquet_rows(path: Path, pf: pq.ParquetFile, mapping: ColumnMapping,
                  chunk_rows: int) -> Iterator[Rows]:
    first = 0
    for batch in pf.iter_batches(batch_size=chunk_rows,
                                 columns=mapping.sources):
        table = mapping.apply_table(pa.Table.from_batches([batch]))
        if "sample_id" not in table.column_names:
            ids = [f"{path.name}#{first + i}" for i in range(table.num_rows)]
            table = table.append_column("sample_id", pa.array(ids))
        where = [Location(str(path), "row", first + i) for i in range(table.num_rows)]
        yield Rows(table, where, mapping.sampling(), mapping.zero_padded)
        first += table.num_rows


def parse(path: Path, ctx: ParseContext) -> Iterator[Rows | Reject]:
    """Rows and rejects of one Parquet (``.parquet``) or JSON Lines file, read through the
    run's column mapping (``ctx.mapping``) in chunks of ``ctx.chunk_rows``."""
    mapping: ColumnMapping | None = ctx.mapping
    if mapping is None:
        raise IngestFieldError("{fmt} columns needs {mapping} MAP.toml")
    if path.suffix == ".parquet":
        yield from _parquet(path, mapping, ctx.chunk_rows)
    else:
        yield from json_rows(path, lambda rec: [rec], lambda rec, *_: mapping.apply_row(rec),
                             "record", lambda rec: mapping.sampling(), mapping.zero_padded)
