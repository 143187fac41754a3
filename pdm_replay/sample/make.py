"""``make-sample``: train the tiny policy, roll out, log, and write a sample directory.

Layout of ``OUT_DIR``: ``behavior/`` and ``policy/`` (HF checkpoints + tokenizer),
``rollouts/part-00000.parquet`` (rollout/v1) and ``README.md``. Everything is built in a
temporary sibling directory and moved into place at the end, so a failure leaves nothing
half-written. The same seed and size give the same Parquet contents.
"""

from __future__ import annotations

import os
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import torch

from pdm_replay.io.rollouts import RolloutWriter
from pdm_replay.sample.model import (ModelConfig, build_model, frozen_copy, load_checkpoint,
                                     quiet_transformers)
from pdm_replay.sample.readme import render_readme
from pdm_replay.sample.records import group_rows, trainer_logprobs
from pdm_replay.sample.rollout import sample_problems
from pdm_replay.sample.stats import SampleStats, log_statistics
from pdm_replay.sample.task import SortTask
from pdm_replay.sample.tokenizer import build_tokenizer, save_tokenizer
from pdm_replay.sample.train import RLStepStats, TrainConfig, rl, sft
from pdm_replay.schema import RolloutMeta

ENTRIES = ("behavior", "policy", "rollouts", "README.md")
LOG_FILE = "rollouts/part-00000.parquet"
Progress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass(frozen=True)
class SizePreset:
    """Everything a size fixes: model shape, training, task and log size."""

    model: ModelConfig
    train: TrainConfig
    min_len: int
    max_len: int
    log_prompts: int
    max_value: int = 1000  # numbers are drawn from [0, max_value)
    top_k: int = 20


SIZES: dict[str, SizePreset] = {
    "small": SizePreset(model=ModelConfig(), train=TrainConfig(), min_len=4, max_len=10,
                        log_prompts=192),
    # tiny: seconds; numbers < 20 so a short SFT already gives mixed rewards.
    "tiny": SizePreset(model=ModelConfig(hidden_size=32, intermediate_size=64),
                       train=TrainConfig(sft_steps=150, sft_batch=16, sft_lr=2e-2,
                                         rl_prompts=4, rl_lr=1e-2),
                       min_len=2, max_len=4, log_prompts=4, max_value=20),
}


@dataclass(frozen=True)
class SampleConfig:
    """Options of ``pdm-replay make-sample`` (1:1)."""

    seed: int = 0
    size: str = "small"
    force: bool = False

    @property
    def preset(self) -> SizePreset:
        if self.size not in SIZES:
            raise ValueError(f"--size {self.size!r}: expected one of {', '.join(SIZES)}")
        return SIZES[self.size]

    def command(self, out_dir: str) -> str:
        return f"pdm-replay make-sample {out_dir} --seed {self.seed} --size {self.size}"


@dataclass
class SampleResult:
    out_dir: Path
    stats: SampleStats
    rl_steps: list[RLStepStats]
    sft_loss: float
    seconds: dict[str, float] = field(default_factory=dict)


@contextmanager
def deterministic(seed: int) -> Iterator[None]:
    """One thread, deterministic kernels, seeded RNG; the previous settings come back after."""
    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)  # reduction order, hence bits, must not depend on the machine
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(det)


def _check_target(out_dir: Path, force: bool) -> None:
    taken = [e for e in ENTRIES if (out_dir / e).exists()]
    if taken and not force:
        raise FileExistsError(f"{out_dir}: already holds {', '.join(taken)}; pass --force "
                              "to replace them or choose another OUT_DIR")


def _move_into_place(tmp: Path, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for entry in ENTRIES:
        target = out_dir / entry
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        (tmp / entry).rename(target)


def _save_checkpoint(model: torch.nn.Module, tokenizer, directory: Path) -> None:
    with quiet_transformers():
        model.save_pretrained(str(directory), safe_serialization=True)
    save_tokenizer(tokenizer, directory)


def make_sample(out_dir: Path | str, cfg: SampleConfig = SampleConfig(),
                progress: Progress | None = None) -> SampleResult:
    """Build the sample into ``out_dir``; returns its statistics and timings."""
    out_dir = Path(out_dir)
    preset = cfg.preset
    _check_target(out_dir, cfg.force)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        result = _build(tmp, cfg, preset, progress or (lambda *_: None))
        (tmp / "README.md").write_text(render_readme(cfg, preset, result, str(out_dir)))
        _move_into_place(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result.out_dir = out_dir
    return result


def _build(tmp: Path, cfg: SampleConfig, preset: SizePreset, progress: Progress
           ) -> SampleResult:
    seconds: dict[str, float] = {}
    clock = time.perf_counter()
    with deterministic(cfg.seed):
        tok = build_tokenizer()
        task = SortTask(tok, preset.min_len, preset.max_len, preset.max_value)
        train_gen = torch.Generator().manual_seed(2 * cfg.seed)
        log_gen = torch.Generator().manual_seed(2 * cfg.seed + 1)
        model = build_model(preset.model, len(tok), bos_id=tok.bos_token_id,
                            eos_id=tok.eos_token_id, pad_id=tok.pad_token_id)
        steps = preset.train.sft_steps
        losses = sft(model, task, preset.train, train_gen,
                     on_step=lambda s, _: progress("sft", s + 1, steps))
        seconds["sft"] = time.perf_counter() - clock
        behavior = frozen_copy(model)  # θ_{t-1}
        rl_stats = rl(model, task, preset.train, train_gen)  # model becomes θ_t
        policy = frozen_copy(model)
        seconds["rl"] = time.perf_counter() - clock - sum(seconds.values())
        _save_checkpoint(behavior, tok, tmp / "behavior")
        _save_checkpoint(policy, tok, tmp / "policy")
        # The engine loads the saved θ_(t-1) in bfloat16, as vLLM/SGLang would.
        engine = load_checkpoint(tmp / "behavior", torch.bfloat16)
        _write_log(tmp / LOG_FILE, task, engine, policy, cfg, log_gen, progress)
        seconds["rollouts"] = time.perf_counter() - clock - sum(seconds.values())
    stats = log_statistics(tmp / "rollouts")
    seconds["statistics"] = time.perf_counter() - clock - sum(seconds.values())
    return SampleResult(out_dir=tmp, stats=stats, rl_steps=rl_stats,
                        sft_loss=sum(losses[-20:]) / max(len(losses[-20:]), 1),
                        seconds=seconds)


def rollout_meta(vocab_size: int, cfg: SampleConfig) -> RolloutMeta:
    """Footer of the sample log; paths are relative to ``rollouts/``.

    ``logprobs_mode=raw``: the log-probs come from ``output_scores``, but with temperature
    1 and no truncation no processor runs, so they are the raw model log-probs.
    """
    return RolloutMeta(
        vocab_size=vocab_size, top_k=cfg.preset.top_k, topk_convention="plus_sampled",
        logprobs_mode="raw", tokenizer="../policy", temperature=1.0, top_p=1.0,
        top_k_sampling=0,
        extra={"behavior_checkpoint": "../behavior", "policy_checkpoint": "../policy",
               "behavior_dtype": "bfloat16", "policy_dtype": "float32",
               "generated_by": f"pdm-replay make-sample --seed {cfg.seed} --size {cfg.size}"})


def _write_log(path: Path, task: SortTask, engine, policy, cfg: SampleConfig,
               gen: torch.Generator, progress: Progress, chunk: int = 32) -> None:
    """Sample from ``engine`` (behaviour in bfloat16), recompute with ``policy`` (float32)."""
    preset = cfg.preset
    problems = task.sample_lists(preset.log_prompts, gen)
    path.parent.mkdir(parents=True, exist_ok=True)
    pad = int(task.tokenizer.pad_token_id)
    with RolloutWriter(path, rollout_meta(len(task.tokenizer), cfg)) as writer:
        for start in range(0, len(problems), chunk):
            part = problems[start: start + chunk]
            groups = sample_problems(engine, task, part, preset.train.group_size,
                                     top_k=preset.top_k)
            rows = group_rows(task, groups, trainer_logprobs(policy, groups, pad),
                              step=preset.train.rl_steps, first_group=start)
            writer.append(rows)
            progress("rollouts", start + len(part), len(problems))
