"""A mask of your own: IcePop's band (r outside [0.5, 5] is out of region) with PDM's
predictive TV direction instead of dropping every out-of-band token.

    pdm-replay masks LOG --out tokens.parquet --mask-module docs/examples/my_masks.py \
        --masks icepop,icepop_ratio,icepop_pdm_tv

It shares the proximity "icepop" with the built-in ``icepop_ratio``, so
``pdm_replay.masks.mask_pairs`` pairs the two (ratio vs predictive direction); it declares
the family "tv", so the pair joins the direction analysis of ``report`` and ``dashboard``
(region: its own band, ΔD: the change of the top-K TV).
"""

from pdm_replay.masks.kinds import Criterion
from pdm_replay.masks import MaskSpec, register

register(MaskSpec(
    "icepop_pdm_tv",
    lambda t: Criterion("ratio", t.icepop_low, t.icepop_high, direction="predictive",
                        slope="dtv_agg"),
    family="tv", direction="predictive", estimator="agg",
    doc="IcePop's band with the predictive TV direction (aggregated tail)",
    thresholds=("icepop_low", "icepop_high"), proximity="icepop", source="docs/masks.md"))
