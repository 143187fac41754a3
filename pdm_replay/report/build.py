"""Assemble every report of a run into one :class:`Report` (what ``pdm-replay report`` prints).

Examples
--------
>>> from pdm_replay.report.synthetic import example_run
>>> from pdm_replay.report.db import connect
>>> with connect(example_run()) as db:
...     report = build_report(db)
>>> d = report.to_dict()
>>> sorted(d["headline"][0])[:4]
['ci_high', 'ci_low', 'corrective_predictive', 'corrective_ratio']
>>> d["kind"], d["thresholds"]["delta_kl"]
('replay', 0.15)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from pdm_replay.masks import MASKS, comparison_pairs
from pdm_replay.report import api
from pdm_replay.report.attribution import ATTRIBUTION_NOTE, attribution_split
from pdm_replay.report.certificates import certificate_summary
from pdm_replay.report.db import DEFAULT_MEMORY_LIMIT, ReportDB
from pdm_replay.report.run import RunInfo

FORMATS = ("table", "markdown", "json", "html")
REPLAY_HINT = ("run `pdm-replay replay` on the rollout log with the training checkpoint to "
               "simulate the update")


@dataclass(frozen=True)
class ReportConfig:
    """Options of ``pdm-replay report`` (1:1 with the CLI)."""

    source: Path
    format: str = "table"
    out: Path | None = None
    plots_dir: Path | None = None
    memory_limit: str = DEFAULT_MEMORY_LIMIT
    threads: int | None = None
    bootstrap_samples: int = 2000
    confidence: float = 0.95
    bootstrap_seed: int = 0


# (attribute, title) of every table section, in print order
SECTIONS = (
    ("headline", "Direction analysis (SPEC §6): ratio vs predictive masks"),
    ("seed_rates", "Unsafe-keep and corrective rates per seed"),
    ("seed_wins", "Seed wins: predictive lower unsafe-keep rate than ratio"),
    ("sign_accuracy", "Sign accuracy of each direction predictor (update `none`)"),
    ("estimator_accuracy", "Top-K slope estimators vs exact"),
    ("certificates", "Sign certificates (KL): decisions the logged support alone settles"),
    ("attribution", "Why direction predictions failed: first-order attribution of ΔD_kl "
                    "(update `none`)"),
    ("mask_summary", "Mask summary"),
    ("log_health", "Log health"),
)


@dataclass(frozen=True)
class Report:
    """Every report table of one run, plus notes on what is missing and why."""

    info: RunInfo
    headline: pl.DataFrame
    seed_rates: pl.DataFrame
    seed_wins: pl.DataFrame
    sign_accuracy: pl.DataFrame
    estimator_accuracy: pl.DataFrame
    mask_summary: pl.DataFrame
    log_health: pl.DataFrame
    notes: tuple[str, ...]
    confidence: float = 0.95  # level of the bootstrap intervals in seed_wins / headline
    attribution: pl.DataFrame = field(default_factory=pl.DataFrame)  # report.attribution
    certificates: pl.DataFrame = field(default_factory=pl.DataFrame)  # report.certificates

    def sections(self) -> list[tuple[str, str, pl.DataFrame]]:
        """``(key, title, frame)`` of every table, in print order."""
        return [(key, title, getattr(self, key)) for key, title in SECTIONS]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: run description, every table as a list of rows, notes."""
        out: dict[str, Any] = {"source": str(self.info.source), "kind": self.info.kind,
                               "thresholds": asdict(self.info.thresholds),
                               "thresholds_source": self.info.thresholds_source,
                               "masks": list(self.info.masks)}
        for key, _, frame in self.sections():
            rows = [_clean(r) for r in frame.to_dicts()]
            out[key] = rows[0] if key == "log_health" else rows
        out["confidence"] = self.confidence
        out["notes"] = list(self.notes)
        return out


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    """NaN -> None, so the JSON is strict."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


def build_report(db: ReportDB, *, bootstrap_samples: int = 2000, confidence: float = 0.95,
                 bootstrap_seed: int = 0) -> Report:
    """Run every report query on ``db``; bootstrap settings go to :func:`api.seed_wins`."""
    boot = {"n_resamples": bootstrap_samples, "confidence": confidence, "seed": bootstrap_seed}
    db.cache_disagreements()
    health = api.log_health(db)
    by_seed = api.alignment_by_seed(db)
    unmeasured = int((by_seed["n_kept"] - by_seed["n_measured"]).sum()) if by_seed.height else 0
    split = attribution_split(db)
    extra = (ATTRIBUTION_NOTE,) if db.info.has_updates and not split.height else ()
    return Report(info=db.info, headline=api.headline(db, **boot),
                  seed_rates=api.seed_rates(db), seed_wins=api.seed_wins(db, **boot),
                  sign_accuracy=api.sign_accuracy(db),
                  estimator_accuracy=api.estimator_accuracy(db),
                  mask_summary=api.mask_summary(db), log_health=health,
                  notes=tuple(_notes(db.info, health.row(0, named=True), unmeasured)) + extra,
                  confidence=confidence, attribution=split,
                  certificates=certificate_summary(db))


def _notes(info: RunInfo, health: dict[str, Any], unmeasured: int) -> list[str]:
    """What the report could not show, and why; data-quality warnings."""
    notes = list(info.notes)
    if not info.has_updates:
        notes.append(f"{info.source}: no simulated update (updates/v1), so unsafe-keep and "
                     "corrective rates, sign accuracy and seed wins are empty; out-of-region "
                     f"and disagreement counts are shown. To get them, {REPLAY_HINT}")
    for family, estimator, ratio, pred in comparison_pairs(list(MASKS)):
        missing = [f"keep_{m}" for m in (ratio, pred) if m not in info.masks]
        if missing:
            notes.append(f"no {family}/{estimator} comparison: the run lacks "
                         f"{', '.join(missing)}")
    if not info.has_exact:
        notes.append("estimator accuracy needs kl_exact/dkl_exact: a replay with a behaviour "
                     "checkpoint (full µ)")
    if health["n_mass_overflow"]:
        notes.append(f"{health['n_mass_overflow']} tokens "
                     f"({health['mass_overflow_fraction']:.3%}) had logged top-K µ mass > 1 "
                     "(mass overflow); their µ_tail was clamped to 0: check the engine's "
                     "logprobs mode and precision")
    if health["n_nonfinite"]:
        notes.append(f"{health['n_nonfinite']} tokens have a non-finite ratio, kl_topk or "
                     "tv_topk; they are never out of region")
    if info.kind == "replay" and health["recompute_deviation_max"] is None:
        notes.append("manifest.json records no recompute_deviation (replay π vs logged π)")
    if info.has_updates and unmeasured:
        notes.append(f"{unmeasured} kept disagreement tokens have no updates row for the mask "
                     "that kept them and are left out of the rates (was that mask among the "
                     "replay's update masks?)")
    return notes
