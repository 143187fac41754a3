"""--format-module: a user's file registers an ingest format that ``ingest`` then reads,
as --mask-module adds masks; and the registry every format (built-in or not) is one
entry of, with one parser signature."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from ingest_layouts import VOCAB, write_jsonl
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.commands.ingest import IngestConfig, ingest
from pdm_replay.commands.validate import validate_log
from pdm_replay.ingest import FORMATS, IngestError, IngestFormat, Rows, register_format
from pdm_replay.ingest.formats import BUILTIN, ParseContext, resolve_format
from pdm_replay.ingest.parsing import Location
from pdm_replay.io.reader import read_meta

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "my_format.py"
# A format written as a user would: a CSV-like text file, "step;ids;logprobs;advantage"
# per line, no top-K (every support is the sampled token), replace_last by choice.
MODULE = textwrap.dedent('''
    from pathlib import Path
    from pdm_replay.ingest import IngestFormat, Location, Rows, register_format

    def parse(path: Path, ctx):
        rows, where = [], []
        for n, line in enumerate(path.read_text().splitlines(), 1):
            step, ids, lps, adv = line.split(";")
            ids = [int(x) for x in ids.split()]
            rows.append({"sample_id": f"{path.stem}-{n}", "step": int(step),
                         "response_ids": ids,
                         "behavior_logprobs": [float(x) for x in lps.split()],
                         "advantages": [float(adv)] * len(ids),
                         "topk_ids": [[] for _ in ids], "topk_logprobs": [[] for _ in ids]})
            where.append(Location(str(path), "line", n))
        yield Rows(rows, where, {"temperature": 0.7})

    register_format(IngestFormat("semicolons", parse, "step;ids;logprobs;advantage lines",
                                 (".txt",), topk_convention="replace_last",
                                 logprobs_mode="processed"))
''')


def _module(tmp_path: Path, text: str = MODULE, name: str = "my_format.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_format_module_joins_ingest_through_the_cli(tmp_path: Path,
                                                    user_formats: None) -> None:
    src = tmp_path / "runs.txt"
    src.write_text("0;3 5 7;-0.5 -1.0 -0.25;1.5\n2;9;-2.0;-0.5\n")
    out = tmp_path / "log.parquet"
    res = runner.invoke(app, ["ingest", "--format-module", str(_module(tmp_path)), "--from",
                              "semicolons", str(src), "--out", str(out), "--vocab-size",
                              str(VOCAB)])
    assert res.exit_code == 0, res.output
    assert "wrote 2 samples, 4 tokens" in res.output
    rows = pq.read_table(out).to_pylist()
    assert [r["sample_id"] for r in rows] == ["runs-1", "runs-2"]
    assert rows[0]["response_ids"] == [3, 5, 7] and rows[1]["step"] == 2
    assert rows[0]["behavior_logprobs"] == [-0.5, -1.0, -0.25]
    assert rows[1]["advantages"] == [-0.5] and rows[0]["topk_ids"] == [[], [], []]
    meta = read_meta(out)
    assert (meta.topk_convention, meta.logprobs_mode, meta.temperature, meta.top_k) == \
        ("replace_last", "processed", 0.7, 0)
    assert meta.extra["source_format"] == "semicolons"
    assert validate_log(out).ok


def test_the_documented_example_module(tmp_path: Path, user_formats: None) -> None:
    """docs/examples/my_format.py reads the line its docstring shows (docs/ingest.md)."""
    line = {"id": "q1-0", "step": 3, "advantage": 0.5, "tokens": [11, 4],
            "logprobs": [-0.5, -0.1], "top": [[[11, -0.5], [4, -1.2]], [[4, -0.1]]]}
    (tmp_path / "runs").mkdir()
    src = write_jsonl(tmp_path / "runs" / "a.jsonl", [line, {"tokens": [1]}])
    out = tmp_path / "log.parquet"
    s = ingest(IngestConfig("my-jsonl", (src.parent,), out, vocab_size=VOCAB,
                            on_error="skip", format_modules=(EXAMPLE,)))
    assert (s.files, s.rows, s.rejected) == (1, 1, 1)  # the second line has no logprobs
    row = pq.read_table(out).to_pylist()[0]
    assert (row["sample_id"], row["step"], row["response_ids"]) == ("q1-0", 3, [11, 4])
    assert row["topk_ids"] == [[11, 4], [4]] and row["advantages"] == [0.5, 0.5]
    assert read_meta(out).top_k == 2 and validate_log(out).ok
    assert "my-jsonl" in FORMATS and "my-jsonl" not in BUILTIN


def test_bad_format_modules_and_unknown_names_are_one_line_errors(
        tmp_path: Path, user_formats: None) -> None:
    src = write_jsonl(tmp_path / "x.jsonl", [{"a": 1}])
    base = ["ingest", str(src), "--out", str(tmp_path / "o.parquet"), "--vocab-size", "5"]
    broken = _module(tmp_path, "import no_such_package_anywhere\n", "broken.py")
    res = runner.invoke(app, [*base, "--from", "x", "--format-module", str(broken)])
    said = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert f"--format-module {broken.resolve()}: cannot be imported (ModuleNotFoundError" \
        in said and "no_such_package_anywhere" in said
    missing = tmp_path / "none.py"
    res = runner.invoke(app, [*base, "--from", "x", "--format-module", str(missing)])
    assert res.exit_code == 2 and f"--format-module {missing}: no such file" in \
        " ".join(res.output.split())
    res = runner.invoke(app, [*base, "--from", "semicolon", "--format-module",
                              str(_module(tmp_path))])
    assert res.exit_code == 2
    assert "unknown format 'semicolon'; known: openai, vllm, sglang, verl, prime-rl, " \
        "columns, semicolons" in " ".join(res.output.split())
    assert not (tmp_path / "o.parquet").exists()


def test_registry_entries_share_one_parser_signature(tmp_path: Path,
                                                     user_formats: None) -> None:
    seen: list[tuple[str, int]] = []

    def parse(path: Path, ctx: ParseContext):
        seen.append((path.name, ctx.index))
        rec = json.loads(path.read_text())
        yield Rows([rec], [Location(str(path), "file")])

    fmt = register_format(IngestFormat("one-json", parse, "one JSON row per file", (".json",)))
    assert resolve_format("one-json") is fmt and FORMATS["one-json"].parse is not None
    for i in range(2):
        (tmp_path / "in").mkdir(exist_ok=True)
        (tmp_path / "in" / f"{i}.json").write_text(json.dumps({
            "sample_id": f"s{i}", "step": i, "response_ids": [1], "advantages": [1.0],
            "behavior_logprobs": [-0.1], "topk_ids": [[1, 2]], "topk_logprobs": [[-0.1, -3.0]]}))
    s = ingest(IngestConfig("one-json", (tmp_path / "in",), tmp_path / "o.parquet",
                            vocab_size=VOCAB))
    assert s.rows == 2 and seen == [("0.json", 0), ("1.json", 1)]  # ctx.index: file order
    meta = read_meta(tmp_path / "o.parquet")
    assert (meta.topk_convention, meta.logprobs_mode, meta.top_k) == ("plus_sampled", "raw", 2)
    with pytest.raises(ValueError, match="format 'one-json' is already registered"):
        register_format(IngestFormat("one-json", parse, "again", (".json",)))
    with pytest.raises(ValueError, match="suffixes must be a tuple"):
        register_format(IngestFormat("other", parse, "bad suffixes", ".json"))  # type: ignore
    with pytest.raises(IngestError, match="unknown format 'nope'; known: .*one-json"):
        resolve_format("nope")


def test_a_format_with_an_unknown_convention_is_refused(tmp_path: Path,
                                                        user_formats: None) -> None:
    register_format(IngestFormat("odd", lambda path, ctx: iter(()), "odd", (".x",),
                                 topk_convention="sampled_first"))
    with pytest.raises(IngestError, match="format 'odd' records topk_convention "
                                          "'sampled_first'"):
        ingest(IngestConfig("odd", (tmp_path,), tmp_path / "o.parquet", vocab_size=VOCAB))
