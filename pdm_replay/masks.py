"""The mask registry (SPEC §4): one place that names every trust-region mask.

A mask maps :class:`~pdm_replay.math.metrics.TokenStats` to ``keep`` ``(N,)`` bool. A token
is masked iff it is outside the trust region AND its update is predicted to move further
away, i.e. ``sign(Â)·slope > 0``; tokens with Â = 0 are always kept.

Examples
--------
>>> from pdm_replay.masks import MASKS, Thresholds, build_masks
>>> sorted(MASKS)[:3]
['clip_higher', 'dppo_binary_kl', 'dppo_binary_tv']
>>> masks = build_masks(["ppo_clip", "pdm_kl_agg"], Thresholds(delta_kl=0.1))
>>> masks["pdm_kl_agg"].delta
0.1
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

if TYPE_CHECKING:
    from torch import Tensor

    from pdm_replay.math.metrics import TokenStats

# torch is imported inside the functions that compute, not here: the CLI reads this
# registry (names, Thresholds defaults) to render `--help`, which must not pay for torch.

Stat = Callable[["TokenStats"], "Tensor"]


class Mask(Protocol):
    def keep(self, stats: TokenStats) -> Tensor:
        """``(N,)`` bool: True where the token's gradient is used."""
        ...


def decide(outside: Tensor, slope: Tensor, advantage: Tensor) -> Tensor:
    """Keep unless outside the region and ``sign(Â)·slope > 0`` (moving away). (N,) bool"""
    import torch
    away = torch.sign(advantage) * slope > 0  # Â = 0 gives 0: never "away", always kept
    return ~(outside & away)


def _ratio_slope(s: TokenStats) -> Tensor:
    from pdm_replay.math.direction import ratio_slope
    return ratio_slope(s.logp_behavior, s.logp_train)  # expm1: exact sign near r = 1


@dataclass(frozen=True)
class RatioClip:
    """PPO clip (ε_low = ε_high) and clip-higher: region ``1−ε_low ≤ r ≤ 1+ε_high``."""

    eps_low: float = 0.2
    eps_high: float = 0.2

    def keep(self, stats: TokenStats) -> Tensor:
        import torch
        a, r = stats.advantage, stats.ratio
        outside = torch.where(a > 0, r > 1.0 + self.eps_high, r < 1.0 - self.eps_low)
        return decide(outside, _ratio_slope(stats), a)


@dataclass(frozen=True)
class DivergenceMask:
    """Outside iff ``proximity > delta``; direction from the sign of ``slope``."""

    proximity: Stat
    slope: Stat
    delta: float

    def keep(self, stats: TokenStats) -> Tensor:
        return decide(self.proximity(stats) > self.delta, self.slope(stats), stats.advantage)


@dataclass(frozen=True)
class KeepAll:
    """The reference update: every token kept."""

    def keep(self, stats: TokenStats) -> Tensor:
        import torch
        return torch.ones_like(stats.advantage, dtype=torch.bool)


@dataclass(frozen=True)
class Thresholds:
    """Every mask parameter, with SPEC defaults; maps 1:1 to the CLI options."""

    eps: float = 0.2
    eps_low: float = 0.2
    eps_high: float = 0.28
    delta_kl: float = 0.15
    delta_tv: float = 0.15


@dataclass(frozen=True)
class MaskSpec:
    """A registered mask: how to build it, and labels the reports group by."""

    name: str
    build: Callable[[Thresholds], Mask]
    family: str | None  # "kl" | "tv" | None: which divergence's region it guards
    direction: str  # "ratio" | "predictive" | "none"
    estimator: str | None  # "agg" | "uniform" | None
    doc: str
    # The Thresholds fields the mask reads (a threshold sweep varies only these).
    thresholds: tuple[str, ...] = ()


MASKS: dict[str, MaskSpec] = {}


def register(spec: MaskSpec) -> MaskSpec:
    """Add ``spec`` to :data:`MASKS`; a second mask of the same name is rejected."""
    if spec.name in MASKS:
        raise ValueError(f"mask {spec.name!r} is already registered")
    MASKS[spec.name] = spec
    return spec


def _div(prox: str, slope: Stat, delta: str) -> Callable:
    """Builder of a divergence mask whose δ is the Thresholds field ``delta``."""
    return lambda t: DivergenceMask(attrgetter(prox), slope, getattr(t, delta))


register(MaskSpec("none", lambda t: KeepAll(), None, "none", None, "keep every token"))
register(MaskSpec("ppo_clip", lambda t: RatioClip(t.eps, t.eps), None, "ratio", None,
                  "PPO clip: r outside [1-eps, 1+eps], ratio direction", ("eps",)))
register(MaskSpec("clip_higher", lambda t: RatioClip(t.eps_low, t.eps_high), None, "ratio",
                  None, "decoupled clip (DAPO): r outside [1-eps_low, 1+eps_high]",
                  ("eps_low", "eps_high")))
for _fam in ("kl", "tv"):
    _delta = f"delta_{_fam}"
    _reads = (_delta,)
    register(MaskSpec(f"dppo_binary_{_fam}", _div(f"{_fam}_binary", _ratio_slope, _delta),
                      _fam, "ratio", None, f"binary {_fam.upper()} > delta, ratio direction",
                      _reads))
    register(MaskSpec(f"dppo_topk_{_fam}", _div(f"{_fam}_topk", _ratio_slope, _delta),
                      _fam, "ratio", None, f"top-K {_fam.upper()} > delta, ratio direction",
                      _reads))
    for _est in ("agg", "uniform"):
        register(MaskSpec(f"pdm_{_fam}_{_est}",
                          _div(f"{_fam}_topk", attrgetter(f"d{_fam}_{_est}"), _delta),
                          _fam, "predictive", _est,
                          f"top-K {_fam.upper()} > delta, predictive direction ({_est} tail)",
                          _reads))


def _certified_slope(s: TokenStats) -> Tensor:
    import torch
    return s.direction_certified * torch.sign(s.advantage)


register(MaskSpec("pdm_kl_certified", _div("kl_topk", _certified_slope, "delta_kl"),
                  "kl", "certified", None,
                  "top-K KL > delta, masked only where the sign certificate proves 'away'",
                  ("delta_kl",)))


def resolve_names(names: Iterable[str] | None) -> list[str]:
    """Validate mask names (``None`` = all, registry order); unknown names raise ``ValueError``."""
    if names is None:
        return list(MASKS)
    names = list(dict.fromkeys(names))
    unknown = [n for n in names if n not in MASKS]
    if unknown:
        raise ValueError(f"unknown mask(s) {', '.join(unknown)}; known: {', '.join(MASKS)}")
    return names


def build_masks(names: Iterable[str] | None, thresholds: Thresholds) -> dict[str, Mask]:
    """Instantiate the named masks with ``thresholds``."""
    return {n: MASKS[n].build(thresholds) for n in resolve_names(names)}


def apply_masks(masks: dict[str, Mask], stats: TokenStats) -> dict[str, Tensor]:
    """Each mask's ``keep`` (N,) bool on ``stats``."""
    return {name: mask.keep(stats) for name, mask in masks.items()}
