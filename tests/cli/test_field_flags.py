"""Library errors name config fields; each command says them as its own flags (issue 21).

The library's text is checked beside each (``str()`` says the field), so these show the
one mapping (``cli.errors.error_text``, from the command's parameters) at work for
commands whose fields and flags are spelled differently: ``ingest``'s ``fmt`` is
``--from``, ``sql``'s ``format`` is ``--format`` on its ``fmt`` parameter, ``make-sample``'s
``out_dir`` is the argument OUT_DIR, every command's ``mask_modules`` is ``--mask-module``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.cli.errors import field_flags
from pdm_replay.commands.dashboard import DashboardConfig
from pdm_replay.errors import FieldError
from pdm_replay.replay.sweep import Sweep, trainer_variant


def _error(args: list[str]) -> str:
    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    return " ".join(res.output.split())


def _chat_line(token: str) -> str:
    """An OpenAI chat-completion record whose one token is the string ``token``."""
    entry = {"token": token, "logprob": -0.5, "top_logprobs": [{"token": token,
                                                                 "logprob": -0.5}]}
    return json.dumps({"sample_id": "s0", "prompt_ids": [1, 2], "advantage": 1.0,
                       "response": {"choices": [{"index": 0, "message": {},
                                                 "logprobs": {"content": [entry]}}]}})


def test_ingest_says_its_flags_for_a_nested_record_error(tmp_path: Path) -> None:
    src = tmp_path / "chat.jsonl"
    src.write_text(_chat_line("hello") + "\n")
    said = _error(["ingest", src, "--from", "openai", "--out", tmp_path / "log.parquet",
                   "--vocab-size", "16"])
    assert "needs a tokenizer: pass --tokenizer PATH" in said
    assert "run with --on-error skip to list every bad record" in said
    assert "on_error" not in said and not (tmp_path / "log.parquet").exists()


def test_ingest_columns_needs_a_mapping(tmp_path: Path) -> None:
    src = tmp_path / "rows.jsonl"
    src.write_text("{}\n")
    said = _error(["ingest", src, "--from", "columns", "--out", tmp_path / "log.parquet",
                   "--vocab-size", "16"])
    assert "--from columns needs --mapping MAP.toml" in said


def test_sql_parquet_needs_out(tmp_path: Path) -> None:
    said = _error(["sql", tmp_path, "SELECT 1", "--format", "parquet"])
    assert said.endswith("error: --format parquet needs --out FILE")


def test_make_sample_names_force_and_the_argument(tmp_path: Path) -> None:
    out = tmp_path / "s"
    out.mkdir()
    (out / "README.md").write_text("keep me")
    said = _error(["make-sample", out, "--size", "tiny"])
    assert "pass --force to replace them or choose another OUT_DIR" in said
    assert (out / "README.md").read_text() == "keep me"


def test_replay_template_and_trainer_mask_errors(tmp_path: Path) -> None:
    base = ["replay", tmp_path / "log.parquet", "--out", tmp_path / "run"]
    said = _error([*base, "--checkpoint", "ckpt/{epoch}"])
    assert "--checkpoint ckpt/{epoch}: unknown field {epoch}; a path template may use " \
           "{step} and {next_step}" in said  # the value's braces kept as typed
    said = _error([*base, "--checkpoint", tmp_path, "--next-checkpoint", tmp_path,
                   "--trainer-mask", "pdm_kl_agg", "--delta-kl", "0.05,0.15"])
    assert "--trainer-mask pdm_kl_agg: pdm_kl_agg reads --delta-kl, which is swept " \
           "(0.05, 0.15); name the trainer's value, e.g. --trainer-mask " \
           "pdm_kl_agg@0.05" in said
    with pytest.raises(FieldError, match="reads delta_kl, which is swept"):  # the library's
        trainer_variant("pdm_kl_agg", Sweep(delta_kl=(0.05, 0.15)))


def test_dashboard_port_and_mask_module(tmp_path: Path) -> None:
    said = _error(["dashboard", tmp_path, "--port", "70000"])
    assert said.endswith("error: --port 70000: must be in 1..65535")
    with pytest.raises(FieldError, match=r"^port 70000: must be in 1\.\.65535$"):
        DashboardConfig(run=tmp_path, port=70000)
    missing = tmp_path / "nope.py"
    said = _error(["dashboard", tmp_path, "--mask-module", missing])
    assert f"--mask-module {missing}: no such file" in said


def test_how_a_command_spells_fields() -> None:
    import typer.main
    commands = typer.main.get_command(app).commands
    spell = field_flags(commands["replay"])
    assert spell("tokenizer_check", off=True) == "--no-tokenizer-check"
    assert (spell("allow_pickle"), spell("log")) == ("--allow-pickle", "LOG")
    assert spell("mask_modules") == field_flags(commands["report"])("mask_modules") == \
        "--mask-module"
    assert field_flags(commands["sql"])("format") == "--format"  # its parameter is fmt
    assert spell("no_such_option") == "no_such_option"  # not a flag of this command
