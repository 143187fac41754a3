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
from dataclasses import dataclass
from pathlib import Path

from pdm_replay.io.atomic import atomic_write_bytes
from pdm_replay.errors import InputError
from pdm_replay.io.lock import LOCK_NAME, DirLock

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

    def seed_parts(self, kind: str, seed: int) -> list[Path]:
        """Every rank's part of ``kind`` (tokens | updates) for ``seed``, in rank order."""
        parts = (self.root / kind / f"seed={seed}").glob("part-*.parquet")
        return sorted(parts, key=lambda p: int(p.stem.split("-", 1)[1]))

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
        raise InputError("run directory exists", file=out, fix="pass --resume to continue "
                         "it, or choose a new --out")


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
