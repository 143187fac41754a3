"""The dashboard's data path never imports torch (issue 19 item 4: a fast first page).

``pdm_replay.report.run_info`` read the tokens footer key from ``pdm_replay.commands.masks``, which
imports torch (about 10 s of a loaded 2-core machine's first page); the key now lives in
``pdm_replay.schema``.
"""

from __future__ import annotations

import subprocess
import sys

MODULES = ("pdm_replay.report.dashboard_api", "pdm_replay.report.build",
           "pdm_replay.report.legend", "pdm_replay.report.mask_comparison",
           "pdm_replay.report.display",
           "pdm_replay.dashboard_app.state", "pdm_replay.dashboard_app.charts")


def test_the_dashboard_and_report_import_no_torch() -> None:
    code = (f"import sys; import {', '.join(MODULES)}; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip().splitlines()[-1]
    assert out == "[]"
