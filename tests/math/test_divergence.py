"""Proximity criteria (SPEC §2): hand-worked values and hypothesis properties."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

from pdm_replay.math import divergence as dv
from pdm_replay.math.support import ReducedPair, build_support, reduce_pair

import oracles  # noqa: E402
from math_strategies import F64, Batch, batches  # noqa: E402



def lg(*rows: tuple[float, ...]) -> Tensor:
    """Log of a batch of probability rows, ``(N, len(row))`` float64."""
    return torch.log(torch.tensor(rows, dtype=F64))


PROPS = settings(max_examples=50, deadline=None)


# ---------------------------------------------------------------------------- hand-worked
# One token, n = 4, k = 0, S = {0, 1} (m = 2), tokens 2, 3 unseen:
#   µ = (0.5, 0.3 | 0.1, 0.1) -> µ_tail = 0.2
#   π = (0.4, 0.4 | 0.15, 0.05) -> π_tail = 0.2
# ln(0.5/0.4) = 0.2231436, ln(0.3/0.4) = −0.2876821, ln(0.5/0.6) = −0.1823216,
# ln(0.1/0.15) = −0.4054651, ln(0.1/0.05) = 0.6931472.
MU_FULL, PI_FULL = (0.5, 0.3, 0.1, 0.1), (0.4, 0.4, 0.15, 0.05)


def hand_pair() -> ReducedPair:
    s = build_support(torch.tensor([0]), torch.tensor([[1]]))
    return reduce_pair(s, lg(MU_FULL[:2]), lg(PI_FULL[:2]))


def test_kl_topk_hand_worked() -> None:
    # 0.5·0.2231436 + 0.3·(−0.2876821) + 0.2·ln(0.2/0.2)
    # = 0.1115718 − 0.0863046 + 0 = 0.0252672
    assert dv.kl_topk(hand_pair()).item() == pytest.approx(0.0252671539, abs=1e-10)


def test_tv_topk_hand_worked() -> None:
    # ½ (|0.5 − 0.4| + |0.3 − 0.4| + |0.2 − 0.2|) = ½ (0.1 + 0.1 + 0) = 0.1
    assert dv.tv_topk(hand_pair()).item() == pytest.approx(0.1, abs=1e-14)


def test_kl_binary_hand_worked() -> None:
    # µ_k = 0.5, π_k = 0.4: 0.5·ln(0.5/0.4) + 0.5·ln(0.5/0.6)
    # = 0.5·0.2231436 + 0.5·(−0.1823216) = 0.1115718 − 0.0911608 = 0.0204110
    logp_behavior, logp_train = lg((0.5,))[:, 0], lg((0.4,))[:, 0]
    assert dv.kl_binary(logp_behavior, logp_train).item() == pytest.approx(0.0204109973, abs=1e-10)


def test_tv_binary_hand_worked() -> None:
    # |0.5 − 0.4| = 0.1 (the two atoms {k, rest} each differ by 0.1; ½·0.2)
    logp_behavior, logp_train = lg((0.5,), (0.25,))[:, 0], lg((0.4,), (0.75,))[:, 0]
    torch.testing.assert_close(dv.tv_binary(logp_behavior, logp_train), torch.tensor([0.1, 0.5], dtype=F64))


def test_kl_exact_hand_worked() -> None:
    # 0.1115718 − 0.0863046 + 0.1·(−0.4054651) + 0.1·0.6931472
    # = 0.0252672 − 0.0405465 + 0.0693147 = 0.0540354 (>= kl_topk 0.0252672: lower bound)
    assert dv.kl_exact(lg(MU_FULL), lg(PI_FULL)).item() == pytest.approx(0.0540353612, abs=1e-10)


def test_tv_exact_hand_worked() -> None:
    # ½ (0.1 + 0.1 + 0.05 + 0.05) = 0.15 (>= tv_topk 0.1)
    assert oracles.tv_exact(lg(MU_FULL), lg(PI_FULL)).item() == pytest.approx(0.15, abs=1e-14)


def test_divergences_vanish_when_mu_equals_pi() -> None:
    p = lg((0.7, 0.2, 0.1))
    s = build_support(torch.tensor([1]), torch.tensor([[0]]))
    pair = reduce_pair(s, p[:, [1, 0]], p[:, [1, 0]])
    for x in (dv.kl_topk(pair), dv.tv_topk(pair), dv.kl_exact(p, p), oracles.tv_exact(p, p),
              dv.kl_binary(p[:, 1], p[:, 1]), dv.tv_binary(p[:, 1], p[:, 1])):
        assert x.abs().item() <= 1e-16


# ---------------------------------------------------------------------------- properties


@PROPS
@given(batches())
def test_topk_sits_between_binary_and_exact(b: Batch) -> None:
    # Data processing: {k, rest} is coarser than S ∪ {tail}, which is coarser than the
    # vocabulary, so binary <= top-K <= exact for KL and for TV.
    pair = b.pair()
    lmu_k, lpi_k = pair.mu.logp_k, pair.pi.logp_k
    kb, kt, ke = dv.kl_binary(lmu_k, lpi_k), dv.kl_topk(pair), dv.kl_exact(b.logp_behavior, b.logp_train)
    tb, tt, te = dv.tv_binary(lmu_k, lpi_k), dv.tv_topk(pair), oracles.tv_exact(b.logp_behavior, b.logp_train)
    # The tail comes from a float64 sum over S, so it is exact to ~n ulp of 1 absolute; a
    # tail term µ_t·ln(µ_t/π_t) then carries a relative error ~n·2e-16/π_t.
    tail_err = 4e-16 * b.n * pair.mu.tail / pair.pi.tail.clamp(min=1e-12)
    tol = 1e-12 * (1.0 + ke) + tail_err
    assert (kb >= -tol).all() and (kb <= kt + tol).all() and (kt <= ke + tol).all()
    assert (tb >= 0).all() and (tb <= tt + 1e-12).all() and (tt <= te + 1e-12).all()
    assert (te <= 1.0 + 1e-12).all()


@PROPS
@given(batches(full=True))
def test_whole_vocabulary_support_gives_exact_values(b: Batch) -> None:
    pair = b.pair()
    assert (pair.m == b.n).all()
    torch.testing.assert_close(dv.kl_topk(pair), dv.kl_exact(b.logp_behavior, b.logp_train), rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(dv.tv_topk(pair), oracles.tv_exact(b.logp_behavior, b.logp_train), rtol=1e-12,
                               atol=1e-13)


def uniform_tail_full(b: Batch, pair: ReducedPair) -> tuple[Tensor, Tensor]:
    """Full (N, n) log-probs: S as given, each unseen token holding tail/(n − m)."""
    out = []
    for red in (pair.mu, pair.pi):
        p = torch.zeros(b.k.shape[0], b.n, dtype=F64)
        for i in range(p.shape[0]):
            v, ids = pair.support.valid[i], pair.support.ids[i]
            unseen = b.n - int(v.sum())
            p[i] = red.tail[i] / max(unseen, 1)
            p[i, ids[v]] = red.p[i, v]
        out.append(torch.log(p))
    return out[0], out[1]


@PROPS
@given(batches())
def test_uniform_tail_model_gives_the_topk_value(b: Batch) -> None:
    # (n − m)·(µ_t/(n−m))·ln((µ_t/(n−m)) / (π_t/(n−m))) = µ_t ln(µ_t/π_t), same for |·|.
    pair = b.pair()
    lmu_u, lpi_u = uniform_tail_full(b, pair)
    full_support = pair.m == b.n  # no unseen token to spread the (rounding) tail over
    kl_u, tv_u = dv.kl_exact(lmu_u, lpi_u), oracles.tv_exact(lmu_u, lpi_u)
    torch.testing.assert_close(kl_u[~full_support], dv.kl_topk(pair)[~full_support],
                               rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(tv_u[~full_support], dv.tv_topk(pair)[~full_support],
                               rtol=1e-12, atol=1e-13)


@PROPS
@given(st.lists(st.tuples(st.floats(-40.0, 0.0), st.floats(-40.0, 0.0)), min_size=1,
                max_size=8))
def test_binary_divergences_are_finite_nonnegative_and_bounded(lps: list) -> None:
    logp_behavior, logp_train = torch.tensor(lps, dtype=F64).T
    kl, tv = dv.kl_binary(logp_behavior, logp_train), dv.tv_binary(logp_behavior, logp_train)
    assert torch.isfinite(kl).all() and (kl >= -1e-12).all()
    assert ((tv >= 0) & (tv <= 1)).all()
    # symmetric in the labeling of the two atoms: KL(µ‖π) over {k, rest} is the same
    # computed from the complementary probabilities (1−µ_k, 1−π_k); the test's own
    # log(1 − p) round trip loses ~1e-16/min(p, 1−p) relative, so keep p in [1e-4, 1−1e-4]
    inner = lambda lp: (lp > math.log(1e-4)) & (lp < math.log1p(-1e-4))  # noqa: E731
    rest_ok = inner(logp_behavior) & inner(logp_train)
    swapped = dv.kl_binary(torch.log(-torch.expm1(logp_behavior)), torch.log(-torch.expm1(logp_train)))
    torch.testing.assert_close(swapped[rest_ok], kl[rest_ok], rtol=1e-9, atol=1e-12)


def test_zero_probability_terms_do_not_produce_nan() -> None:
    # µ_j = 0 exactly (−inf log) contributes 0·log 0 = 0; π_j = 0 with µ_j > 0 is floored
    # at 1e-12: 0.5·(ln 0.5 − ln 1e-12) + 0.5·ln(0.5/1) = 0.5·(−0.6931 + 27.6310) − 0.3466.
    logp_behavior = torch.tensor([[math.log(0.5), math.log(0.5), -math.inf]], dtype=F64)
    logp_train = torch.tensor([[-math.inf, 0.0, -math.inf]], dtype=F64)
    expect = 0.5 * (math.log(0.5) - math.log(1e-12)) + 0.5 * math.log(0.5)
    assert dv.kl_exact(logp_behavior, logp_train).item() == pytest.approx(expect, rel=1e-14, abs=0.0)
    assert oracles.tv_exact(logp_behavior, logp_train).item() == pytest.approx(0.5, rel=1e-14, abs=0.0)
