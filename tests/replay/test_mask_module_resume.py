"""--mask-module in a replay (issue 16): the manifest records each module's path and
sha256; --resume reloads the recorded modules and refuses a module changed since."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.replay.manifest import sha256_file

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "my_masks.py"
runner = CliRunner()


def test_resume_reloads_recorded_module_and_refuses_a_changed_one(
        tmp_path: Path, replay_log: Path, model_dir: Path, user_registry: None) -> None:
    module = tmp_path / "my_masks.py"
    shutil.copy(EXAMPLE, module)
    out = tmp_path / "run"
    args = ["replay", str(replay_log), "--checkpoint", str(model_dir), "--out", str(out),
            "--seeds", "1", "--batch-size", "6", "--optimizer", "sgd", "--lr", "0.1",
            "--chunk-tokens", "32", "--masks", "none,icepop", "--update-masks", "none,icepop",
            "--no-attribution", "--threads", "1"]
    res = runner.invoke(app, [*args, "--mask-module", str(module)])
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["mask_modules"] == [str(module.resolve())]
    assert manifest["hashes"]["mask_module"] == {str(module.resolve()): sha256_file(module)}
    # No --mask-module: the recorded one is reloaded, so the options match the run's.
    again = runner.invoke(app, [*args, "--resume"])
    assert again.exit_code == 0, again.output
    module.write_text(module.read_text() + "\n# edited after the run started\n")
    changed = runner.invoke(app, [*args, "--resume", "--mask-module", str(module)])
    said = " ".join(changed.output.split())
    assert changed.exit_code == 2, changed.output
    assert f"--mask-module {module.resolve()} changed since this run started" in said
