"""The mask registry (SPEC §4): what a mask is, and every built-in one.

- :mod:`~pdm_replay.masks.registry`: :class:`MaskSpec`, :data:`MASK_SPECS` (name → spec),
  :func:`register`, the pairs a comparison derives (:func:`mask_pairs`) and
  ``--mask-module`` (:func:`load_mask_module`);
- :mod:`~pdm_replay.masks.kinds`: the building blocks a spec's mask is made of
  (:class:`~pdm_replay.masks.kinds.Criterion`, the importance weights);
- :mod:`~pdm_replay.masks.catalog`: the built-in masks, one ``register(...)`` line each;
- :mod:`~pdm_replay.masks.table`: the README's mask table, generated from the registry.

Importing the package registers the built-in masks.

>>> from pdm_replay.masks import MASK_SPECS, BUILTIN
>>> MASK_SPECS["ppo_clip"].direction, "ppo_clip" in BUILTIN
('ratio', True)
"""

from pdm_replay.masks.registry import (DIRECTIONS, FLAGGED_THRESHOLDS, GRANULARITIES,
                                       MASK_SPECS, WEIGHTS, Mask, MaskPair, MaskSpec,
                                       Thresholds, apply_masks, build_masks,
                                       comparison_pairs, load_mask_module, mask_pairs,
                                       register, resolve_names, token_region,
                                       weight_masks)
from pdm_replay.masks import catalog  # noqa: E402,F401  (registers the built-in masks)

BUILTIN: tuple[str, ...] = tuple(MASK_SPECS)  # the package's own masks (the README table)

__all__ = ["BUILTIN", "DIRECTIONS", "FLAGGED_THRESHOLDS", "GRANULARITIES", "MASK_SPECS",
           "WEIGHTS", "Mask", "MaskPair", "MaskSpec", "Thresholds", "apply_masks",
           "build_masks", "comparison_pairs", "load_mask_module", "mask_pairs", "register",
           "resolve_names", "token_region", "weight_masks"]
