"""Per-token sums over S (math.sums): against row-by-row sums, chunked == whole, and every
criterion on the sums equals the same criterion on the (N, M) pair, bit for bit."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pdm_replay.math import direction as dr
from pdm_replay.math import divergence as dv
from pdm_replay.math.certificates import dkl_interval
from pdm_replay.math.sums import PairSums, as_sums, pair_sums
from pdm_replay.math.support import ReducedPair

from math_strategies import Batch, batches  # noqa: E402

PROPS = settings(max_examples=60, deadline=None)
FLOOR = math.log(1e-12)


def rowwise(pair: ReducedPair, i: int) -> dict[str, float]:
    """The sums of token ``i`` by a Python loop over its valid slots (k is slot 0)."""
    mu, pi = pair.mu.p[i].tolist(), pair.pi.p[i].tolist()
    logp_behavior, logp_train = pair.mu.logp[i].tolist(), pair.pi.logp[i].tolist()
    live = [j for j, v in enumerate(pair.support.valid[i].tolist()) if v]
    others = [j for j in live if j != 0]
    sign = lambda x: (x > 0) - (x < 0)  # noqa: E731
    return {
        "kl_head": sum(mu[j] * (max(logp_behavior[j], FLOOR) - max(logp_train[j], FLOOR)) for j in live),
        "tv_head": sum(abs(pi[j] - mu[j]) for j in live),
        "pi_diff_others": sum(pi[j] * (pi[j] - mu[j]) for j in others),
        "pi_sq_others": sum(pi[j] ** 2 for j in others),
        "sigma_pi_others": sum(sign(pi[j] - mu[j]) * pi[j] for j in others),
        "sigma_pi_sq_others": sum(sign(pi[j] - mu[j]) * pi[j] ** 2 for j in others),
    }


@PROPS
@given(batches())
def test_sums_match_a_loop_over_each_support(b: Batch) -> None:
    pair = b.pair()
    sums = pair_sums(pair)
    for i in range(len(b.k)):
        for name, want in rowwise(pair, i).items():
            assert math.isclose(getattr(sums, name)[i].item(), want, rel_tol=1e-12,
                                abs_tol=1e-15), (name, i)
    assert torch.equal(sums.m, pair.m)
    assert torch.equal(sums.sigma_k, torch.sign(pair.pi.p_k - pair.mu.p_k))


@PROPS
@given(batches(), st.integers(1, 3))
def test_chunked_sums_equal_the_whole_batch(b: Batch, chunk: int) -> None:
    """Row sums do not depend on the other rows: concatenating chunks changes no bit."""
    whole = pair_sums(b.pair())
    parts = []
    for s in range(0, len(b.k), chunk):
        rows = slice(s, s + chunk)
        parts.append(pair_sums(Batch(b.n, b.k[rows], b.topk[rows], b.logp_behavior[rows],
                                     b.logp_train[rows]).pair()))
    joined = PairSums.cat(parts)
    for name in ("kl_head", "tv_head", "pi_diff_others", "pi_sq_others", "sigma_pi_others",
                 "sigma_pi_sq_others", "m", "sigma_k"):
        assert torch.equal(getattr(joined, name), getattr(whole, name)), name
    for side in ("mu", "pi"):
        for name in ("p_k", "logp_k", "tail", "log_tail", "mass"):
            assert torch.equal(getattr(getattr(joined, side), name),
                               getattr(getattr(whole, side), name)), (side, name)


@PROPS
@given(batches())
def test_criteria_take_the_pair_or_its_sums_alike(b: Batch) -> None:
    pair = b.pair()
    sums = pair_sums(pair)
    assert as_sums(pair) is as_sums(pair) and as_sums(sums) is sums  # computed once per pair
    for f in (dv.kl_topk, dv.tv_topk, dr.dkl_local, dr.dkl_agg, dr.dtv_agg):
        assert torch.equal(f(pair), f(sums)), f.__name__
    for f in (dr.dkl_uniform, dr.dtv_uniform):
        assert torch.equal(f(pair, b.n), f(sums, b.n)), f.__name__
    assert all(torch.equal(x, y) for x, y in zip(dkl_interval(pair, b.n),
                                                 dkl_interval(sums, b.n)))
    assert torch.equal(pair.overflow, sums.overflow)


def test_hand_worked_sums() -> None:
    """S = {k, j}, µ = (0.5, 0.3 | 0.2), π = (0.4, 0.4 | 0.2):
    σ = (−1, +1); Σ_{i≠k} σπ = 0.4, Σ_{i≠k} σπ² = 0.16, Σ_{i≠k} π² = 0.16;
    KL head = 0.5·ln(0.5/0.4) + 0.3·ln(0.3/0.4) = 0.111572 − 0.086305 = 0.025266."""
    from pdm_replay.math.support import build_support, reduce_pair

    s = build_support(torch.tensor([0]), torch.tensor([[1]]))
    lg = lambda *p: torch.tensor([p], dtype=torch.float64).log()  # noqa: E731
    sums = pair_sums(reduce_pair(s, lg(0.5, 0.3), lg(0.4, 0.4)))
    assert sums.sigma_k.item() == -1.0
    assert math.isclose(sums.sigma_pi_others.item(), 0.4, rel_tol=1e-15)
    assert math.isclose(sums.sigma_pi_sq_others.item(), 0.16, rel_tol=1e-15)
    assert math.isclose(sums.pi_sq_others.item(), 0.16, rel_tol=1e-15)
    assert math.isclose(sums.kl_head.item(), 0.5 * math.log(1.25) + 0.3 * math.log(0.75),
                        rel_tol=1e-14)
