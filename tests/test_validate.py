from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pdm_replay.io.reader import read_meta
from pdm_replay.io.rollouts import write_rollouts
from pdm_replay.commands.masks import MasksConfig, run_masks
from pdm_replay.commands.validate import validate_log


def _write(tmp_path: Path, rows: list[dict], like: Path) -> Path:
    return write_rollouts(tmp_path / "bad.parquet", rows, read_meta(like))


def test_clean_log_summary(small_log: Path) -> None:
    r = validate_log(small_log)
    assert r.ok and r.samples == 8 and r.tokens == 48 and r.files == 1
    assert sum(r.k_hist.values()) == 48 and set(r.k_hist) <= {5, 6}
    assert 0 < r.mass_percentiles()["p50"] <= 1
    assert r.steps == {0: 8}


def _set(rows: list[dict], row: int, col: str, pos: int, value, inner: int | None = None):
    if inner is None:
        rows[row][col][pos] = value
    else:
        rows[row][col][pos][inner] = value


# (kind, mutation, expected position) — each bad-input class of issue 2.
CASES = [
    ("token-id-range", lambda r: _set(r, 2, "response_ids", 3, 50), 3),
    ("topk-id-range", lambda r: _set(r, 2, "topk_ids", 1, 99, inner=1), 1),
    ("non-finite", lambda r: _set(r, 2, "advantages", 4, float("nan")), 4),
    ("non-finite", lambda r: _set(r, 2, "topk_logprobs", 0, float("inf"), inner=2), 0),
    ("positive-logprob", lambda r: _set(r, 2, "behavior_logprobs", 5, 0.01), 5),
    ("duplicate-topk-id", lambda r: _set(r, 2, "topk_ids", 2, r[2]["topk_ids"][2][0],
                                         inner=1), 2),
    ("topk-length", lambda r: r[2]["topk_logprobs"][1].pop(), 1),
    ("behavior-mismatch", lambda r: _set(r, 2, "behavior_logprobs", 0,
                                         r[2]["topk_logprobs"][0][0] - 0.5), 0),
    ("train-logprob", lambda r: _set(r, 2, "train_logprobs", 3, float("nan")), 3),
]


@pytest.mark.parametrize("kind,mutate,pos", CASES, ids=[f"{c[0]}-{i}" for i, c in
                                                        enumerate(CASES)])
def test_each_bad_input_is_named_with_file_sample_position(
        tmp_path: Path, small_log: Path, small_rows: list[dict], kind, mutate, pos) -> None:
    if kind == "behavior-mismatch":
        # make sure the sampled token is in its own top-K row at position 0
        small_rows[2]["topk_ids"][0][0] = small_rows[2]["response_ids"][0]
        small_rows[2]["behavior_logprobs"][0] = small_rows[2]["topk_logprobs"][0][0]
    mutate(small_rows)
    bad = _write(tmp_path, small_rows, small_log)
    r = validate_log(bad)
    assert not r.ok and r.error_counts[kind] >= 1
    problem = next(p for p in r.errors if p.kind == kind)
    sid = small_rows[2]["sample_id"]
    assert (problem.file, problem.sample_id, problem.pos) == (str(bad), sid, pos)
    assert f"sample {sid!r} pos {pos}" in str(problem)
    # masks refuses the same log and leaves no output behind
    out = tmp_path / "tokens.parquet"
    with pytest.raises(ValueError, match=sid):
        run_masks(MasksConfig(log=bad, out=out))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.parquet", "log.parquet"]


def test_length_mismatch_and_repeated_sample_id(tmp_path: Path, small_log: Path,
                                                small_rows: list[dict]) -> None:
    small_rows[1]["advantages"].append(1.0)
    small_rows[3]["sample_id"] = small_rows[0]["sample_id"]
    r = validate_log(_write(tmp_path, small_rows, small_log))
    assert r.error_counts["length-mismatch"] == 1 and r.error_counts["sample-id"] == 1
    assert any("advantages has 7 entries but response_ids has 6 (row 1)" in str(p)
               for p in r.errors)


def test_footer_and_missing_columns(tmp_path: Path, small_log: Path) -> None:
    table = pq.read_table(small_log)
    pq.write_table(table.replace_schema_metadata({}), tmp_path / "nofooter.parquet")
    r = validate_log(tmp_path / "nofooter.parquet")
    assert r.error_counts["footer"] == 1 and "pdm_replay.schema" in str(r.errors[0])
    pq.write_table(table.drop_columns(["topk_ids"]), tmp_path / "nocol.parquet")
    r = validate_log(tmp_path / "nocol.parquet")
    assert r.error_counts["missing-column"] == 1 and "'topk_ids'" in str(r.errors[0])
    assert validate_log(tmp_path / "nothing").error_counts["not-found"] == 1


def test_mass_overflow_is_a_counted_warning_not_an_error(tmp_path: Path, small_log: Path,
                                                         small_rows: list[dict]) -> None:
    small_rows[0]["topk_logprobs"][0] = [-0.01] * len(small_rows[0]["topk_logprobs"][0])
    small_rows[0]["behavior_logprobs"][0] = -0.01
    r = validate_log(_write(tmp_path, small_rows, small_log))
    assert r.ok and r.warning_counts["mass-overflow"] == 1


def test_max_errors_lists_few_but_counts_all(tmp_path: Path, small_log: Path,
                                             small_rows: list[dict]) -> None:
    for row in small_rows:
        row["advantages"] = [float("nan")] * len(row["advantages"])
    r = validate_log(_write(tmp_path, small_rows, small_log), max_errors=3)
    assert len(r.errors) == 3 and r.error_count == 48


def test_behavior_mismatch_compares_k_wherever_it_sits_in_the_row(small_log: Path) -> None:
    from dataclasses import replace

    from pdm_replay.io.reader import iter_flat_tokens
    from pdm_replay.checks import _behavior_mismatch

    flat = next(iter_flat_tokens(small_log))
    ids, lp = flat.topk_ids.copy(), flat.topk_logprobs.copy()
    ids[:3] = -1  # rows 0-2: k only in slot 3, at µ_k (row 0), 0.5 away (row 1), 1e-4 (row 2)
    ids[:3, 3] = flat.token_id[:3]
    lp[:3, 3] = flat.logp_behavior[:3] + [0.0, 0.5, 1e-4]
    ids[3, ids[3] == flat.token_id[3]] = -1  # row 3: k absent, nothing to compare
    lp[3] = flat.logp_behavior[3] - 9.0
    bad = _behavior_mismatch(replace(flat, topk_ids=ids, topk_logprobs=lp))
    assert bad is not None and bad[:4].tolist() == [False, True, False, False]
