"""Pieces of a replay's ``manifest.json`` and footers that describe the run (no model work).

Examples
--------
>>> from pathlib import Path
>>> from pdm_replay.replay.config import ReplayConfig
>>> from pdm_replay.replay.sweep import Sweep
>>> cfg = ReplayConfig(log=Path("l"), checkpoint=Path("c"), out=Path("o"),
...                    sweep=Sweep(delta_kl=(0.05, 0.15)))
>>> sorted(json.loads(variant_footer(cfg)["pdm_replay.mask_variants"]))[:2]
['dppo_binary_kl@0.05', 'dppo_binary_kl@0.15']
"""

from __future__ import annotations

import json
import platform

import torch

from pdm_replay.errors import FieldError
from pdm_replay.replay.actual import ACTUAL
from pdm_replay.replay.config import ReplayConfig
from pdm_replay.replay.models import StepModels
from pdm_replay.replay.seeds import SeedPlan
from pdm_replay.replay.sweep import trainer_variant, variants
from pdm_replay.schema import VARIANTS_KEY, RolloutMeta



def device_info(device: str) -> dict:
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise FieldError("{device} {got}: CUDA is not available on this machine",
                             got=device)
        name = torch.cuda.get_device_name(dev)
    else:
        name = platform.processor() or platform.machine()
    return {"device": device, "name": name, "torch_threads": torch.get_num_threads()}


def run_warnings(cfg: ReplayConfig, meta: RolloutMeta, plan: SeedPlan,
                 per_step: bool) -> list[str]:
    """What the manifest (and the CLI's summary) warns about this run's inputs."""
    out = []
    if meta.truncated_sampler:
        out.append(f"the sampler truncated (top_p={meta.top_p}, top_k={meta.top_k_sampling}):"
                   " the logged µ tail is not the model's tail")
    if meta.logprobs_mode == "processed":
        out.append("logprobs_mode=processed: logged µ are post-processing log-probs")
    if cfg.dtype != "float32":
        out.append(f"the simulated step updates {cfg.dtype} weights: steps below the "
                   f"{cfg.dtype} resolution vanish; use --dtype float32 for faithful ΔD")
    if cfg.attribution and cfg.fsdp:
        out.append("--fsdp: the attribution columns (delta_kl_lin ...) stay null: their "
                   "forward-mode pass needs the unsharded model")
    if len(plan.distinct_steps) > 1 and not per_step:
        out.append(f"the log spans {len(plan.distinct_steps)} trainer steps and every row is "
                   "replayed against one checkpoint: pass --checkpoint (and "
                   "--next-checkpoint) as a {step} template to replay each step's rows "
                   "against its own checkpoint")
    if cfg.allow_overlap and plan.overlap(cfg.seeds)["overlap"]:
        out.append(f"--allow-overlap: seeds share samples (only {plan.capacity} fit "
                   "disjointly); per-seed statistics are not independent")
    return out


def variant_footer(cfg: ReplayConfig) -> dict[str, str]:
    """tokens footer ``pdm_replay.mask_variants``: each swept variant's mask and values."""
    swept = {n: v.describe() for n, v in variants(cfg.masks, cfg.sweep).items() if v.values}
    return {VARIANTS_KEY: json.dumps(swept)} if swept else {}


def plan_doc(cfg: ReplayConfig, plan: SeedPlan, first: StepModels) -> dict:
    """Manifest fields of the seed plan, the updates' names and the trainer's state."""
    doc = {"seed_plan": {"by": cfg.seed_by, "batch_size": cfg.batch_size,
                         "allow_overlap": cfg.allow_overlap,
                         "steps": [plan.step_of(s) for s in range(cfg.seeds)]
                         if cfg.seed_by == "step" else None},
           "seed_overlap": plan.overlap(cfg.seeds),
           "updates": ([ACTUAL] if cfg.next_checkpoint else [])
           + list(variants(cfg.update_masks, cfg.sweep)),
           "mask_variants": {n: v.describe() for n, v in
                             variants(None, cfg.sweep).items() if v.values},
           "trainer_mask": (trainer_variant(cfg.trainer_mask, cfg.sweep).describe()
                            if cfg.trainer_mask else None)}
    if first.trainer_optimizer is not None:
        doc["optimizer_state"] = first.trainer_optimizer.describe()
    return doc
