"""Integration tests import the real trainer packages (the ``integrations`` extra) and
reuse the ground-truth layouts of ``tests/ingest``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ingest"))
