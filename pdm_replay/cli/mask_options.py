"""CLI options shared by every command that reads masks (masks, replay, report, sql,
dashboard): dual-clip, any other mask parameter, user mask modules. Torch-free: the
registry's metadata only.

>>> parse_mask_params(["tis_cap=4", "icepop_low=0.4"])
{'tis_cap': 4.0, 'icepop_low': 0.4}
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pdm_replay.masks import Thresholds, load_mask_module

ClipRatioC = Annotated[float, typer.Option(
    "--clip-ratio-c", min=0.0, help="verl's dual-clip c for ppo_clip and clip_higher (Â < 0 "
    "and r > c get no gradient); 0 = off. verl_vanilla uses it, else verl's 3.0.")]
MaskParams = Annotated[Optional[list[str]], typer.Option(
    "--mask-param", help="FIELD=VALUE for any other mask parameter (repeatable), e.g. "
    "tis_cap=4 or icepop_low=0.4; fields and defaults: the README mask table.")]
MaskModules = Annotated[Optional[list[Path]], typer.Option(
    "--mask-module", help="A Python file that registers masks of its own with "
    "pdm_replay.masks.register (repeatable): they join every command, report and view.")]
FIXED_FIELDS = ("eps", "eps_low", "eps_high", "delta_kl", "delta_tv", "clip_ratio_c")


def parse_mask_params(items: list[str] | None) -> dict[str, float]:
    """``["tis_cap=4"]`` -> ``{"tis_cap": 4.0}``; fields with their own option are refused."""
    out: dict[str, float] = {}
    fields = [f for f in Thresholds.__dataclass_fields__ if f not in FIXED_FIELDS]
    for item in items or ():
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in fields:
            raise ValueError(f"--mask-param {item!r}: expected FIELD=VALUE with FIELD one of "
                             f"{', '.join(fields)}")
        try:
            out[name] = float(value)
        except ValueError as exc:
            raise ValueError(f"--mask-param {item!r}: {value!r} is not a number") from exc
    return out


def load_mask_modules(paths: list[Path] | None) -> None:
    """Import every ``--mask-module`` file (each registers its masks)."""
    for path in paths or ():
        load_mask_module(path)
