"""The shipped ``sample_data/``: size, validity, the disagreement tokens the Quickstart
measures, and reproducibility of every logged number and of the trainer's updates."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
import torch
from sample_checks import (bf16_ulps, load, logit_ulps, replayed_trainer_update, rows,
                           rows_by_step, update_error_in_lr)
from transformers import AutoTokenizer, Qwen3ForCausalLM

from pdm_replay.io.reader import read_meta
from pdm_replay.commands.masks import MasksConfig, run_masks
from pdm_replay.commands.make_sample import LOG_FILE, SampleConfig, make_sample
from pdm_replay.sample.log_checks import (DELTA_KL, MIN_DISAGREEMENTS, MIN_SEEDS, MIN_STEPS,
                                          SEED_SAMPLES, log_statistics)
from pdm_replay.commands.validate import validate_log

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data"
REGENERATE = "pdm-replay make-sample sample_data --seed 0 --size small"
MAX_BYTES = 40 * 2**20
LOGGED = list(range(8, 24))  # steps 8..23; θ_8 .. θ_24 saved; engine syncs at 8 and 16
# bf16 engine decode (KV cache) vs the logged behavior log-probs, in bf16 ulps of the
# largest logit (sample_checks.bf16_ulps): 0 on the generating machine's default path, at
# most 2.0 under its ATEN_CPU_CAPABILITY=default (4 rows of each of steps 8..20); on an AMD
# EPYC's AVX2 path (MKL/oneDNN choose kernels by vendor) 2.1..10.6 per step over every row
# of steps 8..23 (10.6 at step 18). 24 = 2.3x the largest measured, as F32_ULPS below; the
# 7-step-stale check (step 15's rows against θ_15) measured 187 there, far above it.
BF16_ULPS = 24.0
# float32 recompute vs the logged train log-probs, in float32 ulps of the largest logit
# (the unit in which two kernel paths can disagree, see sample_checks.logit_ulps): 0 on
# this machine's default (AVX2) path, which wrote them, over 32 rows of every step; under
# ATEN_CPU_CAPABILITY=default (another SIMD width reorders the matmul and softmax sums)
# 6.4..13.75 per step (32 rows of each of steps 8..20; the old sample measured 10.5).
# 32 = 2.3x the largest measured. The bf16 engine check (BF16_ULPS, decoded through the KV
# cache as the engine did) is derived above.
F32_ULPS = 32.0
CHECKED_PER_STEP = 8  # the fast test recomputes one group of every step; the slow one all
# recomputed vs saved θ_24, in units of the step's lr (see test_sample_make.UPDATE_LR):
# measured 2.0e-5 lr on this machine's default path; 1e-3 leaves 50x room for other CPUs
# and is still 1000x below one step.
UPDATE_LR = 1e-3


@pytest.fixture(scope="module")
def sample() -> Path:
    if not (SAMPLE / LOG_FILE).exists():
        pytest.fail(f"{SAMPLE}: no shipped sample; regenerate it with `{REGENERATE}`")
    return SAMPLE


@pytest.fixture(scope="module")
def tokens(sample: Path, tmp_path_factory: pytest.TempPathFactory) -> pl.DataFrame:
    """`pdm-replay masks` on the whole log (tokens/v1)."""
    out = tmp_path_factory.mktemp("masks") / "tokens.parquet"
    run_masks(MasksConfig(log=sample / "rollouts", out=out))
    return pl.read_parquet(out)


def _bytes(root: Path) -> int:
    """Bytes of the files under ``root``; links (behavior/) count as links, not targets."""
    total = 0
    for folder, _, files in os.walk(root):
        total += sum(os.lstat(os.path.join(folder, f)).st_size for f in files)
    return total


def test_size_and_contents(sample: Path) -> None:
    total = _bytes(sample)
    assert total <= MAX_BYTES, f"sample_data/ is {total / 2**20:.1f} MB > 40 MB"
    for t in [*LOGGED, LOGGED[-1] + 1]:
        files = {p.name for p in (sample / "checkpoints" / f"step_{t}").iterdir()}
        assert {"config.json", "model.safetensors", "tokenizer.json",
                "tokenizer_config.json"} <= files
    assert [p.parent.name for p in (sample / "checkpoints").rglob("optimizer.pt")] == \
        ["step_23"]
    for t in LOGGED:
        link = sample / "behavior" / f"step_{t}"
        assert link.is_symlink() and link.resolve() == \
            (sample / "checkpoints" / f"step_{t - t % 8}").resolve()


def test_log_is_valid_and_large_enough(sample: Path) -> None:
    report = validate_log(sample / "rollouts", max_errors=20)
    assert report.ok, [str(e) for e in report.errors]
    assert report.samples >= MIN_SEEDS * SEED_SAMPLES
    meta = read_meta(sample / "rollouts")
    assert (meta.top_k, meta.temperature, meta.top_p, meta.top_k_sampling) == (20, 1.0, 1.0, 0)
    assert meta.vocab_size >= 4096
    assert ((sample / "rollouts" / meta.tokenizer).resolve() / "tokenizer.json").exists()
    steps = sorted(rows_by_step(sample / "rollouts"))
    assert steps == LOGGED and len(steps) >= MIN_STEPS  # consecutive RL steps
    per_step = {t: len(r) for t, r in rows_by_step(sample / "rollouts").items()}
    assert min(per_step.values()) >= SEED_SAMPLES  # --seed-by step: a full seed per step


def test_masks_counts_enough_disagreement_tokens(sample: Path, tokens: pl.DataFrame) -> None:
    """The issue's criterion, counted by `pdm-replay masks` on the whole log: KL /
    aggregated-tail disagreements (out of region, ratio and predictive masks decide
    differently) at δ = 0.15; the same number the sample README states."""
    disagree = tokens.filter((pl.col("kl_topk") > DELTA_KL)
                             & (pl.col("keep_dppo_topk_kl") != pl.col("keep_pdm_kl_agg")))
    assert disagree.height >= MIN_DISAGREEMENTS
    assert disagree.height == log_statistics(sample / "rollouts").disagree_out


def test_statistics_meet_the_criteria_and_match_the_readme(sample: Path) -> None:
    stats = log_statistics(sample / "rollouts")
    assert all(stats.checks().values()), stats.checks()
    readme = (sample / "README.md").read_text()
    assert REGENERATE in readme
    assert f"| response tokens | {stats.tokens} |" in readme
    assert f"{stats.topk_mass_median:.4f}" in readme
    assert f"| ratio / predictive (KL, agg) direction disagreements, out of region | " \
           f"{stats.disagree_out} |" in readme


def test_checkpoints_and_tokenizer_load_offline(sample: Path) -> None:
    for t in (LOGGED[0], LOGGED[-1] + 1):
        assert isinstance(load(sample / "checkpoints" / f"step_{t}", torch.float32),
                          Qwen3ForCausalLM)
    tok = AutoTokenizer.from_pretrained(str(sample / "checkpoints" / "step_8"),
                                        local_files_only=True)
    assert len(tok) == read_meta(sample / "rollouts").vocab_size >= 4096
    for row in rows(sample / "rollouts", 8):
        text = tok.decode(row["prompt_ids"], skip_special_tokens=True)
        assert tok(text).input_ids == row["prompt_ids"]


def _check_reproducible(sample: Path, limit: int | None) -> None:
    for t, step_rows in rows_by_step(sample / "rollouts").items():
        samples = step_rows[:limit]
        ckpt = sample / "checkpoints"
        assert bf16_ulps(load(sample / "behavior" / f"step_{t}", torch.bfloat16),
                         samples) <= BF16_ULPS, t
        f32 = logit_ulps(load(ckpt / f"step_{t}", torch.float32), samples, torch.float32,
                         "train_logprobs", "train_topk_logprobs")
        assert f32 <= F32_ULPS, (t, f32)
    # the bounds tell checkpoints apart: step 15's rows are 7 steps stale
    late = rows_by_step(sample / "rollouts")[15][:limit]
    assert bf16_ulps(load(sample / "checkpoints" / "step_15", torch.bfloat16), late) > BF16_ULPS


def test_logged_logprobs_are_reproducible(sample: Path) -> None:
    _check_reproducible(sample, CHECKED_PER_STEP)


@pytest.mark.slow
def test_every_logged_logprob_is_reproducible(sample: Path) -> None:
    _check_reproducible(sample, None)


def test_last_step_is_the_trainers_real_update(sample: Path, tokens: pl.DataFrame) -> None:
    """θ_24 = one AdamW step from θ_23 with the saved state on step 23's batch (µ 7 steps
    stale), keeping what `pdm-replay masks` says the trainer's mask keeps."""
    last = tokens.filter(pl.col("step") == 23)
    keep = dict(zip(zip(last["sample_id"], last["pos"]), last["keep_dppo_topk_kl"]))
    assert not all(keep.values())
    ckpt = sample / "checkpoints"
    state_file = ckpt / "step_23" / "optimizer.pt"
    lr = torch.load(state_file, weights_only=True)["param_groups"][0]["lr"]
    after = replayed_trainer_update(ckpt / "step_23", state_file,
                                    rows_by_step(sample / "rollouts")[23], keep)
    err, moved = update_error_in_lr(after, ckpt / "step_24", ckpt / "step_23", lr)
    assert err <= UPDATE_LR and moved > 0.5, (err, moved)


@pytest.mark.slow
def test_regeneration_gives_the_shipped_parquet(sample: Path, tmp_path: Path) -> None:
    # Bit-identical regeneration needs kernels that round as the generating machine's did:
    # the sampled tokens follow every float of the trajectory (an AMD EPYC's AVX2 path,
    # MKL/oneDNN choosing by vendor, gave other tokens from the tiny preset's second
    # step). Its logged bf16 engine and float32 train log-probs are 0 ulps from that
    # machine's passes at every step, so a non-zero recompute of any step's first rows
    # says this machine cannot regenerate it. Every step, not only the first: an
    # AMD EPYC, with AVX-512 (2026-12-03), matched step 8 at 0 ulps but steps 12, 16 and
    # 18 at up to 0.99 bf16 ulps, and its regeneration diverged (3 s for all 16 steps).
    by_step = rows_by_step(sample / "rollouts")
    off = {}
    for t in LOGGED:
        first = by_step[t][:CHECKED_PER_STEP]
        ulps = (bf16_ulps(load(sample / "behavior" / f"step_{t}", torch.bfloat16), first),
                logit_ulps(load(sample / "checkpoints" / f"step_{t}", torch.float32), first,
                           torch.float32, "train_logprobs", "train_topk_logprobs"))
        if ulps != (0, 0):
            off[t] = ulps
    if off:
        pytest.skip("this CPU's bf16 / float32 passes are not 0 ulps from the generator's at "
                    + ", ".join(f"step {t}: {b:.3g} / {f:.3g}" for t, (b, f) in off.items())
                    + ": bit-identical regeneration needs kernels that round alike")
    again = make_sample(tmp_path / "sample_data", SampleConfig(seed=0, size="small")).out_dir
    assert pq.read_table(sample / LOG_FILE).equals(pq.read_table(again / LOG_FILE))
