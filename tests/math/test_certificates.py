"""Sign certificates: the exact Ḋ_kl always lies in [dkl_lo, dkl_hi] (issue 9, part 1)."""

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from pdm_replay.math.certificates import (AWAY, TOWARD, UNCERTAIN, certify, dkl_interval,
                                          genuine_topk, unseen_cap)
from pdm_replay.math.direction import dkl_exact
from pdm_replay.math.support import build_support, gather_support_logprobs, reduce_pair

F64 = torch.float64


def _logged(logp_behavior: torch.Tensor, logp_train: torch.Tensor, k: int, top_k: int, conv: str):
    """What an engine logs for one token: top-K ids under ``conv``, µ and π at them."""
    top = torch.topk(logp_behavior, top_k).indices
    if conv == "plus_sampled":
        ids = top if (top == k).any() else torch.cat([top, torch.tensor([k])])
    else:
        ids = top.clone()
        if not (top == k).any():
            ids[-1] = k
    return ids[None], logp_behavior[ids][None], logp_train[ids][None]


@settings(max_examples=300, deadline=None)
@given(n=st.integers(3, 40), top_k=st.integers(1, 8), seed=st.integers(0, 2**31 - 1),
       peak=st.floats(0.1, 6.0), conv=st.sampled_from(["plus_sampled", "replace_last"]))
def test_exact_derivative_lies_in_interval(n, top_k, seed, peak, conv) -> None:
    g = torch.Generator().manual_seed(seed)
    top_k = min(top_k, n - 1)
    logp_behavior = torch.log_softmax(torch.randn(n, generator=g, dtype=F64) * peak, -1)
    logp_train = torch.log_softmax(logp_behavior + torch.randn(n, generator=g, dtype=F64), -1)
    k = int(torch.multinomial(logp_behavior.exp(), 1, generator=g))
    ids, tmu, tpi = _logged(logp_behavior, logp_train, k, top_k, conv)
    kt = torch.tensor([k])
    support = build_support(kt, ids)
    pair = reduce_pair(support, gather_support_logprobs(support, logp_behavior[kt], tmu),
                       gather_support_logprobs(support, logp_train[kt], tpi))
    cap = unseen_cap(tmu, genuine_topk(ids, kt, top_k, conv))
    lo, hi = dkl_interval(pair, n, cap)
    exact = dkl_exact(logp_behavior[None], logp_train[None], kt)
    assert lo.item() - 1e-12 <= exact.item() <= hi.item() + 1e-12
    # the cap really bounds every unseen µ_j
    unseen = torch.ones(n, dtype=torch.bool)
    unseen[support.ids[0][support.valid[0]]] = False
    if unseen.any():
        assert logp_behavior[unseen].exp().max() <= cap.item() + 1e-15


def test_genuine_slots_per_convention() -> None:
    ids = torch.tensor([[4, 2, 9]])  # K = 2; plus_sampled appended k = 9 at slot 2
    assert genuine_topk(ids, torch.tensor([9]), 2, "plus_sampled").tolist() == [[True, True,
                                                                                 False]]
    ids = torch.tensor([[4, 9]])  # replace_last: k = 9 may have been swapped into slot 1
    assert genuine_topk(ids, torch.tensor([9]), 2, "replace_last").tolist() == [[True, False]]
    assert genuine_topk(ids, torch.tensor([4]), 2, "replace_last").tolist() == [[True, True]]
    with pytest.raises(ValueError, match="sideways"):
        genuine_topk(ids, torch.tensor([4]), 2, "sideways")
    assert math.isinf(unseen_cap(torch.tensor([[-1.0]]), torch.tensor([[False]])).item())


def _pair(mu, pi):
    s = build_support(torch.tensor([0]), torch.tensor([list(range(1, len(mu)))]))
    lg = lambda p: torch.tensor([p], dtype=F64).log()  # noqa: E731
    return reduce_pair(s, lg(mu), lg(pi))


def test_hand_worked_away_toward_uncertain() -> None:
    # away: S = {k}, µ_k = 0.2, π_k = 0.7 (tails 0.8 / 0.3), n = 3, no cap.
    # A = (0.7 − 0.2) − 0.7·(0.7 − 0.2) = 0.15; lo = 0.15 − 0.3² = 0.06 > 0 → away for Â > 0.
    lo, hi = dkl_interval(_pair([0.2], [0.7]), 3)
    assert lo.item() == pytest.approx(0.06)
    # hi = 0.15 − 0.09/2 + 0.3·0.8 = 0.345
    assert hi.item() == pytest.approx(0.345)
    assert certify(lo, hi, torch.tensor([2.0])).item() == AWAY
    assert certify(lo, hi, torch.tensor([-2.0])).item() == TOWARD
    # uncertain: µ_k = 0.5, π_k = 0.6 (tails 0.5 / 0.4), n = 3.
    # A = 0.1 − 0.6·0.1 = 0.04; lo = 0.04 − 0.16 = −0.12; hi = 0.04 − 0.08 + 0.4·0.5 = 0.16
    lo, hi = dkl_interval(_pair([0.5], [0.6]), 3)
    assert (lo.item(), hi.item()) == (pytest.approx(-0.12), pytest.approx(0.16))
    assert certify(lo, hi, torch.tensor([1.0])).item() == UNCERTAIN
    # Â = 0: no step, never certified
    assert certify(lo, hi, torch.tensor([0.0])).item() == UNCERTAIN


def test_certified_mask_follows_the_certificate() -> None:
    from pdm_replay.masks import Thresholds, build_masks
    from pdm_replay.math.metrics import token_stats
    pair = _pair([0.2], [0.7])  # certified away for Â > 0, toward for Â < 0 (above)
    mask = build_masks(["pdm_kl_certified"], Thresholds(delta_kl=0.01))["pdm_kl_certified"]
    for adv, kept in ((1.0, False), (-1.0, True), (0.0, True)):
        stats = token_stats(pair, torch.tensor([adv]), 3)
        assert stats.kl_topk.item() > 0.01
        assert bool(mask.keep(stats).item()) is kept


def test_cap_is_infinite_without_genuine_entries_or_any_topk() -> None:
    """No genuine slot, or no top-K column at all, bounds nothing: cap = inf (then only
    µ_tail bounds the unseen µ_j). The min is taken in the logged dtype: float32 here."""
    lp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]], dtype=torch.float32)
    genuine = torch.tensor([[True, False], [False, False]])
    cap = unseen_cap(lp, genuine)
    assert cap.dtype == torch.float64 and math.isclose(cap[0].item(), math.exp(-1.0), rel_tol=1e-15)
    assert cap[1].item() == math.inf
    assert unseen_cap(lp[:, :0], genuine[:, :0]).tolist() == [math.inf, math.inf]
