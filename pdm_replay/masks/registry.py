"""The mask registry (SPEC §4): one place that names every trust-region mask.

A mask is a **proximity criterion × a direction criterion** at token or sequence
granularity, giving every token a gradient weight ``w`` in the replay's surrogate
``−Σ_t w_t · r_t · Â_t / N`` (:func:`pdm_replay.loss.policy_loss`): ``w = keep`` ∈ {0, 1}
for masks, a real stop-gradient weight for importance-sampling corrections (TIS, CISPO,
MIS). A binary mask drops a token iff it is outside the region AND its update is
predicted to move further away (``sign(Â)·slope > 0``; direction ``none``: every token
outside is dropped); tokens with Â = 0 are always kept.

Each :class:`MaskSpec` declares its proximity, direction, estimator, granularity and
weight kind, so comparisons are *derived* (:func:`mask_pairs`), never spelled by name.
The built-in masks are registered in :mod:`pdm_replay.masks.catalog`, one
``register(...)`` line per name; users add theirs from a module of their own
(:func:`load_mask_module`, ``--mask-module``). This module imports no torch: the
metadata is plain Python, torch runs only inside the masks
(:mod:`pdm_replay.masks.kinds`).

Examples
--------
>>> from pdm_replay.masks import MASK_SPECS, Thresholds, build_masks
>>> sorted(MASK_SPECS)[:3]
['cispo', 'clip_higher', 'dppo_binary_kl']
>>> masks = build_masks(["ppo_clip", "pdm_kl_agg"], Thresholds(delta_kl=0.1))
>>> masks["pdm_kl_agg"].high
0.1
>>> [(p.base, p.other) for p in mask_pairs(["dppo_topk_kl", "pdm_kl_agg", "ppo_clip"])]
[('dppo_topk_kl', 'pdm_kl_agg')]
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from pdm_replay.masks.kinds import Criterion
from pdm_replay.user_modules import load_user_module

if TYPE_CHECKING:  # torch only for the type checker: the registry imports without it
    from torch import Tensor

    from pdm_replay.math.metrics import TokenStats
    from pdm_replay.math.segments import Segments

DIRECTIONS = ("none", "ratio", "predictive", "certified", "negative_advantage")
GRANULARITIES = ("token", "sequence")
WEIGHTS = ("binary", "is")  # 0/1 keep, or a real importance weight (stop-gradient)


class Mask(Protocol):
    def keep(self, stats: "TokenStats", seqs: "Segments | None" = None) -> "Tensor":
        """``(N,)`` bool: True where the token's gradient is used."""
        ...

    def weight(self, stats: "TokenStats", seqs: "Segments | None" = None) -> "Tensor":
        """``(N,)`` float64 ``w`` of the surrogate ``−Σ w·r·Â / N`` (``keep`` for masks)."""
        ...


# The Thresholds fields with a CLI option of their own (--eps, ..., --clip-ratio-c); every
# other field is set with --mask-param FIELD=VALUE.
FLAGGED_THRESHOLDS = ("eps", "eps_low", "eps_high", "delta_kl", "delta_tv", "clip_ratio_c")


@dataclass(frozen=True)
class Thresholds:
    """Every mask parameter (flat, typed). CLI: ``--eps``, ``--eps-low``, ``--eps-high``,
    ``--delta-kl``, ``--delta-tv``, ``--clip-ratio-c``; every other field
    ``--mask-param FIELD=VALUE``.

    Defaults are those of the trainer or paper that made each mask popular (the mask
    table in the README says which): SPEC §4 for the paper's masks, verl 0.9's
    ``ActorConfig`` / ``RolloutCorrectionConfig`` presets for the rest.
    """

    eps: float = 0.2
    eps_low: float = 0.2
    eps_high: float = 0.28
    delta_kl: float = 0.15
    delta_tv: float = 0.15
    clip_ratio_c: float = 0.0  # dual-clip c of ppo_clip / clip_higher; 0 = off
    gspo_eps_low: float = 3e-4  # GSPO paper §5.1 / verl's GSPO recipe
    gspo_eps_high: float = 4e-4
    cispo_eps_low: float = 0.2  # verl's ActorConfig clip_ratio_low/high, read by its cispo
    cispo_eps_high: float = 0.2
    tis_cap: float = 2.0  # verl RolloutCorrectionConfig.rollout_is_threshold
    icepop_low: float = 0.5  # verl RolloutCorrectionConfig.decoupled_token_icepop
    icepop_high: float = 5.0
    mis_low: float = 0.5  # verl decoupled_seq_is_rs's "0.5_2.0"
    mis_high: float = 2.0
    rs_k1: float = 2.0  # rollout_rs k1 options: keep iff log(1/C) <= k1 stat <= log C
    rs_seq_mean_k1_low: float = 0.999  # verl decoupled_geo_rs "0.999_1.001": keep iff
    rs_seq_mean_k1_high: float = 1.001  # log(low) <= mean(-log r) <= log(high)
    rs_k2: float = 0.01  # token / seq_sum / seq_max k2 upper bound
    rs_k3: float = 0.01  # verl decoupled_k3_rs (seq_mean_k3 0.01), every k3 option
    dsv32_delta: float = 0.5  # DeepSeek-V3.2 off-policy sequence masking δ (TRL's example)
    trl_is_min: float = 0.0  # TRL GRPOConfig.vllm_importance_sampling_clip_min (None: 0)
    trl_is_cap: float = 3.0  # TRL GRPOConfig.vllm_importance_sampling_clip_max
    trl_cispo_cap: float = 5.0  # TRL cispo epsilon_high (ScaleRL's ε_max, TRL's recommended)
    openrlhf_is_low: float = 0.5  # OpenRLHF --algo.advantage.is_correction_threshold
    openrlhf_is_high: float = 5.0
    slime_veto: float = 1e-4  # slime rs_veto_threshold (examples/.../mis.yaml)
    m2po_threshold: float = 0.04  # AReaL m2_threshold (examples/math/gsm8k_m2po.yaml)
    vaco_tv_delta: float = 2.0  # open-instruct rho_mask_upper_bound with VACO (its test's)
    prime_rl_low: float = 0.2  # prime-rl DefaultLossConfig dppo_mask_low / _high
    prime_rl_high: float = 0.2
    prime_rl_ipo: float = 0.1  # prime-rl IPOLossConfig.ipo_threshold
    sapo_tau_pos: float = 1.0  # verl ActorConfig tau_pos / TRL sapo_temperature_pos
    sapo_tau_neg: float = 1.05  # verl tau_neg / TRL sapo_temperature_neg
    gmpo_eps_low: float = 0.4  # GMPO paper / callsys/GMPO: log r clipped to [−0.4, 0.4]
    gmpo_eps_high: float = 0.4


@dataclass(frozen=True)
class MaskSpec:
    """A registered mask: how to build it, and what the comparisons are derived from."""

    name: str
    build: Callable[[Thresholds], Mask]
    family: str | None  # "kl" | "tv" | None: which divergence's alignment it enters
    direction: str  # one of DIRECTIONS
    estimator: str | None  # "agg" | "uniform" | None: the predictive slope's tail model
    doc: str
    # The Thresholds fields the mask reads (a threshold sweep varies only these).
    thresholds: tuple[str, ...] = ()
    proximity: str = ""  # the region test; masks sharing it differ only in direction
    granularity: str = "token"  # one of GRANULARITIES
    weight: str = "binary"  # one of WEIGHTS
    source: str = ""  # file and function of the reference implementation
    reproduces: str = ""  # the trainer default this mask reproduces, if any
    # The trainer metric that logs this mask's masked token fraction (verl's
    # ``rollout_corr/rollout_rs_<option>_masked_fraction``), if any: report.mismatch.
    logged_as: str = ""

    def __post_init__(self) -> None:
        for field, value, allowed in (("direction", self.direction, DIRECTIONS),
                                      ("granularity", self.granularity, GRANULARITIES),
                                      ("weight", self.weight, WEIGHTS)):
            if value not in allowed:
                raise ValueError(f"mask {self.name!r}: {field} {value!r}, expected one of "
                                 f"{', '.join(allowed)}")
        unknown = [f for f in self.thresholds if f not in Thresholds.__dataclass_fields__]
        if unknown:
            raise ValueError(f"mask {self.name!r} reads unknown Thresholds field(s) "
                             f"{', '.join(unknown)}")


MASK_SPECS: dict[str, MaskSpec] = {}
# sys.modules names of the --mask-module files loaded: this prefix plus a hash of the path
USER_MODULE_PREFIX = "pdm_replay_user_masks_"


def register(spec: MaskSpec) -> MaskSpec:
    """Add ``spec`` to :data:`MASK_SPECS`; a second mask of the same name is rejected."""
    if spec.name in MASK_SPECS:
        raise ValueError(f"mask {spec.name!r} is already registered")
    MASK_SPECS[spec.name] = spec
    return spec


@dataclass(frozen=True)
class MaskPair:
    """Two masks of one proximity criterion that differ only in direction: ``base`` the
    ratio direction, ``other`` the predictive one (``estimator`` its tail model)."""

    proximity: str
    family: str | None
    estimator: str | None
    base: str
    other: str

    @property
    def label(self) -> str:
        """The pair's stable name: ``<ratio mask> vs <predictive mask>``."""
        return f"{self.base} vs {self.other}"


def mask_pairs(names: Iterable[str] | None = None) -> list[MaskPair]:
    """Every (ratio, predictive) pair of the named masks (``None`` = all) that share a
    proximity criterion and granularity, in registry order of the predictive mask."""
    specs = [MASK_SPECS[n] for n in resolve_names(names)]
    out = []
    for other in specs:
        if other.direction != "predictive" or not other.proximity:
            continue
        out.extend(MaskPair(other.proximity, other.family, other.estimator, base.name,
                            other.name)
                   for base in specs if base.direction == "ratio"
                   and (base.proximity, base.granularity) == (other.proximity,
                                                              other.granularity))
    return out


def comparison_pairs(names: Iterable[str] | None = None
                     ) -> list[tuple[str, str | None, str, str]]:
    """``(family, estimator, ratio_mask, predictive_mask)`` of the registry's
    :func:`~pdm_replay.masks.mask_pairs` among ``names`` that enter a divergence family's
    alignment statistics (the predictive mask declares the family)."""
    return [(p.family, p.estimator, p.base, p.other) for p in mask_pairs(names)
            if p.family is not None]


def token_region(name: str, thresholds: Thresholds) -> tuple[str, float, float] | None:
    """``(stat, low, high)`` of mask ``name``'s region as it builds at ``thresholds``
    (outside ``[low, high]``: out of region), when that is a per-token test (a token-level
    :class:`~pdm_replay.masks.kinds.Criterion`); None for sequence statistics and weights.

    >>> token_region("dppo_binary_kl", Thresholds(delta_kl=0.1))
    ('kl_binary', -inf, 0.1)
    >>> token_region("gspo", Thresholds()) is None  # a sequence statistic
    True
    """
    crit = MASK_SPECS[name].build(thresholds)
    if not isinstance(crit, Criterion) or crit.reads_sequences:
        return None
    return crit.stat, crit.low, crit.high


def resolve_names(names: Iterable[str] | None) -> list[str]:
    """Validate mask names (``None`` = all, registry order); unknown names raise ``ValueError``."""
    if names is None:
        return list(MASK_SPECS)
    names = list(dict.fromkeys(names))
    unknown = [n for n in names if n not in MASK_SPECS]
    if unknown:
        raise ValueError(f"unknown mask(s) {', '.join(unknown)}; known: {', '.join(MASK_SPECS)}")
    return names


def build_masks(names: Iterable[str] | None, thresholds: Thresholds) -> dict[str, Mask]:
    """Instantiate the named masks with ``thresholds``."""
    return {n: MASK_SPECS[n].build(thresholds) for n in resolve_names(names)}


def apply_masks(masks: dict[str, Mask], stats: "TokenStats",
                seqs: "Segments | None" = None) -> dict[str, "Tensor"]:
    """Each mask's ``keep`` (N,) bool on ``stats`` (``seqs``: the tokens' sequences, needed
    by sequence masks)."""
    return {name: mask.keep(stats, seqs) for name, mask in masks.items()}


def weight_masks(names: Iterable[str]) -> list[str]:
    """The names among ``names`` whose weight is real-valued (tokens/v1 ``weight_<mask>``)."""
    return [n for n in names if n in MASK_SPECS and MASK_SPECS[n].weight != "binary"]


def load_mask_module(path: str | Path) -> Any:
    """Import the user's Python file ``path`` (it calls :func:`register`); its masks then
    join every command, report and dashboard view. Loading the same file twice is a no-op;
    a missing file or one that fails to import is an error naming it
    (:func:`pdm_replay.user_modules.load_user_module`).
    """
    return load_user_module(path, USER_MODULE_PREFIX, "mask_modules",
                            "pdm_replay.masks.register")
