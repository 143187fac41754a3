"""Find what a report input holds: a replay run directory or a ``masks`` tokens file.

A replay run directory holds ``manifest.json``, ``tokens/seed=<s>/*.parquet`` (tokens/v1 +
``seed``) and ``updates/seed=<s>/*.parquet`` (updates/v1). ``pdm-replay masks`` writes one
tokens/v1 file without ``seed`` and without updates. Only footers and the manifest are read
here; the rows stay on disk for DuckDB.

Examples
--------
>>> import tempfile, pathlib
>>> from pdm_replay.testing.synthetic_run import write_synthetic_run
>>> run = write_synthetic_run(pathlib.Path(tempfile.mkdtemp()) / "run", seeds=(0, 1),
...                           rows_per_seed=500)
>>> info = discover_run(run)
>>> info.kind, info.has_updates, len(info.tokens_files), info.thresholds.delta_kl
('replay', True, 2, 0.15)
>>> "pdm_kl_agg" in info.masks
True
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pyarrow.parquet as pq

from pdm_replay.io.reader import list_parquet_files
from pdm_replay.masks import MASK_SPECS, Thresholds
from pdm_replay.report.masks_output import chosen_parts, masks_manifest
from pdm_replay.run_summary import SUMMARY_FILE
from pdm_replay.schema import (SCHEMA_KEY, THRESHOLDS_KEY, TOKENS_SCHEMA_ID,
                               UPDATES_SCHEMA_ID, VARIANTS_KEY)

MANIFEST = "manifest.json"
REQUIRED_TOKEN_COLUMNS = ("sample_id", "pos", "advantage", "ratio", "kl_topk", "tv_topk",
                          "dkl_local", "dkl_agg", "dkl_uniform", "dtv_agg", "dtv_uniform")
REQUIRED_UPDATE_COLUMNS = ("seed", "update_mask", "sample_id", "pos", "kl_topk_post",
                           "tv_topk_post", "delta_kl_topk", "delta_tv_topk")


@dataclass(frozen=True)
class RunInfo:
    """What a report input holds, from footers and the manifest only."""

    source: Path
    kind: str  # "replay" (run directory) | "masks" (tokens/v1 file(s) without updates)
    tokens_files: tuple[Path, ...]
    updates_files: tuple[Path, ...]
    columns: frozenset[str]  # tokens/v1 columns present in the files
    thresholds: Thresholds
    thresholds_source: str  # "tokens footer" | "manifest.json" | "defaults"
    manifest: Mapping[str, Any] | None
    notes: tuple[str, ...] = ()
    # sweep variants ``<mask>@<value>`` -> {"mask": ..., "<field>": value} (tokens footer
    # ``pdm_replay.mask_variants``, else the manifest's ``mask_variants``)
    mask_variants: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    summary: Path | None = None  # summary.parquet of a `masks --engine ray` output

    @property
    def has_updates(self) -> bool:
        return bool(self.updates_files)

    @property
    def has_exact(self) -> bool:
        return "dkl_exact" in self.columns

    @property
    def masks(self) -> tuple[str, ...]:
        """Masks with a ``keep_<mask>`` column (or ``keep_<mask>@<value>`` columns of a
        sweep): registry order, then unknown names."""
        present = {c[len("keep_"):] for c in self.columns if c.startswith("keep_")}
        present = {str(self.mask_variants[n]["mask"]) if n in self.mask_variants else n
                   for n in present}
        return tuple([m for m in MASK_SPECS if m in present] + sorted(present - set(MASK_SPECS)))

    @property
    def seeds_overlap(self) -> bool:
        """Whether the manifest says seeds share samples (``seed_overlap.overlap``)."""
        return bool(((self.manifest or {}).get("seed_overlap") or {}).get("overlap"))

    @property
    def recompute_deviation(self) -> Mapping[str, float] | None:
        """``{"max": .., "mean": ..}`` from the manifest, when the replay recorded it."""
        dev = (self.manifest or {}).get("recompute_deviation")
        return dev if isinstance(dev, Mapping) else None


def discover_run(source: Path | str) -> RunInfo:
    """Inspect ``source``: a run directory, or a tokens/v1 file (or directory of them)."""
    source = Path(source)
    if not source.exists():
        raise FileNotFoundError(f"{source}: no such file or directory; pass a replay run "
                                "directory or the tokens file written by `pdm-replay masks`")
    kind, tokens, updates, manifest, summary, read_note = _locate(source)
    columns, footer, variants = _check_tokens(tokens)
    if not variants and isinstance((manifest or {}).get("mask_variants"), Mapping):
        variants = dict(manifest["mask_variants"])
    for f in updates[:1]:
        _check_schema(f, UPDATES_SCHEMA_ID, REQUIRED_UPDATE_COLUMNS,
                      "the replay wrote it only partly; re-run `pdm-replay replay`")
    thresholds, origin, notes = _resolve_thresholds(footer, manifest)
    notes += [read_note] if read_note else []
    if kind == "replay" and not updates:
        notes.append(f"{source}: no updates/ Parquet files; rates that need the simulated "
                     "step are left empty (re-run `pdm-replay replay`)")
    return RunInfo(source=source, kind=kind, tokens_files=tuple(tokens),
                   updates_files=tuple(updates), columns=frozenset(columns),
                   thresholds=thresholds, thresholds_source=origin, manifest=manifest,
                   notes=tuple(notes), mask_variants=variants,
                   summary=summary)


def _locate(source: Path) -> tuple[str, list[Path], list[Path], dict | None, Path | None,
                                   str | None]:
    """``(kind, tokens files, updates files, manifest, summary.parquet, note on which
    rows are read)`` of a replay run directory, a Ray ``masks`` output directory (a
    bounded subset of its parts: :func:`~pdm_replay.report.masks_output.chosen_parts`),
    or a tokens/v1 file or directory."""
    if source.is_dir() and (source / "tokens").is_dir():
        upd_dir = source / "updates"
        updates = list_parquet_files(upd_dir) if upd_dir.is_dir() else []
        return ("replay", list_parquet_files(source / "tokens"), updates,
                _read_manifest(source / MANIFEST), None, None)
    partitioned = masks_manifest(source)
    if partitioned is not None:
        tokens, note = chosen_parts(source, partitioned)
        return "masks", tokens, [], None, source / SUMMARY_FILE, note
    return "masks", list_parquet_files(source), [], None, None, None


def _read_manifest(path: Path) -> dict | None:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err}); restore the replay's manifest "
                         "or delete it (thresholds then come from the tokens footer)") from err


def _check_schema(path: Path, schema_id: str, required: tuple[str, ...],
                  fix: str) -> pq.ParquetSchema:
    schema = pq.read_schema(path)
    md = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
    found = md.get(SCHEMA_KEY)
    if found not in (None, schema_id):
        raise ValueError(f"{path}: footer {SCHEMA_KEY}={found!r}, expected {schema_id!r}; "
                         "`pdm-replay report`, `sql` and `dashboard` read the output of "
                         "`pdm-replay masks` or `pdm-replay replay`, not a rollout log")
    missing = [c for c in required if c not in schema.names]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)} of {schema_id}; "
                         f"{fix}")
    return schema


def _check_tokens(files: list[Path]) -> tuple[set[str], dict[Path, str], dict[str, Any]]:
    """Union of the tokens columns, each file's thresholds footer (where present) and the
    sweep variants of the footers."""
    columns: set[str] = set()
    footer: dict[Path, str] = {}
    variants: dict[str, Any] = {}
    for f in files:
        schema = _check_schema(f, TOKENS_SCHEMA_ID, REQUIRED_TOKEN_COLUMNS,
                               "write it with `pdm-replay masks` or `pdm-replay replay`")
        columns.update(schema.names)
        raw = (schema.metadata or {}).get(THRESHOLDS_KEY.encode())
        if raw is not None:
            footer[f] = raw.decode()
        raw = (schema.metadata or {}).get(VARIANTS_KEY.encode())
        if raw is not None:
            variants.update(json.loads(raw))
    return columns, footer, variants


def parse_thresholds(payload: Mapping[str, Any] | str, where: str) -> Thresholds:
    """Thresholds from a JSON object of :class:`Thresholds` fields; others are ignored.

    >>> parse_thresholds('{"delta_kl": 0.05, "lr": 1e-6}', "x").delta_kl
    0.05
    """
    try:
        data = json.loads(payload) if isinstance(payload, str) else dict(payload)
        names = {f.name for f in dataclasses.fields(Thresholds)}
        return Thresholds(**{k: float(v) for k, v in data.items() if k in names})
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: thresholds {payload!r} are not a JSON object of "
                         f"Thresholds fields ({err})") from err


def _manifest_thresholds(manifest: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    config = (manifest or {}).get("config")
    if not isinstance(config, Mapping):
        return None
    if isinstance(config.get("thresholds"), Mapping):
        return config["thresholds"]
    return config if any(k.startswith(("delta_", "eps")) for k in config) else None


def _resolve_thresholds(footer: dict[Path, str], manifest: Mapping[str, Any] | None
                        ) -> tuple[Thresholds, str, list[str]]:
    """Footer first, then the manifest, then defaults (with a note)."""
    notes: list[str] = []
    parsed = {f: parse_thresholds(v, f"{f} footer {THRESHOLDS_KEY}") for f, v in footer.items()}
    distinct = dict(zip(parsed.values(), parsed.keys()))
    if len(distinct) > 1:
        (a, fa), (b, fb) = list(distinct.items())[:2]
        raise ValueError(f"tokens files disagree on thresholds: {fa} has {a}, {fb} has {b}; "
                         "report each run separately")
    from_manifest = _manifest_thresholds(manifest)
    manifest_t = parse_thresholds(from_manifest, MANIFEST) if from_manifest else None
    if distinct:
        t = next(iter(distinct))
        if manifest_t is not None and manifest_t != t:
            notes.append(f"{MANIFEST} thresholds {manifest_t} differ from the tokens footer "
                         f"{t}; the footer (what the masks used) is reported")
        return t, "tokens footer", notes
    if manifest_t is not None:
        return manifest_t, MANIFEST, notes
    notes.append(f"no thresholds in the tokens footer ({THRESHOLDS_KEY}) or {MANIFEST}; "
                 f"assuming the defaults {Thresholds()}")
    return Thresholds(), "defaults", notes
