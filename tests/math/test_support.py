"""Support construction, log1mexp and reduced-distribution tails (SPEC §1 numerics)."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pdm_replay.math import direction as dr
from pdm_replay.math import divergence as dv
from pdm_replay.math.support import (
    build_support,
    gather_support_logprobs,
    log1mexp,
    reduce_logged_pair,
    reduce_logprobs,
    reduce_pair,
)

F64 = torch.float64
FAST = settings(max_examples=60, deadline=None)


def t64(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=F64)


def support_sets(token_id: torch.Tensor, topk_ids: torch.Tensor) -> list[set[int]]:
    s = build_support(token_id, topk_ids)
    return [set(row[v].tolist()) for row, v in zip(s.ids, s.valid)]


# ---------------------------------------------------------------------------- support


def test_support_hand_worked_duplicates_and_padding() -> None:
    # k = 5, logged row [5, 2, -1, 2, 7]: slot 1 repeats k, slot 3 pads, slot 4 repeats 2.
    s = build_support(torch.tensor([5]), torch.tensor([[5, 2, -1, 2, 7]]))
    assert s.ids[0].tolist() == [5, 5, 2, -1, 2, 7]  # column 0 = k, then the row as logged
    assert s.valid[0].tolist() == [True, False, True, False, False, True]
    assert s.size.tolist() == [3]  # S = {5, 2, 7}


@st.composite
def logged_rows(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor, int]:
    """A batch of sampled ids and top-K rows with padding and duplicates anywhere."""
    n = draw(st.integers(3, 40))
    rows = draw(st.integers(1, 5))
    width = draw(st.integers(0, 12))
    k = draw(st.lists(st.integers(0, n - 1), min_size=rows, max_size=rows))
    topk = draw(st.lists(st.lists(st.integers(-1, n - 1), min_size=width, max_size=width),
                         min_size=rows, max_size=rows))
    return torch.tensor(k), torch.tensor(topk, dtype=torch.long).reshape(rows, width), n


@FAST
@given(logged_rows())
def test_support_is_unique_topk_union_k(case: tuple[torch.Tensor, torch.Tensor, int]) -> None:
    k, topk, _ = case
    s = build_support(k, topk)
    assert s.ids.shape == (k.shape[0], topk.shape[1] + 1)
    assert (s.ids[:, 0] == k).all() and s.valid[:, 0].all()  # k is always column 0
    for i in range(k.shape[0]):
        kept = s.ids[i][s.valid[i]].tolist()
        assert len(kept) == len(set(kept))  # no id twice
        assert set(kept) == {int(k[i])} | {x for x in topk[i].tolist() if x >= 0}
        assert int(s.size[i]) == len(kept)


@FAST
@given(logged_rows())
def test_support_is_the_same_for_logged_int32_ids(case: tuple[torch.Tensor, torch.Tensor, int]
                                                  ) -> None:
    """Logs store int32 ids; the reader keeps them so (no (N, K) conversion pass)."""
    k, topk, _ = case
    wide, narrow = build_support(k, topk), build_support(k.int(), topk.int())
    assert narrow.ids.dtype == torch.int64
    assert torch.equal(wide.ids, narrow.ids) and torch.equal(wide.valid, narrow.valid)


def test_known_unique_skips_only_the_repeat_search() -> None:
    # k = 5, row [5, 2, -1, 7]: no id twice, so the promise holds and S is the same.
    k, clean = torch.tensor([5]), torch.tensor([[5, 2, -1, 7]])
    fast, full = build_support(k, clean, known_unique=True), build_support(k, clean)
    assert torch.equal(fast.valid, full.valid) and fast.size.tolist() == [3]
    # Row [2, 2]: a broken promise keeps the repeat (validate rejects such rows first).
    dup = build_support(torch.tensor([5]), torch.tensor([[2, 2]]), known_unique=True)
    assert dup.valid[0].tolist() == [True, True, True]


@FAST
@given(logged_rows(), st.integers(0, 2**31 - 1))
def test_pair_reduced_together_equals_each_reduced_alone(
        case: tuple[torch.Tensor, torch.Tensor, int], seed: int) -> None:
    """reduce_logged_pair stacks µ and π into one (2N, M) tensor: the same bits as two
    separate gathers and reductions, with float32 top-K logs converted on the way."""
    k, topk, _ = case
    g = torch.Generator().manual_seed(seed)
    logp = lambda: -torch.rand(topk.shape, generator=g).float() * 5  # noqa: E731
    mu_k, pi_k = -torch.rand(len(k), generator=g, dtype=F64), -torch.rand(len(k), generator=g,
                                                                          dtype=F64)
    mu_top, pi_top = logp(), logp()
    s = build_support(k, topk)
    alone = reduce_pair(s, gather_support_logprobs(s, mu_k, mu_top),
                        gather_support_logprobs(s, pi_k, pi_top))
    together = reduce_logged_pair(s, (mu_k, mu_top), (pi_k, pi_top))
    for side in ("mu", "pi"):
        a, b = getattr(alone, side), getattr(together, side)
        for name in ("p", "logp", "tail", "log_tail", "mass"):
            assert torch.equal(getattr(a, name), getattr(b, name)), (side, name)


@FAST
@given(n=st.integers(3, 40), data=st.data())
def test_both_topk_conventions_give_the_same_support(n: int, data: st.DataObject) -> None:
    # Engine ranking `order` (best first), sampled k of rank >= K. plus_sampled with top-(K−1)
    # appends k (then padding); replace_last with top-K overwrites slot K with k unless k is
    # the K-th best. Both logs hold the ids top-(K−1) ∪ {k}, so build_support must give
    # that S and identical reduced statistics whatever the layout. (With the same K and k
    # outside the top-K the two conventions log different ids, K+1 vs K: SPEC §1's "same S"
    # is about the builder, not about the engines' lists.)
    order = data.draw(st.permutations(range(n)))
    kk = data.draw(st.integers(2, n))
    k = data.draw(st.sampled_from(order[kk - 1:]))  # rank >= K: the two logs agree
    plus = list(order[:kk - 1]) + [k] + [-1] * data.draw(st.integers(0, 3))
    repl = list(order[:kk])
    if k not in repl:
        repl[-1] = k
    ids = torch.tensor([k, k])
    width = max(len(plus), len(repl))
    topk = torch.tensor([plus + [-1] * (width - len(plus)), repl + [-1] * (width - len(repl))])
    a, b = support_sets(ids, topk)
    assert a == b == set(order[:kk - 1]) | {k}

    z = torch.randn(2, n, dtype=F64, generator=torch.Generator().manual_seed(n))
    logp_behavior, logp_train = torch.log_softmax(z[0], -1), torch.log_softmax(z[1], -1)
    s = build_support(ids, topk)
    g = s.ids.clamp(min=0)
    pair = reduce_pair(s, logp_behavior[g], logp_train[g])
    for stat in (dv.kl_topk(pair), dv.tv_topk(pair), dr.dkl_agg(pair), dr.dtv_agg(pair),
                 dr.dkl_uniform(pair, n), dr.dtv_uniform(pair, n), pair.mu.tail):
        torch.testing.assert_close(stat[0], stat[1], rtol=1e-12, atol=1e-15)


def test_support_when_k_is_inside_topk_matches_for_both_layouts() -> None:
    # k = 4 ranked 2nd of top-3 [9, 4, 1]: plus_sampled logs [9, 4, 1, 4] (k repeated),
    # replace_last leaves [9, 4, 1] untouched. Same S = {9, 4, 1}, m = 3.
    a, b = support_sets(torch.tensor([4, 4]), torch.tensor([[9, 4, 1, 4], [9, 4, 1, -1]]))
    assert a == b == {9, 4, 1}


def test_gather_takes_k_from_logp_k_and_ignores_duplicate_slots() -> None:
    # The duplicate slot of k carries a slightly different (rounded) value: it must be
    # ignored, otherwise k's mass counts twice and the tail goes negative.
    s = build_support(torch.tensor([3]), torch.tensor([[3, 1, -1]]))
    topk_lp = t64(math.log(0.6001), math.log(0.3), 0.0)[None]
    lp = gather_support_logprobs(s, t64(math.log(0.6)), topk_lp)  # layout [3, 3, 1, -1]
    assert lp.dtype == F64 and lp[0, 0].item() == math.log(0.6)
    assert torch.isneginf(lp[0, [1, 3]]).all()
    red = reduce_logprobs(lp)
    torch.testing.assert_close(red.mass, t64(0.9))  # 0.6 + 0.3
    torch.testing.assert_close(red.tail, t64(0.1))  # 1 − 0.9


# ---------------------------------------------------------------------------- log1mexp


def log1mexp_ref(x: float) -> float:
    """``log(1 − e^x)`` of the exact float64 ``x``, >= 60 correct significant digits."""
    with localcontext() as ctx:
        ctx.prec = 80 + int(-x / math.log(10.0))  # 1 − e^x must not round to 1
        return float((1 - Decimal(x).exp()).ln())


def test_log1mexp_known_values() -> None:
    x = t64(-math.log(2.0), 0.0, 1e-3, -math.inf, -1e-20, -40.0)
    out = log1mexp(x)
    assert out[0].item() == pytest.approx(-math.log(2.0), rel=1e-15, abs=0.0)  # 1 − 1/2 = 1/2
    assert torch.isneginf(out[1]) and torch.isneginf(out[2])  # no mass left (x >= 0)
    assert out[3].item() == 0.0  # log(1 − 0)
    # 1 − e^(−1e-20) = 1e-20 − 5e-41 + ... so the log is log(1e-20) = −46.0517018598809...
    assert out[4].item() == pytest.approx(math.log(1e-20), rel=1e-15, abs=0.0)
    # log(1 − e^(−40)) = −e^(−40) − e^(−80)/2 − ... = −4.248354255291589e-18
    assert out[5].item() == pytest.approx(-math.exp(-40.0), rel=1e-15, abs=0.0)


def test_log1mexp_beats_naive_at_both_ends() -> None:
    x = t64(-1e-20, -40.0)
    naive = torch.log(1.0 - torch.exp(x))
    assert torch.isneginf(naive[0]) and naive[1].item() == 0.0  # naive loses everything
    assert torch.isfinite(log1mexp(x)).all() and (log1mexp(x) < 0).all()


# x = −exp(u): magnitudes from 1e-40 (x → 0⁻) to 700 (e^x near the float64 range end)
MAGNITUDES = st.floats(math.log(1e-40), math.log(700.0)).map(lambda u: -math.exp(u))


@settings(max_examples=200, deadline=None)
@given(MAGNITUDES)
def test_log1mexp_matches_high_precision_reference(x: float) -> None:
    assert log1mexp(t64(x)).item() == pytest.approx(log1mexp_ref(x), rel=4e-16 * 8, abs=0.0)


@FAST
@given(st.floats(-3.0, -0.05))
def test_log1mexp_agrees_with_naive_where_naive_is_safe(x: float) -> None:
    # here neither 1 − e^x (>= 0.049) nor its log (|·| >= 0.051) loses digits to rounding
    naive = math.log(1.0 - math.exp(x))
    assert log1mexp(t64(x)).item() == pytest.approx(naive, rel=1e-13, abs=0.0)


# ---------------------------------------------------------------------------- tails


def tail_ref(logps: list[float]) -> float:
    """``1 − Σ e^{logp}`` of the exact float64 inputs, 80 significant digits."""
    with localcontext() as ctx:
        ctx.prec = 80
        return float(1 - sum(Decimal(x).exp() for x in logps))


def test_tiny_tail_of_single_atom_support_is_relatively_accurate() -> None:
    # S = {k} with µ_k = 1 − 1.234e-15: log µ_k = log1p(−1.234e-15). The tail is
    # log1mexp(log µ_k), relatively exact; the naive 1 − exp(log µ_k) is off by ~1%
    # (exp(log µ_k) rounds to a multiple of 2^-53 ≈ 1.1e-16 below 1).
    lp = math.log1p(-1.234e-15)
    red = reduce_logprobs(torch.tensor([[lp, -math.inf]], dtype=F64))
    ref = tail_ref([lp])
    assert red.tail.item() == pytest.approx(ref, rel=1e-13, abs=0.0)
    assert red.log_tail.item() == pytest.approx(math.log(ref), rel=1e-14, abs=0.0)
    assert abs(1.0 - math.exp(lp) - ref) / ref > 1e-3  # what the naive form would give


@FAST
@given(st.integers(2, 30), st.floats(1e-16, 1e-13), st.integers(0, 2**31 - 1))
def test_tiny_tail_of_many_atoms_is_accurate_to_float64_sums(m: int, tail: float,
                                                             seed: int) -> None:
    # Σ_S p = 1 − tail with tail ~1e-15: the log-sum-exp over S is exact to a few ulp of 1,
    # so the tail is exact to ~4e-16 absolute (no cancellation beyond that) and never < 0.
    w = torch.rand(m, dtype=F64, generator=torch.Generator().manual_seed(seed)) + 0.1
    logp = torch.log(w / w.sum()) + math.log1p(-tail)
    red = reduce_logprobs(logp[None])
    ref = tail_ref(logp.tolist())
    assert red.tail.item() >= 0.0 and not torch.isnan(red.log_tail).any()
    assert abs(red.tail.item() - ref) <= 4e-16 * m ** 0.5 + 2e-16


def test_replay_path_normalizes_logits_by_log_z() -> None:
    # Logits on S = (3, 1), full logZ = log(e^3 + e^1 + e^-2): tail = e^-2 / Z.
    z = t64(3.0, 1.0)
    log_z = torch.logsumexp(t64(3.0, 1.0, -2.0), 0)[None]
    red = reduce_logprobs(z[None], log_z)
    expect = math.exp(-2.0) / (math.exp(3.0) + math.exp(1.0) + math.exp(-2.0))
    assert red.tail.item() == pytest.approx(expect, rel=1e-13, abs=0.0)
    torch.testing.assert_close(red.p.sum(-1) + red.tail, t64(1.0), rtol=0, atol=1e-15)


def test_support_far_below_float64_range_gives_full_tail_not_nan() -> None:
    # A training policy can put all of S below e^-745 (every p underflows to 0): the tail
    # is then 1 and log Σ_S p is still exact in log space. Row 2: log Σ = −800 + log1p(e^-1).
    lp = torch.tensor([[-800.0, -math.inf], [-800.0, -801.0]], dtype=F64)
    red = reduce_logprobs(lp)
    assert not torch.isnan(red.log_tail).any() and not torch.isnan(red.tail).any()
    assert red.tail.tolist() == [1.0, 1.0] and red.mass.tolist() == [0.0, 0.0]
    s = build_support(torch.tensor([0]), torch.tensor([[1]]))
    pair = reduce_pair(s, torch.log(t64(0.6, 0.3))[None], torch.tensor([[-800.0, -900.0]]))
    stats = [dv.kl_topk(pair), dv.tv_topk(pair), dr.dkl_agg(pair), dr.dkl_uniform(pair, 10),
             dr.dtv_agg(pair), dr.dtv_uniform(pair, 10)]
    assert all(torch.isfinite(x).all() for x in stats)
    # µ on S = 0.9, π on S = 0: TV = ½(0.6 + 0.3 + |0.1 − 1|) = 0.9
    assert dv.tv_topk(pair).item() == pytest.approx(0.9, rel=1e-14, abs=0.0)


def overflow_pair(mu_mass: float) -> tuple:
    """S = {k, j, l} (µ scaled to ``mu_mass``), π a proper distribution with tail 0.1."""
    s = build_support(torch.tensor([0]), torch.tensor([[1, 2]]))
    logp_behavior = torch.log(t64(0.5, 0.3, 0.2) * mu_mass)[None]
    logp_train = torch.log(t64(0.4, 0.3, 0.2))[None]
    return s, reduce_pair(s, logp_behavior, logp_train)


@pytest.mark.parametrize("mass", [1.3, 1.0 + 2e-4, 1.0 + 1e-9])
def test_mass_overflow_clamps_tail_flags_and_stays_finite(mass: float) -> None:
    _, pair = overflow_pair(mass)
    assert pair.mu.tail.item() == 0.0 and torch.isneginf(pair.mu.log_tail).all()
    assert pair.mu.mass.item() == pytest.approx(mass, rel=1e-14, abs=0.0)
    assert bool(pair.overflow.item()) is (mass > 1.0 + 1e-4)  # 1e-9 is rounding, not overflow
    stats = [dv.kl_topk(pair), dv.tv_topk(pair), dr.dkl_agg(pair), dr.dkl_uniform(pair, 10),
             dr.dtv_agg(pair), dr.dtv_uniform(pair, 10)]
    assert all(torch.isfinite(x).all() for x in stats)


def test_overflowing_pi_mass_stays_finite() -> None:
    # Logged fp32 train log-probs can also sum past 1; the floored logs keep KL finite.
    s = build_support(torch.tensor([0]), torch.tensor([[1]]))
    pair = reduce_pair(s, torch.log(t64(0.5, 0.3))[None], torch.log(t64(0.7, 0.4))[None])
    assert pair.pi.tail.item() == 0.0
    for x in (dv.kl_topk(pair), dv.tv_topk(pair), dr.dkl_agg(pair), dr.dtv_agg(pair)):
        assert torch.isfinite(x).all()
