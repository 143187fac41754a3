"""pdm_replay.loss.policy_loss: its gradient is the replay's simulated-step gradient."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pdm_replay.io.reader import FlatTokens
from pdm_replay.loss import mask_stats, policy_loss
from pdm_replay.masks import MASK_SPECS, Thresholds
from pdm_replay.math.segments import Segments
from pdm_replay.math.surrogate import surrogate_loss
from pdm_replay.replay.step import ParamSnapshot, simulated_step
from pdm_replay.schema import RolloutMeta
from pdm_replay.tokens import log_stats

F64 = torch.float64
B, T, V, K = 6, 7, 12, 3
MASK_NAMES = ["ppo_clip", "verl_vanilla", "dppo_topk_kl", "pdm_kl_agg", "pdm_tv_uniform",
              "pdm_kl_certified", "gspo", "cispo", "tis", "seq_tis", "mis", "icepop",
              "rs_seq_mean_k3", "rs_token_k1", "dsv32_offpolicy",
              "trl_is_sequence_mask", "trl_cispo", "openrlhf_seq_mask_tis", "slime_veto",
              "m2po", "vaco_tv", "prime_rl_default", "prime_rl_ipo", "sapo", "gmpo"]


# regions narrow enough that every listed mask acts on setup(1)'s mismatch
THRESHOLDS = Thresholds(delta_kl=0.05, delta_tv=0.1, gspo_eps_low=0.05, gspo_eps_high=0.05,
                        rs_k3=0.3, mis_low=0.01, mis_high=100.0, dsv32_delta=0.02,
                        trl_cispo_cap=1.2, openrlhf_is_low=0.7, openrlhf_is_high=5.0,
                        slime_veto=0.33, prime_rl_low=0.05, prime_rl_high=0.05)


def setup(seed: int):
    """Logits θ ``(B, T, V)`` (the parameters), µ, sampled tokens, µ's top-K
    (replace_last: the sampled token overwrites the last slot), Â, a padded loss mask."""
    g = torch.Generator().manual_seed(seed)
    z_mu = torch.randn(B, T, V, generator=g, dtype=F64) * 1.5
    theta = torch.nn.Parameter(z_mu + torch.randn(B, T, V, generator=g, dtype=F64) * 0.7)
    logp_behavior = torch.log_softmax(z_mu, -1)
    k = torch.multinomial(logp_behavior.exp().reshape(-1, V), 1, generator=g).reshape(B, T)
    topk = torch.topk(logp_behavior, K, -1).indices
    missing = ~(topk == k[..., None]).any(-1)
    topk[..., -1] = torch.where(missing, k, topk[..., -1])
    adv = torch.randn(B, 1, generator=g, dtype=F64).expand(B, T).clone()
    adv[0, :2] = 0.0
    loss_mask = torch.arange(T)[None, :] < torch.randint(3, T + 1, (B, 1), generator=g)
    return theta, logp_behavior, k, topk, adv, loss_mask


META = RolloutMeta(vocab_size=V, top_k=K, topk_convention="replace_last")  # as setup logs


def flat_of(theta, logp_behavior, k, topk, adv, loss_mask) -> FlatTokens:
    """The tokens of :func:`setup` as the log-only path reads them (π logged from θ)."""
    with torch.no_grad():
        logp_train = torch.log_softmax(theta, -1)
    n = B * T
    return FlatTokens(
        sample_id=np.array([f"s{r}" for r in range(B) for _ in range(T)], dtype=object),
        step=np.zeros(n, np.int64), row=np.repeat(np.arange(B), T),
        pos=np.tile(np.arange(T, dtype=np.int32), B), token_id=k.reshape(-1).numpy(),
        advantage=adv.reshape(-1).numpy(), loss_mask=loss_mask.reshape(-1).numpy(),
        logp_behavior=logp_behavior.gather(-1, k[..., None]).reshape(-1).numpy(),
        topk_ids=topk.reshape(n, K).numpy(),
        topk_logprobs=logp_behavior.gather(-1, topk).reshape(n, K).numpy(),
        train_logprobs=logp_train.gather(-1, k[..., None]).reshape(-1).numpy(),
        train_topk_logprobs=logp_train.gather(-1, topk).reshape(n, K).numpy())


def replay_gradient(name, theta, logp_behavior, k, topk, adv, loss_mask, t):
    """−Δθ of one SGD step at lr 1 as the replay takes it: statistics from the log-only
    path (FlatTokens -> log_stats), weight × loss mask, surrogate_loss, simulated_step."""
    flat = flat_of(theta, logp_behavior, k, topk, adv, loss_mask)
    stats = log_stats(flat, V, META)
    seqs = Segments.of(flat.row, flat.loss_mask)
    weight = MASK_SPECS[name].build(t).weight(stats, seqs) * torch.from_numpy(flat.loss_mask)

    def backward() -> None:
        logp = torch.log_softmax(theta, -1).gather(-1, k[..., None]).reshape(-1)
        surrogate_loss(logp, torch.from_numpy(flat.logp_behavior),
                       torch.from_numpy(flat.advantage), weight,
                       int(flat.loss_mask.sum())).backward()

    snap = ParamSnapshot([theta])
    delta = simulated_step([theta], snap, backward, optimizer="sgd", lr=1.0,
                           measure=lambda s: s.delta()[0].clone())
    return -delta


@pytest.mark.parametrize("name", MASK_NAMES)
def test_policy_loss_gradient_is_the_simulated_step_gradient(name: str) -> None:
    t = THRESHOLDS
    theta, logp_behavior, k, topk, adv, loss_mask = setup(1)
    expected = replay_gradient(name, theta, logp_behavior, k, topk, adv, loss_mask, t)
    logp_train = torch.log_softmax(theta, -1)
    loss = policy_loss(name, logp_train.gather(-1, k[..., None])[..., 0],
                       logp_behavior.gather(-1, k[..., None])[..., 0], adv, loss_mask, token_ids=k,
                       topk_ids=topk, topk_logp_behavior=logp_behavior.gather(-1, topk),
                       topk_logp_train=logp_train.detach().gather(-1, topk), vocab_size=V,
                       top_k=K, topk_convention="replace_last", thresholds=t)
    (grad,) = torch.autograd.grad(loss, theta)
    # the step's Δθ = (θ − g) − θ rounds once at the scale of θ: half an ulp of |θ| per
    # entry (the gradient itself is the same float64 expression on both sides)
    ulp = torch.finfo(F64).eps * theta.detach().abs().clamp(min=1.0)
    assert ((grad - expected).abs() <= ulp).all()
    assert (grad != 0).any()


def test_masks_differ_so_the_gradient_test_is_not_vacuous() -> None:
    t = THRESHOLDS
    theta, logp_behavior, k, topk, adv, loss_mask = setup(1)
    grads = {n: replay_gradient(n, theta, logp_behavior, k, topk, adv, loss_mask, t) for n in MASK_NAMES}
    ref = replay_gradient("none", theta, logp_behavior, k, topk, adv, loss_mask, t)
    assert all(not torch.equal(g, ref) for g in grads.values())


def test_loss_statistics_are_the_log_only_statistics() -> None:
    """policy_loss's statistics come from the builder ``masks`` and ``replay`` use: every
    field equals log_stats' at the loss tokens, the genuine-top-K cap included (without
    ``top_k`` the certificate interval is only looser, never narrower)."""
    theta, logp_behavior, k, topk, adv, loss_mask = setup(1)
    flat = flat_of(theta, logp_behavior, k, topk, adv, loss_mask)
    want = log_stats(flat, V, META)
    sel = torch.from_numpy(flat.loss_mask)
    logp_train = torch.log_softmax(theta.detach(), -1)
    at_k = k[..., None]
    args = (logp_train.gather(-1, at_k)[..., 0][loss_mask], logp_behavior.gather(-1, at_k)[..., 0][loss_mask],
            adv[loss_mask], k[loss_mask], topk[loss_mask], logp_behavior.gather(-1, topk)[loss_mask],
            logp_train.gather(-1, topk)[loss_mask], V)
    got = mask_stats(*args, top_k=K, topk_convention="replace_last")
    for name, value in want.as_dict().items():
        assert torch.equal(got.as_dict()[name], value[sel]), name
    loose = mask_stats(*args)  # no cap: µ_tail alone bounds the unseen tokens
    assert (loose.dkl_hi >= got.dkl_hi).all() and (loose.dkl_hi > got.dkl_hi).any()
