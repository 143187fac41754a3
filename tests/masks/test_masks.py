"""The mask registry (SPEC §4): contract over every mask, registration, hand-worked decisions."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

from pdm_replay.masks import (
    MASK_SPECS,
    MaskSpec,
    Thresholds,
    apply_masks,
    build_masks,
    register,
    resolve_names,
)
from pdm_replay.math.metrics import TokenStats, token_stats
from pdm_replay.math.segments import Segments
from pdm_replay.math.support import build_support, reduce_pair

F64 = torch.float64
SPEC_MASKS = {  # name: (family, direction, estimator), SPEC §4
    "none": (None, "none", None),
    "ppo_clip": (None, "ratio", None),
    "clip_higher": (None, "ratio", None),
    "dppo_binary_kl": ("kl", "ratio", None),
    "dppo_topk_kl": ("kl", "ratio", None),
    "pdm_kl_agg": ("kl", "predictive", "agg"),
    "pdm_kl_uniform": ("kl", "predictive", "uniform"),
    "dppo_binary_tv": ("tv", "ratio", None),
    "dppo_topk_tv": ("tv", "ratio", None),
    "pdm_tv_agg": ("tv", "predictive", "agg"),
    "pdm_tv_uniform": ("tv", "predictive", "uniform"),
}


def test_registry_holds_every_spec_mask_with_its_labels() -> None:
    for name, labels in SPEC_MASKS.items():
        spec = MASK_SPECS[name]
        assert (spec.family, spec.direction, spec.estimator) == labels, name
        assert spec.name == name and spec.doc


def test_default_thresholds_are_the_spec_defaults() -> None:
    t = Thresholds()
    assert (t.eps, t.eps_low, t.eps_high, t.delta_kl, t.delta_tv) == (0.2, 0.2, 0.28, 0.15, 0.15)


# ---------------------------------------------------------------------------- contract


@st.composite
def token_batches(draw: st.DrawFn) -> TokenStats:
    """Random µ, π (vocab 3..40, mismatch 0..3 logits), random K and advantages with zeros."""
    n, rows = draw(st.integers(3, 40)), draw(st.integers(1, 12))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    z_mu = torch.randn(rows, n, generator=g, dtype=F64) * draw(st.floats(0.1, 4.0))
    z_pi = z_mu + torch.randn(rows, n, generator=g, dtype=F64) * draw(st.floats(0.0, 3.0))
    logp_behavior, logp_train = torch.log_softmax(z_mu, -1), torch.log_softmax(z_pi, -1)
    k = torch.multinomial(logp_behavior.exp(), 1, generator=g)[:, 0]
    kk = draw(st.integers(0, n))
    topk = torch.topk(logp_behavior, kk, dim=-1).indices if kk else torch.zeros(rows, 0, dtype=torch.long)
    s = build_support(k, topk)
    ids = s.ids.clamp(min=0)
    pair = reduce_pair(s, logp_behavior.gather(1, ids), logp_train.gather(1, ids))
    adv = draw(st.lists(st.sampled_from([-2.0, -0.3, 0.0, 0.0, 0.5, 1.7]), min_size=rows,
                        max_size=rows))
    return token_stats(pair, torch.tensor(adv, dtype=F64), n)


def own_sequences(stats: TokenStats) -> Segments:
    """Every token its own response (sequence masks then act per token)."""
    n = stats.advantage.shape[0]
    return Segments(torch.arange(n), torch.ones(n, dtype=torch.bool))


SCALES = (1000.0, 8.0, 2.0, 1.0, 0.5, 0.25, 0.05, 0.0)  # every threshold shrinks together


# Thresholds fields by how they shrink the region: widths (ε, δ, upper bounds of a
# divergence) scale by s; ratio caps C > 1 move to 1 + (C − 1)·s; lower ratio bounds
# L < 1 to 1 − (1 − L)·s; so s = 0 is the empty region for every mask.
CAPS = ("tis_cap", "icepop_high", "mis_high", "rs_k1", "rs_seq_mean_k1_high", "trl_is_cap",
        "trl_cispo_cap", "openrlhf_is_high")
LOWS = ("icepop_low", "mis_low", "rs_seq_mean_k1_low", "openrlhf_is_low", "slime_veto")
# SAPO's temperatures are not widths (a larger τ is a sharper gate, and no τ drops a token
# but where σ rounds to 0 or 1): held at their defaults
FIXED = ("sapo_tau_pos", "sapo_tau_neg")


def scaled(s: float) -> Thresholds:
    t = Thresholds()
    new = {}
    for f in Thresholds.__dataclass_fields__:
        v = getattr(t, f)
        new[f] = (v if f in FIXED else 1 + (v - 1) * s if f in CAPS
                  else 1 - (1 - v) * s if f in LOWS else v * s)
    return Thresholds(**new)


@settings(max_examples=40, deadline=None)
@given(token_batches(), st.integers(0, 2**31 - 1))
def test_every_registered_mask_honors_the_contract(stats: TokenStats, split: int) -> None:
    n_tok = stats.advantage.shape[0]
    g = torch.Generator().manual_seed(split)  # random responses, random loss mask
    seqs = Segments(torch.sort(torch.randint(0, 3, (n_tok,), generator=g)).values,
                    torch.rand(n_tok, generator=g) > 0.2)
    zero_adv = stats.advantage == 0
    masked_before: dict[str, Tensor] = {}
    for s in SCALES:
        masks = build_masks(None, scaled(s))
        keep = apply_masks(masks, stats, seqs)
        assert set(keep) == set(MASK_SPECS)
        for name, kp in keep.items():
            assert kp.shape == (n_tok,) and kp.dtype == torch.bool, name
            w = masks[name].weight(stats, seqs)
            assert w.shape == (n_tok,) and w.dtype == F64 and (w >= 0).all(), name
            assert torch.equal(w > 0, kp), f"{name}: keep is not w > 0"
            if MASK_SPECS[name].weight == "binary":  # an IS weight may zero a no-gradient token
                assert torch.equal(w, kp.double()), name
                assert kp[zero_adv].all(), f"{name} masked a token with Â = 0"
            masked = ~kp
            if name in masked_before:  # a smaller region masks a superset
                assert (masked_before[name] <= masked).all(), f"{name} not monotone at {s}"
            masked_before[name] = masked
        assert keep["none"].all()


def test_contract_is_not_vacuous_every_mask_masks_at_zero_threshold() -> None:
    # The monotonicity check above means something only if masks do mask: with a large
    # µ/π mismatch and thresholds at 0 every mask but `none` removes some tokens.
    g = torch.Generator().manual_seed(0)
    z_mu = torch.randn(400, 12, generator=g, dtype=F64) * 2
    logp_behavior = torch.log_softmax(z_mu, -1)
    logp_train = torch.log_softmax(z_mu + torch.randn(400, 12, generator=g, dtype=F64) * 2, -1)
    k = torch.multinomial(logp_behavior.exp(), 1, generator=g)[:, 0]
    s = build_support(k, torch.topk(logp_behavior, 3, dim=-1).indices)
    ids = s.ids.clamp(min=0)
    adv = torch.where(torch.arange(400) % 2 == 0, 1.0, -1.0).double()
    stats = token_stats(reduce_pair(s, logp_behavior.gather(1, ids), logp_train.gather(1, ids)), adv, 12)
    seqs = own_sequences(stats)
    loose = apply_masks(build_masks(None, scaled(1000.0)), stats, seqs)
    tight = apply_masks(build_masks(None, scaled(0.0)), stats, seqs)
    # M2PO keeps one token of each response at least: 4-token responses for it
    fours = Segments(torch.arange(400) // 4, torch.ones(400, dtype=torch.bool))
    for kept, s in ((loose, 1000.0), (tight, 0.0)):
        kept["m2po"] = build_masks(["m2po"], scaled(s))["m2po"].keep(stats, fours)
    for name in MASK_SPECS:
        n_loose, n_tight = int((~loose[name]).sum()), int((~tight[name]).sum())
        if MASK_SPECS[name].weight == "is" and getattr(MASK_SPECS[name].build(Thresholds()),
                                                  "truncate", False):
            assert n_tight == 0, name  # TIS / CISPO reweight, never drop
        elif set(MASK_SPECS[name].thresholds) <= set(FIXED):
            assert n_tight == n_loose, name  # SAPO: nothing scaled, nothing changes
        elif name == "none":
            assert n_tight == 0
        else:
            assert 0 < n_tight and n_loose < n_tight, (name, n_loose, n_tight)


def test_duplicate_registration_is_rejected() -> None:
    before = dict(MASK_SPECS)
    dup = MaskSpec("ppo_clip", lambda t: None, None, "ratio", None, "a second ppo_clip")  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="ppo_clip.*already registered"):
        register(dup)
    assert MASK_SPECS == before and MASK_SPECS["ppo_clip"] is before["ppo_clip"]


def test_unknown_name_error_lists_every_known_name() -> None:
    for call in (lambda: resolve_names(["ppo_clip", "nope"]),
                 lambda: build_masks(["nope"], Thresholds())):
        with pytest.raises(ValueError) as err:
            call()
        msg = str(err.value)
        assert "nope" in msg
        assert all(name in msg for name in MASK_SPECS)


def test_resolve_names_keeps_order_and_drops_repeats() -> None:
    assert resolve_names(["pdm_kl_agg", "none", "pdm_kl_agg"]) == ["pdm_kl_agg", "none"]
    assert resolve_names(None) == list(MASK_SPECS)


# ---------------------------------------------------------------------------- hand-worked


def binary_stats(mu_k: list[float], pi_k: list[float], adv: list[float]) -> TokenStats:
    """Tokens on S = {k} with the given µ_k, π_k: ratio r = π_k/µ_k."""
    s = build_support(torch.zeros(len(mu_k), dtype=torch.long), torch.zeros(len(mu_k), 0,
                                                                           dtype=torch.long))
    lg = lambda x: torch.log(torch.tensor(x, dtype=F64))[:, None]  # noqa: E731
    return token_stats(reduce_pair(s, lg(mu_k), lg(pi_k)), torch.tensor(adv, dtype=F64), 100)


def test_ppo_clip_hand_worked() -> None:
    # µ_k = 0.5 throughout, ε = 0.2: region 0.8 <= r <= 1.2
    #   Â>0, r=1.3 (π_k .65): outside above, moving up           -> masked
    #   Â>0, r=1.1 (π_k .55): inside                              -> kept
    #   Â>0, r=0.5 (π_k .25): outside below but Â>0 raises r back -> kept
    #   Â<0, r=0.7 (π_k .35): outside below, moving down          -> masked
    #   Â<0, r=0.9 (π_k .45): inside                              -> kept
    #   Â<0, r=1.5 (π_k .75): outside above but Â<0 lowers r      -> kept
    #   Â=0, r=1.8 (π_k .90): no gradient                         -> kept
    stats = binary_stats([0.5] * 7, [0.65, 0.55, 0.25, 0.35, 0.45, 0.75, 0.9],
                         [1.0, 1.0, 1.0, -1.0, -1.0, -1.0, 0.0])
    keep = build_masks(["ppo_clip"], Thresholds())["ppo_clip"].keep(stats)
    assert keep.tolist() == [False, True, True, False, True, True, True]


def test_clip_higher_hand_worked() -> None:
    # ε_low = 0.2, ε_high = 0.28: region 0.8 <= r <= 1.28, µ_k = 0.5
    #   Â>0, r=1.25 (π_k .625): inside (ppo_clip at ε=0.2 masks it) -> kept
    #   Â>0, r=1.30 (π_k .650): above 1.28, moving up               -> masked
    #   Â<0, r=0.78 (π_k .390): below 0.8, moving down              -> masked
    #   Â<0, r=0.82 (π_k .410): inside                              -> kept
    stats = binary_stats([0.5] * 4, [0.625, 0.65, 0.39, 0.41], [1.0, 1.0, -1.0, -1.0])
    masks = build_masks(["clip_higher", "ppo_clip"], Thresholds())
    assert masks["clip_higher"].keep(stats).tolist() == [True, False, False, True]
    assert masks["ppo_clip"].keep(stats).tolist() == [False, False, False, True]


def test_pdm_and_dppo_disagree_on_a_hand_built_token() -> None:
    # S = {k, j} + tail, n = 10 (n − m = 8), Â = +1:
    #   µ = (0.1, 0.2 | 0.7), π = (0.2, 0.7 | 0.1), r = 0.2/0.1 = 2 -> ratio says "away"
    # kl_topk = 0.1 ln(0.1/0.2) + 0.2 ln(0.2/0.7) + 0.7 ln(0.7/0.1)
    #         = −0.0693147 − 0.2505526 + 1.3621371 = 1.0422698 > δ = 0.15: outside
    # Ḋ_agg = (0.2 − 0.1) − [0.2·0.1 + 0.7·0.5 + 0.1·(−0.6)] = 0.1 − 0.31 = −0.21
    # Ḋ_uniform = 0.1 − [0.02 + 0.35 − 0.06/8] = 0.1 − 0.3625 = −0.2625
    #   -> predictive says "toward": pdm keeps it, dppo_topk_kl masks it.
    # TV: tv_topk = ½(0.1 + 0.5 + 0.6) = 0.6 > 0.15; atoms σ = (+, +, −), c = 0.54:
    # Ḋ_tv,agg = ½[0.2 + 0.2(0.54 − 0.4) + 0.7(0.54 − 0.9) − 0.1(0.54 − 0.3)]
    #          = ½[0.2 + 0.028 − 0.252 − 0.024] = −0.024 -> "toward" as well.
    s = build_support(torch.tensor([0]), torch.tensor([[1]]))
    lg = lambda *p: torch.log(torch.tensor([p], dtype=F64))  # noqa: E731
    stats = token_stats(reduce_pair(s, lg(0.1, 0.2), lg(0.2, 0.7)),
                        torch.tensor([1.0], dtype=F64), 10)
    assert stats.ratio.item() == pytest.approx(2.0, rel=1e-14, abs=0.0)
    assert stats.kl_topk.item() == pytest.approx(1.0422698, abs=1e-7)
    assert stats.dkl_agg.item() == pytest.approx(-0.21, abs=1e-14)
    assert stats.dkl_uniform.item() == pytest.approx(-0.2625, abs=1e-14)
    assert stats.tv_topk.item() == pytest.approx(0.6, abs=1e-14)
    assert stats.dtv_agg.item() == pytest.approx(-0.024, abs=1e-14)
    keep = {n: bool(k.item()) for n, k in apply_masks(build_masks(None, Thresholds()),
                                                      stats, own_sequences(stats)).items()}
    assert keep["dppo_topk_kl"] is False and keep["dppo_topk_tv"] is False
    assert keep["pdm_kl_agg"] and keep["pdm_kl_uniform"]
    assert keep["pdm_tv_agg"] and keep["pdm_tv_uniform"]
    # the reverse: Â = −1 flips both directions; ratio now says "toward" (kept) and the
    # predictive masks say "away" (masked)
    neg = replace(stats, advantage=-stats.advantage)
    keep = {n: bool(k.item()) for n, k in apply_masks(build_masks(None, Thresholds()),
                                                      neg, own_sequences(neg)).items()}
    assert keep["dppo_topk_kl"] and keep["dppo_topk_tv"]
    assert not keep["pdm_kl_agg"] and not keep["pdm_tv_agg"]
    assert math.isfinite(stats.dtv_uniform.item())
