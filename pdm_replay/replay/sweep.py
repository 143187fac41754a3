"""Threshold sweeps: ``--delta-kl 0.05,0.15`` replays every δ in one run (SPEC §6).

A mask reads some :class:`~pdm_replay.masks.Thresholds` fields (the registry's
``MaskSpec.thresholds``). When a field it reads is given more than one value, the mask
becomes one *variant* per value, named ``<mask>@<value>`` (``value`` as Python's shortest
float ``repr``): its decision is the tokens/v1 column ``keep_<mask>@<value>`` and its
simulated update the updates/v1 ``update_mask`` ``<mask>@<value>``. A mask that reads no
swept field keeps its plain name. The first value of each field is the run's primary
threshold (tokens footer ``pdm_replay.thresholds``); the variants' fields and values are
recorded in the tokens footer (``pdm_replay.mask_variants``) and the manifest, so nothing
downstream parses names.

Examples
--------
>>> from pdm_replay.masks import Thresholds
>>> sweep = Sweep(delta_kl=(0.05, 0.15))
>>> list(variants(["none", "dppo_topk_kl", "dppo_topk_tv"], sweep))
['none', 'dppo_topk_kl@0.05', 'dppo_topk_kl@0.15', 'dppo_topk_tv']
>>> masks = build_variants(["pdm_kl_agg"], Thresholds(), sweep)
>>> masks["pdm_kl_agg@0.05"].high, masks["pdm_kl_agg@0.15"].high
(0.05, 0.15)
>>> parse_values("0.05, 0.15,0.05", "delta_kl")
(0.05, 0.15)
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Iterable

from pdm_replay.errors import FieldError
from pdm_replay.masks import MASK_SPECS, Mask, Thresholds, resolve_names

SWEPT = ("eps", "delta_kl", "delta_tv")  # the fields a CLI option may list several values of


@dataclass(frozen=True)
class Sweep:
    """Values of each swept threshold field; a field with fewer than two is not swept."""

    eps: tuple[float, ...] = ()
    delta_kl: tuple[float, ...] = ()
    delta_tv: tuple[float, ...] = ()

    def swept(self) -> dict[str, tuple[float, ...]]:
        """``{field: values}`` of the fields with at least two values."""
        return {f: getattr(self, f) for f in SWEPT if len(getattr(self, f)) > 1}

    def primary(self, thresholds: Thresholds) -> Thresholds:
        """``thresholds`` with every swept field at its first value."""
        return dataclasses.replace(thresholds, **{f: v[0] for f, v in self.swept().items()})


@dataclass(frozen=True)
class Variant:
    """One (mask, threshold values) pair: ``values`` maps swept fields to their value."""

    name: str
    mask: str
    values: tuple[tuple[str, float], ...] = ()

    def build(self, thresholds: Thresholds) -> Mask:
        return MASK_SPECS[self.mask].build(dataclasses.replace(thresholds, **dict(self.values)))

    def describe(self) -> dict:
        return {"mask": self.mask, **dict(self.values)}


def value_label(value: float) -> str:
    """The ``@<value>`` part of a variant name: Python's shortest round-trip float."""
    return repr(float(value))


def parse_values(text: str | float, field: str) -> tuple[float, ...]:
    """``"0.05,0.15"`` -> ``(0.05, 0.15)`` (repeats dropped, order kept); each finite, >= 0.
    ``field``: the config field the text is for (its errors name it)."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    try:
        values = tuple(dict.fromkeys(float(p) for p in parts))
    except ValueError as exc:
        raise FieldError("{" + field + "} {text!r}: expected numbers separated by commas, "
                         "e.g. 0.05,0.15", text=text) from exc
    if not values or any(not math.isfinite(v) or v < 0 for v in values):
        raise FieldError("{" + field + "} {text!r}: expected one or more finite values >= 0",
                         text=text)
    return values


def variants(names: Iterable[str] | None, sweep: Sweep) -> dict[str, Variant]:
    """Every variant of the named masks (``None`` = all), registry order within a mask."""
    swept = sweep.swept()
    out: dict[str, Variant] = {}
    for mask in resolve_names(names):
        fields = [f for f in MASK_SPECS[mask].thresholds if f in swept]
        for combo in itertools.product(*(swept[f] for f in fields)):
            name = mask + "".join(f"@{value_label(v)}" for v in combo)
            out[name] = Variant(name, mask, tuple(zip(fields, combo)))
    return out


def build_variants(names: Iterable[str] | None, thresholds: Thresholds,
                   sweep: Sweep) -> dict[str, Mask]:
    """The masks of :func:`variants`, built at their thresholds."""
    return {n: v.build(thresholds) for n, v in variants(names, sweep).items()}


def trainer_variant(spec: str, sweep: Sweep) -> Variant:
    """The mask the trainer used: ``NAME`` or ``NAME@VALUE`` (VALUE for the one swept
    field the mask reads, which must then be named)."""
    mask, _, value = spec.partition("@")
    resolve_names([mask])
    swept = [f for f in MASK_SPECS[mask].thresholds if f in sweep.swept()]
    if not value:
        if swept:
            f = swept[0]
            raise FieldError("{trainer_mask} {spec}: {mask} reads {" + f + "}, which is swept "
                             "({values}); name the trainer's value, e.g. {trainer_mask} "
                             "{mask}@{first}", spec=spec, mask=mask,
                             values=", ".join(map(value_label, getattr(sweep, f))),
                             first=value_label(getattr(sweep, f)[0]))
        return Variant(mask, mask)
    reads = [f for f in MASK_SPECS[mask].thresholds if f in SWEPT]
    if len(reads) != 1:
        raise FieldError("{trainer_mask} {spec}: {mask} reads no single threshold of "
                         + ", ".join("{%s}" % f for f in SWEPT) + "; pass the plain name",
                         spec=spec, mask=mask)
    (val,) = parse_values(value, "trainer_mask")
    return Variant(f"{mask}@{value_label(val)}", mask, ((reads[0], val),))
