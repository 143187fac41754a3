"""Pieces of a replay's ``manifest.json`` and footers that describe the run (no model work).

Examples
--------
>>> from pdm_replay.replay.sweep import Sweep
>>> sorted(json.loads(variant_footer(None, Sweep(delta_kl=(0.05, 0.15)))
...                   ["pdm_replay.mask_variants"]))[:2]
['dppo_binary_kl@0.05', 'dppo_binary_kl@0.15']
"""

from __future__ import annotations

import json
import platform
from typing import Sequence

import torch

from pdm_replay.errors import FieldError
from pdm_replay.names import ACTUAL
from pdm_replay.replay.models import StepModels
from pdm_replay.replay.seeds import SeedPlan
from pdm_replay.replay.sweep import Sweep, trainer_variant, variants
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


def run_warnings(meta: RolloutMeta, plan: SeedPlan, seeds: int, per_step: bool, *,
                 dtype: str, attribution: bool, fsdp: bool) -> list[str]:
    """What the manifest (and the CLI's summary) warns about this run's inputs: the log
    (``meta``), seeds ``0..seeds-1`` of ``plan``, models per step or not, the weights'
    ``dtype``, attribution asked for under ``fsdp``."""
    out = []
    if meta.truncated_sampler:
        out.append(f"the sampler truncated (top_p={meta.top_p}, top_k={meta.top_k_sampling}):"
                   " the logged µ tail is not the model's tail")
    if meta.logprobs_mode == "processed":
        out.append("logprobs_mode=processed: logged µ are post-processing log-probs")
    if dtype != "float32":
        out.append(f"the simulated step updates {dtype} weights: steps below the "
                   f"{dtype} resolution vanish; use --dtype float32 for faithful ΔD")
    if attribution and fsdp:
        out.append("--fsdp: the attribution columns (delta_kl_lin ...) stay null: their "
                   "forward-mode pass needs the unsharded model")
    if len(plan.distinct_steps) > 1 and not per_step:
        out.append(f"the log spans {len(plan.distinct_steps)} trainer steps and every row is "
                   "replayed against one checkpoint: pass --checkpoint (and "
                   "--next-checkpoint) as a {step} template to replay each step's rows "
                   "against its own checkpoint")
    if plan.allow_overlap and plan.overlap(seeds)["overlap"]:
        out.append(f"--allow-overlap: seeds share samples (only {plan.capacity} fit "
                   "disjointly); per-seed statistics are not independent")
    return out


def variant_footer(masks: Sequence[str] | None, sweep: Sweep) -> dict[str, str]:
    """tokens footer ``pdm_replay.mask_variants``: each swept variant of the recorded
    ``masks`` (None: every mask), its mask and values."""
    swept = {n: v.describe() for n, v in variants(masks, sweep).items() if v.values}
    return {VARIANTS_KEY: json.dumps(swept)} if swept else {}


def plan_doc(plan: SeedPlan, seeds: int, first: StepModels, *, actual: bool,
             update_masks: Sequence[str], trainer_mask: str | None, sweep: Sweep) -> dict:
    """Manifest fields of the seed plan (seeds ``0..seeds-1``), the updates' names (the
    trainer's ``actual`` one first when there is one) and the trainer's state."""
    doc = {"seed_plan": {"by": plan.by, "batch_size": plan.batch_size,
                         "allow_overlap": plan.allow_overlap,
                         "steps": [plan.step_of(s) for s in range(seeds)]
                         if plan.by == "step" else None},
           "seed_overlap": plan.overlap(seeds),
           "updates": ([ACTUAL] if actual else []) + list(variants(update_masks, sweep)),
           "mask_variants": {n: v.describe() for n, v in
                             variants(None, sweep).items() if v.values},
           "trainer_mask": (trainer_variant(trainer_mask, sweep).describe()
                            if trainer_mask else None)}
    if first.trainer_optimizer is not None:
        doc["optimizer_state"] = first.trainer_optimizer.describe()
    return doc
