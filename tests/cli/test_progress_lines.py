"""Long commands print plain progress lines when stderr is not a terminal (issue 19)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from pdm_replay.cli import app
from pdm_replay.cli.common import ProgressLines

runner = CliRunner()


def test_lines_are_throttled_and_the_last_state_is_printed() -> None:
    now, out = [0.0], []
    p = ProgressLines("masks", 100, "samples", every_s=10.0, clock=lambda: now[0],
                      write=out.append)
    for t, done in ((1.0, 10), (5.0, 20), (11.5, 30), (15.0, 40)):
        now[0] = t
        p.update(0, completed=done, rate="5 tok/s")
    now[0] = 16.0
    p.finish()
    # printed at 1.0 (first), 11.5 (≥ 10 s later) and at the end; 5.0 and 15.0 throttled
    assert out == ["masks: 10/100 samples, 5 tok/s, 1 s elapsed",
                   "masks: 30/100 samples, 5 tok/s, 12 s elapsed",
                   "masks: 40/100 samples, 5 tok/s, 16 s elapsed"]


def test_total_learned_late_and_no_rate() -> None:
    out: list[str] = []
    p = ProgressLines("replay", None, "stages", clock=lambda: 0.0, write=out.append)
    p.update(0, completed=1, total=4)
    assert out == ["replay: 1/4 stages, 0 s elapsed"]
    p.update(0, description="sft", completed=2)  # make-sample names each stage
    p.finish()
    assert out[-1] == "sft: 2/4 stages, 0 s elapsed"


def test_masks_prints_progress_lines_off_a_terminal(tmp_path: Path, small_log: Path) -> None:
    res = runner.invoke(app, ["masks", str(small_log), "--out", str(tmp_path / "t.parquet"),
                              "--masks", "none,dppo_topk_kl,pdm_kl_agg"])
    assert res.exit_code == 0, res.output
    assert "masks: " in res.stderr and " samples" in res.stderr and "elapsed" in res.stderr
