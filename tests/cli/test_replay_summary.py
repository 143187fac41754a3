"""`pdm-replay replay`'s closing summary (cli/replay.print_summary) reads whole when piped:
rich then assumes 80 columns, and no cell may be folded or cut."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

import pdm_replay.cli.replay as replay_cli
from pdm_replay.report.legend import DEVIATION_WARN

ROW = {"basis": "actual", "ratio_mask": "dppo_topk_kl", "predictive_mask": "pdm_kl_uniform",
       "delta": 0.15, "out_of_region_per_seed": 1068.625, "disagreement_per_seed": 87.375,
       "unsafe_ratio_pooled": 0.6808, "unsafe_ratio_seed_mean": 0.7312,
       "unsafe_predictive_pooled": 0.5974, "unsafe_predictive_seed_mean": 0.6647,
       "wins": 10, "losses": 3, "ties": 1, "empty_seeds": 2}


def _summary(monkeypatch: pytest.MonkeyPatch, mean: float) -> str:
    out = io.StringIO()
    # what rich does when stdout is a file: 80 columns, no terminal
    monkeypatch.setattr(replay_cli, "console", Console(file=out, width=80, color_system=None))
    manifest = {"tokens": 87167, "config": {"seeds": 16, "lr": 0.001,
                                           "trainer_mask": "dppo_topk_kl"},
                "updates": ["actual"], "update_steps": {},
                "recompute_deviation": {"max": 4e-5, "mean": mean, "tokens": 87167}}
    result = SimpleNamespace(manifest=manifest, summary=[ROW, {**ROW, "basis": "none"}],
                             run_dir="runs/sample")
    replay_cli.print_summary(result, 12.0)
    return out.getvalue()


def test_the_summary_fits_80_columns_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _summary(monkeypatch, 5e-7)
    assert max(len(line) for line in text.splitlines()) <= 80
    for cell in ("1068.6", "87.4", "68.1%", "(73.1%)", "59.7%", "(66.5%)", "10/3/1/2",
                 "pdm_kl_uniform", "dppo_topk_kl vs"):
        assert cell in text, cell
    assert "…" not in text and "warning" not in text


def test_a_deviation_beyond_the_reports_bound_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    text = " ".join(_summary(monkeypatch, 2 * DEVIATION_WARN).split())
    assert f"by more than {DEVIATION_WARN} nats" in text
    assert "`pdm-replay report` repeats this warning" in text


def test_a_band_pair_shows_its_band_within_80_columns(monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    """The IcePop pair's region is a band: its cell reads [0.5, 5.0] (two lines), as the
    report's tables do, not its lower bound "0.5" alone."""
    icepop = {**ROW, "ratio_mask": "icepop_ratio", "predictive_mask": "icepop_pdm",
              "delta": 0.5, "region": "ratio ∉ [0.5, 5.0]"}
    out = io.StringIO()
    monkeypatch.setattr(replay_cli, "console", Console(file=out, width=80, color_system=None))
    manifest = {"tokens": 10, "config": {"seeds": 2, "lr": 0.001}, "updates": [],
                "update_steps": {}}
    replay_cli.print_summary(SimpleNamespace(manifest=manifest, summary=[icepop],
                                             run_dir="r"), 1.0)
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    row = next(i for i, line in enumerate(lines) if "icepop_ratio vs" in line)
    assert lines[row].split()[3] == "[0.5,"  # update, ratio mask, "vs", the band
    assert lines[row + 1].split()[1] == "5.0]"
