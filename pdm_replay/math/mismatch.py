"""Training–inference mismatch metrics of one trainer step, by the trainers' own definitions
(pure torch, float64, flat tokens).

One logged step is the batch: ``(N,)`` flat tokens of its responses (the loss tokens only,
so verl's ``response_mask`` and TRL's ``completion_mask`` are all ones over them) and
:class:`~pdm_replay.math.segments.Segments` saying which response each token belongs to.
Every value is the one the trainer's function gives on the same ``(B, T)`` batch padded
with that mask; the definitions were read from (and are tested against) the installed
code:

- verl 0.9.1 ``verl/trainer/ppo/rollout_corr_helper.py``: ``compute_offpolicy_metrics``
  (:func:`offpolicy_metrics`) and ``compute_is_metrics`` fed by
  ``compute_rollout_correction_weights`` in TIS mode (:func:`is_metrics`). Its
  ``verl_F.masked_mean`` divides by ``count + 1e-8`` (:data:`VERL_MEAN_EPS`), its
  exponentials clamp the log ratio to ±20 (:data:`SAFETY_BOUND`) where verl clamps them
  and nowhere else (``k3_kl`` is unclamped there, so it is here).
- TRL 1.16 ``trl/trainer/grpo_trainer.py`` ``GRPOTrainer._generate_and_score_completions``
  (the ``sampling/*`` block, :func:`sampling_metrics`): ``|old − sampling|`` log-prob
  difference and the vLLM importance-sampling ratio after its mode's truncation/masking.

Examples
--------
Two responses, log r = (0.1, −0.1 | 0.2): verl's ``kl`` is the token mean of
log µ − log π = (−0.1 + 0.1 − 0.2)/3; TRL's max logp difference is 0.2.

>>> import torch
>>> from pdm_replay.math.segments import Segments
>>> seqs = Segments(torch.tensor([0, 0, 1]), torch.ones(3, dtype=torch.bool))
>>> b = torch.zeros(3, dtype=torch.float64)
>>> t = torch.tensor([0.1, -0.1, 0.2], dtype=torch.float64)
>>> m = offpolicy_metrics(t - 1, b - 1, seqs)
>>> round(m["kl"], 6), round(sampling_metrics(t, b, seqs)["sampling_logp_difference/max"], 6)
(-0.066667, 0.2)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from pdm_replay.math.segments import Segments

SAFETY_BOUND = 20.0  # verl rollout_corr_helper.SAFETY_BOUND: exp() arguments clamped to ±20
VERL_MEAN_EPS = 1e-8  # verl utils/torch_functional.masked_mean: sum / (count + 1e-8)
TRL_IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def _per_sequence(values: Tensor, seqs: Segments) -> tuple[Tensor, Tensor]:
    """Per-response sum and verl ``masked_mean(..., axis=-1)`` of ``values`` ``(N,)``: two
    ``(B,)`` tensors (B responses, in order of first appearance in ``seqs``)."""
    v = torch.where(seqs.valid, values.double(), torch.zeros_like(values, dtype=torch.float64))
    total = torch.zeros(seqs.count.shape[0], dtype=torch.float64).index_add_(0, seqs.inverse, v)
    return total, total / (seqs.count + VERL_MEAN_EPS)


def verl_masked_mean(values: Tensor, seqs: Segments) -> Tensor:
    """verl ``masked_mean(values, response_mask)`` over every valid token (a 0-dim tensor):
    the sum over valid tokens / (their count + 1e-8)."""
    v = torch.where(seqs.valid, values.double(), torch.zeros_like(values, dtype=torch.float64))
    return v.sum() / (seqs.valid.sum().double() + VERL_MEAN_EPS)


def offpolicy_metrics(logp_train: Tensor, logp_behavior: Tensor,
                      seqs: Segments) -> dict[str, float]:
    """verl ``compute_offpolicy_metrics(old_log_prob=π, rollout_log_prob=µ)`` on the batch:
    its 13 keys, unprefixed. ``logp_train`` / ``logp_behavior`` are log π(k) / log µ(k)
    ``(N,)``."""
    lt, lb = logp_train.double(), logp_behavior.double()
    log_ratio = lt - lb
    _, mean_t = _per_sequence(lt, seqs)
    _, mean_b = _per_sequence(lb, seqs)
    sum_lr, _ = _per_sequence(log_ratio, seqs)
    diff = mean_b - mean_t
    rho = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND).exp()
    out = {
        "training_ppl": (-mean_t).exp().mean(), "training_log_ppl": (-mean_t).mean(),
        "kl": verl_masked_mean(lb - lt, seqs),
        "k3_kl": verl_masked_mean(log_ratio.exp() - log_ratio - 1, seqs),
        "rollout_ppl": (-mean_b).exp().mean(), "rollout_log_ppl": (-mean_b).mean(),
        "log_ppl_diff": diff.mean(), "log_ppl_abs_diff": diff.abs().mean(),
        "log_ppl_diff_max": diff.max(), "log_ppl_diff_min": diff.min(),
        "ppl_ratio": diff.exp().mean(),
        "chi2_token": verl_masked_mean(rho.square(), seqs) - 1.0,
        "chi2_seq": (2.0 * sum_lr.clamp(-SAFETY_BOUND, SAFETY_BOUND)).exp().mean() - 1.0,
    }
    return {k: float(v) for k, v in out.items()}


def _f32_log(x: float) -> float:
    """log x as verl forms its IS log thresholds: ``torch.log(torch.tensor(x))``, float32."""
    return float(torch.log(torch.tensor(x, dtype=torch.float32)))


def is_metrics(logp_train: Tensor, logp_behavior: Tensor, seqs: Segments, *, level: str,
               cap: float) -> dict[str, float]:
    """verl ``compute_rollout_correction_weights(rollout_is=level, rollout_is_threshold=cap)``'s
    metrics (TIS: weights clamped above at ``cap``, lower bound 1/cap for the fractions),
    unprefixed ``rollout_is_*`` keys. ``level``: ``token`` | ``sequence``."""
    if level not in ("token", "sequence"):
        raise ValueError(f"rollout_is level {level!r}: expected token or sequence")
    log_ratio = logp_train.double() - logp_behavior.double()
    low = 1.0 / cap
    if level == "token":
        raw = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND).exp()
        w = raw.clamp(max=cap)
        out = {"rollout_is_mean": verl_masked_mean(w, seqs),
               "rollout_is_ratio_fraction_high": verl_masked_mean((raw > cap).double(), seqs),
               "rollout_is_ratio_fraction_low": verl_masked_mean((raw < low).double(), seqs),
               "rollout_is_max": w[seqs.valid].max(), "rollout_is_min": w[seqs.valid].min()}
    else:
        sum_lr, _ = _per_sequence(log_ratio, seqs)
        raw = sum_lr.clamp(-SAFETY_BOUND, SAFETY_BOUND).exp()[seqs.inverse]
        w = raw.clamp(max=cap)
        out = {"rollout_is_max": sum_lr.max().clamp(max=SAFETY_BOUND).exp(),
               "rollout_is_min": sum_lr.min().exp(),
               "rollout_is_mean": verl_masked_mean(w, seqs),
               "rollout_is_ratio_fraction_high": (sum_lr > _f32_log(cap)).double().mean(),
               "rollout_is_ratio_fraction_low": (sum_lr < _f32_log(low)).double().mean()}
    out |= _weight_spread(w, raw, seqs, cap)
    return {k: float(v) for k, v in out.items()}


def _weight_spread(w: Tensor, raw: Tensor, seqs: Segments, cap: float) -> dict[str, Tensor]:
    """The level-independent part of verl ``compute_is_metrics``: std and ESS of the applied
    weights ``w`` ``(N,)``, and the per-response ``rollout_is_seq_*`` statistics (the high /
    low fractions from the raw weights ``raw`` ``(N,)``)."""
    clamped = w.clamp(min=0.0, max=cap)
    mean = verl_masked_mean(clamped, seqs)
    var = verl_masked_mean(clamped.square(), seqs) - mean.square()
    n = int(seqs.valid.sum())
    std = var.clamp(min=0.0).sqrt() if n > 1 else torch.zeros((), dtype=torch.float64)
    ess = 1.0 / verl_masked_mean((clamped / (mean + VERL_MEAN_EPS)).square(), seqs)
    _, seq_w = _per_sequence(w, seqs)
    _, seq_raw = _per_sequence(raw, seqs)
    seq_std = seq_w.std() if seq_w.numel() > 1 else torch.zeros((), dtype=torch.float64)
    return {"rollout_is_std": std, "rollout_is_eff_sample_size": ess,
            "rollout_is_seq_mean": seq_w.mean(), "rollout_is_seq_std": seq_std,
            "rollout_is_seq_max": seq_w.max(), "rollout_is_seq_min": seq_w.min(),
            "rollout_is_seq_max_deviation": (seq_w - 1.0).abs().max(),
            "rollout_is_seq_fraction_high": (seq_raw > cap).double().mean(),
            "rollout_is_seq_fraction_low": (seq_raw < 1.0 / cap).double().mean()}


def sampling_metrics(logp_train: Tensor, logp_behavior: Tensor, seqs: Segments, *,
                     mode: str = "sequence_mask", cap_max: float | None = 3.0,
                     cap_min: float | None = None) -> dict[str, float]:
    """TRL ``GRPOTrainer``'s ``sampling/*`` metrics (unprefixed) with
    ``vllm_importance_sampling_mode=mode`` and its clip bounds (GRPOConfig defaults:
    ``sequence_mask``, C_max 3.0, no C_min). ``old_per_token_logps`` is π, the sampling
    log-probs µ; NaN log-probs count as a zero difference in the ratio and are left out of
    the difference statistics, as TRL does."""
    if mode not in TRL_IS_MODES:
        raise ValueError(f"vllm_importance_sampling_mode {mode!r}: expected one of "
                         f"{', '.join(TRL_IS_MODES)}")
    diff = logp_train.double() - logp_behavior.double()
    delta = diff.abs()[seqs.valid & ~diff.isnan()]
    zero = torch.zeros((), dtype=torch.float64)
    diff = torch.nan_to_num(torch.where(seqs.valid, diff, zero), nan=0.0)
    per = _per_sequence(diff, seqs)[0] if mode.startswith("sequence") else diff[seqs.valid]
    ratio = per.exp()
    lo = -math.inf if cap_min is None else cap_min
    hi = math.inf if cap_max is None else cap_max
    if mode.endswith("truncate"):
        ratio = ratio.clamp(min=cap_min, max=cap_max)
    else:
        ratio = ratio.masked_fill((ratio < lo) | (ratio > hi), 0.0)
    stats = {"sampling_logp_difference/mean": delta.mean() if delta.numel() else zero,
             "sampling_logp_difference/max": delta.max() if delta.numel() else zero}
    for name, fn in (("min", torch.min), ("mean", torch.mean), ("max", torch.max)):
        stats[f"importance_sampling_ratio/{name}"] = fn(ratio) if ratio.numel() else zero
    return {k: float(v) for k, v in stats.items()}


def topk_metrics(kl_topk: Tensor, tv_topk: Tensor, deltas: dict[str, list[float]],
                 ) -> dict[str, float]:
    """What only top-K logs allow: mean and 99th percentile (linear interpolation) of the
    top-K KL and TV ``(N,)`` over their finite values, and the share of all tokens out of
    region (``D > δ``; NaN never is) at each δ of ``deltas`` (``{"kl": [...], "tv": [...]}``).
    Keys ``kl_topk_mean``, ``kl_topk_p99``, ``kl_topk_out_of_region@<δ>``, same for tv."""
    out: dict[str, float] = {}
    for family, d in (("kl", kl_topk.double()), ("tv", tv_topk.double())):
        finite = d[d.isfinite()]
        out[f"{family}_topk_mean"] = float(finite.mean()) if finite.numel() else math.nan
        out[f"{family}_topk_p99"] = (float(torch.quantile(finite, 0.99)) if finite.numel()
                                     else math.nan)
        for delta in deltas.get(family, []):
            share = float((d > delta).double().mean()) if d.numel() else math.nan
            out[f"{family}_topk_out_of_region@{delta:g}"] = share
    return out


def keep_metrics(keep: Tensor, advantage: Tensor, stat: Tensor | None = None,
                 low: float = -math.inf, high: float = math.inf) -> dict[str, float]:
    """A mask's decisions ``keep`` ``(N,)`` bool over one step's loss tokens, as trainers log
    them: token fractions (of all N) masked, masked with Â > 0 / Â < 0, and, where the mask
    has a per-token region (``stat`` ``(N,)`` outside ``[low, high]``; NaN never is), masked
    below / above it, out of region, out of region kept / dropped, and TRL's ``clip_ratio``
    definitions on that region (``GRPOTrainer._compute_loss``: ``low_mean`` = stat < low with
    Â < 0, ``high_mean`` = stat > high with Â > 0, ``region_mean`` = either)."""
    n = max(keep.numel(), 1)
    a, dropped = advantage.double(), ~keep.bool()

    def share(x: Tensor) -> float:
        return float(x.sum()) / n

    out = {"masked_fraction": share(dropped), "masked_fraction_adv_pos": share(dropped & (a > 0)),
           "masked_fraction_adv_neg": share(dropped & (a < 0))}
    if stat is None:
        return out
    below, above = stat < low, stat > high
    outside = below | above
    low_clip, high_clip = below & (a < 0), above & (a > 0)
    return out | {"masked_fraction_below": share(dropped & below),
                  "masked_fraction_above": share(dropped & above),
                  "out_of_region_fraction": share(outside),
                  "out_of_region_kept_fraction": share(outside & ~dropped),
                  "out_of_region_dropped_fraction": share(outside & dropped),
                  "clip_ratio/low_mean": share(low_clip),
                  "clip_ratio/high_mean": share(high_clip),
                  "clip_ratio/region_mean": share(low_clip | high_clip)}
