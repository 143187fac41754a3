"""``make-sample``: train the small policy, run GRPO from a stale engine, log, write a sample.

Layout of ``OUT_DIR``: ``checkpoints/step_<t>/`` (θ_t for every logged step t and the
last θ, HF checkpoints + tokenizer; ``optimizer.pt`` in the last logged step's),
``behavior/step_<t>`` (links to the engine's checkpoint of each logged step),
``rollouts/part-00000.parquet`` (rollout/v1) and ``README.md``. Everything is built in a
temporary sibling directory and moved into place at the end, so a failure leaves nothing
half-written. The same seed and size give the same Parquet contents.
"""

from __future__ import annotations

import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch

from pdm_replay.io.rollouts import RolloutWriter
from pdm_replay.sample.config import (BEHAVIOR, CHECKPOINT, ENTRIES, LOG_FILE, OPTIMIZER_FILE,
                                      SIZES, Progress, SampleConfig, SampleExists,
                                      SampleResult, SizePreset)
from pdm_replay.sample.model import build_model, quiet_transformers
from pdm_replay.sample.readme import render_readme
from pdm_replay.sample.trainer_rows import group_rows
from pdm_replay.sample.rl import RLStepStats, StepBatch, run_rl
from pdm_replay.sample.log_checks import log_statistics
from pdm_replay.sample.task import SortTask
from pdm_replay.sample.tokenizer import build_tokenizer, save_tokenizer
from pdm_replay.sample.train import sft
from pdm_replay.schema import RolloutMeta

__all__ = ["BEHAVIOR", "CHECKPOINT", "ENTRIES", "LOG_FILE", "OPTIMIZER_FILE", "SIZES",
           "SampleConfig", "SampleExists", "SampleResult", "SizePreset", "make_sample"]

@contextmanager
def deterministic(rng_seed: int) -> Iterator[None]:
    """One thread, deterministic kernels, seeded RNG; the previous settings come back after."""
    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)  # reduction order, hence bits, must not depend on the machine
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(rng_seed)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(det)


def _check_target(out_dir: Path, force: bool) -> None:
    taken = [e for e in ENTRIES if (out_dir / e).exists()]
    if taken and not force:
        raise SampleExists("already holds {taken}; pass {force} to replace them or choose "
                           "another {out_dir}", file=out_dir, taken=", ".join(taken))


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
        rl_gen = torch.Generator().manual_seed(2 * cfg.seed + 1)
        model = build_model(preset.model, len(tok), bos_id=tok.bos_token_id,
                            eos_id=tok.eos_token_id, pad_id=tok.pad_token_id)
        steps = preset.train.sft_steps
        losses = sft(model, task, preset.train, train_gen,
                     on_step=lambda s, _: progress("sft", s + 1, steps))
        seconds["sft"] = time.perf_counter() - clock
        rl_stats = _rl(tmp, task, cfg, rl_gen, model, progress)
        seconds["rl"] = time.perf_counter() - clock - sum(seconds.values())
    stats = log_statistics(tmp / "rollouts")
    seconds["statistics"] = time.perf_counter() - clock - sum(seconds.values())
    return SampleResult(out_dir=tmp, stats=stats, rl_steps=rl_stats,
                        sft_loss=sum(losses[-20:]) / max(len(losses[-20:]), 1),
                        seconds=seconds)


def _rl(tmp: Path, task: SortTask, cfg: SampleConfig, gen: torch.Generator, model,
        progress: Progress) -> list[RLStepStats]:
    """The GRPO run; logged steps go to the log, their θ_t (and the last θ) to checkpoints/."""
    train, tok = cfg.preset.train, task.tokenizer
    scratch = tmp / ".engine"  # θ_t of unlogged sync steps: the engine's input, not shipped

    def save(step: int, policy, opt) -> Path | None:
        if step >= train.first_logged:
            directory = tmp / CHECKPOINT.format(step=step)
        elif step == train.engine_step(step):
            directory = scratch / f"step_{step}"
        else:
            return None  # an unlogged step between syncs: nobody reads its θ
        _save_checkpoint(policy, tok, directory)
        if step == train.rl_steps - 1 and opt is not None:
            torch.save(opt.state_dict(), directory / OPTIMIZER_FILE)
        return directory

    path = tmp / LOG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with RolloutWriter(path, rollout_meta(len(tok), cfg)) as writer:
        def log(batch: StepBatch) -> None:
            progress("rl", batch.step + 1, train.rl_steps)
            if batch.step >= train.first_logged:
                first = (batch.step - train.first_logged) * train.rl_prompts
                writer.append(group_rows(task, batch.groups, batch.train, step=batch.step,
                                         first_group=first))
                _link_behavior(tmp, batch.step, train.engine_step(batch.step))
        stats = run_rl(model, task, train, gen, cfg.preset.top_k, save, log)
    shutil.rmtree(scratch, ignore_errors=True)
    return stats


def _link_behavior(root: Path, step: int, engine_step: int) -> None:
    """``behavior/step_<step>`` -> ``../checkpoints/step_<engine_step>`` (relative link)."""
    link = root / BEHAVIOR.format(step=step)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(Path("..") / CHECKPOINT.format(step=engine_step), target_is_directory=True)


def rollout_meta(vocab_size: int, cfg: SampleConfig) -> RolloutMeta:
    """Footer of the sample log; paths are relative to ``rollouts/``.

    ``logprobs_mode=raw``: the log-probs come from ``output_scores``, but with temperature
    1 and no truncation no processor runs, so they are the raw model log-probs. Step t's
    rollouts come from the engine's bf16 copy of θ at its last sync step,
    ``../behavior/step_{step}`` (a link to that checkpoint).
    """
    train = cfg.preset.train
    ckpt = "../" + CHECKPOINT
    first = ckpt.format(step=train.first_logged)
    last = ckpt.format(step=train.rl_steps - 1)
    return RolloutMeta(
        vocab_size=vocab_size, top_k=cfg.preset.top_k, topk_convention="plus_sampled",
        logprobs_mode="raw", tokenizer=first, temperature=1.0, top_p=1.0,
        top_k_sampling=0,
        extra={"behavior_checkpoint": "../" + BEHAVIOR, "behavior_dtype": "bfloat16",
               "policy_checkpoint": ckpt,
               "next_checkpoint": ckpt.replace("{step}", "{next_step}"),
               "policy_dtype": "float32", "trainer_mask": train.trainer_mask,
               "trainer_delta_kl": str(train.delta_kl),
               "optimizer_state": f"{last}/{OPTIMIZER_FILE}",
               "generated_by": f"pdm-replay make-sample --seed {cfg.seed} --size {cfg.size}"})
