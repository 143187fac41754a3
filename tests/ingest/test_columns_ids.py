"""``--from columns`` never turns token texts or floats into ids (issue 35): a JSON Lines
record whose mapped id column holds them is refused, naming file, line and column; with
``on_error="skip"`` it is listed and the good records are kept. (Parquet inputs:
tests/cli/test_cli_bad_inputs.py, cases ``*-ids-ingest``.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdm_replay.commands.ingest import IngestConfig, IngestError, ingest

MAPPING = ('[columns]\nsample_id = "id"\nresponse_ids = "ids"\nadvantages = "adv"\n'
           'behavior_logprobs = "lp"\ntopk_ids = "top"\ntopk_logprobs = "top_lp"\n'
           '[defaults]\nstep = 0\n')


def record(name: str, ids: list, top: list | None = None) -> str:
    return json.dumps({"id": name, "ids": ids, "adv": 1.0, "lp": [-0.1] * len(ids),
                       "top": top or [[i] for i in ids], "top_lp": [[-0.1]] * len(ids)})


@pytest.mark.parametrize("ids, top, said", [
    (["12", "13"], None, "holds str '12'"), ([12.0, 13.5], None, "holds float 12.0"),
    ([12, 13], [["12"], [13]], "'top' (topk_ids) holds str '12'"),
    ([True, 13], None, "holds bool True")])
def test_non_integer_ids_are_refused(tmp_path: Path, ids: list, top: list | None,
                                     said: str) -> None:
    (tmp_path / "map.toml").write_text(MAPPING)
    src, out = tmp_path / "in.jsonl", tmp_path / "log.parquet"
    src.write_text(record("good", [3, 4]) + "\n" + record("bad", ids, top) + "\n")
    cfg = dict(mapping=tmp_path / "map.toml", vocab_size=100, top_k=1)
    with pytest.raises(IngestError) as err:
        ingest(IngestConfig("columns", (src,), out, **cfg))
    text = str(err.value)
    assert f"{src}: line 2" in text and said in text and "not integer token ids" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "map.toml"]
    summary = ingest(IngestConfig("columns", (src,), out, on_error="skip", **cfg))
    assert summary.rows == 1 and summary.rejected == 1
