"""The built-in masks: one ``register(...)`` line per name (``grep -n 'register(' ``).

Each entry declares its proximity criterion, direction, estimator, granularity and weight
kind (:class:`~pdm_replay.masks.MaskSpec`), the reference implementation it is checked
against (``source``; the parity tests call those functions where they are installable:
``tests/masks/test_mask_parity.py``) and which trainer default it reproduces. Parameters are
:class:`~pdm_replay.masks.Thresholds` fields; ``thresholds`` lists those a mask reads.

verl sources are verl 0.9's ``verl/trainer/ppo/core_algos.py`` (``VERL_LOSS``) and
``verl/trainer/ppo/rollout_corr_helper.py`` (``VERL_RC``); Stable-RL's are
sail-sg/Stable-RL's ``verl/trainer/ppo/core_algos.py`` ``_compute_token_mask_for_policy_loss``
with the top-K KL/TV of ``verl/workers/actor/utils.py`` ``compute_topk_kl``.
"""

from __future__ import annotations

import math
from typing import Callable

from pdm_replay.masks.kinds import (M2PO, Criterion, GeoMeanClip, ISWeight, KeepAll, SapoGate,
                                     VacoTV)
from pdm_replay.masks.registry import Mask, MaskSpec, Thresholds, register

VERL_LOSS = "verl/trainer/ppo/core_algos.py"
VERL_RC = "verl/trainer/ppo/rollout_corr_helper.py"
STABLE_RL = "sail-sg/Stable-RL verl/trainer/ppo/core_algos.py:_compute_token_mask_for_policy_loss"
PAPER = "arXiv 2607.10848 (Predictive Divergence Masks), SPEC §4"
TRL = "trl/trainer/grpo_trainer.py:GRPOTrainer"
VERL_CLIP_RATIO_C = 3.0  # verl ActorConfig.clip_ratio_c default (compute_policy_loss_vanilla)


Build = Callable[[Thresholds], Mask]


def ratio_band(low: str, high: str, dual_clip: float = 0.0) -> Build:
    """r outside [1 − t.low, 1 + t.high], ratio direction, dual-clip at --clip-ratio-c (or
    ``dual_clip`` when that is 0)."""
    return lambda t: Criterion("ratio", 1.0 - getattr(t, low), 1.0 + getattr(t, high),
                               direction="ratio", clip_ratio_c=t.clip_ratio_c or dual_clip)


def above(stat: str, field: str, direction: str = "none", slope: str = "",
          reduce: str = "") -> Build:
    """``stat`` (its sequence ``reduce``) above ``t.field``."""
    return lambda t: Criterion(stat, high=getattr(t, field), reduce=reduce,
                               direction=direction, slope=slope)


def band(stat: str, low: str, high: str, direction: str = "none", slope: str = "") -> Build:
    """``stat`` outside [t.low, t.high] (``slope``: the Ḋ field of a predictive direction)."""
    return lambda t: Criterion(stat, getattr(t, low), getattr(t, high), direction=direction,
                               slope=slope)


def offset_band(stat: str, low: str, high: str, direction: str = "none") -> Build:
    """``stat`` outside [−t.low, t.high] (a signed difference, 0 = on-policy)."""
    return lambda t: Criterion(stat, -getattr(t, low), getattr(t, high), direction=direction)


def k1_band(field: str, reduce: str = "") -> Build:
    """verl's k1 options: keep log(lower) <= k1 <= log(upper), lower = 1/upper."""
    return lambda t: Criterion("k1", -math.log(getattr(t, field)), math.log(getattr(t, field)),
                               reduce=reduce)


def _log(x: float) -> float:
    """log x, −inf at x <= 0 (a ratio bound scaled to nothing means no bound)."""
    return math.log(x) if x > 0 else -math.inf


def log_bounds(stat: str, low: str, high: str, reduce: str = "") -> Build:
    """``stat`` (its sequence ``reduce``) outside [log t.low, log t.high]: ratio bounds."""
    return lambda t: Criterion(stat, _log(getattr(t, low)), _log(getattr(t, high)),
                               reduce=reduce)


def veto(field: str) -> Build:
    """slime's veto: a response with any token ratio below ``t.field`` is dropped, i.e. its
    largest k1 = −log r is above −log ``t.field``."""
    return lambda t: Criterion("k1", high=-_log(getattr(t, field)), reduce="max")


def geo_ratio_band(low: str, high: str) -> Build:
    """GSPO: exp(mean log r) outside [1 − t.low, 1 + t.high], ratio direction."""
    return lambda t: Criterion("log_ratio", math.log1p(-getattr(t, low)),
                               math.log1p(getattr(t, high)), reduce="mean", direction="ratio")


def weight(low: str | None, high: str, reduce: str = "", truncate: bool = True,
           offset: bool = False) -> Build:
    """ISWeight on [t.low, t.high] (``offset``: [1 − t.low, 1 + t.high]; low None: 0)."""
    def build(t: Thresholds) -> ISWeight:
        lo = getattr(t, low) if low else 0.0
        hi = getattr(t, high)
        if offset:
            lo, hi = 1.0 - lo, 1.0 + hi
        return ISWeight(lo, hi, reduce=reduce, truncate=truncate)
    return build


RS = f"{VERL_RC}:compute_rollout_rejection_mask"


def rs_logged(option: str) -> str:
    """The key verl logs an rs option's masked token fraction under
    (``compute_rollout_rejection_mask``'s metrics, prefixed as
    ``compute_rollout_correction_and_rejection_mask`` prefixes them)."""
    return f"rollout_corr/rollout_rs_{option}_masked_fraction"


SEQ = {"granularity": "sequence"}

register(MaskSpec("none", lambda t: KeepAll(), None, "none", None, "keep every token",
                  proximity="never"))
register(MaskSpec("ppo_clip", ratio_band("eps", "eps"), None, "ratio", None,
                  "PPO clip: r outside [1-eps, 1+eps], ratio direction (dual-clip with "
                  "--clip-ratio-c)", ("eps", "clip_ratio_c"), proximity="ratio_band",
                  source=f"{STABLE_RL} ('ppo')",
                  reproduces="Stable-RL loss_mode ppo (GRPO); verl vanilla with clip_ratio_c off"))
register(MaskSpec("clip_higher", ratio_band("eps_low", "eps_high"), None, "ratio", None,
                  "decoupled clip (DAPO): r outside [1-eps_low, 1+eps_high] (dual-clip with "
                  "--clip-ratio-c)", ("eps_low", "eps_high", "clip_ratio_c"),
                  proximity="ratio_band_decoupled",
                  source=f"{VERL_LOSS}:compute_policy_loss_vanilla",
                  reproduces="DAPO clip_ratio_low 0.2 / clip_ratio_high 0.28"))
register(MaskSpec("verl_vanilla", ratio_band("eps", "eps", VERL_CLIP_RATIO_C), None, "ratio",
                  None, "verl's default PPO loss: ppo_clip plus dual-clip (Â<0 and r>c "
                  "dropped), c = --clip-ratio-c or verl's 3.0", ("eps", "clip_ratio_c"),
                  proximity="ratio_band_dual", source=f"{VERL_LOSS}:compute_policy_loss_vanilla",
                  reproduces="verl policy_loss vanilla (clip_ratio 0.2, clip_ratio_c 3)"))
for _f in ("kl", "tv"):
    _d = f"delta_{_f}"
    register(MaskSpec(f"dppo_binary_{_f}", above(f"{_f}_binary", _d, "ratio"), _f, "ratio",
                      None, f"binary {_f.upper()} > delta, ratio direction", (_d,),
                      proximity=f"{_f}_binary",
                      source=f"{VERL_LOSS}:compute_policy_loss_dppo_{_f}; {STABLE_RL}",
                      reproduces=f"verl dppo_{_f} / Stable-RL dppo_binary_{_f} "
                                 "(clip_ratio = delta)"))
    register(MaskSpec(f"dppo_topk_{_f}", above(f"{_f}_topk", _d, "ratio"), _f, "ratio", None,
                      f"top-K {_f.upper()} > delta, ratio direction", (_d,),
                      proximity=f"{_f}_topk", source=STABLE_RL,
                      reproduces=f"Stable-RL dppo_topk_{_f} (clip_ratio = delta)"))
    for _e in ("agg", "uniform"):
        register(MaskSpec(f"pdm_{_f}_{_e}", above(f"{_f}_topk", _d, "predictive", f"d{_f}_{_e}"),
                          _f, "predictive", _e, f"top-K {_f.upper()} > delta, predictive "
                          f"direction ({_e} tail)", (_d,), proximity=f"{_f}_topk",
                          source=PAPER))
register(MaskSpec("pdm_kl_certified", above("kl_topk", "delta_kl", "certified"), "kl",
                  "certified", None, "top-K KL > delta, masked only where the sign "
                  "certificate proves 'away'", ("delta_kl",), proximity="kl_topk", source=PAPER))
register(MaskSpec("gspo", geo_ratio_band("gspo_eps_low", "gspo_eps_high"), None, "ratio", None,
                  "GSPO: sequence ratio exp(mean log r) outside [1-eps_low, 1+eps_high], "
                  "ratio direction", ("gspo_eps_low", "gspo_eps_high"),
                  proximity="seq_geo_ratio_band", **SEQ,
                  source=f"{VERL_LOSS}:compute_policy_loss_gspo",
                  reproduces="GSPO paper / verl GSPO recipe (3e-4 / 4e-4)"))
register(MaskSpec("cispo", weight("cispo_eps_low", "cispo_eps_high", offset=True), None, "none",
                  None, "CISPO: weight clip(r, 1-eps_low, 1+eps_high)/r, stop-gradient; no "
                  "token dropped", ("cispo_eps_low", "cispo_eps_high"),
                  proximity="ratio_weight", weight="is",
                  source=f"{VERL_LOSS}:compute_policy_loss_cispo",
                  reproduces="verl policy_loss cispo (ActorConfig clip_ratio 0.2)"))
register(MaskSpec("tis", weight(None, "tis_cap"), None, "none", None,
                  "token TIS: weight min(r, C)/r", ("tis_cap",), proximity="ratio_weight_cap",
                  weight="is", source=f"{VERL_RC}:compute_rollout_correction_weights (token)",
                  reproduces="verl rollout_is=token, rollout_is_threshold 2.0"))
register(MaskSpec("seq_tis", weight(None, "tis_cap", "sum"), None, "none", None,
                  "sequence TIS: weight min(prod r, C)/r_t", ("tis_cap",),
                  proximity="seq_ratio_weight_cap", **SEQ, weight="is",
                  source=f"{VERL_RC}:compute_rollout_correction_weights (sequence)",
                  reproduces="verl RolloutCorrectionConfig default (sequence, 2.0)"))
register(MaskSpec("mis", weight("mis_low", "mis_high", "sum", truncate=False), None, "none",
                  None, "sequence masked IS: weight prod r / r_t, zero when prod r is outside "
                  "[low, high]", ("mis_low", "mis_high"), proximity="seq_ratio_weight_band",
                  **SEQ, weight="is",
                  source=f"{VERL_RC}:compute_rollout_correction_weights (sequence, lower_upper)",
                  reproduces="verl rollout_is=sequence, rollout_is_threshold '0.5_2.0'"))
register(MaskSpec("icepop", band("ratio", "icepop_low", "icepop_high"), None, "none", None,
                  "IcePop: r outside [low, high] dropped (both signs of Â)",
                  ("icepop_low", "icepop_high"), proximity="icepop",
                  source=f"{VERL_RC}:compute_rollout_correction_weights (token, lower_upper)",
                  reproduces="verl decoupled_token_icepop (0.5 / 5.0)"))
register(MaskSpec("icepop_ratio", band("ratio", "icepop_low", "icepop_high", "ratio"), None,
                  "ratio", None, "IcePop's band with the ratio direction",
                  ("icepop_low", "icepop_high"), proximity="icepop", source="composed"))
register(MaskSpec("icepop_pdm_kl", band("ratio", "icepop_low", "icepop_high", "predictive",
                                       "dkl_agg"), "kl", "predictive", "agg",
                  "IcePop's band with the predictive KL direction (aggregated tail)",
                  ("icepop_low", "icepop_high"), proximity="icepop", source="composed"))
register(MaskSpec("rs_token_k1", k1_band("rs_k1"), None, "none", None, "rollout_rs token_k1: "
                  "-log r outside [-log C, log C]", ("rs_k1",), proximity="rs_token_k1",
                  source=RS, logged_as=rs_logged("token_k1")))
register(MaskSpec("rs_token_k2", above("k2", "rs_k2"), None, "none", None,
                  "rollout_rs token_k2: (log r)^2/2 > C", ("rs_k2",), proximity="rs_token_k2",
                  source=RS, logged_as=rs_logged("token_k2")))
register(MaskSpec("rs_token_k3", above("k3", "rs_k3"), None, "none", None,
                  "rollout_rs token_k3: r - 1 - log r > C", ("rs_k3",), proximity="rs_token_k3",
                  source=RS, logged_as=rs_logged("token_k3")))
register(MaskSpec("rs_seq_sum_k1", k1_band("rs_k1", "sum"), None, "none", None,
                  "rollout_rs seq_sum_k1: sum -log r outside [-log C, log C]", ("rs_k1",),
                  proximity="rs_seq_sum_k1", **SEQ, source=RS,
                  reproduces="verl decoupled_seq_is_rs (rs '0.5_2.0')",
                  logged_as=rs_logged("seq_sum_k1")))
register(MaskSpec("rs_seq_sum_k2", above("k2", "rs_k2", reduce="sum"), None, "none", None,
                  "rollout_rs seq_sum_k2", ("rs_k2",), proximity="rs_seq_sum_k2", **SEQ,
                  source=RS, logged_as=rs_logged("seq_sum_k2")))
register(MaskSpec("rs_seq_sum_k3", above("k3", "rs_k3", reduce="sum"), None, "none", None,
                  "rollout_rs seq_sum_k3", ("rs_k3",), proximity="rs_seq_sum_k3", **SEQ,
                  source=RS, logged_as=rs_logged("seq_sum_k3")))
register(MaskSpec("rs_seq_mean_k1", log_bounds("k1", "rs_seq_mean_k1_low",
                                               "rs_seq_mean_k1_high", "mean"), None, "none",
                  None, "rollout_rs seq_mean_k1: mean -log r outside [log low, log high]",
                  ("rs_seq_mean_k1_low", "rs_seq_mean_k1_high"),
                  proximity="rs_seq_mean_k1", **SEQ, source=RS,
                  reproduces="verl decoupled_geo_rs ('0.999_1.001')",
                  logged_as=rs_logged("seq_mean_k1")))
register(MaskSpec("rs_seq_mean_k2", above("k2", "rs_k2", reduce="mean"), None, "none", None,
                  "rollout_rs seq_mean_k2", ("rs_k2",), proximity="rs_seq_mean_k2", **SEQ,
                  source=RS, logged_as=rs_logged("seq_mean_k2")))
register(MaskSpec("rs_seq_mean_k3", above("k3", "rs_k3", reduce="mean"), None, "none", None,
                  "rollout_rs seq_mean_k3", ("rs_k3",), proximity="rs_seq_mean_k3", **SEQ,
                  source=RS, reproduces="verl decoupled_k3_rs (0.01)",
                  logged_as=rs_logged("seq_mean_k3")))
register(MaskSpec("rs_seq_max_k2", above("k2", "rs_k2", reduce="max"), None, "none", None,
                  "rollout_rs seq_max_k2: a response is dropped if any token's k2 > C",
                  ("rs_k2",), proximity="rs_seq_max_k2", **SEQ, source=RS,
                  reproduces="Trust Region Masking (arXiv 2512.23075, max-token divergence; "
                             "verl PR #4544)", logged_as=rs_logged("seq_max_k2")))
register(MaskSpec("rs_seq_max_k3", above("k3", "rs_k3", reduce="max"), None, "none", None,
                  "rollout_rs seq_max_k3: a response is dropped if any token's k3 > C",
                  ("rs_k3",), proximity="rs_seq_max_k3", **SEQ, source=RS,
                  reproduces="Trust Region Masking (arXiv 2512.23075, max-token divergence; "
                             "verl PR #4544)", logged_as=rs_logged("seq_max_k3")))
register(MaskSpec("dsv32_offpolicy",
                  above("k1", "dsv32_delta", "negative_advantage", reduce="mean"), None,
                  "negative_advantage", None, "DeepSeek-V3.2 off-policy sequence masking: "
                  "mean log(mu/pi) > delta with Â < 0", ("dsv32_delta",),
                  proximity="seq_mean_k1_upper", **SEQ,
                  source="trl GRPOTrainer.get_off_policy_mask (DeepSeek-V3.2 Eq. 9)",
                  reproduces="TRL off_policy_mask_threshold (documented example 0.5)"))

# Other trainers' shipped masks (issue 37). TRL 1.16's vLLM IS correction lives in
# _generate_and_score_completions (the weight multiplies the per-token loss), its CISPO
# and SAPO in _compute_loss; the repositories' files are cited at each entry. TRL does not
# bound the sequence log ratio; ISWeight clamps it to ±20 (verl's SAFETY_BOUND): the two
# differ only where a response's ratio is below e^-20 (a weight under 2e-9 either way).
for _mode, _red, _trunc in (("token_truncate", "", True), ("token_mask", "", False),
                            ("sequence_truncate", "sum", True), ("sequence_mask", "sum", False)):
    register(MaskSpec(f"trl_is_{_mode}", weight("trl_is_min", "trl_is_cap", _red, _trunc),
                      None, "none", None, f"TRL vLLM IS {_mode}: "
                      + ("sequence ratio exp(sum log r)" if _red else "token ratio")
                      + (" clamped to" if _trunc else " zeroed outside")
                      + " [min, cap], weight f/r_t", ("trl_is_min", "trl_is_cap"),
                      proximity=f"trl_is_{_mode}", weight="is",
                      **(SEQ if _red else {}),
                      source=f"{TRL}._generate_and_score_completions",
                      reproduces=f"TRL vllm_importance_sampling_mode={_mode} (cap 3.0)"))
register(MaskSpec("trl_cispo", weight(None, "trl_cispo_cap"), None, "none", None,
                  "one-sided CISPO: weight min(r, cap)/r, stop-gradient", ("trl_cispo_cap",),
                  proximity="ratio_weight_cap_cispo", weight="is",
                  source=f"{TRL}._compute_loss (loss_type cispo)",
                  reproduces="TRL loss_type=cispo, epsilon_high 5 (ScaleRL)"))
register(MaskSpec("openrlhf_seq_mask_tis",
                  log_bounds("log_ratio", "openrlhf_is_low", "openrlhf_is_high", "mean"),
                  None, "none", None, "response dropped when its geometric-mean ratio "
                  "exp(mean log r) is outside [low, high]; kept tokens weigh r",
                  ("openrlhf_is_low", "openrlhf_is_high"), proximity="seq_geo_ratio_band_is",
                  **SEQ, source="OpenRLHF/OpenRLHF openrlhf/models/loss.py:PolicyLoss.forward "
                  "(seq-mask-tis)",
                  reproduces="OpenRLHF is_correction_type seq-mask-tis [0.5, 5.0]"))
register(MaskSpec("slime_veto", veto("slime_veto"), None, "none", None,
                  "veto: a response with any token ratio r_t < veto is dropped",
                  ("slime_veto",), proximity="seq_min_ratio", **SEQ,
                  source="THUDM/slime examples/train_infer_mismatch_helper/mis.py:"
                         "calculate_veto_mask", reproduces="slime rs_veto_threshold 1e-4"))
register(MaskSpec("m2po", lambda t: M2PO(t.m2po_threshold), None, "none", None,
                  "M2PO within a response: its largest (log mu - log pi)^2 tokens dropped "
                  "until the rest's mean is below the threshold (AReaL: per micro-batch)",
                  ("m2po_threshold",), proximity="seq_second_moment", **SEQ,
                  source="inclusionAI/AReaL areal/trainer/ppo/actor.py:_apply_m2po_masking",
                  reproduces="AReaL actor.m2_threshold 0.04 (gsm8k_m2po.yaml)"))
register(MaskSpec("vaco_tv", lambda t: VacoTV(t.vaco_tv_delta, t.tis_cap), None, "ratio", None,
                  "VACO: response TV mean|rho-1| > delta drops the tokens whose update "
                  "raises it (sign(log r) Â > 0); kept tokens weigh min(rho, cap)",
                  ("vaco_tv_delta", "tis_cap"), proximity="seq_mean_abs_ratio", **SEQ,
                  weight="is", source="allenai/open-instruct open_instruct/grpo_utils.py:"
                                      "compute_rho_correction (rho_mask_tv_divergence)",
                  reproduces="open-instruct VACO TV mask, rho clamp 2.0"))
register(MaskSpec("prime_rl_default", offset_band("prob_diff", "prime_rl_low",
                                                  "prime_rl_high", "ratio"), None, "ratio", None,
                  "prime-rl default: pi_k - mu_k outside [-low, high] (binary TV against the "
                  "inference log-probs), ratio direction", ("prime_rl_low", "prime_rl_high"),
                  proximity="prob_diff_band",
                  source="PrimeIntellect-ai/prime-rl src/prime_rl/trainer/rl/loss.py:"
                         "default_loss_fn", reproduces="prime-rl loss type default "
                                                       "(dppo_mask_low/high 0.2)"))
register(MaskSpec("prime_rl_ipo", above("tv_binary", "prime_rl_ipo"), None, "none", None,
                  "prime-rl ipo: |pi_k - mu_k| > threshold dropped (both signs of Â)",
                  ("prime_rl_ipo",), proximity="tv_binary_symmetric",
                  source="PrimeIntellect-ai/prime-rl src/prime_rl/trainer/rl/loss.py:ipo_loss_fn",
                  reproduces="prime-rl loss type ipo (ipo_threshold 0.1)"))
register(MaskSpec("sapo", lambda t: SapoGate(t.sapo_tau_pos, t.sapo_tau_neg), None, "none",
                  None, "SAPO soft gate: weight 4 sig(x)(1 - sig(x)), x = tau (r - 1), tau by "
                  "the sign of Â", ("sapo_tau_pos", "sapo_tau_neg"), proximity="sigmoid_gate",
                  weight="is", source=f"{VERL_LOSS}:compute_policy_loss_sapo; "
                                      f"{TRL}._compute_loss (loss_type sapo)",
                  reproduces="verl policy_loss sapo / TRL loss_type=sapo (tau 1.0 / 1.05)"))
register(MaskSpec("gmpo", lambda t: GeoMeanClip(t.gmpo_eps_low, t.gmpo_eps_high), None, "none",
                  None, "GMPO: response ratio exp(mean clipped log r), log r clipped to "
                  "[-eps_low, eps_high] on Â's side; clipped tokens weigh 0",
                  ("gmpo_eps_low", "gmpo_eps_high"), proximity="seq_geo_mean_clip", **SEQ,
                  weight="is", source=f"{VERL_LOSS}:compute_policy_loss_geo_mean",
                  reproduces="verl policy_loss geo_mean / GMPO paper (clip e^-0.4, e^0.4)"))
