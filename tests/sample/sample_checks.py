"""Independent re-computation of a sample log's log-probs with plain transformers.

Kept apart from ``pdm_replay.sample`` on purpose: the tests recompute what a trainer or an
engine would, without the generator's own helpers.
"""

from __future__ import annotations

import math
from pathlib import Path

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


@torch.no_grad()
def decoded_logits(model, row: dict) -> torch.Tensor:
    """Float32 copy of the logits of each response position the way an engine decodes,
    ``(T, V)``: the prompt in one pass, then one token at a time through the KV cache.

    A bf16 model's full forward of prompt + response rounds differently (other shapes,
    attention over a whole block): with logits near 30 (a bf16 ulp of 0.125) it differs
    from incremental decoding by up to 3 nats at a few positions of the shipped sample.
    """
    prompt, resp = row["prompt_ids"], row["response_ids"]
    out = model(input_ids=torch.tensor([prompt]), use_cache=True)
    logits = [out.logits[0, -1].float()]
    for token in resp[:-1]:
        out = model(input_ids=torch.tensor([[token]]), cache=out.cache, use_cache=True)
        logits.append(out.logits[0, -1].float())
    return torch.stack(logits)


def logit_ulps(model, samples: list[dict], dtype: torch.dtype = torch.bfloat16,
               logged_k: str | None = None, logged_top: str = "topk_logprobs",
               logits_fn=response_logits) -> float:
    """Largest |recomputed − logged| log-prob over ``samples``, in ulps of ``dtype``.

    A float with ``m`` mantissa bits knows a logit near ``z`` only to
    ``2^(floor(log2 |z|) − m)`` (bf16: m = 7, float32: m = 23); log-softmax inherits the
    error of the largest logit, so that ulp is the unit in which two kernel paths (another
    CPU's SIMD width, ``ATEN_CPU_CAPABILITY=default``) can disagree. ``logged_k`` adds the
    sampled-token column to the comparison; ``logits_fn`` computes the ``(T, V)`` logits
    (:func:`response_logits`: a trainer's full forward; :func:`decoded_logits`: an engine's).
    """
    mantissa = round(-math.log2(torch.finfo(dtype).eps))  # bf16: 7, float32: 23
    worst = 0.0
    for row in samples:
        z = logits_fn(model, row)
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
    """Largest |recomputed − logged| behavior top-K log-prob, in bf16 ulps (see logit_ulps),
    recomputed the way the engine decoded (:func:`decoded_logits`)."""
    return logit_ulps(model, samples, torch.bfloat16, logits_fn=decoded_logits)


def rows(log: Path, limit: int | None = None) -> list[dict]:
    """The first ``limit`` rows (all when None) of a log, as dicts."""
    files = sorted(Path(log).rglob("*.parquet")) if Path(log).is_dir() else [Path(log)]
    out: list[dict] = []
    for f in files:
        table = pq.read_table(f)
        left = None if limit is None else limit - len(out)
        out.extend(table.slice(0, left).to_pylist() if left is not None else table.to_pylist())
    return out


def rows_by_step(log: Path) -> dict[int, list[dict]]:
    """Every row of a log, grouped by its logged ``step``."""
    out: dict[int, list[dict]] = {}
    for row in rows(log):
        out.setdefault(int(row["step"]), []).append(row)
    return out


def replayed_trainer_update(model_dir: Path, optimizer_file: Path | None, samples: list[dict],
                            keep: dict[tuple[str, int], bool], lr: float = 1e-3
                            ) -> list[torch.Tensor]:
    """θ_(t+1) from θ_t, the saved AdamW state and the logged batch, recomputed plainly.

    The trainer's loss −Σ keep·(π_θ(k)/µ(k))·Â / N_tokens (SPEC §6) over every row of the
    step, one forward per row (gradients summed), µ(k) the logged ``behavior_logprobs``,
    ``keep`` the trainer mask's decision per (sample_id, pos); then ``torch.optim.AdamW``
    with the saved state_dict (its lr, betas, eps, weight decay; None: a fresh AdamW of
    ``lr`` without weight decay) takes one step.
    Returns the parameters after the step, in ``model.parameters()`` order.
    """
    model = load(model_dir, torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    if optimizer_file is not None:
        opt.load_state_dict(torch.load(optimizer_file, weights_only=True))
    n = sum(len(r["response_ids"]) for r in samples)
    opt.zero_grad()
    for row in samples:
        prompt, resp = row["prompt_ids"], row["response_ids"]
        logits = model(input_ids=torch.tensor([prompt + resp])).logits[0].float()
        logp = torch.log_softmax(logits[len(prompt) - 1: len(prompt) - 1 + len(resp)], -1)
        lp = logp[torch.arange(len(resp)), torch.tensor(resp)]
        w = torch.tensor([keep[(row["sample_id"], t)] * a
                          for t, a in enumerate(row["advantages"])])
        ratio = torch.exp(lp - torch.tensor(row["behavior_logprobs"]))
        (-(ratio * w).sum() / n).backward()
    opt.step()
    return [p.detach() for p in model.parameters()]


def update_error_in_lr(after: list[torch.Tensor], want_dir: Path, before_dir: Path,
                       lr: float) -> tuple[float, float]:
    """Largest |recomputed − saved| θ_(t+1) coordinate and largest |θ_(t+1) − θ_t|, both
    in units of ``lr`` (an Adam step moves each coordinate by about lr at most)."""
    want = list(load(want_dir, torch.float32).parameters())
    before = list(load(before_dir, torch.float32).parameters())
    err = max(float((a - w.detach()).abs().max()) for a, w in zip(after, want))
    step = max(float((w - b).detach().abs().max()) for w, b in zip(want, before))
    return err / lr, step / lr
