"""Each option declared once (issue 21): `replay`'s options are generated from
ReplayConfig's field metadata, and the other commands' options match their config
dataclasses' fields, so a CLI option and its field cannot differ in name, default, help
or choices."""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.cli.replay import THRESHOLD_PARAMS
from pdm_replay.commands.ingest import IngestConfig
from pdm_replay.replay.config import OPTION, ReplayConfig, flag
from pdm_replay.report.build import ReportConfig
from pdm_replay.commands.masks import MasksConfig
from pdm_replay.commands.recompute import RecomputeConfig

COMMANDS = typer.main.get_command(app).commands


def _params(command: str) -> dict:
    return {p.name: p for p in COMMANDS[command].params}


def _field_default(f: dataclasses.Field) -> object:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _cli_default(p) -> object:
    d = p.default
    return d.value if isinstance(d, enum.Enum) else d


def test_replay_options_are_the_config_fields() -> None:
    params = _params("replay")
    option_fields = [f for f in dataclasses.fields(ReplayConfig) if OPTION in f.metadata]
    assert set(params) == {f.name for f in option_fields} | set(THRESHOLD_PARAMS)
    for f in option_fields:
        spec, p = f.metadata[OPTION], params[f.name]
        if spec.get("argument"):
            assert p.param_type_name == "argument" and p.help == spec["help"]
            continue
        assert p.opts[0] == flag(f.name), f.name
        if spec.get("shared"):
            continue
        assert p.help == spec["help"], f.name
        default = spec.get("cli", _field_default(f))
        if spec.get("names") and f.default:
            default = ",".join(f.default)
        assert _cli_default(p) == default, f.name
        if "choices" in spec:
            annotation = p.type_descriptor.annotation
            members = getattr(annotation, "__args__", (annotation,))[0]  # Optional[Enum]
            assert tuple(m.value for m in members) == tuple(spec["choices"]), f.name


@pytest.mark.parametrize("command, cls, renamed, cli_only", [
    ("ingest", IngestConfig, {"format_modules": "format_module"}, ()),
    ("masks", MasksConfig, {"masks": "mask_names", "thresholds": None,
                            "mask_modules": "mask_module"},
     ("delta_kl", "delta_tv", "eps", "eps_low", "eps_high", "clip_ratio_c", "mask_param")),
    ("report", ReportConfig, {"source": "run", "format": "fmt"}, ("mask_module",)),
    ("recompute", RecomputeConfig, {}, ()),
])
def test_command_options_match_config_fields(command, cls, renamed, cli_only) -> None:
    params = _params(command)
    fields = {renamed.get(f.name, f.name): f for f in dataclasses.fields(cls)}
    fields.pop(None, None)  # built from several options (the thresholds)
    assert set(params) == set(fields) | set(cli_only)
    for name, f in fields.items():
        default = _field_default(f)
        if params[name].param_type_name == "option" and not params[name].required:
            assert _cli_default(params[name]) == default, (command, name)


def test_a_config_error_is_reported_with_the_flags(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["replay", str(tmp_path / "log.parquet"), "--checkpoint",
                                   str(tmp_path), "--out", str(tmp_path / "run"), "--lr",
                                   "auto"])
    said = " ".join(res.output.split())
    assert res.exit_code == 2
    assert "--lr auto scales each simulated step to the actual one: it needs " \
           "--next-checkpoint" in said
    assert not (tmp_path / "run").exists()
