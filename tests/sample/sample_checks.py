"""Independent re-computation of a sample log's log-probs with plain transformers.

Kept apart from ``pdm_replay.sample`` on purpose: the tests recompute what a trainer or an
engine would, without the generator's own helpers.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch
from transformers import AutoModelForCausalLM


def load(model_dir: Path, dtype: torch.dtype):
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), use_safetensors=True,
                                                 dtype=dtype, local_files_only=True)
    return model.eval()


@torch.no_grad()
def response_logits(model, row: dict) -> torch.Tensor:
    """Float32 copy of the logits that predict each response token, ``(T, V)``."""
    prompt, resp = row["prompt_ids"], row["response_ids"]
    logits = model(input_ids=torch.tensor([prompt + resp])).logits[0].float()
    return logits[len(prompt) - 1: len(prompt) - 1 + len(resp)]


def recompute(model, row: dict) -> tuple[np.ndarray, list[np.ndarray]]:
    """log p(k_t) ``(T,)`` and log p at the logged top-K ids of each position."""
    resp = row["response_ids"]
    logp = torch.log_softmax(response_logits(model, row), -1)
    at_k = logp[torch.arange(len(resp)), torch.tensor(resp)].numpy()
    at_top = [logp[t, torch.tensor(top)].numpy() for t, top in enumerate(row["topk_ids"])]
    return at_k, at_top


def logit_ulps(model, samples: list[dict], dtype: torch.dtype = torch.bfloat16,
               logged_k: str | None = None, logged_top: str = "topk_logprobs") -> float:
    """Largest |recomputed − logged| log-prob over ``samples``, in ulps of ``dtype``.

    A float with ``m`` mantissa bits knows a logit near ``z`` only to
    ``2^(floor(log2 |z|) − m)`` (bf16: m = 7, float32: m = 23); log-softmax inherits the
    error of the largest logit, so that ulp is the unit in which two kernel paths (another
    CPU's SIMD width, ``ATEN_CPU_CAPABILITY=default``) can disagree. ``logged_k`` adds the
    sampled-token column to the comparison.
    """
    mantissa = round(-math.log2(torch.finfo(dtype).eps))  # bf16: 7, float32: 23
    worst = 0.0
    for row in samples:
        z = response_logits(model, row)
        logp = torch.log_softmax(z, -1)
        ulp = 2.0 ** (torch.floor(torch.log2(z.abs().max(-1).values)) - mantissa)  # (T,)
        for t, top in enumerate(row["topk_ids"]):
            err = (logp[t, torch.tensor(top)] - torch.tensor(row[logged_top][t])).abs()
            worst = max(worst, float(err.max() / ulp[t]))
        if logged_k is not None:
            at_k = logp[torch.arange(len(row["response_ids"])), torch.tensor(row["response_ids"])]
            err = (at_k - torch.tensor(row[logged_k])).abs() / ulp
            worst = max(worst, float(err.max()))
    return worst


def bf16_ulps(model, samples: list[dict]) -> float:
    """Largest |recomputed − logged| behavior top-K log-prob, in bf16 ulps (see logit_ulps)."""
    return logit_ulps(model, samples, torch.bfloat16)


def rows(log: Path, limit: int | None = None) -> list[dict]:
    """The first ``limit`` rows (all when None) of a log, as dicts."""
    files = sorted(Path(log).rglob("*.parquet")) if Path(log).is_dir() else [Path(log)]
    out: list[dict] = []
    for f in files:
        table = pq.read_table(f)
        left = None if limit is None else limit - len(out)
        out.extend(table.slice(0, left).to_pylist() if left is not None else table.to_pylist())
    return out


def max_abs_diff(model, samples: list[dict], logged_k: str, logged_top: str
                 ) -> tuple[float, float]:
    """Largest |recomputed − logged| at k and over the top-K entries, over ``samples``."""
    worst_k = worst_top = 0.0
    for row in samples:
        at_k, at_top = recompute(model, row)
        worst_k = max(worst_k, float(np.abs(at_k - np.asarray(row[logged_k])).max()))
        for t, lp in enumerate(at_top):
            worst_top = max(worst_top,
                            float(np.abs(lp - np.asarray(row[logged_top][t])).max()))
    return worst_k, worst_top
