"""The per-step plots of :mod:`pdm_replay.report.mismatch` (PNG bytes, matplotlib):
``mismatch``, one small panel per metric over steps as trainers' W&B panels show them, and
``keep_stats``, each mask's masked fraction over steps split by the sign of Â.

Examples
--------
>>> import polars as pl
>>> frame = pl.DataFrame({"step": [0, 1], "rollout_corr/kl": [0.01, 0.02]})
>>> mismatch_png(frame)[:4]
b'\\x89PNG'
"""

from __future__ import annotations

import math

import polars as pl

from pdm_replay.report.figures import _empty, _figure, _png

# The panels of the report's figure (the dashboard page draws every metric).
PANELS = ("rollout_corr/kl", "rollout_corr/k3_kl", "rollout_corr/chi2_token",
          "rollout_corr/chi2_seq", "rollout_corr/log_ppl_abs_diff", "rollout_corr/ppl_ratio",
          "rollout_corr/rollout_is_eff_sample_size", "rollout_corr/rollout_is_ratio_fraction_high",
          "sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max",
          "sampling/importance_sampling_ratio/max", "topk/kl_topk_p99", "topk/tv_topk_p99")
COLUMNS = 4


def mismatch_png(frame: pl.DataFrame) -> bytes:
    """Panels of :data:`PANELS` present in the ``mismatch`` table ``frame`` (plus its
    out-of-region shares), each a line over ``step``."""
    names = [c for c in PANELS if c in frame.columns] + [
        c for c in frame.columns if "out_of_region@" in c]
    rows = max(math.ceil(len(names) / COLUMNS), 1)
    fig = _figure(3.2 * COLUMNS, 2.3 * rows)
    axes = fig.subplots(rows, COLUMNS, squeeze=False).ravel()
    if not names or not frame.height:
        _empty(axes[0], "no per-step metrics: the run has no tokens")
    steps = frame["step"].to_numpy() if frame.height else []
    for ax, name in zip(axes, names):
        ax.plot(steps, frame[name].cast(pl.Float64).to_numpy(), marker=".", lw=1.0)
        ax.set_title(name, fontsize=7)
        ax.tick_params(labelsize=6)
        ax.set_xlabel("step", fontsize=6)
    for ax in axes[max(len(names), 1):]:
        ax.set_axis_off()
    return _png(fig)


def keep_stats_png(frame: pl.DataFrame) -> bytes:
    """Two panels (Â > 0, Â < 0): each mask's masked token fraction over ``step``."""
    fig = _figure(12.0, 4.0)
    axes = fig.subplots(1, 2, squeeze=False)[0]
    if not frame.height:
        _empty(axes[0], "no keep statistics: the run has no tokens")
        return _png(fig)
    for ax, (column, side) in zip(axes, (("masked_fraction_adv_pos", "Â > 0"),
                                         ("masked_fraction_adv_neg", "Â < 0"))):
        for (mask,), g in frame.group_by(["mask"], maintain_order=True):
            ax.plot(g["step"].to_numpy(), g[column].to_numpy(), lw=1.0, label=mask)
        ax.set_title(f"masked fraction of the step's tokens with {side}", fontsize=8)
        ax.set_xlabel("step", fontsize=7)
        ax.tick_params(labelsize=6)
    axes[1].legend(fontsize=5, ncol=2, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(fig)
