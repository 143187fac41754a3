"""A directory output committed atomically, built by many writers, resumable.

The Ray engine of ``masks`` writes ``<out>``'s files under a staging directory beside
it (``.<name>.pdm-partial``): part files (each written to a temp name and renamed, so a
retried task overwrites its own part whole), one progress marker per finished input
file (``_progress/<key>.json``), then the manifest last; the staging directory is then
renamed to ``<out>``. A reader never sees a half-written ``<out>``; a driver killed
mid-run leaves the staging directory, and a resumed run keeps the inputs whose marker
is there.

Examples
--------
>>> import tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp()) / "tokens"
>>> stage = open_staging(out, resume=False)
>>> write_marker(stage, "a", {"rows": 3})
>>> read_markers(stage)
{'a': {'rows': 3}}
>>> commit_staging(stage, out, {"kind": "masks"}).name, sorted(p.name for p in out.iterdir())
('tokens', ['manifest.json'])
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from pdm_replay.io.atomic import atomic_write_bytes

PROGRESS_DIR = "_progress"
MANIFEST_FILE = "manifest.json"


def staging_path(out: Path) -> Path:
    """Where ``out`` is built: a hidden directory beside it, on the same filesystem."""
    return out.parent / f".{out.name}.pdm-partial"


def open_staging(out: Path, resume: bool) -> Path:
    """The staging directory of ``out``, created; a previous run's is kept when
    ``resume`` (its finished inputs are not redone), else removed first."""
    stage = staging_path(out)
    if stage.exists() and not resume:
        shutil.rmtree(stage)
    (stage / PROGRESS_DIR).mkdir(parents=True, exist_ok=True)
    return stage


def discard_staging(out: Path) -> None:
    """Remove ``out``'s staging directory (after an input error: nothing is left)."""
    shutil.rmtree(staging_path(out), ignore_errors=True)


def write_marker(stage: Path, key: str, data: dict[str, Any]) -> None:
    """Record input ``key`` as finished, with what it produced (atomic: a marker is
    whole or absent)."""
    atomic_write_bytes(stage / PROGRESS_DIR / f"{key}.json", json.dumps(data).encode())


def read_markers(stage: Path) -> dict[str, dict[str, Any]]:
    """``key -> marker`` of every finished input under ``stage``."""
    return {p.stem: json.loads(p.read_text())
            for p in sorted((stage / PROGRESS_DIR).glob("*.json"))}


def commit_staging(stage: Path, out: Path, manifest: dict[str, Any]) -> Path:
    """Write the manifest last, drop the progress markers, and rename the staging
    directory to ``out`` (a previous ``out`` is moved aside first, then removed)."""
    shutil.rmtree(stage / PROGRESS_DIR, ignore_errors=True)
    atomic_write_bytes(stage / MANIFEST_FILE, json.dumps(manifest, indent=1).encode())
    old = out.parent / f".{out.name}.pdm-old"
    if out.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
    os.replace(stage, out)
    shutil.rmtree(old, ignore_errors=True)
    return out
