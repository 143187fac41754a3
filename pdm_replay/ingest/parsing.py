"""What format parsers yield, and the per-record fields every JSON format shares.

A parser turns one input file into a stream of :class:`Rows` (rollout/v1 rows, with the
:class:`Location` of each) and :class:`Reject` items (a record that cannot be used, and
why). The driver decides what a reject means (stop, or list it in the rejects file).

Examples
--------
>>> str(Location("runs/a.jsonl", "line", 3, "choice 1"))
'runs/a.jsonl: line 3 (choice 1)'
>>> sample_fields({"advantage": 0.5, "step": 3}, {}, 2)["advantages"]
[0.5, 0.5]
>>> row = {"topk_ids": [[3, 8, 1]], "topk_logprobs": [[-2.0, -0.1, -1.0]]}
>>> sort_topk(row, [[-2.0, -0.1, -1.0]])["topk_ids"]
[[8, 1, 3]]
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import pyarrow as pa

from pdm_replay.errors import FieldError, InputError

# Per-sample fields a JSON record may carry next to the engine's own output (README).
SAMPLE_FIELDS = ("sample_id", "step", "group_id", "prompt_ids", "reward", "loss_mask",
                 "train_logprobs", "train_topk_logprobs")
# A row builder may count what it repaired under this key ({what: count}); json_rows moves
# it into Rows.notes, the driver sums the notes and reports them as warnings.
NOTES = "__notes__"


class IngestError(InputError):
    """A record (or a whole input) that cannot become a rollout/v1 row."""


class IngestFieldError(FieldError, IngestError):
    """An :class:`IngestError` about a setting, named by its :class:`IngestConfig` field."""


@dataclass(frozen=True)
class Location:
    """Where a record came from: ``file`` plus ``kind`` (line, row, item, file) and index."""

    file: str
    kind: str
    index: int | None = None
    detail: str = ""

    def __str__(self) -> str:
        where = self.file if self.index is None else f"{self.file}: {self.kind} {self.index}"
        return f"{where} ({self.detail})" if self.detail else where

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, self.kind: self.index, "detail": self.detail or None}


@dataclass(frozen=True)
class Reject:
    """A record that cannot be used, with the reason (how to fix it, where possible)."""

    where: Location
    reason: str
    # the error behind ``reason`` when it names settings: the CLI spells them as flags
    error: InputError | None = field(default=None, compare=False)


@dataclass
class Rows:
    """Rows parsed from one input: dicts or an Arrow table, one :class:`Location` each.

    ``sampling`` holds sampler settings the records stated (temperature, top_p, top_k,
    logprobs_mode); the driver records them in the footer. ``zero_padded`` selects the
    zero-padding rule of :mod:`pdm_replay.ingest.padded` for the top-K slots. ``notes``
    counts what the parser repaired (``{"what": n}``), reported once per run.
    """

    rows: list[dict] | pa.Table | Any  # Any: a PaddedRollouts
    where: list[Location]
    sampling: dict[str, Any] = field(default_factory=dict)
    zero_padded: bool = False
    notes: dict[str, int] = field(default_factory=dict)


def iter_json_records(path: Path) -> Iterator[tuple[Location, Any] | Reject]:
    """JSON Lines (one record per line) or one ``.json`` document holding a record or a list.

    A line that does not parse yields a :class:`Reject` naming the line; JSONL streams.
    """
    if path.suffix == ".json":
        try:
            doc = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            yield Reject(Location(str(path), "file"), f"invalid JSON: {exc}")
            return
        items = doc if isinstance(doc, list) else [doc]
        for i, item in enumerate(items):
            yield Location(str(path), "item", i), item
        return
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            where = Location(str(path), "line", lineno)
            try:
                yield where, json.loads(raw.rstrip(b"\r\n"))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                msg = getattr(exc, "msg", str(exc))
                col = getattr(exc, "colno", None)
                yield Reject(where, f"invalid JSON ({msg}{f' at column {col}' if col else ''});"
                             " the line is truncated or not JSON")


def json_rows(path: Path, samples: Callable[[dict], list], build: Callable[..., dict],
              label: str, sampling: Callable[[dict], dict] | None = None,
              zero_padded: bool = False) -> Iterator[Rows | Reject]:
    """Rows and rejects of a JSON-lines file whose records each hold one or more samples.

    ``samples(rec)`` lists a record's samples (raising :class:`IngestError` when it has
    none); ``build(rec, sample, i, n)`` makes the row of sample ``i`` of ``n``; ``label``
    names a sample in locations ("choice 1"). A row without ``sample_id`` gets
    ``<file name>:<line>/<i>``. ``sampling(rec)``: sampler settings (default: the record's
    ``sampling_params`` / ``sampling``).
    """
    settings = sampling or (lambda rec: sampling_of(rec, "sampling_params", "sampling"))
    for item in iter_json_records(path):
        if isinstance(item, Reject):
            yield item
            continue
        where, rec = item
        try:
            if not isinstance(rec, dict):
                raise IngestError("record is not a JSON object")
            subs, stated = samples(rec), settings(rec)
        except IngestError as exc:
            yield Reject(where, str(exc), exc)
            continue
        for i, sub in enumerate(subs):
            loc = Location(where.file, where.kind, where.index,
                           f"{label} {i}" if len(subs) > 1 else "")
            try:
                row = build(rec, sub, i, len(subs))
            except (IngestError, AttributeError, IndexError, KeyError, TypeError,
                    ValueError) as exc:
                yield Reject(loc, str(exc), exc if isinstance(exc, InputError) else None)
                continue
            if row.get("sample_id") is None:
                row["sample_id"] = f"{Path(where.file).name}:{where.index}/{i}"
            yield Rows([row], [loc], stated, zero_padded, row.pop(NOTES, {}))


def _broadcast_advantages(obj: Mapping, length: int) -> list[float]:
    value = obj.get("advantages", obj.get("advantage"))
    if value is None:
        raise IngestError("no advantages: add `advantage` (a number, used for every token) "
                          "or `advantages` (one number per response token) to the record")
    if isinstance(value, (int, float)):
        return [float(value)] * length
    return list(value)


def sample_fields(obj: Mapping, extra: Mapping, length: int) -> dict[str, Any]:
    """rollout/v1 fields a record states itself; ``extra`` (``per_sample[i]``) overrides.

    ``length`` is T, the response length, for broadcasting a scalar ``advantage``.
    """
    merged = {**obj, **extra}
    row = {k: merged[k] for k in SAMPLE_FIELDS if merged.get(k) is not None}
    own = "advantage" in extra or "advantages" in extra
    row["advantages"] = _broadcast_advantages(extra if own else obj, length)
    row["step"] = int(row.get("step", 0))
    return row


def per_sample(obj: Mapping, index: int, count: int) -> Mapping:
    """``obj["per_sample"][index]``: per-choice fields of a record with ``count`` choices."""
    extra = obj.get("per_sample")
    if extra is None:
        return {}
    if not isinstance(extra, list) or len(extra) != count:
        raise IngestError(f"per_sample must be a list with one object per choice ({count}), "
                          f"got {type(extra).__name__} of length "
                          f"{len(extra) if isinstance(extra, list) else '-'}")
    return extra[index]


def sampling_of(obj: Mapping, *keys: str) -> dict[str, Any]:
    """Sampler settings stated in ``obj[key]`` for the first of ``keys`` present.

    Keeps temperature, top_p, top_k (``<= 0`` means off, stored as 0), logprobs_mode
    (vLLM's ``raw_logprobs`` / ``processed_logprobs`` map to raw / processed), logprobs (K).
    """
    src = next((obj[k] for k in keys if isinstance(obj.get(k), Mapping)), None)
    if src is None:
        return {}
    out: dict[str, Any] = {}
    for key in ("temperature", "top_p"):
        if src.get(key) is not None:
            out[key] = float(src[key])
    if src.get("top_k") is not None:
        out["top_k_sampling"] = max(int(src["top_k"]), 0)
    mode = src.get("logprobs_mode")
    if mode and "logits" in str(mode):
        raise IngestError(f"logprobs_mode={mode!r}: the engine returned logits, not "
                          "log-probs; generate with raw_logprobs or processed_logprobs")
    if mode:
        out["logprobs_mode"] = "processed" if "processed" in str(mode) else "raw"
    if isinstance(src.get("logprobs"), int) and not isinstance(src.get("logprobs"), bool):
        out["top_k"] = int(src["logprobs"])
    return out



def sort_topk(row: dict[str, Any], scores: list[list[float]]) -> dict[str, Any]:
    """Reorder each position's top-K entries by descending ``scores`` (stable), carrying
    ``train_topk_logprobs`` along when it has one value per entry; returns ``row``.

    Puts the genuine top-K first and a sampled token outside them last, the slot order
    the sign certificates rely on (:mod:`pdm_replay.ingest.padded`).
    """
    train = row.get("train_topk_logprobs")
    for t, sc in enumerate(scores):
        order = sorted(range(len(sc)), key=lambda j: -sc[j])
        for name in ("topk_ids", "topk_logprobs"):
            row[name][t] = [row[name][t][j] for j in order]
        if train is not None and t < len(train) and len(train[t]) == len(order):
            train[t] = [train[t][j] for j in order]
    return row
