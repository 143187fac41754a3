"""The kinds of mask the registry composes: frozen dataclasses with flat typed parameters.

:class:`Criterion` is proximity × direction (a region ``low ≤ stat ≤ high`` on a token or
sequence statistic, and a direction criterion); :class:`ISWeight` is an importance weight
(TIS, CISPO, MIS); :class:`KeepAll` keeps every token (the ``none`` mask, whose update is
the basis ``none``). The math is in :mod:`pdm_replay.math.mask_ops`, imported on first use
so that the registry's metadata imports without torch. Other trainers' masks that are neither (AReaL's M2PO, open-instruct's
VACO, SAPO's gate, GMPO's clip) are kinds of their own at the end, their math in
:mod:`pdm_replay.math.field_masks`.

Examples
--------
>>> c = Criterion("kl_topk", high=0.15, direction="predictive", slope="dkl_agg")
>>> c.reads_sequences, Criterion("k1", high=0.1, reduce="mean").reads_sequences
(False, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

    from pdm_replay.math.metrics import TokenStats
    from pdm_replay.math.segments import Segments


def _ops():  # noqa: ANN202  (torch loads here, not when the registry is imported)
    from pdm_replay.math import mask_ops
    return mask_ops


@dataclass(frozen=True)
class Criterion:
    """Drop a token iff ``stat`` (its sequence ``reduce`` when set) is outside
    ``[low, high]`` and the ``direction`` says the update moves away.

    ``slope`` names the TokenStats Ḋ field of a predictive direction; ``clip_ratio_c``
    adds verl's dual-clip (Â < 0 and r > c dropped; 0 = off).
    """

    stat: str
    low: float = -math.inf
    high: float = math.inf
    reduce: str = ""  # "" token | "sum" | "mean" | "max" over the sequence's loss tokens
    direction: str = "none"
    slope: str = ""
    clip_ratio_c: float = 0.0

    @property
    def reads_sequences(self) -> bool:
        return bool(self.reduce)

    def keep(self, stats: "TokenStats", seqs: "Segments | None" = None) -> "Tensor":
        ops = _ops()
        value = ops.per_sequence(ops.statistic(stats, self.stat), self.reduce, seqs,
                                 f"{self.stat} {self.reduce}")
        drop = ops.outside(value, self.low, self.high)
        drop &= ops.away(stats, self.direction, self.slope, self.reduce, seqs)
        return ops.dual_clip(~drop, stats, self.clip_ratio_c)

    def weight(self, stats: "TokenStats", seqs: "Segments | None" = None) -> "Tensor":
        return self.keep(stats, seqs).double()


class WeightKeeps:
    """A weight mask (a class with ``weight``) keeps a token where ``w > 0``."""

    def keep(self, stats: "TokenStats", seqs: "Segments | None" = None) -> "Tensor":
        return self.weight(stats, seqs) > 0  # type: ignore[attr-defined]


@dataclass(frozen=True)
class ISWeight(WeightKeeps):
    """Weight ``w = f(ρ)/r`` so that the surrogate's ``w·r = f(ρ)``: ``f`` clamps ρ to
    ``[low, high]`` (``truncate``) or zeroes it outside; ρ the token ratio, or the
    sequence ratio ``exp(Σ log r)`` when ``reduce`` is "sum"."""

    low: float = 0.0
    high: float = math.inf
    reduce: str = ""
    truncate: bool = True

    @property
    def reads_sequences(self) -> bool:
        return bool(self.reduce)

    def weight(self, stats: "TokenStats", seqs: "Segments | None" = None) -> "Tensor":
        return _ops().is_weight(stats, self.low, self.high, self.reduce, self.truncate, seqs)


@dataclass(frozen=True)
class KeepAll:
    """Every token kept: the ``none`` mask, whose simulated step is the basis ``none``."""

    reads_sequences = False

    def keep(self, stats: "TokenStats", seqs: "Segments | None" = None) -> "Tensor":
        import torch
        return torch.ones_like(stats.advantage, dtype=torch.bool)

    def weight(self, stats: "TokenStats", seqs: "Segments | None" = None) -> "Tensor":
        return self.keep(stats, seqs).double()


def _field():  # noqa: ANN202  (torch loads here, as in _ops)
    from pdm_replay.math import field_masks
    return field_masks


def _valid(stats: "TokenStats", seqs: "Segments | None") -> "Tensor":
    import torch
    return seqs.valid if seqs is not None else torch.ones_like(stats.advantage, dtype=torch.bool)


def _needs(seqs: "Segments | None", what: str) -> "Segments":
    if seqs is None:
        raise ValueError(f"{what} is a sequence mask: pass the tokens' Segments")
    return seqs


def _raw_log_ratio(stats: "TokenStats") -> "Tensor":
    return stats.logp_train.double() - stats.logp_behavior.double()


@dataclass(frozen=True)
class M2PO:
    """AReaL's M2PO within each response: drop its largest ``(log µ − log π)²`` until the
    mean of the rest is below ``threshold`` (:func:`~pdm_replay.math.field_masks.m2po_keep`).

    AReaL applies the rule over a training micro-batch; here the unit is the response,
    the one group whose decisions do not depend on how ``masks`` cuts its work (by a token
    budget) or on a replay seed's batch. Without Segments the call's tokens are one group.
    """

    threshold: float

    reads_sequences = True

    def keep(self, stats: "TokenStats", seqs: "Segments | None" = None) -> "Tensor":
        return _field().m2po_keep(_raw_log_ratio(stats), _valid(stats, seqs),
                                  stats.advantage, self.threshold,
                                  None if seqs is None else seqs.inverse)

    def weight(self, stats: "TokenStats", seqs: "Segments | None" = None) -> "Tensor":
        return self.keep(stats, seqs).double()


@dataclass(frozen=True)
class VacoTV(WeightKeeps):
    """open-instruct's VACO TV mask and ρ cap
    (:func:`~pdm_replay.math.field_masks.vaco_weight`)."""

    delta: float
    cap: float

    reads_sequences = True

    def weight(self, stats: "TokenStats", seqs: "Segments | None" = None) -> "Tensor":
        return _field().vaco_weight(_raw_log_ratio(stats), stats.advantage,
                                    _needs(seqs, "vaco_tv"), self.delta, self.cap)


@dataclass(frozen=True)
class SapoGate(WeightKeeps):
    """SAPO's sigmoid gate as a weight (:func:`~pdm_replay.math.field_masks.sapo_weight`)."""

    tau_pos: float
    tau_neg: float

    reads_sequences = False

    def weight(self, stats: "TokenStats", seqs: "Segments | None" = None) -> "Tensor":
        return _field().sapo_weight(_raw_log_ratio(stats), stats.advantage, self.tau_pos,
                                    self.tau_neg)


@dataclass(frozen=True)
class GeoMeanClip(WeightKeeps):
    """GMPO's geometric-mean clip as a weight
    (:func:`~pdm_replay.math.field_masks.gmpo_weight`)."""

    eps_low: float
    eps_high: float

    reads_sequences = True

    def weight(self, stats: "TokenStats", seqs: "Segments | None" = None) -> "Tensor":
        return _field().gmpo_weight(_raw_log_ratio(stats), stats.advantage,
                                    _needs(seqs, "gmpo"), self.eps_low, self.eps_high)
