"""Statistics of a rollout log that say whether it behaves like a real (small) RL run.

Computed from the written log in log-only mode (:func:`pdm_replay.tokens.log_stats`),
i.e. exactly what ``pdm-replay masks`` would see.

Examples
--------
>>> import tempfile, pathlib
>>> from pdm_replay.testing.fixtures import write_synthetic_log
>>> p = write_synthetic_log(pathlib.Path(tempfile.mkdtemp()) / "l.parquet", n_samples=16)
>>> s = log_statistics(p)
>>> s.samples, s.tokens
(16, 256)
>>> sorted(s.checks())[:2]
['disagreements', 'kl_tail']
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import torch

from pdm_replay.io.log import RolloutLog
from pdm_replay.io.reader import flatten_batch
from pdm_replay.math.metrics import TokenStats
from pdm_replay.tokens import log_stats

DELTA_KL = 0.15
TAIL_FLOOR = 1e-3  # a µ tail above this is "non-trivial"
MIN_DISAGREEMENTS = 1000  # KL / aggregated disagreements at DELTA_KL over the whole log
MIN_SEEDS, SEED_SAMPLES = 16, 64  # disjoint replay seeds the log must hold
MIN_STEPS = 3  # consecutive logged RL steps


@dataclass(frozen=True)
class SampleStats:
    """Summary of a log (token counts over loss tokens; K = the log's ``top_k``)."""

    samples: int
    steps: int  # distinct logged steps
    tokens: int
    top_k: int
    topk_mass_median: float  # median µ mass of the K logged top-K entries
    topk_mass_p05: float
    tail_median: float  # median µ mass outside S = top-K ∪ {k}
    tail_p95: float
    tail_nontrivial_frac: float  # fraction of tokens with µ tail > TAIL_FLOOR
    kl_topk_median: float
    kl_over_delta_frac: float  # fraction with kl_topk > DELTA_KL
    disagree_all: int  # Â ≠ 0 and sign(Â)(r−1) > 0 differs from sign(Â)·dkl_agg > 0
    disagree_out: int  # the same among out-of-region tokens (kl_topk > DELTA_KL)
    out_of_region: int
    ratio_p01: float
    ratio_p99: float
    mass_overflow: int
    reward_mean: float
    reward_zero_frac: float
    reward_one_frac: float

    def checks(self) -> dict[str, bool]:
        """The acceptance criteria of the shipped sample (issues 3 and 18): peaked but not
        degenerate µ, enough disagreement tokens to measure, 16 disjoint seeds of 64."""
        return {
            "peaked": self.topk_mass_median >= 0.95,
            "tail": self.tail_nontrivial_frac >= 0.05,
            "kl_tail": self.kl_over_delta_frac >= 0.02,
            "disagreements": self.disagree_out >= MIN_DISAGREEMENTS,
            "rewards_mixed": 0.0 < self.reward_mean < 1.0,
            "size": self.samples >= MIN_SEEDS * SEED_SAMPLES,
            "steps": self.steps >= MIN_STEPS,
        }

    def as_dict(self) -> dict:
        return asdict(self)


def direction_disagreement(stats: TokenStats) -> torch.Tensor:
    """``(N,)`` bool: ratio and predictive (KL, aggregated) directions disagree, Â ≠ 0."""
    sign = torch.sign(stats.advantage)
    ratio_away = sign * (stats.ratio - 1.0) > 0
    pred_away = sign * stats.dkl_agg > 0
    return (sign != 0) & (ratio_away != pred_away)


def _quantile(x: np.ndarray, q: float) -> float:
    return float(np.quantile(x, q)) if x.size else float("nan")


def _token_arrays(log: RolloutLog) -> dict[str, np.ndarray]:
    parts: dict[str, list[np.ndarray]] = {}
    meta = log.meta
    for flat in (flatten_batch(batch) for _, _, batch in log.iter_batches()):
        keep = flat.loss_mask
        stats = log_stats(flat, meta.vocab_size, meta)
        lp = torch.from_numpy(flat.topk_logprobs[:, :meta.top_k]).double()
        cols = {"mass": torch.logsumexp(lp, -1).exp().numpy(),
                "disagree": direction_disagreement(stats).numpy()}
        cols.update({k: stats.as_dict()[k].numpy()
                     for k in ("mu_tail", "kl_topk", "ratio", "mass_overflow")})
        for name, value in cols.items():
            parts.setdefault(name, []).append(value[keep])
    return {k: np.concatenate(v) for k, v in parts.items()}


def _rewards_and_steps(log: RolloutLog) -> tuple[np.ndarray, np.ndarray]:
    batches = [b for _, _, b in log.iter_batches(["reward", "step"])]
    rewards = [pc.fill_null(b.column("reward"), np.nan).to_numpy(zero_copy_only=False)
               for b in batches]
    steps = [b.column("step").to_numpy() for b in batches]
    return np.concatenate(rewards).astype(np.float64), np.concatenate(steps)


def log_statistics(path: Path | str, delta_kl: float = DELTA_KL) -> SampleStats:
    """:class:`SampleStats` of the rollout/v1 log at ``path`` (file or directory)."""
    log = RolloutLog.open(path)
    meta = log.meta
    a = _token_arrays(log)
    all_rewards, steps = _rewards_and_steps(log)
    rewards = all_rewards[~np.isnan(all_rewards)]
    out = a["kl_topk"] > delta_kl
    return SampleStats(
        samples=len(all_rewards), steps=len(np.unique(steps)), tokens=len(a["mass"]), top_k=meta.top_k,
        topk_mass_median=_quantile(a["mass"], 0.5), topk_mass_p05=_quantile(a["mass"], 0.05),
        tail_median=_quantile(a["mu_tail"], 0.5), tail_p95=_quantile(a["mu_tail"], 0.95),
        tail_nontrivial_frac=float((a["mu_tail"] > TAIL_FLOOR).mean()),
        kl_topk_median=_quantile(a["kl_topk"], 0.5), kl_over_delta_frac=float(out.mean()),
        disagree_all=int(a["disagree"].sum()), disagree_out=int((a["disagree"] & out).sum()),
        out_of_region=int(out.sum()), ratio_p01=_quantile(a["ratio"], 0.01),
        ratio_p99=_quantile(a["ratio"], 0.99), mass_overflow=int(a["mass_overflow"].sum()),
        reward_mean=float(rewards.mean()) if rewards.size else float("nan"),
        reward_zero_frac=float((rewards == 0).mean()) if rewards.size else float("nan"),
        reward_one_frac=float((rewards == 1).mean()) if rewards.size else float("nan"))
