"""Parity of the registry's masks with the real implementations, token by token.

verl 0.9's own functions (``verl/trainer/ppo/core_algos.py``: ``compute_policy_loss_vanilla``
with and without dual-clip, ``_dppo_kl``, ``_dppo_tv``, ``_gspo``, ``_cispo``;
``verl/trainer/ppo/rollout_corr_helper.py``: ``compute_rollout_rejection_mask`` for every
``rollout_rs`` option, ``compute_rollout_correction_weights`` for TIS / IcePop / MIS) run on
the same tokens as the masks: their zero-gradient tokens (autograd of verl's loss) are the
tokens the mask drops, and their IS weights equal ``w·r``; TRL's
``GRPOTrainer.get_off_policy_mask`` (DeepSeek-V3.2's off-policy sequence mask) likewise.
Stable-RL's top-K DPPO is not
installable: its cases are hand-worked from ``compute_topk_kl``
(``verl/workers/actor/utils.py``) and ``_compute_token_mask_for_policy_loss``
(``verl/trainer/ppo/core_algos.py``) of sail-sg/Stable-RL.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from pdm_replay.masks import Thresholds, build_masks
from pdm_replay.math.metrics import TokenStats, token_stats
from pdm_replay.math.segments import Segments
from pdm_replay.math.support import build_support, reduce_pair

core_algos = pytest.importorskip("verl.trainer.ppo.core_algos",
                                 reason="verl is not installed (pip install --no-deps verl==0.9.*)")
rc = pytest.importorskip("verl.trainer.ppo.rollout_corr_helper", reason="verl is not installed")
from verl.workers.config.actor import ActorConfig  # noqa: E402

F64 = torch.float64
B, T = 24, 16


def batch(seed: int, spread: float = 0.8, seq_spread: float = 0.0):
    """(B, T) µ_k, π_k log-probs, per-token Â ≠ 0 and a padded response mask.

    log r = spread·N(0, 1) per token (+ seq_spread·N(0, 1) per sequence); µ_k in
    (0.02, 0.9) so neither binary divergence sits at a floor; |log r| < 20 so verl's
    ±20 clamp of log r (which zeroes gradients) never acts.
    """
    g = torch.Generator().manual_seed(seed)
    logp_behavior = torch.log(torch.rand(B, T, generator=g, dtype=F64) * 0.88 + 0.02)
    lr = spread * torch.randn(B, T, generator=g, dtype=F64)
    lr = lr + seq_spread * torch.randn(B, 1, generator=g, dtype=F64)
    logp_train = torch.minimum(logp_behavior + lr, torch.full_like(logp_behavior, -1e-3))  # π_k < 1
    adv = torch.randn(B, T, generator=g, dtype=F64)
    lengths = torch.randint(4, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    return logp_behavior, logp_train, adv, mask


def stats_of(logp_behavior, logp_train, adv, mask) -> tuple[TokenStats, Segments, torch.Tensor]:
    """Binary-support TokenStats of the valid tokens, their Segments, the valid index."""
    sel = mask.reshape(-1)
    n = int(sel.sum())
    support = build_support(torch.zeros(n, dtype=torch.long), torch.zeros(n, 0, dtype=torch.long))
    pick = lambda x: x.reshape(-1)[sel][:, None]  # noqa: E731
    s = token_stats(reduce_pair(support, pick(logp_behavior), pick(logp_train)), adv.reshape(-1)[sel], 1000)
    rows = torch.arange(B)[:, None].expand(B, T).reshape(-1)[sel]
    return s, Segments(rows, torch.ones(n, dtype=torch.bool)), sel


def verl_zero_grad(loss_fn, logp_behavior, logp_train, adv, mask, **cfg) -> torch.Tensor:
    """Valid tokens where verl's loss has no gradient w.r.t. log π (flat, valid order)."""
    lp = logp_train.clone().requires_grad_(True)
    config = ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1, **cfg)
    loss, _ = loss_fn(logp_behavior, lp, adv, mask.double(), "token-mean", config)
    loss.backward()
    return (lp.grad == 0).reshape(-1)[mask.reshape(-1)]


def mask_drops(name: str, t: Thresholds, logp_behavior, logp_train, adv, mask) -> torch.Tensor:
    s, seqs, _ = stats_of(logp_behavior, logp_train, adv, mask)
    return ~build_masks([name], t)[name].keep(s, seqs)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_verl_vanilla_with_and_without_dual_clip(seed: int) -> None:
    logp_behavior, logp_train, adv, mask = batch(seed)
    t = Thresholds()
    dual = verl_zero_grad(core_algos.compute_policy_loss_vanilla, logp_behavior, logp_train, adv, mask,
                          clip_ratio=0.2, clip_ratio_c=3.0)
    assert torch.equal(dual, mask_drops("verl_vanilla", t, logp_behavior, logp_train, adv, mask))
    t3 = Thresholds(clip_ratio_c=3.0)
    assert torch.equal(dual, mask_drops("ppo_clip", t3, logp_behavior, logp_train, adv, mask))
    # verl cannot switch dual-clip off (it asserts c > 1): a c above every ratio is "off"
    plain = verl_zero_grad(core_algos.compute_policy_loss_vanilla, logp_behavior, logp_train, adv, mask,
                           clip_ratio=0.2, clip_ratio_c=1e12)
    assert torch.equal(plain, mask_drops("ppo_clip", t, logp_behavior, logp_train, adv, mask))
    # the difference is not vacuous: dual-clip drops Â < 0, r > 3 tokens ppo_clip keeps
    assert int((dual & ~plain).sum()) > 0
    higher = verl_zero_grad(core_algos.compute_policy_loss_vanilla, logp_behavior, logp_train, adv, mask,
                            clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28,
                            clip_ratio_c=1e12)
    assert torch.equal(higher, mask_drops("clip_higher", t, logp_behavior, logp_train, adv, mask))
    assert 0 < int(plain.sum()) < plain.numel()


@pytest.mark.parametrize("family", ["kl", "tv"])
def test_verl_dppo_binary(family: str) -> None:
    logp_behavior, logp_train, adv, mask = batch(3, spread=1.0)
    fn = getattr(core_algos, f"compute_policy_loss_dppo_{family}")
    for delta in (0.05, 0.15):
        verl = verl_zero_grad(fn, logp_behavior, logp_train, adv, mask, clip_ratio=delta,
                              clip_ratio_low=delta, clip_ratio_high=delta)
        ours = mask_drops(f"dppo_binary_{family}", Thresholds(**{f"delta_{family}": delta}),
                          logp_behavior, logp_train, adv, mask)
        assert torch.equal(verl, ours)
        assert 0 < int(ours.sum()) < ours.numel()


def test_verl_gspo_sequence_ratio_band() -> None:
    # GSPO's band is 3e-4 / 4e-4 wide: a per-sequence offset of ~1e-3 in mean log r puts
    # some sequences inside and some outside
    logp_behavior, logp_train, adv, mask = batch(4, spread=1e-3, seq_spread=1e-3)
    t = Thresholds()
    verl = verl_zero_grad(core_algos.compute_policy_loss_gspo, logp_behavior, logp_train, adv, mask,
                          clip_ratio=0.2, clip_ratio_low=t.gspo_eps_low,
                          clip_ratio_high=t.gspo_eps_high)
    ours = mask_drops("gspo", t, logp_behavior, logp_train, adv, mask)
    assert torch.equal(verl, ours)
    assert 0 < int(ours.sum()) < ours.numel()


def test_verl_cispo_weight_is_the_clipped_ratio() -> None:
    # verl's CISPO loss −sg(clip(r))·Â·log π / N has d/d log π = −clip(r)·Â/N; the
    # surrogate −w·r·Â/N has d/d log π = −w·r·Â/N, so w·r must equal clip(r)
    logp_behavior, logp_train, adv, mask = batch(5)
    lp = logp_train.clone().requires_grad_(True)
    config = ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1,
                         clip_ratio=0.2)
    loss, _ = core_algos.compute_policy_loss_cispo(logp_behavior, lp, adv, mask.double(),
                                                   "token-mean", config)
    loss.backward()
    s, seqs, sel = stats_of(logp_behavior, logp_train, adv, mask)
    w = build_masks(["cispo"], Thresholds())["cispo"].weight(s, seqs)
    n = int(mask.sum())
    ours = -w * s.ratio * s.advantage / n
    # both sides are a handful of float64 roundings of the same product: 8 ulps
    torch.testing.assert_close(lp.grad.reshape(-1)[sel], ours, rtol=8 * 2**-52, atol=0.0)


RS_OPTIONS = {  # rollout_rs option: (our mask, its Thresholds field)
    "token_k1": ("rs_token_k1", "rs_k1"), "token_k2": ("rs_token_k2", "rs_k2"),
    "token_k3": ("rs_token_k3", "rs_k3"), "seq_sum_k1": ("rs_seq_sum_k1", "rs_k1"),
    "seq_sum_k2": ("rs_seq_sum_k2", "rs_k2"), "seq_sum_k3": ("rs_seq_sum_k3", "rs_k3"),
    "seq_mean_k1": ("rs_seq_mean_k1", "rs_seq_mean_k1_high"),
    "seq_mean_k2": ("rs_seq_mean_k2", "rs_k2"), "seq_mean_k3": ("rs_seq_mean_k3", "rs_k3"),
    "seq_max_k2": ("rs_seq_max_k2", "rs_k2"), "seq_max_k3": ("rs_seq_max_k3", "rs_k3"),
}


def test_every_rollout_rs_option_is_registered() -> None:
    assert set(RS_OPTIONS) == rc.SUPPORTED_ROLLOUT_RS_OPTIONS


@pytest.mark.parametrize("option", sorted(RS_OPTIONS))
def test_verl_rollout_rejection_mask(option: str) -> None:
    name, field = RS_OPTIONS[option]
    for spread, value in ((0.05, None), (0.3, 1.5), (0.3, 0.2)):
        logp_behavior, logp_train, adv, mask = batch(6, spread=spread, seq_spread=spread / 4)
        t = Thresholds() if value is None else Thresholds(**{field: value})
        if option.endswith("k1") and getattr(t, field) <= 1:
            continue  # a k1 option's C is a ratio bound > 1
        spec = str(getattr(t, field))
        if option == "seq_mean_k1":  # two bounds of its own: verl's "lower_upper"
            t = replace(t, rs_seq_mean_k1_low=1 / t.rs_seq_mean_k1_high)
            spec = f"{t.rs_seq_mean_k1_low!r}_{t.rs_seq_mean_k1_high!r}"
        kept, _ = rc.compute_rollout_rejection_mask(logp_train - logp_behavior, mask.double(), option, spec)
        verl_drops = (kept == 0).reshape(-1)[mask.reshape(-1)]
        assert torch.equal(verl_drops, mask_drops(name, t, logp_behavior, logp_train, adv, mask)), (option, t)


@pytest.mark.parametrize("name,level,spec", [
    ("tis", "token", lambda t: t.tis_cap), ("seq_tis", "sequence", lambda t: t.tis_cap),
    ("mis", "sequence", lambda t: f"{t.mis_low}_{t.mis_high}"),
    ("icepop", "token", lambda t: f"{t.icepop_low}_{t.icepop_high}")])
def test_verl_rollout_correction_weights(name: str, level: str, spec) -> None:
    # verl's weight multiplies the per-token loss of an on-policy step (r_old = 1), so its
    # gradient is weight·Â·∇log π: the surrogate's w·r (IcePop: a 0/1 mask, w·r = r·keep)
    logp_behavior, logp_train, adv, mask = batch(7, spread=0.4, seq_spread=0.1)
    t = Thresholds()
    weights, _ = rc.compute_rollout_correction_weights(logp_train - logp_behavior, mask.double(), level,
                                                       spec(t))
    s, seqs, sel = stats_of(logp_behavior, logp_train, adv, mask)
    w = build_masks([name], t)[name].weight(s, seqs)
    # exp and the clamp or band: a few float64 roundings (sequence: a sum of T ≤ 16 log
    # ratios first, 16 ulps of the sum's exp)
    torch.testing.assert_close(w * s.ratio, weights.reshape(-1)[sel], rtol=32 * 2**-52,
                               atol=0.0)
    assert 0 < int((w * s.ratio != s.ratio).sum())  # the cap / band acts somewhere


# ------------------------------------------------------------ Stable-RL top-K DPPO (cases)


def topk_case(adv: float) -> TokenStats:
    """One token, replace_last top-2 = {j: µ .5, k: µ .3} (the sampled k in the last
    slot), π = (.4, .4) on them; tails µ .2, π .2. S = {k} ∪ {j}: the same set as
    Stable-RL's K = 2 row, listed sampled token first as build_support orders it.

    Stable-RL's compute_topk_kl on these K = 2 entries (tail = 1 − top-K mass):
      KL = .5 ln(.5/.4) + .3 ln(.3/.4) + .2 ln(.2/.2) = .111572 − .086305 = .025267
      TV = ½(|.5−.4| + |.3−.4| + |.2−.2|) = .1
    """
    support = build_support(torch.tensor([1]), torch.tensor([[0]]))
    lg = lambda *p: torch.log(torch.tensor([p], dtype=F64))  # noqa: E731
    return token_stats(reduce_pair(support, lg(0.3, 0.5), lg(0.4, 0.4)),
                       torch.tensor([adv], dtype=F64), 50)


def test_stable_rl_topk_divergences_hand_worked() -> None:
    s = topk_case(1.0)
    assert s.kl_topk.item() == pytest.approx(0.5 * math.log(1.25) + 0.3 * math.log(0.75),
                                             rel=1e-12)
    assert s.kl_topk.item() == pytest.approx(0.025267, abs=1e-6)
    assert s.tv_topk.item() == pytest.approx(0.1, rel=1e-12)


@pytest.mark.parametrize("adv,dropped", [(1.0, True), (-1.0, False)])
def test_stable_rl_topk_mask_hand_worked(adv: float, dropped: bool) -> None:
    # _compute_token_mask_for_policy_loss, loss_mode dppo_topk_kl / dppo_topk_tv:
    #   invalid_positive = (topk_D > clip_high) & (π_k > µ_k), for Â > 0
    #   invalid_negative = (topk_D > clip_low) & (π_k < µ_k), for Â ≤ 0
    # here π_k = .4 > µ_k = .3: with δ_kl = .02 < .025267 and δ_tv = .05 < .1 the token is
    # dropped iff Â > 0; at δ above the divergence it is always kept
    s = topk_case(adv)
    masks = build_masks(["dppo_topk_kl", "dppo_topk_tv"], Thresholds(delta_kl=0.02, delta_tv=0.05))
    assert bool(~masks["dppo_topk_kl"].keep(s)) is dropped
    assert bool(~masks["dppo_topk_tv"].keep(s)) is dropped
    wide = build_masks(["dppo_topk_kl", "dppo_topk_tv"], Thresholds(delta_kl=0.03, delta_tv=0.11))
    assert all(bool(m.keep(s)) for m in wide.values())


def test_trl_off_policy_sequence_mask() -> None:
    # TRL's GRPOTrainer.get_off_policy_mask (DeepSeek-V3.2's off-policy sequence masking):
    # keep a response iff Â >= 0 or its mean log(µ/π) over the completion <= δ
    trl = pytest.importorskip("trl",
                              reason="trl is not installed: pip install -e '.[integrations]'")
    logp_behavior, logp_train, _, mask = batch(8, spread=0.3, seq_spread=0.3)
    adv = torch.randn(B, 1, generator=torch.Generator().manual_seed(8), dtype=F64)
    for delta in (0.05, 0.5):
        keep = trl.GRPOTrainer.get_off_policy_mask(adv, logp_train, logp_behavior, mask.double(), delta)
        verl_like = (keep == 0).expand(B, T).reshape(-1)[mask.reshape(-1)]
        ours = mask_drops("dsv32_offpolicy", Thresholds(dsv32_delta=delta), logp_behavior, logp_train,
                          adv.expand(B, T), mask)
        assert torch.equal(verl_like, ours)
        assert 0 < int(ours.sum()) < ours.numel()


def test_dsv32_offpolicy_sequence_mask_hand_worked() -> None:
    # DeepSeek-V3.2 §3.1: drop a sequence with Â < 0 whose mean log(µ/π) > δ = 0.1.
    # seq 0: log r = (−0.3, −0.1): mean k1 = 0.2 > 0.1 -> dropped where Â < 0 only
    # seq 1: log r = (−0.1, 0.0):  mean k1 = 0.05      -> kept
    logp_behavior = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]], dtype=F64))
    logp_train = logp_behavior + torch.tensor([[-0.3, -0.1], [-0.1, 0.0]], dtype=F64)
    adv = torch.tensor([[-1.0, 1.0], [-1.0, -1.0]], dtype=F64)
    s, seqs, _ = stats_of_small(logp_behavior, logp_train, adv)
    mask = build_masks(["dsv32_offpolicy"], Thresholds(dsv32_delta=0.1))["dsv32_offpolicy"]
    keep = mask.keep(s, seqs)
    assert keep.tolist() == [False, True, True, True]


def stats_of_small(logp_behavior, logp_train, adv):
    b, t = logp_behavior.shape
    support = build_support(torch.zeros(b * t, dtype=torch.long),
                            torch.zeros(b * t, 0, dtype=torch.long))
    s = token_stats(reduce_pair(support, logp_behavior.reshape(-1, 1), logp_train.reshape(-1, 1)),
                    adv.reshape(-1), 100)
    rows = torch.arange(b)[:, None].expand(b, t).reshape(-1)
    return s, Segments(rows, torch.ones(b * t, dtype=torch.bool)), None


# ------------------------------------------- `pdm-replay masks` end to end (issue 15 §3)


def test_pdm_replay_masks_cli_decisions_equal_verls_zero_gradient_tokens(tmp_path) -> None:
    # A log with a large µ/π mismatch through the CLI; verl's own losses on the same
    # logged log-probs and advantages, padded per response: their zero-gradient tokens are
    # the CLI's dropped tokens, with and without dual-clip.
    import polars as pl
    from typer.testing import CliRunner

    from pdm_replay.cli.app import app
    from pdm_replay.testing.fixtures import SyntheticLogConfig, write_synthetic_log

    log = write_synthetic_log(tmp_path / "log.parquet",
                              SyntheticLogConfig(n_samples=64, mismatch=1.5, peak=1.0))
    out = tmp_path / "tokens.parquet"
    res = CliRunner().invoke(app, ["masks", str(log), "--out", str(out), "--masks",
                                   "ppo_clip,verl_vanilla,dppo_binary_kl,dppo_binary_tv"])
    assert res.exit_code == 0, res.output
    tok = pl.read_parquet(out).sort("sample_id", "pos")
    ids = tok["sample_id"].unique(maintain_order=True).to_list()
    row = {s: i for i, s in enumerate(ids)}
    r = torch.tensor([row[s] for s in tok["sample_id"].to_list()])
    c = torch.tensor(tok["pos"].to_list())
    shape = (len(ids), int(c.max()) + 1)

    def padded(col: str, fill: float) -> torch.Tensor:
        x = torch.full(shape, fill, dtype=F64)
        x[r, c] = torch.tensor(tok[col].to_numpy(), dtype=F64)
        return x

    logp_behavior, logp_train = padded("logp_behavior", -1.0), padded("logp_train", -1.0)
    adv = padded("advantage", 0.0)
    mask = torch.zeros(shape, dtype=torch.bool)
    mask[r, c] = True
    grad_tokens = adv[mask] != 0  # Â = 0 has no gradient anywhere: kept by every mask

    def verl(fn, **cfg):
        return verl_zero_grad(fn, logp_behavior, logp_train, adv, mask, **cfg)[grad_tokens]

    def ours(name):
        # tokens are (sample_id, pos)-sorted, as mask[...] flattens row-major
        return ~torch.from_numpy(tok[f"keep_{name}"].to_numpy())[grad_tokens]

    dual = verl(core_algos.compute_policy_loss_vanilla, clip_ratio=0.2, clip_ratio_c=3.0)
    plain = verl(core_algos.compute_policy_loss_vanilla, clip_ratio=0.2, clip_ratio_c=1e12)
    assert torch.equal(dual, ours("verl_vanilla")) and torch.equal(plain, ours("ppo_clip"))
    assert int((dual & ~plain).sum()) > 0  # dual-clip drops tokens ppo_clip keeps
    for fam in ("kl", "tv"):
        fn = getattr(core_algos, f"compute_policy_loss_dppo_{fam}")
        d = verl(fn, clip_ratio=0.15, clip_ratio_low=0.15, clip_ratio_high=0.15)
        assert torch.equal(d, ours(f"dppo_binary_{fam}")), fam
