"""Typed run state (issue 21): the manifest's transitions and its one JSON form, seed
records, config errors that name fields, and a resume of a run written before a field."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdm_replay.replay.config import FieldError, ReplayConfig, default_json
from pdm_replay.replay.manifest import COMPLETE, FAILED, RUNNING, Finish, Manifest
from pdm_replay.replay.seed_records import SeedRecord


def _cfg(**kw) -> ReplayConfig:
    return ReplayConfig(log=Path("l"), checkpoint=Path("c"), out=Path("o"), **kw)


def _started() -> Manifest:
    return Manifest.started(config=_cfg().to_json(), hashes={"log": {"l": "0" * 64}},
                            started_at="2026-01-01T00:00:00+00:00", log_rows=12,
                            warnings=("w",), timings={"load_s": 1.0, "hash_s": 0.5},
                            updates=("none",), chunk_tokens=32)


def _record(seed: int) -> SeedRecord:
    return SeedRecord.from_json({"seed": seed, "samples": 6, "tokens": 40 + seed,
                                 "timings": {"total_s": 2.0}, "steps": [{"step": None}],
                                 "deviation": {"max": 0.1, "sum": 0.2, "count": 4},
                                 "world_size": 1, "ranks": []})


def test_transitions_return_new_manifests_and_round_trip() -> None:
    m = _started()
    assert m.status == RUNNING and m.to_json()["kind"] == "pdm_replay.replay"
    done = m.with_seed(_record(0)).with_seed(_record(1))
    assert m.seeds == () and [r.seed for r in done.seeds] == [0, 1]
    fin = done.finished(Finish(finished_at="t", seeds_resumed=(0,), recompute_deviation=None,
                               tokens=81, update_steps={}, behavior_fidelity=None,
                               summary=(), seeds_s=3.0, per_seed={"0": {}}))
    doc = fin.to_json()
    assert doc["status"] == COMPLETE and doc["tokens"] == 81 and doc["seeds_resumed"] == [0]
    assert doc["timings"] == {"load_s": 1.0, "hash_s": 0.5, "seeds_s": 3.0,
                              "per_seed": {"0": {}}}
    assert "optimizer_state" not in doc and "error" not in doc
    assert Manifest.from_json(doc).to_json() == doc
    with pytest.raises(ValueError, match="complete run cannot finish"):
        fin.finished(fin.finish)  # type: ignore[arg-type]
    bad = m.failed("ValueError: x", "t2").to_json()
    assert bad["status"] == FAILED and bad["error"] == "ValueError: x" and "tokens" not in bad
    assert Manifest.from_json(bad).to_json() == bad


def test_seed_record_round_trips_its_done_marker() -> None:
    doc = _record(3).to_json()
    assert SeedRecord.from_json(doc).to_json() == doc
    assert _record(3).timed(5.0).timings == {"total_s": 5.0}


def test_config_errors_name_fields() -> None:
    with pytest.raises(FieldError) as info:
        _cfg(seeds=0)
    assert info.value.field == "seeds" and str(info.value) == "seeds must be >= 1"
    with pytest.raises(FieldError) as info:
        _cfg(optimizer_state=Path("s.pt"), optimizer="sgd")
    assert info.value.fields == ("optimizer_state", "optimizer")


def test_a_stored_config_without_a_newer_field_reads_its_default() -> None:
    old = _cfg().to_json()
    del old["mask_modules"]  # a manifest written before --mask-module was recorded
    assert _cfg().differences(old) == []
    assert _cfg(lr=0.5).differences(old) == ["lr"]
    assert default_json()["mask_modules"] == []
