"""Direction criteria (SPEC §3): every Ḋ against central finite differences of D(η).

D(η) = D(µ ‖ softmax(z + ηv)), v = e_k − softmax(z), over three atom sets:
- the full vocabulary (dkl_exact, dtv_exact, dkl_from_sums);
- the reduced softmax over S ∪ {tail}, tail = one atom, built here from the full
  distribution independently of pdm_replay's support code (dkl_agg, dtv_agg);
- S plus n − m explicit unseen atoms of mass tail/(n − m) each (dkl_uniform, dtv_uniform).
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from torch import Tensor

from pdm_replay.masks import Thresholds, build_masks
from pdm_replay.math import direction as dr
from pdm_replay.math import divergence as dv
from pdm_replay.math.metrics import token_stats
from pdm_replay.math.support import ReducedPair, build_support, reduce_pair

import oracles  # noqa: E402
from math_strategies import F64, Batch, batches  # noqa: E402

H = 1e-5  # central FD: truncation ~H² ≈ 1e-10, rounding ~1e-16·|D|/H ≈ 1e-10
KINK = 1e-4  # |π_i − µ_i| below this could cross 0 within ±H (|dπ_i/dη| <= 2): skip
FD = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])


# ---------------------------------------------------------------------------- FD machinery


def kl(mu: Tensor, z: Tensor) -> Tensor:
    lq = torch.log_softmax(z, -1)
    terms = torch.where(mu > 0, mu * (torch.log(mu) - lq), torch.zeros_like(mu))
    return terms.sum()


def tv(mu: Tensor, z: Tensor) -> Tensor:
    return 0.5 * (mu - torch.softmax(z, -1)).abs().sum()


def fd(div, mu: Tensor, pi: Tensor, k: int) -> float:
    """Central FD of ``div(µ, z + ηv)`` at η = 0, z = log π, v = e_k − π (atoms ``(A,)``)."""
    z = torch.log(pi)  # −inf for an empty atom: it stays empty (v = 0 there)
    v = -pi.clone()
    v[k] += 1.0
    return ((div(mu, z + H * v) - div(mu, z - H * v)) / (2 * H)).item()


def away_from_kinks(mu: Tensor, pi: Tensor) -> bool:
    live = (mu > 0) | (pi > 0)
    return bool(((pi - mu).abs()[live] > KINK).all())


def reduced_atoms(b: Batch, i: int, uniform: bool) -> tuple[Tensor, Tensor]:
    """µ, π of token i on S (k first) then the tail: one atom, or n − m equal atoms."""
    s = b.support_list(i)
    unseen = [j for j in range(b.n) if j not in s]
    out = []
    for lp in (b.logp_behavior[i], b.logp_train[i]):
        p = torch.exp(lp)
        tail = p[unseen].sum() if unseen else torch.zeros((), dtype=F64)
        if uniform:
            rest = (tail / len(unseen)).repeat(len(unseen))
        else:
            rest = tail[None]
        out.append(torch.cat([p[s], rest]))
    return out[0], out[1]


def assert_fd(value: float, expect: float) -> None:
    assert value == pytest.approx(expect, rel=1e-6, abs=1e-7)


# ---------------------------------------------------------------------------- FD checks


@FD
@given(batches())
def test_exact_directions_match_full_vocabulary_fd(b: Batch) -> None:
    dkl = dr.dkl_exact(b.logp_behavior, b.logp_train, b.k)
    dtv = oracles.dtv_exact(b.logp_behavior, b.logp_train, b.k)
    for i in range(b.k.shape[0]):
        mu, pi, k = b.logp_behavior[i].exp(), b.logp_train[i].exp(), int(b.k[i])
        assert_fd(dkl[i].item(), fd(kl, mu, pi, k))
        if away_from_kinks(mu, pi):
            assert_fd(dtv[i].item(), fd(tv, mu, pi, k))


@FD
@given(batches(), st.floats(-50.0, 50.0), st.floats(-50.0, 50.0))
def test_dkl_from_sums_with_lse_identities_matches_fd(b: Batch, c_mu: float, c_pi: float) -> None:
    # SPEC §7 chunked form from unnormalized logits z_µ = log µ + c_µ, z = log π + c_π:
    # Σπ² = exp(LSE(2z) − 2·LSE(z)), Σπµ = exp(LSE(z + z_µ) − LSE(z) − LSE(z_µ)).
    z_mu, z = b.logp_behavior + c_mu, b.logp_train + c_pi
    lse, lse_mu = torch.logsumexp(z, -1), torch.logsumexp(z_mu, -1)
    sum_pi2 = torch.exp(torch.logsumexp(2 * z, -1) - 2 * lse)
    sum_pi_mu = torch.exp(torch.logsumexp(z + z_mu, -1) - lse - lse_mu)
    idx = b.k[:, None]
    pi_k = torch.exp(z.gather(1, idx)[:, 0] - lse)
    mu_k = torch.exp(z_mu.gather(1, idx)[:, 0] - lse_mu)
    got = dr.dkl_from_sums(pi_k, mu_k, sum_pi2, sum_pi_mu)
    torch.testing.assert_close(got, dr.dkl_exact(b.logp_behavior, b.logp_train, b.k), rtol=1e-9, atol=1e-12)
    for i in range(b.k.shape[0]):
        assert_fd(got[i].item(), fd(kl, b.logp_behavior[i].exp(), b.logp_train[i].exp(), int(b.k[i])))


@FD
@given(batches())
def test_aggregated_directions_match_reduced_softmax_fd(b: Batch) -> None:
    # On the reduced support the update is z_red + η(e_k − π_red): the tail atom's logit
    # moves by −η·π_tail like every other non-k atom.
    pair = b.pair()
    dkl, dtv = dr.dkl_agg(pair), dr.dtv_agg(pair)
    for i in range(b.k.shape[0]):
        mu, pi = reduced_atoms(b, i, uniform=False)
        assert_fd(dkl[i].item(), fd(kl, mu, pi, 0))
        if away_from_kinks(mu, pi):
            assert_fd(dtv[i].item(), fd(tv, mu, pi, 0))


@FD
@given(batches())
def test_uniform_directions_match_explicit_uniform_tail_fd(b: Batch) -> None:
    pair = b.pair()
    dkl, dtv = dr.dkl_uniform(pair, b.n), dr.dtv_uniform(pair, b.n)
    for i in range(b.k.shape[0]):
        mu, pi = reduced_atoms(b, i, uniform=True)  # n atoms: S then n − m tail copies
        assert mu.shape == (b.n,)
        assert_fd(dkl[i].item(), fd(kl, mu, pi, 0))
        # and the closed form on that explicit distribution is the exact Ḋ
        logp_behavior, logp_train = torch.log(mu)[None], torch.log(pi)[None]
        k0 = torch.tensor([0])
        assert dkl[i].item() == pytest.approx(dr.dkl_exact(logp_behavior, logp_train, k0).item(), abs=1e-12)
        if away_from_kinks(mu, pi):
            assert_fd(dtv[i].item(), fd(tv, mu, pi, 0))
            assert dtv[i].item() == pytest.approx(oracles.dtv_exact(logp_behavior, logp_train, k0).item(), abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(batches(full=True))
def test_whole_vocabulary_support_all_estimators_equal_exact(b: Batch) -> None:
    pair = b.pair()
    assert (pair.m == b.n).all()
    exact_kl = dr.dkl_exact(b.logp_behavior, b.logp_train, b.k)
    exact_tv = oracles.dtv_exact(b.logp_behavior, b.logp_train, b.k)
    for got in (dr.dkl_agg(pair), dr.dkl_uniform(pair, b.n)):
        torch.testing.assert_close(got, exact_kl, rtol=1e-10, atol=1e-12)
    for got in (dr.dtv_agg(pair), dr.dtv_uniform(pair, b.n)):
        torch.testing.assert_close(got, exact_tv, rtol=1e-10, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(batches())
def test_local_term_has_the_sign_of_the_ratio(b: Batch) -> None:
    pair = b.pair()
    slope = dr.ratio_slope(pair.mu.logp_k, pair.pi.logp_k)
    tie = pair.mu.logp_k == pair.pi.logp_k
    assert (torch.sign(dr.dkl_local(pair))[~tie] == torch.sign(slope)[~tie]).all()
    assert (dr.dkl_local(pair)[tie] == 0).all() and (slope[tie] == 0).all()


# ---------------------------------------------------------------------------- binary support

# log-probs of k in [−30, −1e-30]: π_tail >= 1e-30, so Ḋ = 2(π_k − µ_k)·π_tail stays a
# normal float (at π_k = 1 exactly v = e_k − π = 0 and Ḋ = 0 whatever r is).
LOGP_K = st.floats(-30.0, -1e-30)


@st.composite
def binary_rows(draw: st.DrawFn) -> tuple[Tensor, Tensor, Tensor]:
    """k, log µ_k, log π_k and a top-K row holding only padding or k (S = {k})."""
    rows = draw(st.integers(1, 6))
    width = draw(st.integers(0, 4))
    ks = draw(st.lists(st.integers(0, 50), min_size=rows, max_size=rows))
    topk = [[draw(st.sampled_from([-1, k])) for _ in range(width)] for k in ks]
    lps = draw(st.lists(st.tuples(LOGP_K, LOGP_K), min_size=rows, max_size=rows))
    # the signs can only be compared where log r is not rounded away: exact ties, or
    # |log π_k − log µ_k| > 1e-12 (below that exp(log r) − 1 and π_k − µ_k round separately)
    assume(all(a == b or abs(a - b) > 1e-12 for a, b in lps))
    lp = torch.tensor(lps, dtype=F64)
    return torch.tensor(ks), torch.tensor(topk, dtype=torch.long).reshape(rows, width), lp


def binary_pair(ks: Tensor, topk: Tensor, lp: Tensor) -> ReducedPair:
    return reduce_pair(build_support(ks, topk), lp[:, :1].expand(-1, topk.shape[1] + 1),
                       lp[:, 1:].expand(-1, topk.shape[1] + 1))


@settings(max_examples=100, deadline=None)
@given(binary_rows())
def test_binary_support_predictive_sign_equals_ratio_sign(case: tuple) -> None:
    ks, topk, lp = case
    pair = binary_pair(ks, topk, lp)
    assert (pair.m == 1).all()
    r_sign = torch.sign(dr.ratio_slope(lp[:, 0], lp[:, 1]))
    assert (torch.sign(dr.dkl_agg(pair)) == r_sign).all()
    assert (torch.sign(dr.dtv_agg(pair)) == r_sign).all()
    # closed forms on {k, tail}, p = π_k, q = π_tail = 1 − p, σ = sign(π_k − µ_k):
    # KL: (p − µ_k) − [p(p − µ_k) + q(q − µ_t)] with q − µ_t = −(p − µ_k) → 2(p − µ_k)·q
    # TV: ½σ[p + p(c − 2p) − q(c − q − p)], c = p² + q², which simplifies to 2σ·p·q²
    # TV is relatively exact even at q = 1e-30 (it was 0 or half the value before the fix,
    # below q ~1e-8); as p → 0 the tail atom's O(1) terms leave ~1e-16·q² absolute. KL's
    # π_t − µ_t comes from two tails near 1, each within an ulp (1.1e-16) of exact, so
    # the difference is exact to 2.2e-16 absolute (hypothesis found 1.02e-16 at µ_k ≈ 3e-10)
    p, q = pair.pi.p_k, pair.pi.tail
    torch.testing.assert_close(dr.dkl_agg(pair), 2 * (p - pair.mu.p_k) * q, rtol=1e-9,
                               atol=2.3e-16)
    tv_expect = 2 * r_sign * p * q * q
    assert ((dr.dtv_agg(pair) - tv_expect).abs() <= 1e-12 * tv_expect.abs() + 4e-16 * q * q).all()
    assert torch.equal(dv.kl_topk(pair), dv.kl_binary(lp[:, 0], lp[:, 1]))  # bit for bit
    torch.testing.assert_close(dv.tv_topk(pair), dv.tv_binary(lp[:, 0], lp[:, 1]),
                               rtol=1e-12, atol=1e-15)


@settings(max_examples=60, deadline=None)
@given(binary_rows(), st.data())
def test_binary_support_pdm_masks_equal_dppo_binary_masks(case: tuple,
                                                           data: st.DataObject) -> None:
    # Paper App. C: on S = {k} the predictive and ratio directions coincide, and
    # kl_topk = kl_binary, so pdm_kl_agg ≡ dppo_binary_kl (and the TV pair likewise).
    ks, topk, lp = case
    rows = ks.shape[0]
    adv = torch.tensor(data.draw(st.lists(st.sampled_from([-2.0, -0.5, 0.0, 0.3, 1.0]),
                                          min_size=rows, max_size=rows)), dtype=F64)
    delta = data.draw(st.sampled_from([1e-6, 1e-3, 0.05, 0.15, 1.0, 5.0]))
    stats = token_stats(binary_pair(ks, topk, lp), adv, vocab_size=51)
    masks = build_masks(["pdm_kl_agg", "dppo_binary_kl", "pdm_tv_agg", "dppo_binary_tv"],
                        Thresholds(delta_kl=delta, delta_tv=delta))
    keep = {name: m.keep(stats) for name, m in masks.items()}
    assert torch.equal(keep["pdm_kl_agg"], keep["dppo_binary_kl"])
    assert torch.equal(keep["pdm_tv_agg"], keep["dppo_binary_tv"])


def test_binary_support_masks_agree_when_pi_k_is_almost_one() -> None:
    # µ_k = e^-1 ≈ 0.368, log π_k = −1e-30 (π_k = 1 − 1e-30, q = 1e-30), Â = +1:
    # tv_binary = 1 − 0.368 = 0.632 > 0.15 and r = e > 1, so dppo_binary_tv masks; Ḋ_tv =
    # 2σ·p·q² = 2e-60 > 0 says "away" too. The textbook form evaluated it as exactly 0
    # (never "away") and pdm_tv_agg kept the token.
    lp = torch.tensor([[-1.0, -1e-30]], dtype=F64)
    pair = binary_pair(torch.tensor([0]), torch.zeros(1, 0, dtype=torch.long), lp)
    assert dr.dtv_agg(pair).item() == pytest.approx(2e-60, rel=1e-12, abs=0.0)
    stats = token_stats(pair, torch.tensor([1.0], dtype=F64), vocab_size=51)
    keep = {n: m.keep(stats).item() for n, m in build_masks(
        ["pdm_tv_agg", "dppo_binary_tv", "pdm_kl_agg", "dppo_binary_kl"], Thresholds()).items()}
    assert keep == {"pdm_tv_agg": False, "dppo_binary_tv": False,
                    "pdm_kl_agg": False, "dppo_binary_kl": False}


# ---------------------------------------------------------------------------- peaked π
# Where π_k = 1 − q with q ≪ 1, Ḋ_tv is O(q²) and Ḋ_kl O(q) while the textbook forms add
# O(1) terms: compare with SPEC's formulas evaluated in 60-digit decimals on the exact
# float64 inputs (FD cannot resolve these values in float64).


def spec_slopes(pi: list[Decimal], mu: list[Decimal]) -> tuple[float, float]:
    """SPEC §3 Ḋ_kl and Ḋ_tv, atom 0 = k, literally as written, in decimals."""
    c = sum(p * p for p in pi)
    kl = (pi[0] - mu[0]) - sum(p * (p - m) for p, m in zip(pi, mu))
    sig = [(p > m) - (p < m) for p, m in zip(pi, mu)]
    tv = (sig[0] * pi[0] + sum(s * p * (c - p - pi[0]) for s, p in zip(sig, pi))) / 2
    return float(kl), float(tv)


@settings(max_examples=60, deadline=None)
@given(st.floats(-15.0, -3.0), st.integers(1, 4), st.integers(0, 5),
       st.floats(0.05, 0.95), st.integers(0, 2**31 - 1))
def test_peaked_pi_slopes_match_high_precision_spec(log10_q: float, m_other: int,
                                                    extra_unseen: int, mu_k: float,
                                                    seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    q = 10.0 ** log10_q
    share = torch.rand(m_other + 1, dtype=F64, generator=g) + 0.1  # S∖{k} and the tail
    share = share / share.sum() * q
    logp_train = torch.cat([torch.tensor([math.log1p(-q)], dtype=F64), share[:-1].log()])
    # µ keeps clear of π on every atom so σ is the same in float64 and in decimals
    mu_o = share[:-1] * torch.where(torch.rand(m_other, generator=g) < 0.5, 0.5, 2.0)
    logp_behavior = torch.cat([torch.tensor([math.log(mu_k)], dtype=F64), mu_o.log()])
    m, n = m_other + 1, m_other + 2 + extra_unseen
    pair = reduce_pair(build_support(torch.tensor([0]), torch.arange(1, m)[None]),
                       logp_behavior[None], logp_train[None])
    with localcontext() as ctx:
        ctx.prec = 60
        pi = [Decimal(x).exp() for x in logp_train.tolist()]
        mu = [Decimal(x).exp() for x in logp_behavior.tolist()]
        pi_t, mu_t = 1 - sum(pi), 1 - sum(mu)
        u = n - m
        agg = spec_slopes(pi + [pi_t], mu + [mu_t])
        uni = spec_slopes(pi + [pi_t / u] * u, mu + [mu_t / u] * u)
    got = {"agg": (dr.dkl_agg(pair), dr.dtv_agg(pair)),
           "uniform": (dr.dkl_uniform(pair, n), dr.dtv_uniform(pair, n))}
    for name, ref in (("agg", agg), ("uniform", uni)):
        for value, expect in zip(got[name], ref):
            assert value.item() == pytest.approx(expect, rel=1e-9, abs=0.0), name
    # exact forms on the explicit uniform-tail vocabulary, from its float64 log-probs
    full_pi = torch.cat([logp_train, (pair.pi.log_tail - math.log(u)).expand(u)])[None]
    full_mu = torch.cat([logp_behavior, (pair.mu.log_tail - math.log(u)).expand(u)])[None]
    with localcontext() as ctx:
        ctx.prec = 60
        ex = spec_slopes([Decimal(x).exp() for x in full_pi[0].tolist()],
                         [Decimal(x).exp() for x in full_mu[0].tolist()])
    k0 = torch.tensor([0])
    assert dr.dkl_exact(full_mu, full_pi, k0).item() == pytest.approx(ex[0], rel=1e-9, abs=0.0)
    assert oracles.dtv_exact(full_mu, full_pi, k0).item() == pytest.approx(ex[1], rel=1e-9, abs=0.0)


def test_peaked_pi_tv_slope_regression() -> None:
    # S = {k, j} + tail, π = (1 − 1e-9, 6e-10 | 4e-10), µ = (0.5, 3e-10 | 0.4999999997):
    # σ = (+, +, −), p = 1 − q, q = 1e-9, π_j = 0.6q, π_t = 0.4q.
    # w_k = q² + π_j² + π_t² = 1.52q²; v̄ = p·q − (π_j² + π_t²) = q − 1.52q²;
    # w_j = −π_j − v̄ ≈ −1.6q, w_t = −π_t − v̄ ≈ −1.4q (to O(q²)).
    # Ḋ_tv = ½[p·w_k + π_j·w_j − π_t·w_t] = ½[1.52q² + 0.6q(−0.6q − v̄) − 0.4q(−0.4q − v̄)]
    #      = ½[1.52 − 0.36 + 0.16 − 0.2·(v̄/q)]q² = ½[1.32 − 0.2]q² = 0.56q² = 5.6e-19
    # (the textbook form returned 2.8e-19 here and flipped signs in other such cases)
    q = 1e-9
    logp_train = torch.tensor([[math.log1p(-q), math.log(0.6 * q)]], dtype=F64)
    logp_behavior = torch.tensor([[math.log(0.5), math.log(0.3 * q)]], dtype=F64)
    pair = reduce_pair(build_support(torch.tensor([0]), torch.tensor([[1]])), logp_behavior, logp_train)
    assert dr.dtv_agg(pair).item() == pytest.approx(0.56 * q * q, rel=1e-6, abs=0.0)
    # KL: (p − µ_k)·q − π_j(π_j − µ_j) − π_t(π_t − µ_t), p − µ_k = 0.5 − q, µ_t = 0.5 − 0.3q
    #   = (0.5 − q)q − 0.6q·0.3q − 0.4q·(0.4q − 0.5 + 0.3q)
    #   = 0.5q − q² − 0.18q² − 0.28q² + 0.2q = 0.7q − 1.46q²
    assert dr.dkl_agg(pair).item() == pytest.approx(0.7 * q - 1.46 * q * q, rel=1e-12, abs=0.0)


# ---------------------------------------------------------------------------- hand-worked
# One token, n = 4, k = 0, S = {0, 1} (m = 2), tokens 2, 3 unseen (n − m = 2):
#   µ = (0.5, 0.3 | 0.1, 0.1) -> µ_tail = 0.2
#   π = (0.4, 0.3 | 0.2, 0.1) -> π_tail = 0.3
MU_FULL, PI_FULL = (0.5, 0.3, 0.1, 0.1), (0.4, 0.3, 0.2, 0.1)


def lg(*p: float) -> Tensor:
    return torch.log(torch.tensor([p], dtype=F64))


def hand_pair() -> ReducedPair:
    s = build_support(torch.tensor([0]), torch.tensor([[1]]))
    return reduce_pair(s, lg(*MU_FULL[:2]), lg(*PI_FULL[:2]))


def test_dkl_local_hand_worked() -> None:
    # π_k − µ_k = 0.4 − 0.5 = −0.1
    assert dr.dkl_local(hand_pair()).item() == pytest.approx(-0.1, abs=1e-14)


def test_ratio_slope_hand_worked() -> None:
    # r − 1 = 0.4/0.5 − 1 = −0.2
    assert dr.ratio_slope(lg(0.5)[:, 0], lg(0.4)[:, 0]).item() == pytest.approx(-0.2, abs=1e-14)


def test_dkl_agg_hand_worked() -> None:
    # global = 0.4·(0.4 − 0.5) + 0.3·(0.3 − 0.3) + 0.3·(0.3 − 0.2) = −0.04 + 0 + 0.03 = −0.01
    # Ḋ = −0.1 − (−0.01) = −0.09
    assert dr.dkl_agg(hand_pair()).item() == pytest.approx(-0.09, abs=1e-14)


def test_dkl_uniform_hand_worked() -> None:
    # tail term spread over n − m = 2 atoms: 0.3·0.1/2 = 0.015
    # global = −0.04 + 0 + 0.015 = −0.025, Ḋ = −0.1 + 0.025 = −0.075
    assert dr.dkl_uniform(hand_pair(), 4).item() == pytest.approx(-0.075, abs=1e-14)


def test_dkl_exact_and_from_sums_hand_worked() -> None:
    # global = 0.4·(−0.1) + 0.3·0 + 0.2·(0.2 − 0.1) + 0.1·0 = −0.04 + 0.02 = −0.02
    # Ḋ = −0.1 + 0.02 = −0.08. From sums: Σπ² = 0.16 + 0.09 + 0.04 + 0.01 = 0.30,
    # Σπµ = 0.20 + 0.09 + 0.02 + 0.01 = 0.32: (0.4 − 0.5) − (0.30 − 0.32) = −0.08
    k = torch.tensor([0])
    assert dr.dkl_exact(lg(*MU_FULL), lg(*PI_FULL), k).item() == pytest.approx(-0.08, abs=1e-14)
    t = lambda x: torch.tensor([x], dtype=F64)  # noqa: E731
    got = dr.dkl_from_sums(t(0.4), t(0.5), t(0.30), t(0.32))
    assert got.item() == pytest.approx(-0.08, abs=1e-14)


def test_dtv_agg_hand_worked() -> None:
    # atoms (k, j, tail): π = (0.4, 0.3, 0.3), µ = (0.5, 0.3, 0.2), σ = (−1, 0, +1),
    # c = 0.16 + 0.09 + 0.09 = 0.34, π_k = 0.4
    # ½[σ_k π_k + Σ σ_i π_i (c − π_i − π_k)]
    # = ½[−0.4 + (−1)(0.4)(0.34 − 0.8) + 0 + (+1)(0.3)(0.34 − 0.3 − 0.4)]
    # = ½[−0.4 + 0.184 − 0.108] = ½(−0.324) = −0.162
    assert dr.dtv_agg(hand_pair()).item() == pytest.approx(-0.162, abs=1e-14)


def test_dtv_uniform_hand_worked() -> None:
    # tail as 2 atoms of π 0.15, µ 0.1 (σ = +1): c = 0.16 + 0.09 + 2·0.0225 = 0.295
    # ½[−0.4 + (−1)(0.4)(0.295 − 0.8) + 0 + 2·(0.15)(0.295 − 0.15 − 0.4)]
    # = ½[−0.4 + 0.202 − 0.0765] = ½(−0.2745) = −0.13725
    assert dr.dtv_uniform(hand_pair(), 4).item() == pytest.approx(-0.13725, abs=1e-14)


def test_dtv_exact_hand_worked() -> None:
    # σ = (−1, 0, +1, 0), c = 0.30:
    # ½[−0.4 + (−1)(0.4)(0.30 − 0.8) + (+1)(0.2)(0.30 − 0.2 − 0.4)]
    # = ½[−0.4 + 0.2 − 0.06] = ½(−0.26) = −0.13
    got = oracles.dtv_exact(lg(*MU_FULL), lg(*PI_FULL), torch.tensor([0]))
    assert got.item() == pytest.approx(-0.13, abs=1e-14)


def test_hand_worked_values_agree_with_fd() -> None:
    # The hand-worked numbers above are themselves derivatives: confirm two by FD.
    mu, pi = torch.tensor(MU_FULL, dtype=F64), torch.tensor(PI_FULL, dtype=F64)
    assert_fd(-0.08, fd(kl, mu, pi, 0))
    assert_fd(-0.162, fd(tv, torch.tensor([0.5, 0.3, 0.2], dtype=F64),
                         torch.tensor([0.4, 0.3, 0.3], dtype=F64), 0))


def test_vocab_equal_to_support_size_drops_the_uniform_tail() -> None:
    # n = m: no unseen token, the (rounding-size) tail contributes nothing to the uniform
    # estimators, and vocab_size < m (bad input) is treated the same, never a division by 0.
    pair = hand_pair()
    for n in (2, 1):
        assert dr.dkl_uniform(pair, n).item() == pytest.approx(-0.1 + 0.04, abs=1e-14)
        assert math.isfinite(dr.dtv_uniform(pair, n).item())
