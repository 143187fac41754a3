"""A mask of your own: IcePop's band (r outside [0.5, 5] is out of region) with PDM's
predictive KL direction instead of dropping every out-of-band token.

    pdm-replay masks LOG --out tokens.parquet --mask-module docs/examples/my_masks.py \
        --masks icepop,icepop_ratio,icepop_pdm_kl

It shares the proximity "icepop" with the built-in ``icepop_ratio``, so
``pdm_replay.masks.mask_pairs`` pairs the two (ratio vs predictive direction).
"""

from pdm_replay.mask_kinds import Criterion
from pdm_replay.masks import MaskSpec, register

register(MaskSpec(
    "icepop_pdm_kl",
    lambda t: Criterion("ratio", t.icepop_low, t.icepop_high, direction="predictive",
                        slope="dkl_agg"),
    family=None, direction="predictive", estimator="agg",
    doc="IcePop's band with the predictive KL direction (aggregated tail)",
    thresholds=("icepop_low", "icepop_high"), proximity="icepop", source="docs/masks.md"))
