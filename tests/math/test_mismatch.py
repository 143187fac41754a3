""":mod:`pdm_replay.math.mismatch` on flat tokens equals verl 0.9.1's and TRL 1.16's own code
on the same batch padded to ``(B, T)`` (tests/trainer_oracles.py), for random batches:
ragged responses, log-ratios up to ±8 per token (so sequence sums pass verl's ±20 clamp
and TRL's caps), every verl IS level and every TRL IS mode.

Tolerance: both sides run in float64 on the same values; sums of ≤ 8·12 terms in another
order differ by ≤ 96·2⁻⁵² relative, exp(2·Σ) (chi2_seq) doubles it: rel 1e-12 covers
both. verl's response-level IS fractions are ``.float().mean()`` (float32 whatever the
input): rel 2⁻²³ there. ``rollout_is_std`` is verl's one-pass √(E[w²] − E[w]²): near a
zero variance both sides return rounding noise of E[w²] ≤ cap², so their difference is
bounded by √|Δvar| ≤ √(64 ulps of cap²) = 8·cap·2⁻²⁶ (absolute). TRL's ``clip_ratio``
indicators are ``.float()``: where it sums them alone (its ``(B, 1)`` branch, taken when
T = 1) the fraction is a float32 division, rel 2⁻²³.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pdm_replay.math.mismatch import (is_metrics, keep_metrics, offpolicy_metrics,
                                      sampling_metrics)
from pdm_replay.math.segments import Segments
from trainer_oracles import trl_clip_ratio, trl_sampling, verl_metrics

pytest.importorskip("verl", reason="verl is not installed")
pytest.importorskip("trl", reason="trl is not installed")

REL = 1e-12
F32_FRACTION = ("ratio_fraction_high", "ratio_fraction_low", "seq_fraction_high",
                "seq_fraction_low")


@st.composite
def batches(draw: st.DrawFn) -> tuple[torch.Tensor, ...]:
    """log π, log µ, Â and the response mask ``(B, T)`` (each response's valid tokens first,
    at least one), and the same as flat valid tokens with their Segments."""
    b, t = draw(st.integers(1, 8)), draw(st.integers(1, 12))
    lengths = draw(st.lists(st.integers(1, t), min_size=b, max_size=b))
    seed = draw(st.integers(0, 2 ** 31 - 1))
    scale = draw(st.sampled_from([0.05, 1.0, 8.0]))
    gen = torch.Generator().manual_seed(seed)
    lb = -torch.rand(b, t, generator=gen, dtype=torch.float64) * 6
    lt = lb + scale * torch.randn(b, t, generator=gen, dtype=torch.float64)
    adv = torch.randn(b, 1, generator=gen, dtype=torch.float64).round().expand(b, t).clone()
    mask = (torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]).double()
    lt, lb = lt * mask, lb * mask
    return lt, lb, adv, mask


def _flat(lt: torch.Tensor, lb: torch.Tensor, mask: torch.Tensor
          ) -> tuple[torch.Tensor, torch.Tensor, Segments]:
    valid = mask.bool()
    index = torch.arange(mask.shape[0])[:, None].expand_as(mask)[valid]
    return lt[valid], lb[valid], Segments(index, torch.ones_like(index, dtype=torch.bool))


def _atol(lt: torch.Tensor, lb: torch.Tensor, cap: float) -> float:
    """Differences of near-equal means (``log_ppl_diff``, a std near 0) cancel: their
    rounding is absolute, ≤ 96 ulps of the largest operand M (|log p| or a weight ≤ cap),
    96·2⁻⁵²·M ≈ 2e-14·M; 1e-12·M leaves a margin of 50."""
    return 1e-12 * max(1.0, cap, float(lt.abs().max()), float(lb.abs().max()))


@settings(max_examples=40, deadline=None)
@given(batch=batches(), level=st.sampled_from(["token", "sequence"]),
       cap=st.sampled_from([2.0, 5.0]))
def test_verl_offpolicy_and_is_metrics(batch: tuple[torch.Tensor, ...], level: str,
                                       cap: float) -> None:
    lt, lb, _, mask = batch
    ref = verl_metrics(lt, lb, mask, level=level, cap=cap, rs={})
    t, b, seqs = _flat(lt, lb, mask)
    ours = offpolicy_metrics(t, b, seqs) | is_metrics(t, b, seqs, level=level, cap=cap)
    assert set(ref) == {f"rollout_corr/{k}" for k in ours}
    for key, value in ours.items():
        f32 = key.endswith(F32_FRACTION) and (level == "sequence" or "seq" in key)
        atol = 8 * cap * 2.0 ** -26 if key == "rollout_is_std" else _atol(lt, lb, cap)
        assert value == pytest.approx(ref[f"rollout_corr/{key}"],
                                      rel=2.0 ** -23 if f32 else REL, abs=atol), key


@settings(max_examples=40, deadline=None)
@given(batch=batches(), mode=st.sampled_from(["token_truncate", "token_mask",
                                               "sequence_truncate", "sequence_mask"]),
       caps=st.sampled_from([(3.0, None), (2.0, 0.5), (None, 0.5)]))
def test_trl_sampling_metrics(batch: tuple[torch.Tensor, ...], mode: str,
                              caps: tuple[float | None, float | None]) -> None:
    lt, lb, _, mask = batch
    if mode.endswith("truncate") and caps[0] is None:
        return  # torch.clamp needs a bound; TRL's truncate modes need clip_max
    ref = trl_sampling(lt, lb, mask, mode=mode, cap_max=caps[0], cap_min=caps[1])
    t, b, seqs = _flat(lt, lb, mask)
    ours = sampling_metrics(t, b, seqs, mode=mode, cap_max=caps[0], cap_min=caps[1])
    assert set(ref) == {f"sampling/{k}" for k in ours}
    for key, value in ours.items():
        assert value == pytest.approx(ref[f"sampling/{key}"], rel=REL,
                                      abs=_atol(lt, lb, 1.0)), key


@settings(max_examples=30, deadline=None)
@given(batch=batches(), eps=st.sampled_from([(0.2, 0.2), (0.2, 0.28), (0.5, 1.0)]))
def test_keep_metrics_clip_ratio_is_trls(batch: tuple[torch.Tensor, ...],
                                         eps: tuple[float, float]) -> None:
    """keep_metrics on the ratio band [1 − ε_low, 1 + ε_high] gives GRPOTrainer's
    clip_ratio/*; a keep that drops exactly TRL's clipped tokens splits into them."""
    lt, lb, adv, mask = batch
    ref = trl_clip_ratio(lt, lb, adv, mask, eps_low=eps[0], eps_high=eps[1])
    valid = mask.bool()
    ratio, a = (lt - lb).exp()[valid], adv[valid]
    clipped = ((ratio < 1 - eps[0]) & (a < 0)) | ((ratio > 1 + eps[1]) & (a > 0))
    ours = keep_metrics(~clipped, a, ratio, 1 - eps[0], 1 + eps[1])
    for key in ref:  # TRL's indicators are float32 (`.float()`): one float32 division
        assert ours[key] == pytest.approx(ref[key], rel=2.0 ** -23, abs=0), key
    assert ours["masked_fraction"] == ours["clip_ratio/region_mean"]
    assert ours["masked_fraction_adv_neg"] == ours["clip_ratio/low_mean"]
    assert math.isclose(ours["out_of_region_fraction"], ours["out_of_region_kept_fraction"]
                        + ours["out_of_region_dropped_fraction"], abs_tol=1e-15)
