"""Run-directory bookkeeping: layout, content hashes, package versions, per-seed markers.

A seed is finished only when ``RUN_DIR/done/seed=<s>.json`` exists; it is written
(atomically) after both of the seed's Parquet parts are in place, so a run killed at any
instant leaves every seed either finished or redone from scratch on ``--resume``.
``manifest.json`` says ``"status": "running"`` until the last seed is done.

Examples
--------
>>> import pathlib, tempfile
>>> layout = RunLayout(pathlib.Path(tempfile.mkdtemp()) / "run")
>>> layout.tokens_part(3).relative_to(layout.root).as_posix()
'tokens/seed=3/part-0.parquet'
>>> layout.finished_seeds()
[]
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import shutil
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from pdm_replay.errors import FieldError
from pdm_replay.io.atomic import atomic_write_bytes
from pdm_replay.io.lock import LOCK_NAME, DirLock
from pdm_replay.replay.templates import is_template, resolve

if TYPE_CHECKING:
    from pdm_replay.replay.seed_records import SeedRecord

VERSIONED = ("pdm_replay", "torch", "transformers", "safetensors", "tokenizers", "pyarrow",
             "numpy", "polars")


@dataclass(frozen=True)
class RunLayout:
    """Paths of a run directory (CONTEXT: tokens/, updates/ partitioned by seed)."""

    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    def tokens_part(self, seed: int, rank: int = 0) -> Path:
        return self.root / "tokens" / f"seed={seed}" / f"part-{rank}.parquet"

    def updates_part(self, seed: int, rank: int = 0) -> Path:
        return self.root / "updates" / f"seed={seed}" / f"part-{rank}.parquet"

    def done_marker(self, seed: int) -> Path:
        return self.root / "done" / f"seed={seed}.json"

    def started(self) -> bool:
        """True when the directory holds anything but its writer lock (a run was begun)."""
        return self.root.is_dir() and any(p.name != LOCK_NAME for p in self.root.iterdir())

    def finished_seeds(self) -> list[int]:
        done = self.root / "done"
        if not done.is_dir():
            return []
        return sorted(int(p.stem.split("=", 1)[1]) for p in done.glob("seed=*.json"))

    def clear_seed(self, seed: int) -> None:
        """Remove what an interrupted attempt at ``seed`` left (parts, temp files)."""
        for kind in ("tokens", "updates"):
            shutil.rmtree(self.root / kind / f"seed={seed}", ignore_errors=True)
        self.done_marker(seed).unlink(missing_ok=True)

    def mark_done(self, seed: int, record: dict) -> None:
        atomic_write_bytes(self.done_marker(seed), json_bytes(record))

    def read_done(self, seed: int) -> dict:
        return json.loads(self.done_marker(seed).read_text())


def json_bytes(doc: dict) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n").encode()


def sha256_file(path: Path, block: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def content_hashes(path: Path) -> dict[str, str]:
    """sha256 of every regular file under ``path`` (or of ``path`` itself), by relative name."""
    path = Path(path)
    if path.is_file():
        return {path.name: sha256_file(path)}
    files = sorted(p for p in path.rglob("*") if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(path).parts))
    return {p.relative_to(path).as_posix(): sha256_file(p) for p in files}


def input_hashes(log: Path, paths: Mapping[str, Path], steps: list[int | None]) -> dict:
    """Manifest ``hashes``: sha256 of every input file, the log's and each of ``paths``'
    (by setting name), per step (``{"step=<s>": ...}``) for a ``{step}`` template."""
    out = {"log": content_hashes(log)}
    for key, path in paths.items():
        out[key] = ({f"step={s}": content_hashes(resolve(path, s)) for s in steps}
                    if is_template(path) else content_hashes(path))
    return out


def hash_differences(old: dict, new: dict) -> list[str]:
    """Inputs whose content changed between a run's manifest ``hashes`` and now.

    A per-step input (``{"step=<s>": {file: sha}}``, a ``{step}`` template) is compared on
    the steps both hold: resuming with more seeds may read more steps.

    >>> hash_differences({"log": {"a": "1"}, "checkpoint": {"step=1": {"m": "x"}}},
    ...                  {"log": {"a": "1"}, "checkpoint": {"step=1": {"m": "y"},
    ...                                                     "step=2": {"m": "z"}}})
    ['checkpoint (content)']
    """
    def per_step(h: object) -> bool:
        return isinstance(h, dict) and bool(h) and all(k.startswith("step=") for k in h)

    out = []
    for key, now in new.items():
        before = old.get(key)
        if per_step(now) and per_step(before):
            same = all(before[s] == now[s] for s in set(before) & set(now))
        else:
            same = before == now
        if not same:
            out.append(f"{key} (content)")
    return out


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def write_manifest(layout: RunLayout, doc: dict) -> None:
    atomic_write_bytes(layout.manifest, json_bytes(doc))


def read_manifest(layout: RunLayout) -> dict:
    try:
        return json.loads(layout.manifest.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{layout.manifest}: unreadable ({exc}); this is not a replay run "
                         "directory, or it was never started: remove it and run again") from exc


def refuse_existing(out: Path, resume: bool) -> None:
    """A directory holding a run may only be continued (``--resume``)."""
    if RunLayout(out).started() and not resume:
        raise FieldError("run directory exists", file=out, fix="pass {resume} to continue "
                         "it, or choose a new {out}")


def lock_run(out: Path, resume: bool) -> DirLock:
    """Take the run directory's writer lock (created if missing), then refuse an existing
    run without ``resume``: both before any input is loaded. A refused start removes the
    directory again if it created it."""
    lock = DirLock(out).acquire()
    try:
        refuse_existing(out, resume)
    except BaseException:
        lock.release(remove_if_empty=True)
        raise
    return lock


KIND = "pdm_replay.replay"
RUNNING, COMPLETE, FAILED = "running", "complete", "failed"


@dataclass(frozen=True)
class Finish:
    """What a completed run adds to its manifest (pooled from the seeds' done markers)."""

    finished_at: str
    seeds_resumed: tuple[int, ...]
    recompute_deviation: dict | None
    tokens: int
    update_steps: dict
    behavior_fidelity: dict | None
    summary: tuple[dict, ...]
    seeds_s: float
    per_seed: dict


@dataclass(frozen=True)
class Manifest:
    """``manifest.json`` as a value: :meth:`started`, then :meth:`with_seed` per finished
    seed, then :meth:`finished` or :meth:`failed`, each returning a new manifest.
    :meth:`to_json` / :meth:`from_json` are the one place its JSON form is written and read
    (the format of earlier versions: a manifest without a newer key reads its default)."""

    config: dict
    hashes: dict
    started_at: str
    versions: dict = field(default_factory=dict)
    device: dict = field(default_factory=dict)
    log_meta: dict = field(default_factory=dict)
    log_rows: int = 0
    warnings: tuple[str, ...] = ()
    timings: dict = field(default_factory=dict)  # load_s, hash_s (+ seeds_s, per_seed)
    seed_plan: dict = field(default_factory=dict)
    seed_overlap: dict = field(default_factory=dict)
    updates: tuple[str, ...] = ()
    mask_variants: dict = field(default_factory=dict)
    trainer_mask: dict | None = None
    optimizer_state: dict | None = None  # written only when the trainer's state was read
    chunk_tokens: int | None = None
    distributed: dict = field(default_factory=dict)
    threads: dict = field(default_factory=dict)
    status: str = RUNNING
    seeds: tuple[SeedRecord, ...] = ()  # done markers (not written: the markers hold them)
    error: str | None = None
    failed_at: str | None = None
    finish: Finish | None = None

    @classmethod
    def started(cls, **facts: object) -> Manifest:
        """A running run's manifest from what is known at its start."""
        return cls(status=RUNNING, **facts)  # type: ignore[arg-type]

    def with_seed(self, record: SeedRecord) -> Manifest:
        """Seed ``record.seed`` is done (its done-marker record)."""
        return replace(self, seeds=(*self.seeds, record))

    def finished(self, finish: Finish) -> Manifest:
        if self.status != RUNNING:
            raise ValueError(f"a {self.status} run cannot finish")
        return replace(self, status=COMPLETE, finish=finish)

    def failed(self, error: str, at: str) -> Manifest:
        return replace(self, status=FAILED, error=error, failed_at=at)

    def to_json(self) -> dict:
        """The JSON document written to ``manifest.json``."""
        doc = {"kind": KIND, **{f.name: getattr(self, f.name) for f in fields(self)
                                if f.name not in ("seeds", "error", "failed_at", "finish")}}
        doc.update(warnings=list(self.warnings), updates=list(self.updates))
        if self.optimizer_state is None:
            del doc["optimizer_state"]
        if self.status == FAILED:
            doc.update(error=self.error, failed_at=self.failed_at)
        if self.finish is not None:
            f = self.finish
            doc["timings"] = {**self.timings, "seeds_s": f.seeds_s, "per_seed": f.per_seed}
            doc.update(finished_at=f.finished_at, seeds_resumed=list(f.seeds_resumed),
                       recompute_deviation=f.recompute_deviation, tokens=f.tokens,
                       update_steps=f.update_steps, behavior_fidelity=f.behavior_fidelity,
                       summary=list(f.summary))
        return doc

    @classmethod
    def from_json(cls, doc: dict) -> Manifest:
        """Read a manifest document (keys it lacks take their defaults)."""
        names = {f.name for f in fields(cls)} - {"seeds", "finish"}
        kw = {k: doc[k] for k in names if k in doc}
        kw.update(warnings=tuple(doc.get("warnings", ())), updates=tuple(doc.get("updates", ())))
        timings = dict(doc.get("timings", {}))
        if doc.get("status") == COMPLETE:
            kw["finish"] = Finish(
                finished_at=doc.get("finished_at", ""),
                seeds_resumed=tuple(doc.get("seeds_resumed", ())),
                recompute_deviation=doc.get("recompute_deviation"),
                tokens=doc.get("tokens", 0), update_steps=doc.get("update_steps", {}),
                behavior_fidelity=doc.get("behavior_fidelity"),
                summary=tuple(doc.get("summary", ())), seeds_s=timings.pop("seeds_s", 0.0),
                per_seed=timings.pop("per_seed", {}))
        kw["timings"] = timings
        return cls(**{"config": {}, "hashes": {}, "started_at": "", **kw})


def save(layout: RunLayout, manifest: Manifest) -> None:
    write_manifest(layout, manifest.to_json())


def load(layout: RunLayout) -> Manifest:
    return Manifest.from_json(read_manifest(layout))


def recorded_mask_modules(out: Path) -> list[Path]:
    """The ``--mask-module`` files a started run at ``out`` recorded (none if no run)."""
    layout = RunLayout(Path(out))
    if not layout.manifest.is_file():
        return []
    return [Path(p) for p in read_manifest(layout).get("config", {}).get("mask_modules", [])]


def mask_module_hashes(paths: tuple[Path, ...]) -> dict:
    """Manifest ``hashes["mask_module"]``: sha256 of each user mask module, by path (the
    key is absent without modules, as in manifests written before it existed)."""
    return {"mask_module": {str(p): sha256_file(p) for p in paths}} if paths else {}


def check_mask_modules(out: Path, old: dict, new: dict) -> None:
    """Refuse a ``--resume`` whose mask modules changed since the run started."""
    before, now = old.get("mask_module", {}), new.get("mask_module", {})
    for path in sorted(set(before) & set(now)):
        if before[path] != now[path]:
            raise FieldError(
                "{mask_modules} {path} changed since this run started (sha256 {old} -> "
                "{new}): {resume} replays with the masks the run began with; restore that "
                "file or choose a new {out}", file=out, path=path, old=before[path][:12],
                new=now[path][:12])
