"""Finding the run's tokenizer and rendering a token in its context."""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pdm_replay.dashboard_app.text import (context_html, load_tokenizer, token_texts,
                                           tokenizer_candidates)
from pdm_replay.testing.fixtures import SyntheticLogConfig, write_synthetic_log
from pdm_replay.report.run_info import discover_run
from dashboard_fixtures import run_dir, tokenizer_dir  # noqa: F401 (fixtures)


def with_manifest(run_dir: Path, tmp_path: Path, **fields) -> Path:
    run = Path(shutil.copytree(run_dir, tmp_path / "runs" / "r1"))
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.pop("log_meta", None)
    (run / "manifest.json").write_text(json.dumps({**manifest, **fields}))
    return run


def log_with_tokenizer(path: Path, tokenizer: str | None) -> Path:
    log = write_synthetic_log(path, SyntheticLogConfig(n_samples=2, response_len=4))
    table = pq.read_table(log)
    md = dict(table.schema.metadata)
    if tokenizer is not None:
        md[b"tokenizer"] = tokenizer.encode()
    pq.write_table(table.replace_schema_metadata(md), log)
    return log


def test_fixture_run_decodes_with_the_manifest_tokenizer(run_dir: Path,
                                                         tokenizer_dir: Path) -> None:
    loaded = load_tokenizer(tokenizer_candidates(discover_run(run_dir)))
    assert loaded.tokenizer is not None and loaded.source.startswith("log metadata")
    assert token_texts(loaded.tokenizer, [7, 8, 1006]) == ["0", "1", "999"]


def test_relative_tokenizer_in_the_log_footer_resolves_against_the_log(
        run_dir: Path, tokenizer_dir: Path, tmp_path: Path) -> None:
    logs = tmp_path / "runs" / "logs"
    logs.mkdir(parents=True)
    shutil.copytree(tokenizer_dir, tmp_path / "runs" / "tok")
    log_with_tokenizer(logs / "rollouts.parquet", "../tok")
    # the replay records the log path as given on its command line: relative here
    run = with_manifest(run_dir, tmp_path, config={"log": "../logs/rollouts.parquet"})
    candidates = tokenizer_candidates(discover_run(run))
    assert candidates[0] == ("log metadata", str((tmp_path / "runs" / "tok").resolve()))
    assert load_tokenizer(candidates).tokenizer is not None


def test_explicit_tokenizer_first_then_checkpoint(run_dir: Path, tokenizer_dir: Path,
                                                  tmp_path: Path) -> None:
    run = with_manifest(run_dir, tmp_path, config={"checkpoint": str(tokenizer_dir)})
    info = discover_run(run)
    assert tokenizer_candidates(info) == [("checkpoint", str(tokenizer_dir))]
    first = tokenizer_candidates(info, explicit=str(tmp_path / "missing"))[0]
    assert first[0] == "--tokenizer"
    loaded = load_tokenizer(tokenizer_candidates(info, explicit=str(tmp_path / "missing")))
    assert loaded.source == f"checkpoint `{tokenizer_dir}`"
    assert len(loaded.tried) == 1 and "--tokenizer" in loaded.tried[0]


def test_no_tokenizer_shows_ids(run_dir: Path, tmp_path: Path) -> None:
    run = with_manifest(run_dir, tmp_path, config={})
    loaded = load_tokenizer(tokenizer_candidates(discover_run(run)))
    assert loaded.tokenizer is None and "no tokenizer named" in loaded.tried[0]
    html = context_html(None, [(0, 5), (1, 6), (2, 7)], pos=1)
    assert '[5] <mark' in html and ">[6] </mark>" in html


def test_context_highlights_the_token_and_keeps_spacing(tokenizer_dir: Path) -> None:
    tok = load_tokenizer([("test", str(tokenizer_dir))]).tokenizer
    ids = [7 + n for n in (12, 7, 3)]  # "12 7 3"
    html = context_html(tok, [(4, ids[0]), (5, ids[1]), (6, ids[2]), (9, 7 + 42)], pos=5)
    assert ">12" in html and "> 7</mark>" in html and " 3" in html
    assert "⋯" in html and "42" in html  # positions 7-8 are missing: a gap
    assert context_html(tok, [(0, 7 + 1)], pos=0).count("<mark") == 1


@pytest.mark.parametrize("text", ["<script>alert(1)</script>", "a & b"])
def test_context_escapes_html(text: str) -> None:
    class Echo:  # a tokenizer whose tokens are raw strings
        def decode(self, ids, clean_up_tokenization_spaces=False):
            return "".join(text for _ in ids)
    rendered = context_html(Echo(), [(0, 1)], pos=0)
    assert text not in rendered and html.escape(text) in rendered


def test_masks_output_finds_the_tokenizer_named_relative_to_the_log(tmp_path, monkeypatch) -> None:
    # a log in logs/ whose metadata names its tokenizer "tok" relative to logs/; masks output
    # elsewhere, the dashboard started from a third directory (issue 19)
    import dataclasses

    import pyarrow.parquet as pq

    from pdm_replay.testing.fixtures import SyntheticLogConfig, iter_synthetic_chunks
    from pdm_replay.io.rollouts import RolloutWriter
    from pdm_replay.report.run_info import discover_run
    from pdm_replay.commands.masks import MasksConfig, run_masks

    (tmp_path / "logs" / "tok").mkdir(parents=True)
    cfg = SyntheticLogConfig(n_samples=4)
    log = tmp_path / "logs" / "log.parquet"
    with RolloutWriter(log, dataclasses.replace(cfg.meta(), tokenizer="tok")) as w:
        for table in iter_synthetic_chunks(cfg):
            w.write(table)
    out = tmp_path / "out" / "tokens.parquet"
    out.parent.mkdir()
    monkeypatch.chdir(tmp_path)
    run_masks(MasksConfig(log=Path("logs/log.parquet"), out=out, masks=("none",)))
    assert pq.read_schema(out).metadata[b"tokenizer"] == b"tok"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    found = tokenizer_candidates(discover_run(out))
    assert ("log metadata", str((tmp_path / "logs" / "tok").resolve())) in found
