"""The shipped ``sample_data/``: size, validity, reproducibility of every logged number."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from sample_checks import bf16_ulps, load, logit_ulps, rows
from transformers import AutoTokenizer, Qwen3ForCausalLM

from pdm_replay.io.reader import read_meta
from pdm_replay.sample.make import LOG_FILE, SampleConfig, make_sample
from pdm_replay.sample.stats import log_statistics
from pdm_replay.validate import validate_log

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data"
REGENERATE = "pdm-replay make-sample sample_data --seed 0 --size small"
BF16_ULPS = 4.0  # see test_sample_make.py
# float32 recompute vs the logged train log-probs, in float32 ulps of the largest logit:
# 0 on the CPU path that wrote them (avx2), 10.5 measured on 256 samples under
# ATEN_CPU_CAPABILITY=default (another SIMD width reorders the matmul/softmax sums; an
# AVX-512 CPU differed by 1.14e-5, the same size). 32 = 3x the measured spread.
F32_ULPS = 32.0
CHECKED_SAMPLES = 32  # the fast test recomputes the first 4 groups; the slow one all


@pytest.fixture(scope="module")
def sample() -> Path:
    if not (SAMPLE / LOG_FILE).exists():
        pytest.fail(f"{SAMPLE}: no shipped sample; regenerate it with `{REGENERATE}`")
    return SAMPLE


def test_size_and_contents(sample: Path) -> None:
    total = sum(p.stat().st_size for p in sample.rglob("*") if p.is_file())
    assert total <= 20 * 2**20, f"sample_data/ is {total / 2**20:.1f} MB > 20 MB"
    for name in ("behavior", "policy"):
        files = {p.name for p in (sample / name).iterdir()}
        assert {"config.json", "model.safetensors", "tokenizer.json",
                "tokenizer_config.json"} <= files


def test_log_is_valid_and_large_enough(sample: Path) -> None:
    report = validate_log(sample / "rollouts", max_errors=20)
    assert report.ok, [str(e) for e in report.errors]
    assert report.samples >= 256 and report.tokens >= 10_000
    meta = read_meta(sample / "rollouts")
    assert (meta.top_k, meta.temperature, meta.top_p, meta.top_k_sampling) == (20, 1.0, 1.0, 0)
    assert ((sample / "rollouts" / meta.tokenizer).resolve() / "tokenizer.json").exists()


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
    for name in ("behavior", "policy"):
        assert isinstance(load(sample / name, torch.float32), Qwen3ForCausalLM)
    tok = AutoTokenizer.from_pretrained(str(sample / "policy"), local_files_only=True)
    assert len(tok) == read_meta(sample / "rollouts").vocab_size >= 1000
    for row in rows(sample / "rollouts", 8):
        text = tok.decode(row["prompt_ids"], skip_special_tokens=True)
        assert tok(text).input_ids == row["prompt_ids"]


def _check_reproducible(sample: Path, samples: list[dict]) -> None:
    assert bf16_ulps(load(sample / "behavior", torch.bfloat16), samples) <= BF16_ULPS
    assert bf16_ulps(load(sample / "policy", torch.bfloat16), samples) > BF16_ULPS
    f32 = logit_ulps(load(sample / "policy", torch.float32), samples, torch.float32,
                     "train_logprobs", "train_topk_logprobs")
    assert f32 <= F32_ULPS


def test_logged_logprobs_are_reproducible(sample: Path) -> None:
    _check_reproducible(sample, rows(sample / "rollouts", CHECKED_SAMPLES))


@pytest.mark.slow
def test_every_logged_logprob_is_reproducible(sample: Path) -> None:
    _check_reproducible(sample, rows(sample / "rollouts"))


@pytest.mark.slow
def test_regeneration_gives_the_shipped_parquet(sample: Path, tmp_path: Path) -> None:
    again = make_sample(tmp_path / "sample_data", SampleConfig(seed=0, size="small")).out_dir
    assert pq.read_table(sample / LOG_FILE).equals(pq.read_table(again / LOG_FILE))
