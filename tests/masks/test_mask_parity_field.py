"""Parity of the other trainers' shipped masks (issue 37) with their producers.

Called where the producer installs on CPU: verl 0.9.1 (``compute_policy_loss_sapo``,
``compute_policy_loss_geo_mean``, ``compute_rollout_rejection_mask`` with the
``RolloutCorrectionConfig.decoupled_geo_rs`` preset) and TRL 1.16 (``GRPOTrainer._compute_loss``
run on a stand-in trainer object for ``cispo`` and ``sapo``; ``GRPOConfig``'s defaults).
TRL's vLLM IS weights are computed inline in ``_generate_and_score_completions`` (no
function to call), and OpenRLHF (0.11 needs flash-attn to build), slime, AReaL,
open-instruct and prime-rl do not install here: their cases are hand-worked from the
source cited at each test, the arithmetic in comments.
"""

from __future__ import annotations

import math
import types
from collections import defaultdict

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pdm_replay.masks import Thresholds, build_masks
from pdm_replay.math.field_masks import m2po_keep
from pdm_replay.math.metrics import TokenStats, token_stats
from pdm_replay.math.segments import Segments
from pdm_replay.math.support import build_support, reduce_pair

F64 = torch.float64
ULP = 2.0 ** -52


def stats_2d(logp_behavior: torch.Tensor, logp_train: torch.Tensor, adv: torch.Tensor,
             mask: torch.Tensor | None = None) -> tuple[TokenStats, Segments, torch.Tensor]:
    """Binary-support TokenStats of the (B, T) tokens where ``mask``, one response a row."""
    b, t = logp_behavior.shape
    sel = torch.ones(b, t, dtype=torch.bool) if mask is None else mask
    n = int(sel.sum())
    support = build_support(torch.zeros(n, dtype=torch.long), torch.zeros(n, 0, dtype=torch.long))
    s = token_stats(reduce_pair(support, logp_behavior[sel][:, None], logp_train[sel][:, None]),
                    adv.expand(b, t)[sel], 1000)
    rows = torch.arange(b)[:, None].expand(b, t)[sel]
    return s, Segments(rows, torch.ones(n, dtype=torch.bool)), sel


def ratios_case(ratios: list[list[float]], adv: list[float], mu: float = 0.1):
    """Responses of the given token ratios r = π_k/µ_k at µ_k = ``mu``, Â per response."""
    lr = torch.log(torch.tensor(ratios, dtype=F64))
    logp_behavior = torch.full_like(lr, math.log(mu))
    return stats_2d(logp_behavior, logp_behavior + lr, torch.tensor(adv, dtype=F64)[:, None])


def weight_times_ratio(name: str, t: Thresholds, s: TokenStats, seqs: Segments) -> torch.Tensor:
    return build_masks([name], t)[name].weight(s, seqs) * s.ratio


def random_batch(seed: int, b: int = 16, t: int = 12, spread: float = 1.0):
    """(B, T) log µ_k, log π_k (π_k < 1), one Â per response, a padded mask."""
    g = torch.Generator().manual_seed(seed)
    logp_behavior = torch.log(torch.rand(b, t, generator=g, dtype=F64) * 0.88 + 0.02)
    logp_train = torch.minimum(logp_behavior + spread * torch.randn(b, t, generator=g, dtype=F64),
                        torch.full_like(logp_behavior, -1e-3))
    adv = torch.randn(b, 1, generator=g, dtype=F64)
    mask = torch.arange(t)[None, :] < torch.randint(3, t + 1, (b,), generator=g)[:, None]
    return logp_behavior, logp_train, adv, mask


# ------------------------------------------------------------ item 4: verl decoupled_geo_rs


def test_rs_seq_mean_k1_is_verls_decoupled_geo_rs_preset_at_both_edges() -> None:
    rc = pytest.importorskip("verl.trainer.ppo.rollout_corr_helper", reason="verl not installed")
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    preset = RolloutCorrectionConfig.decoupled_geo_rs()
    low, high = (float(x) for x in str(preset.rollout_rs_threshold).split("_"))
    t = Thresholds()
    assert (t.rs_seq_mean_k1_low, t.rs_seq_mean_k1_high) == (low, high)
    # verl keeps iff log(low) <= mean(−log r) <= log(high): the geometric-mean ratio in
    # [1/high, 1/low] = [0.999000999, 1.001001001]. Probe each edge 1e-9 inside and outside
    # in log space (far above the float64 rounding of a 4-token mean, ~1e-19), and a point
    # in (1.001, 1/0.999], which the old symmetric band (C = 1.001) dropped.
    eps = 1e-9
    means = [-math.log(high) + eps, -math.log(high) - eps, -math.log(low) - eps,
             -math.log(low) + eps, math.log(1.0010005), 0.0]
    expect_kept = [True, False, True, False, True, True]
    wiggle = torch.tensor([0.01, -0.01, 0.003, -0.003], dtype=F64)  # sums to 0
    lr = torch.tensor(means, dtype=F64)[:, None] + wiggle[None, :]
    mask = torch.ones_like(lr)
    kept, _ = rc.compute_rollout_rejection_mask(lr, mask, preset.rollout_rs,
                                                preset.rollout_rs_threshold)
    assert (kept[:, 0] == 1).tolist() == expect_kept
    logp_behavior = torch.full_like(lr, math.log(0.3))
    s, seqs, _ = stats_2d(logp_behavior, logp_behavior + lr, torch.ones(len(means), 1, dtype=F64))
    ours = build_masks(["rs_seq_mean_k1"], t)["rs_seq_mean_k1"].keep(s, seqs)
    assert torch.equal(ours, (kept == 1).reshape(-1))


# ---------------------------------------------------------------------------- TRL 1.16


def trl_loss_grad(loss_type: str, logp_behavior, logp_train, adv, mask, eps_high: float) -> torch.Tensor:
    """d loss / d log π of TRL's ``GRPOTrainer._compute_loss`` on a stand-in trainer whose
    forward returns ``logp_train`` and whose old log-probs are µ's (what our r = π/µ means)."""
    trl = pytest.importorskip("trl", reason="trl is not installed")
    b, t = logp_train.shape
    lp = logp_train.clone().requires_grad_(True)
    acc = types.SimpleNamespace(num_processes=1, gather=lambda x: x, reduce=lambda x, **k: x)
    fake = types.SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (lp, torch.zeros(b, t, dtype=F64),
                                                            None),
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, beta=0.0,
        importance_sampling_level="token", loss_type=loss_type, epsilon_high=eps_high,
        epsilon_low=0.2, use_vllm=False, vllm_importance_sampling_correction=False,
        aux_loss_enabled=False, model=types.SimpleNamespace(training=True),
        args=types.SimpleNamespace(delta=None, sapo_temperature_pos=Thresholds().sapo_tau_pos,
                                   sapo_temperature_neg=Thresholds().sapo_tau_neg,
                                   steps_per_generation=1),
        current_gradient_accumulation_steps=1, accelerator=acc, _entropy_bonus_enabled=False,
        _metrics=defaultdict(lambda: defaultdict(list)))
    inputs = dict(prompt_ids=torch.zeros(b, 1, dtype=torch.long),
                  prompt_mask=torch.ones(b, 1, dtype=torch.long),
                  completion_ids=torch.zeros(b, t, dtype=torch.long),
                  completion_mask=mask.long(), advantages=adv[:, 0], old_per_token_logps=logp_behavior,
                  num_items_in_batch=mask.sum().double())
    trl.GRPOTrainer._compute_loss(fake, None, inputs).backward()
    return lp.grad


def test_trl_cispo_is_one_sided_and_matches_trls_loss() -> None:
    logp_behavior, logp_train, adv, mask = random_batch(11, spread=1.5)
    grad = trl_loss_grad("cispo", logp_behavior, logp_train, adv, mask, Thresholds().trl_cispo_cap)
    s, seqs, sel = stats_2d(logp_behavior, logp_train, adv, mask)
    wr = weight_times_ratio("trl_cispo", Thresholds(), s, seqs)
    ours = -wr * s.advantage / int(mask.sum())
    # TRL's −sg(min(r, 5))·Â·log π / N and our −w·r·Â / N: a few float64 roundings, 8 ulps
    torch.testing.assert_close(grad[sel], ours, rtol=8 * ULP, atol=0.0)
    assert int((s.ratio > 5).sum()) > 0 and int((s.ratio < 0.8).sum()) > 0
    # one-sided: far below 1 the weight is r itself (verl's two-sided cispo clips it to 0.8)
    low = s.ratio < 0.8
    torch.testing.assert_close(wr[low], s.ratio[low], rtol=4 * ULP, atol=0.0)


def assert_per_sequence_mean_of(grad, wr, s, sel, mask, eps: float) -> None:
    """``grad`` is ``−w·r·Â / ((L_b + eps)·c)`` for one batch constant c (the producer
    averages per response, verl over L + 1e-8 tokens; c read off the largest w·r)."""
    lengths = mask.sum(-1, keepdim=True).double().expand_as(mask)[sel] + eps
    ours = -wr * s.advantage
    top = int(torch.argmax(wr * s.advantage.abs()))
    c = float(ours[top] / (grad[sel][top] * lengths[top]))
    assert c > 0
    # σ(x)(1 − σ(x)) computed by autograd (verl, TRL) and by us both round σ near 1, where
    # 1 − σ cancels: their difference is a few ulps of σ ≤ 1, times 4·r·|Â| (64 ulps), plus
    # 64 ulps of the value itself for c and the products
    bound = 64 * ULP * (4 * s.ratio * s.advantage.abs() + ours.abs())
    assert ((grad[sel] * lengths * c - ours).abs() <= bound).all()


@pytest.mark.parametrize("producer", ["verl", "trl"])
def test_sapo_gate_weight_matches_the_producers(producer: str) -> None:
    logp_behavior, logp_train, adv, mask = random_batch(12, spread=0.8)
    if producer == "trl":
        grad = trl_loss_grad("sapo", logp_behavior, logp_train, adv, mask, 0.28)
    else:
        core = pytest.importorskip("verl.trainer.ppo.core_algos", reason="verl not installed")
        from verl.workers.config.actor import ActorConfig
        lp = logp_train.clone().requires_grad_(True)
        cfg = ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1)
        loss, _ = core.compute_policy_loss_sapo(logp_behavior, lp, adv.expand_as(logp_behavior), mask.double(),
                                                "seq-mean-token-mean", cfg)
        loss.backward()
        grad = lp.grad
    s, seqs, sel = stats_2d(logp_behavior, logp_train, adv, mask)
    t = Thresholds()
    if producer == "trl":
        # TRL's torch.where(Â > 0, 1.0, 1.05) on Python floats makes a float32 τ tensor:
        # τ_neg is float32(1.05) = 1.0499999523 there
        t = Thresholds(sapo_tau_neg=float(torch.tensor(t.sapo_tau_neg, dtype=torch.float32)))
    wr = weight_times_ratio("sapo", t, s, seqs)
    assert_per_sequence_mean_of(grad, wr, s, sel, mask, 1e-8 if producer == "verl" else 0.0)
    assert float((wr / s.ratio).min()) < 0.5  # the gate bites somewhere (w = 1 at r = 1)


def test_gmpo_weight_matches_verls_geo_mean_loss() -> None:
    core = pytest.importorskip("verl.trainer.ppo.core_algos", reason="verl not installed")
    from verl.workers.config.actor import ActorConfig
    logp_behavior, logp_train, adv, mask = random_batch(13, spread=0.5)
    t = Thresholds()
    lp = logp_train.clone().requires_grad_(True)
    cfg = ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1,
                      clip_ratio=0.2, clip_ratio_low=t.gmpo_eps_low, clip_ratio_high=t.gmpo_eps_high)
    loss, _ = core.compute_policy_loss_geo_mean(logp_behavior, lp, adv.expand_as(logp_behavior), mask.double(),
                                                "token-mean", cfg)
    loss.backward()
    s, seqs, sel = stats_2d(logp_behavior, logp_train, adv, mask)
    wr = weight_times_ratio("gmpo", t, s, seqs)
    b = logp_behavior.shape[0]
    lengths = mask.sum(-1, keepdim=True).double().expand_as(mask)[sel]
    # verl: d/d log π_t = −Â·R·[not clipped] / ((L + 1e-8)·B); its R divides the sum by
    # L + 1e-8 where we divide by L: relative 1e-8·|mean log r|/L < 1e-8
    verl_wr = -lp.grad[sel] * (lengths + 1e-8) * b / s.advantage
    torch.testing.assert_close(wr, verl_wr, rtol=1e-8, atol=0.0)
    assert torch.equal(wr == 0, lp.grad[sel] == 0)
    assert 0 < int((wr == 0).sum()) < wr.numel()


def test_trl_vllm_is_modes_hand_worked() -> None:
    # TRL _generate_and_score_completions: ρ = exp(old − sampling) per token, or exp of the
    # response's sum (sequence_*); *_truncate clamps ρ to [clip_min, clip_max] (None: no
    # bound), *_mask zeroes ρ outside; the per-token loss is multiplied by ρ, so w·r = ρ'.
    # response 0: r = (0.5, 4, 2), Σ log r = log 4;  response 1: r = (1.5, 1.2, 0.5): 0.9
    trl = pytest.importorskip("trl", reason="trl is not installed")
    fields = trl.GRPOConfig.__dataclass_fields__
    t = Thresholds()
    assert fields["vllm_importance_sampling_clip_max"].default == t.trl_is_cap == 3.0
    assert fields["vllm_importance_sampling_clip_min"].default is None and t.trl_is_min == 0
    s, seqs, _ = ratios_case([[0.5, 4.0, 2.0], [1.5, 1.2, 0.5]], [1.0, -1.0])
    expect = {"token_truncate": [0.5, 3.0, 2.0, 1.5, 1.2, 0.5],  # 4 -> 3
              "token_mask": [0.5, 0.0, 2.0, 1.5, 1.2, 0.5],  # 4 > 3 -> 0
              "sequence_truncate": [3.0] * 3 + [0.9] * 3,  # 4 -> 3; 0.9 inside
              "sequence_mask": [0.0] * 3 + [0.9] * 3}  # 4 > 3 -> 0
    for mode, want in expect.items():
        got = weight_times_ratio(f"trl_is_{mode}", t, s, seqs)
        torch.testing.assert_close(got, torch.tensor(want, dtype=F64), rtol=16 * ULP, atol=0.0)


# -------------------------------------------------------------- hand-worked from source


def test_openrlhf_seq_mask_tis_hand_worked() -> None:
    # OpenRLHF openrlhf/models/loss.py PolicyLoss.forward, seq-mask-tis: seq_is =
    # exp(masked_mean(log r)); kept iff 0.5 <= seq_is <= 5.0; kept tokens weigh r (no clamp)
    #   (4, 8):     exp(mean log) = √32 = 5.657 > 5      -> dropped
    #   (0.25, 1.5): √0.375 = 0.612 in [0.5, 5]          -> kept
    #   (0.2, 1.0):  √0.2 = 0.447 < 0.5                  -> dropped
    s, seqs, _ = ratios_case([[4.0, 8.0], [0.25, 1.5], [0.2, 1.0]], [1.0, -1.0, 1.0], mu=0.05)
    keep = build_masks(["openrlhf_seq_mask_tis"], Thresholds())["openrlhf_seq_mask_tis"]
    assert keep.keep(s, seqs).tolist() == [False, False, True, True, False, False]


def test_slime_veto_hand_worked() -> None:
    # slime examples/train_infer_mismatch_helper/mis.py calculate_veto_mask: a response with
    # any loss token of log r < log(1e-4) is dropped whole
    #   (0.5, 5e-5, 1.0): 5e-5 < 1e-4 -> dropped;  (2e-4, 0.1): none below -> kept
    s, seqs, _ = ratios_case([[0.5, 5e-5, 1.0], [2e-4, 0.1, 1.0]], [1.0, -1.0], mu=0.9)
    veto = build_masks(["slime_veto"], Thresholds())["slime_veto"]
    assert veto.keep(s, seqs).tolist() == [False] * 3 + [True] * 3
    # a non-loss token (slime: `& loss_mask`) vetoes nothing
    off = Segments(seqs.index, torch.tensor([True, False, True, True, True, True]))
    assert veto.keep(s, off).tolist() == [True] * 6


def test_m2po_hand_worked_and_edge_rules() -> None:
    # AReaL _get_m2po_loss_mask at 0.04 on m2 = (log µ − log π)² = (0.25, 0.09, 0.01, 0):
    # suffix means 0.0875, 0.0333.. -> the first below 0.04 is index 1: drop the largest
    lr = torch.tensor([0.1, -0.5, 0.0, 0.3], dtype=F64)  # m2 = .01, .25, 0, .09
    valid, adv = torch.ones(4, dtype=torch.bool), torch.ones(4, dtype=F64)
    assert m2po_keep(lr, valid, adv, 0.04).tolist() == [True, False, True, True]
    # at 0.02: suffix means .0875, .0333, .005 -> index 2: drop .25 and .09
    assert m2po_keep(lr, valid, adv, 0.02).tolist() == [True, False, True, False]
    # at 0: no suffix is below -> all but one dropped (AReaL keeps one)
    assert int(m2po_keep(lr, valid, adv, 0.0).sum()) == 1
    # a non-loss token neither counts nor is dropped; Â = 0 (no gradient) is kept
    valid2 = torch.tensor([True, False, True, True])
    # valid m2 = (.01, 0, .09): at 0.03 the suffix means are .0333, .005: drop .09
    assert m2po_keep(lr, valid2, adv, 0.03).tolist() == [True, True, True, False]
    adv0 = torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=F64)
    assert m2po_keep(lr, valid, adv0, 0.04).tolist() == [True, True, True, True]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-3, 3), min_size=1, max_size=30), st.floats(0.0, 2.0),
       st.integers(1, 3))
def test_m2po_equals_the_definition_by_brute_force(lrs: list[float], tau: float,
                                                   groups: int) -> None:
    # M2PO's rule stated directly, per group: the smallest k such that the n − k smallest
    # m2 have a mean below τ (k = n − 1 when none); the k largest are dropped. Our suffix
    # sums are total − prefix, off by at most n ulps of the group's total; cases whose
    # suffix mean is that close to τ are not decided by the rule but by rounding: skipped
    lr = torch.tensor(lrs, dtype=F64)
    group = torch.arange(len(lrs)) % groups
    keep = m2po_keep(lr, torch.ones(len(lrs), dtype=torch.bool), torch.ones(len(lrs), dtype=F64),
                     tau, group)
    for g in range(min(groups, len(lrs))):
        m2 = sorted((lrs[i] ** 2 for i in range(g, len(lrs), groups)), reverse=True)
        n = len(m2)
        means = [math.fsum(m2[i:]) / (n - i) for i in range(n)]
        assume(all(abs(m - tau) > 64 * n * ULP * math.fsum(m2) for m in means))
        k = next((i for i in range(n) if means[i] < tau), n - 1)
        mine = keep[group == g]
        assert int((~mine).sum()) == k
        if k:  # the dropped are the k largest (ties at the boundary count either way)
            assert float((lr[group == g][~mine] ** 2).min()) >= m2[k - 1]


def test_vaco_tv_hand_worked_from_open_instructs_own_case() -> None:
    # open-instruct test_olmo_core_train_modules.py test_rho_mask_tv_divergence, upper 2.0,
    # clamp off: ρ row 0 = (0.25, 1, 4): mean|ρ − 1| = (0.75 + 0 + 3)/3 = 1.25 <= 2 -> kept,
    # weights ρ; row 1 = (4, 4, 4): 3 > 2 and sign(log ρ)·Â = +1 > 0 -> weights 0
    s, seqs, _ = ratios_case([[0.25, 1.0, 4.0], [4.0, 4.0, 4.0]], [1.0, 1.0], mu=0.2)
    t = Thresholds(vaco_tv_delta=2.0, tis_cap=math.inf)
    torch.testing.assert_close(weight_times_ratio("vaco_tv", t, s, seqs),
                               torch.tensor([0.25, 1.0, 4.0, 0, 0, 0], dtype=F64),
                               rtol=4 * ULP, atol=0.0)
    # with the ρ clamp at its default 2 and Â < 0 on row 1 (its update lowers the TV): kept,
    # every weight min(ρ, 2)
    s, seqs, _ = ratios_case([[0.25, 1.0, 4.0], [4.0, 4.0, 4.0]], [1.0, -1.0], mu=0.2)
    torch.testing.assert_close(weight_times_ratio("vaco_tv", Thresholds(), s, seqs),
                               torch.tensor([0.25, 1.0, 2.0, 2.0, 2.0, 2.0], dtype=F64),
                               rtol=4 * ULP, atol=0.0)


def test_prime_rl_default_and_ipo_hand_worked() -> None:
    # prime-rl src/prime_rl/trainer/rl/loss.py: default_loss_fn drops Â > 0 tokens with
    # π − µ > 0.2 and Â < 0 tokens with π − µ < −0.2; ipo_loss_fn drops |π − µ| > 0.1
    #   Â>0  µ .30 π .55: +.25 > .2              -> default drops; ipo drops
    #   Â>0  µ .50 π .65: +.15                   -> default keeps; ipo drops (> .1)
    #   Â<0  µ .60 π .35: −.25 < −.2             -> default drops; ipo drops
    #   Â<0  µ .30 π .60: +.30, Â<0 lowers π     -> default keeps; ipo drops
    #   Â>0  µ .60 π .30: −.30, Â>0 raises π     -> default keeps; ipo drops
    #   Â<0  µ .50 π .55: +.05                   -> both keep
    mu = torch.tensor([[0.3, 0.5, 0.6, 0.3, 0.6, 0.5]], dtype=F64)
    pi = torch.tensor([[0.55, 0.65, 0.35, 0.6, 0.3, 0.55]], dtype=F64)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0, 1.0, -1.0]], dtype=F64)
    s, seqs, _ = stats_2d(mu.log(), pi.log(), adv)
    masks = build_masks(["prime_rl_default", "prime_rl_ipo"], Thresholds())
    assert masks["prime_rl_default"].keep(s, seqs).tolist() == [False, True, False, True,
                                                                True, True]
    assert masks["prime_rl_ipo"].keep(s, seqs).tolist() == [False] * 5 + [True]


def test_m2po_groups_are_independent() -> None:
    # two responses: each alone gives the single-group answer
    lr = torch.tensor([0.1, -0.5, 0.0, 0.3, 0.7, 0.05, -0.02], dtype=F64)
    group = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    valid, adv = torch.ones(7, dtype=torch.bool), torch.ones(7, dtype=F64)
    both = m2po_keep(lr, valid, adv, 0.04, group)
    one = torch.ones(4, dtype=torch.bool), torch.ones(4, dtype=F64)
    assert both[:4].tolist() == m2po_keep(lr[:4], *one, 0.04).tolist()
    # response 1: m2 = (.49, .0025, .0004): suffix means .164, .00145 -> drop .49 alone
    assert both[4:].tolist() == [False, True, True]
