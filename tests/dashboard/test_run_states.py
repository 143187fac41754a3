"""Missing, half-written, damaged and masks-only inputs: a message in the page, never a
traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pdm_replay.dashboard_app import APP_FILE, ENV_RUN_DIR
from dashboard_fixtures import app_for, run_dir, tokenizer_dir  # noqa: F401 (fixtures)

REPO = Path(__file__).resolve().parents[2]


def messages(at) -> str:
    return "\n".join(str(e.value) for e in (*at.error, *at.warning, *at.info))


def copy_run(run_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run_dir, tmp_path / "run"))


def mark_running(run: Path, done_seeds: list[int]) -> None:
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["status"] = "running"
    (run / "manifest.json").write_text(json.dumps(manifest))
    shutil.rmtree(run / "done", ignore_errors=True)  # a real replay has markers already
    (run / "done").mkdir()
    for seed in done_seeds:
        (run / "done" / f"seed={seed}.json").write_text("{}")


@pytest.mark.parametrize("page", ["Overview", "Disagreements", "Log health"])
def test_no_run_directory_given(app_for, page: str) -> None:
    at = app_for(None, page)
    assert not at.exception
    assert "No run directory was given" in messages(at)
    assert "pdm-replay dashboard RUN_DIR" in messages(at)


def test_missing_run_directory(app_for, tmp_path: Path) -> None:
    at = app_for(tmp_path / "nope", "Disagreements")
    assert not at.exception
    assert "no such run directory" in messages(at)


def test_run_with_some_seeds_finished_shows_only_those(app_for, run_dir: Path,
                                                      tmp_path: Path) -> None:
    run = copy_run(run_dir, tmp_path)
    seeds = sorted(int(p.name.split("=")[1]) for p in (run / "tokens").iterdir())
    mark_running(run, seeds[:1])
    shutil.rmtree(run / "updates" / f"seed={seeds[-1]}")  # the seed being replayed
    at = app_for(run, "Disagreements")
    assert not at.exception and not at.error
    assert f"showing the 1 finished seed(s) [{seeds[0]}]" in messages(at)
    next(s for s in at.selectbox if s.label == "Pair").select_index(0).run()  # any
    assert set(at.dataframe[0].value["seed"]) == {seeds[0]}


def test_run_without_finished_seed(app_for, run_dir: Path, tmp_path: Path) -> None:
    run = copy_run(run_dir, tmp_path)
    mark_running(run, [])
    at = app_for(run, "Overview")
    assert not at.exception
    assert "no seed has finished yet" in messages(at)


def test_damaged_tokens_file(app_for, run_dir: Path, tmp_path: Path) -> None:
    run = copy_run(run_dir, tmp_path)
    part = sorted((run / "tokens").rglob("*.parquet"))[0]
    part.write_bytes(part.read_bytes()[:100])
    at = app_for(run, "Divergence")
    assert not at.exception
    assert f"Cannot open `{run.resolve()}`" in messages(at) and part.name in messages(at)


def test_damaged_updates_file_is_named_in_the_page(app_for, run_dir: Path,
                                                   tmp_path: Path) -> None:
    run = copy_run(run_dir, tmp_path)
    part = sorted((run / "updates").rglob("*.parquet"))[-1]
    part.write_bytes(b"PAR1 not really parquet PAR1")
    at = app_for(run, "Overview")
    assert not at.exception
    assert str(part.relative_to(run)) in messages(at)


def test_masks_only_tokens_file(app_for, run_dir: Path, tmp_path: Path) -> None:
    part = sorted((run_dir / "tokens").rglob("*.parquet"))[0]
    table = pq.read_table(part)
    tokens = tmp_path / "tokens.parquet"
    pq.write_table(table.drop_columns(["seed"]), tokens)
    for page in ("Overview", "Disagreements", "Divergence", "Estimators", "Log health"):
        at = app_for(tokens, page)
        assert not at.exception and not at.error, page
        assert "`pdm-replay masks` output" in messages(at)
    rows = at.switch_page("page_scripts/disagreements.py").run().dataframe[0].value
    assert rows["delta_d"].isna().all()


def test_repository_entry_runs_the_same_app(monkeypatch: pytest.MonkeyPatch,
                                            run_dir: Path) -> None:
    AppTest = pytest.importorskip("streamlit.testing.v1").AppTest
    monkeypatch.setenv(ENV_RUN_DIR, str(run_dir))
    at = AppTest.from_file(str(REPO / "dashboards" / "app.py"), default_timeout=120).run()
    assert not at.exception and at.title[0].value == "Overview"
    at.switch_page(str(Path("..") / APP_FILE.relative_to(REPO).parent / "page_scripts"
                       / "estimators.py")).run()
    assert not at.exception and at.title[0].value == "Estimators"
