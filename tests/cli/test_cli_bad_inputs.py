"""Every class of bad input, through the CLI: exit code 2 (1 for `validate`'s findings), a
message naming the file (and sample and position where they apply), no traceback, no
stray warning, and nothing left under the output's name."""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.testing.fixtures import TINY_VOCAB, SyntheticLogConfig, save_tiny, write_synthetic_log
from pdm_replay.io.rollouts import write_rollouts
from pdm_replay.schema import RolloutMeta

LOG_CFG = SyntheticLogConfig(n_samples=8, response_len=4, vocab_size=TINY_VOCAB, top_k=6,
                             prompt_len=3, rng_seed=1)
MAPPING = "[columns]\n" + "".join(f'{c} = "{c}"\n' for c in (
    "sample_id", "step", "prompt_ids", "response_ids", "advantages", "behavior_logprobs",
    "topk_ids", "topk_logprobs"))


@dataclass
class Inputs:
    """The good inputs every bad one is made from."""

    dir: Path
    log: Path
    checkpoint: Path

    def rows(self) -> list[dict]:
        return pq.read_table(self.log).to_pylist()

    def meta(self) -> RolloutMeta:
        return RolloutMeta.from_metadata(pq.read_schema(self.log).metadata, "log")


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    d = tmp_path_factory.mktemp("good")
    return Inputs(d, write_synthetic_log(d / "log.parquet", LOG_CFG), save_tiny(d / "ckpt", 0))


@dataclass
class Case:
    """One bad input: the file to name, what else the message must say, the exit code."""

    path: Path
    says: list[str] = field(default_factory=list)
    sample: str | None = None  # the sample id named (ingest names the row instead)
    row: int | None = None


# -- builders: each writes one bad input into `d` from the good ones ------------------------

def corrupt_page(g: Inputs, d: Path) -> Case:
    """A data page header overwritten: pyarrow's "Couldn't deserialize thrift"."""
    raw = bytearray(g.log.read_bytes())
    offset = pq.ParquetFile(g.log).metadata.row_group(0).column(4).data_page_offset
    raw[offset:offset + 8] = b"\xff" * 8
    (d / "corrupt.parquet").write_bytes(bytes(raw))
    return Case(d / "corrupt.parquet", ["corrupt or truncated"])


def truncated(g: Inputs, d: Path) -> Case:
    data = g.log.read_bytes()
    (d / "truncated.parquet").write_bytes(data[: len(data) // 2])
    return Case(d / "truncated.parquet", ["corrupt or truncated"])


def empty_file(g: Inputs, d: Path) -> Case:
    (d / "empty.parquet").write_bytes(b"")
    return Case(d / "empty.parquet", ["0 bytes"])


def not_parquet(g: Inputs, d: Path) -> Case:
    (d / "notes.parquet").write_text("these are my notes, not a Parquet file\n")
    return Case(d / "notes.parquet", ["magic bytes"])


def _without(g: Inputs, d: Path, column: str) -> Case:
    table = pq.read_table(g.log)
    pq.write_table(table.drop_columns([column]), d / f"no_{column}.parquet")
    return Case(d / f"no_{column}.parquet", [column, "missing-column"])


def no_advantages(g: Inputs, d: Path) -> Case:
    return _without(g, d, "advantages")


def no_topk_logprobs(g: Inputs, d: Path) -> Case:
    return _without(g, d, "topk_logprobs")


def string_response_ids(g: Inputs, d: Path) -> Case:
    table = pq.read_table(g.log)
    ids = pa.array([[str(t) for t in r] for r in table["response_ids"].to_pylist()])
    table = table.set_column(table.schema.get_field_index("response_ids"), "response_ids", ids)
    pq.write_table(table.replace_schema_metadata(pq.read_schema(g.log).metadata),
                   d / "string_ids.parquet")
    return Case(d / "string_ids.parquet", ["response_ids", "string"])


def _ids_as(g: Inputs, d: Path, column: str, convert) -> Case:
    """The log with ``column``'s ids turned into ``convert(id)`` (texts or floats)."""
    table = pq.read_table(g.log)
    def each(v):
        return [each(x) for x in v] if isinstance(v, list) else convert(v)
    values = pa.array([each(r) for r in table[column].to_pylist()])
    table = table.set_column(table.schema.get_field_index(column), column, values)
    path = d / f"{column}_{values.type.value_type}.parquet".replace("<", "").replace(">", "")
    pq.write_table(table.replace_schema_metadata(pq.read_schema(g.log).metadata), path)
    return Case(path, [column])


def string_prompt_ids(g: Inputs, d: Path) -> Case:
    case = _ids_as(g, d, "prompt_ids", str)
    return Case(case.path, case.says + ["string", "not integer token ids"])


def string_topk_ids(g: Inputs, d: Path) -> Case:
    case = _ids_as(g, d, "topk_ids", str)
    return Case(case.path, case.says + ["string", "not integer token ids"])


def float_response_ids(g: Inputs, d: Path) -> Case:
    case = _ids_as(g, d, "response_ids", float)
    return Case(case.path, case.says + ["double", "not integer token ids"])


def footer_not_a_number(g: Inputs, d: Path) -> Case:
    table = pq.read_table(g.log)
    md = {**table.schema.metadata, b"vocab_size": b"abc"}
    pq.write_table(table.replace_schema_metadata(md), d / "abc.parquet")
    return Case(d / "abc.parquet", ["vocab_size='abc'", "not a whole number"])


def topk_too_long(g: Inputs, d: Path) -> Case:
    """Sample 2, position 1 logs 12 top-K entries where K = 6 (plus_sampled: at most 7)."""
    rows = g.rows()
    rows[2]["topk_ids"][1] = list(range(12))
    rows[2]["topk_logprobs"][1] = [-6.0] * 12
    rows[2]["train_topk_logprobs"][1] = [-6.0] * 12
    path = write_rollouts(d / "long_topk.parquet", rows, g.meta())
    return Case(path, ["pos 1", "topk-too-long", "more than 7"], repr(rows[2]["sample_id"]), 2)


def huge_value(g: Inputs, d: Path) -> Case:
    """1e308 in a float32 column is inf: reported by name, no numpy RuntimeWarning."""
    rows = g.rows()
    rows[5]["advantages"][2] = 1e308
    path = write_rollouts(d / "huge.parquet", rows, g.meta())
    return Case(path, ["pos 2", "non-finite"], repr(rows[5]["sample_id"]), 5)


def nan_value(g: Inputs, d: Path) -> Case:
    rows = g.rows()
    rows[7]["behavior_logprobs"][3] = float("nan")
    path = write_rollouts(d / "nan.parquet", rows, g.meta())
    return Case(path, ["pos 3", "non-finite"], repr(rows[7]["sample_id"]), 7)


def _replay(case: Case, g: Inputs, out: Path) -> list[str]:
    return ["replay", str(case.path), "--checkpoint", str(g.checkpoint), "--out", str(out),
            "--seeds", "2", "--batch-size", "4"]


def _masks(case: Case, g: Inputs, out: Path) -> list[str]:
    return ["masks", str(case.path), "--out", str(out)]


def _validate(case: Case, g: Inputs, out: Path) -> list[str]:
    return ["validate", str(case.path)]


def _ingest_columns(case: Case, g: Inputs, out: Path) -> list[str]:
    mapping = case.path.parent / "identity.toml"
    mapping.write_text(MAPPING)
    # --top-k: the columns format does not read a footer; the user states the engine's K
    return ["ingest", "--from", "columns", str(case.path), "--mapping", str(mapping),
            "--vocab-size", str(TINY_VOCAB), "--top-k", str(LOG_CFG.top_k), "--out", str(out)]


COMMANDS: dict[str, Callable[[Case, Inputs, Path], list[str]]] = {
    "validate": _validate, "masks": _masks, "replay": _replay, "ingest": _ingest_columns}
LOG_CASES: dict[str, tuple[Callable[[Inputs, Path], Case], tuple[str, ...]]] = {
    "corrupt-page": (corrupt_page, ("validate", "masks", "replay", "ingest")),
    "truncated": (truncated, ("validate", "masks", "replay", "ingest")),
    "empty-file": (empty_file, ("validate", "masks", "replay", "ingest")),
    "not-parquet": (not_parquet, ("validate", "masks", "replay")),
    "no-advantages": (no_advantages, ("validate", "masks", "replay")),
    "no-topk-logprobs": (no_topk_logprobs, ("validate", "masks", "replay")),
    # ingest: ids are never cast from texts or floats (a column of token texts would
    # become wrong ids); the file and column are named
    "string-response-ids": (string_response_ids, ("validate", "masks", "replay", "ingest")),
    "string-prompt-ids": (string_prompt_ids, ("ingest",)),
    "string-topk-ids": (string_topk_ids, ("ingest",)),
    "float-response-ids": (float_response_ids, ("ingest",)),
    "footer-vocab-abc": (footer_not_a_number, ("validate", "masks", "replay")),
    "topk-too-long": (topk_too_long, ("validate", "masks", "replay", "ingest")),
    "value-1e308": (huge_value, ("validate", "masks", "replay")),
    "value-nan": (nan_value, ("validate", "masks", "replay")),
}
PARAMS = [pytest.param(case, cmd, id=f"{case}-{cmd}")
          for case, (_, cmds) in LOG_CASES.items() for cmd in cmds]


def invoke(argv: list[str]):
    """Run the CLI; every warning raised on the way is recorded, not shown."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(app, argv)
    stray = [w for w in caught if issubclass(w.category, (RuntimeWarning, UserWarning))
             and "pdm_replay" in str(w.filename) or issubclass(w.category, RuntimeWarning)]
    return result, stray


def flat(text: str) -> str:
    """The output with rich's line wrapping undone."""
    return " ".join(text.split())


def check(result, stray, case: Case, code: int, out: Path | None) -> None:
    said = flat(result.output)
    assert result.exit_code == code, result.output
    assert str(case.path) in said, said
    for part in case.says:
        assert part in said, (part, said)
    assert "Traceback" not in result.output
    assert not stray, [str(w.message) for w in stray]
    if out is not None:
        assert not out.exists(), f"{out} left behind"
        assert not [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")]


@pytest.mark.parametrize("case, command", PARAMS)
def test_bad_log(tmp_path: Path, good: Inputs, case: str, command: str) -> None:
    bad = LOG_CASES[case][0](good, tmp_path)
    if bad.sample is not None:  # ingest locates a record by its row, the others by sample
        bad.says.append(f"row {bad.row}:" if command == "ingest" else bad.sample)
    out = tmp_path / ("run" if command == "replay" else "out.parquet")
    result, stray = invoke(COMMANDS[command](bad, good, out))
    check(result, stray, bad, 1 if command == "validate" else 2,
          None if command == "validate" else out)


# -- inputs other than a log --------------------------------------------------------------

def _tokenizer_dir(d: Path, tokenizer_json: str, config_json: str | None) -> Path:
    tok = d / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text(tokenizer_json)
    if config_json is not None:
        (tok / "config.json").write_text(config_json)
    return tok


def _vllm_input(d: Path, token_ids: list) -> Path:
    rec = {"request_id": "r0", "advantage": 1.0, "outputs": [{"index": 0, "token_ids":
           token_ids, "logprobs": [{"3": {"logprob": -0.1, "rank": 1}}] * len(token_ids)}]}
    path = d / "gen.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    return path


def bad_config_json(d: Path) -> tuple[list[str], Path, list[str]]:
    tok = _tokenizer_dir(d, "{}", "{not json")
    return ["--tokenizer", str(tok)], tok / "config.json", ["config.json", "--vocab-size"]


def bad_tokenizer_json(d: Path) -> tuple[list[str], Path, list[str]]:
    tok = _tokenizer_dir(d, json.dumps({"version": "1.0", "model": {"type": "Nope"}}), None)
    return ["--tokenizer", str(tok)], tok / "tokenizer.json", ["cannot be loaded"]


def string_token_id(d: Path) -> tuple[list[str], Path, list[str]]:
    src = _vllm_input(d, ["abc"])
    return ["--vocab-size", "10"], src, ["line 1", "abc"]


def no_usable_records(d: Path) -> tuple[list[str], Path, list[str]]:
    (d / "empty.jsonl").write_text("")
    return ["--vocab-size", "10"], d / "empty.jsonl", ["no usable records"]


INGEST_CASES = {"config-json": bad_config_json, "tokenizer-json": bad_tokenizer_json,
                "string-token-id": string_token_id, "no-usable-records": no_usable_records}


@pytest.mark.parametrize("case", list(INGEST_CASES))
def test_bad_ingest_input(tmp_path: Path, case: str) -> None:
    options, named, says = INGEST_CASES[case](tmp_path)
    src = tmp_path / "empty.jsonl" if case == "no-usable-records" else _vllm_input(
        tmp_path, [3]) if case != "string-token-id" else named
    out = tmp_path / "out" / "log.parquet"
    result, stray = invoke(["ingest", "--from", "vllm", str(src), *options, "--out", str(out)])
    check(result, stray, Case(named, says), 2, None)
    assert not out.parent.exists() or not list(out.parent.iterdir())


def test_checkpoint_transformers_refuses(tmp_path: Path, good: Inputs) -> None:
    """--allow-pickle with a pytorch_model.bin that is not a torch save."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(good.checkpoint, ckpt, ignore=shutil.ignore_patterns("*.safetensors"))
    (ckpt / "pytorch_model.bin").write_bytes(b"this is not a pickle")
    out = tmp_path / "run"
    result, stray = invoke(["replay", str(good.log), "--checkpoint", str(ckpt),
                            "--allow-pickle", "--out", str(out), "--seeds", "1",
                            "--batch-size", "4"])
    check(result, stray, Case(ckpt, ["transformers could not load it"]), 2, out)
    assert len(flat(result.output)) < 600  # one or two lines, not torch's essay


def test_debug_shows_the_traceback(tmp_path: Path, good: Inputs) -> None:
    bad = not_parquet(good, tmp_path)
    argv = ["masks", str(bad.path), "--out", str(tmp_path / "o.parquet")]
    result = CliRunner().invoke(app, ["--debug", *argv])
    assert isinstance(result.exception, ValueError) and "magic bytes" in str(result.exception)
    result = CliRunner().invoke(app, argv, env={"PDM_REPLAY_DEBUG": "1"})
    assert isinstance(result.exception, ValueError)
