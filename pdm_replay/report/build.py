"""Assemble every report of a run into one :class:`Report` (what ``pdm-replay report`` prints).

Examples
--------
>>> from pdm_replay.testing.synthetic_run import example_run
>>> from pdm_replay.report.db import connect
>>> with connect(example_run()) as db:
...     report = build_report(db)
>>> d = report.to_dict()
>>> sorted(d["headline"][0])[:4]
['basis', 'bootstrap_clusters', 'bootstrap_resamples', 'ci_high']
>>> d["kind"], d["thresholds"]["delta_kl"]
('replay', 0.15)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from pdm_replay.masks import FLAGGED_THRESHOLDS, MASK_SPECS, mask_pairs
from pdm_replay.report import api
from pdm_replay.report.attribution_report import ATTRIBUTION_NOTE, attribution_split
from pdm_replay.report.certificate_report import certificate_summary
from pdm_replay.report.db import DEFAULT_MEMORY_LIMIT, ReportDB
from pdm_replay.names import REPORT_FORMATS as FORMATS
from pdm_replay.report.headline import threshold_comparison
from pdm_replay.report.legend import (Coverage, ReportWarning, legend, report_warnings,
                                      run_coverage)
from pdm_replay.report.masks_output import whole_run
from pdm_replay.names import ACTUAL, NONE, OWN
from pdm_replay.report.section_catalog import SECTIONS as REGISTERED
from pdm_replay.report.section_catalog import ordered
from pdm_replay.report.run_info import RunInfo
from pdm_replay.report.verdict import Verdict, trainer_mask_of, verdicts

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
    delta_kl: float | None = None  # re-threshold the direction analysis (report time)
    delta_tv: float | None = None
    by: str | None = None  # "step": every section per logged step
    wide: bool = False  # table format: every column, not the 100-column selection

    def thresholds(self) -> dict[str, float]:
        """The report-time thresholds given (``delta_kl`` / ``delta_tv``)."""
        return {k: v for k, v in (("delta_kl", self.delta_kl), ("delta_tv", self.delta_tv))
                if v is not None}


# (attribute, title) of every core table section, in print order; the registered report
# sections (report.sections, report.section_catalog) are printed among them: section_keys
SECTIONS = (
    ("headline", "Direction analysis (SPEC §6): ratio vs predictive masks, per update "
                 f"basis ({ACTUAL} = the trainer's real step; {OWN} = each mask's own "
                 f"simulated update; {NONE} = the simulated update with every token kept)"),
    ("threshold_comparison", "Threshold comparison (the paper's δ study): every δ side by "
                             "side"),
    ("seed_rates", "Unsafe-keep and corrective rates per seed"),
    ("seed_wins", "Seed outcomes: predictive lower (win) / higher (loss) / equal (tie) "
                  "unsafe-keep rate than ratio, or a side with nothing kept (empty)"),
    ("sign_accuracy", "Sign accuracy of each direction predictor vs sign(ΔD) under the "
                      "single updates (`actual`, `none`)"),
    ("estimator_accuracy", "Top-K slope estimators vs exact (exact = vs reloaded µ, the "
                           "behavior checkpoint, not the logged µ)"),
    ("behavior_fidelity", "µ fidelity: logged vs reloaded behavior log-probs"),
    ("certificates", "Sign certificates (KL): decisions the logged support alone settles"),
    ("attribution", "Why direction predictions failed: first-order attribution of ΔD_kl "
                    "(updates `actual` and `none`)"),
    ("whole_run", "Whole run (summary.parquet, every token): each mask's kept tokens, "
                  "each ratio/predictive pair's out-of-region and disagreement tokens"),
    ("mask_summary", "Mask summary"),
    ("log_health", "Log health"),
)
HIDDEN_WHEN_EMPTY = ("threshold_comparison", "whole_run")


def section_keys() -> list[str]:
    """Every section's key in print order: the core ones and the registered report
    sections, each after the section its spec names."""
    return ordered((key for key, _ in SECTIONS), REGISTERED.values())


def section_title(key: str) -> str:
    """The heading of the section ``key`` (core, or its registered spec's title)."""
    return dict(SECTIONS).get(key) or REGISTERED[key].title


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
    behavior_fidelity: pl.DataFrame = field(default_factory=pl.DataFrame)
    threshold_comparison: pl.DataFrame = field(default_factory=pl.DataFrame)  # sweeps only
    by: str | None = None  # "step" when every frame has a leading step column
    coverage: Coverage | None = None  # report.legend: what the numbers cover
    warnings: tuple[ReportWarning, ...] = ()  # report.legend: what to distrust
    section_notes: dict[str, str] = field(default_factory=dict)  # key -> why cells are empty
    verdicts: tuple[Verdict, ...] = ()  # report.verdict: what the run shows, first
    whole_run: pl.DataFrame = field(default_factory=pl.DataFrame)  # masks --engine ray only
    # each registered report section's frame (report.sections), by its name
    section_frames: dict[str, pl.DataFrame] = field(default_factory=dict)

    def __getattr__(self, name: str) -> pl.DataFrame:
        """A registered section's frame as an attribute (``report.mask_comparison``)."""
        frames = self.__dict__.get("section_frames", {})
        if name in frames:
            return frames[name]
        if name in REGISTERED:
            return pl.DataFrame()
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def sections(self) -> list[tuple[str, str, pl.DataFrame]]:
        """``(key, title, frame)`` of every table, in print order (the threshold comparison
        only when some comparison was analyzed at several δ)."""
        shown = []
        for key in section_keys():
            frame = getattr(self, key)
            hidden = (key in HIDDEN_WHEN_EMPTY
                      or (key in REGISTERED and REGISTERED[key].hide_empty))
            if frame.height or not hidden:
                shown.append((key, section_title(key), frame))
        return shown

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: run description, every table as a list of rows, notes."""
        out: dict[str, Any] = {"source": str(self.info.source), "kind": self.info.kind,
                               "thresholds": asdict(self.info.thresholds),
                               "thresholds_source": self.info.thresholds_source,
                               "masks": list(self.info.masks),
                               "verdicts": [v.to_dict() for v in self.verdicts]}
        for key, _, frame in self.sections():
            rows = [_clean(r) for r in frame.to_dicts()]
            out[key] = rows[0] if key == "log_health" and self.by is None and rows else rows
        out["confidence"] = self.confidence
        out["by"] = self.by
        out["legend"] = dict(legend())
        out["coverage"] = asdict(self.coverage) if self.coverage else None
        out["warnings"] = [asdict(w) for w in self.warnings]
        out["section_notes"] = dict(self.section_notes)
        out["notes"] = list(self.notes)
        return out


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    """NaN -> None, so the JSON is strict."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


def build_report(db: ReportDB, *, bootstrap_samples: int = 2000, confidence: float = 0.95,
                 bootstrap_seed: int = 0) -> Report:
    """Run every report query on ``db``; bootstrap settings go to :func:`api.headline`."""
    db.cache_disagreements()
    health = api.log_health(db)
    by_seed = api.alignment_by_seed(db)
    own = by_seed.filter(pl.col("basis") == OWN)
    unmeasured = int((own["n_kept"] - own["n_measured"]).sum()) if own.height else 0
    split = _attribution(db)
    extra = (ATTRIBUTION_NOTE,) if db.info.has_updates and not split.height else ()
    head = api.headline(db, n_resamples=bootstrap_samples, confidence=confidence,
                        rng_seed=bootstrap_seed)
    notes = (*_notes(db.info, health.row(0, named=True), unmeasured),
             *basis_notes(db), *extra)
    rates, fidelity, coverage = api.seed_rates(db), api.behavior_fidelity(db), run_coverage(db)
    frames, why = section_frames(db)
    return Report(info=db.info, headline=head, seed_rates=rates,
                  seed_wins=api.seed_wins_of(head), sign_accuracy=api.sign_accuracy(db),
                  estimator_accuracy=api.estimator_accuracy(db),
                  mask_summary=api.mask_summary(db), log_health=health, notes=notes,
                  confidence=confidence, attribution=split,
                  certificates=certificate_summary(db), behavior_fidelity=fidelity,
                  threshold_comparison=threshold_comparison(head), coverage=coverage,
                  warnings=tuple(report_warnings(db, rates, head, fidelity, coverage)),
                  section_frames=frames, section_notes=why, verdicts=tuple(verdicts(
                      head, rates, kind=db.info.kind, confidence=confidence,
                      trainer_mask=trainer_mask_of(db.info.manifest))),
                  whole_run=_whole_run(db))


def section_frames(db: ReportDB) -> tuple[dict[str, pl.DataFrame], dict[str, str]]:
    """Every registered report section's frame on ``db``, and the notes on why some of
    their cells are empty, by section name."""
    frames, notes = {}, {}
    for spec in REGISTERED.values():
        frames[spec.name] = spec.compute(db)
        why = spec.why_empty(frames[spec.name], db)
        if why:
            notes[spec.name] = why
    return frames, notes


def _whole_run(db: ReportDB) -> pl.DataFrame:
    """The summary's counts (of the connection's step under ``--by step``), where the
    run has a ``summary.parquet``."""
    if db.info.summary is None:
        return pl.DataFrame()
    return whole_run(db.info.summary, db.named("report_step")["step"][0])


def _attribution(db: ReportDB) -> pl.DataFrame:
    """The attribution split under the single updates, the trainer's real step first."""
    splits = [attribution_split(db, update_mask=b) for b in db.layout.bases
              if b in (ACTUAL, NONE)]
    found = [s for s in splits if s.height]
    return pl.concat(found) if found else attribution_split(db)


def basis_notes(db: ReportDB) -> list[str]:
    """Which updates the numbers use and comparisons whose own updates were not simulated
    at the threshold analyzed (overlapping seeds are a :mod:`.legend` warning)."""
    info, layout = db.info, db.layout
    notes = []
    trainer = (info.manifest or {}).get("trainer_mask")
    if ACTUAL in layout.bases:
        notes.append(f"basis {ACTUAL}: ΔD after the trainer's real step (replay --next-checkpoint)"
                     "; each mask's kept tokens are its own decisions on π_pre"
                     + (f"; the trainer used {trainer['mask']}" if trainer else ""))
    for c in layout.comparisons:
        if info.has_updates and not c.own_measured:
            notes.append(f"{c.pair} at δ = {c.delta:g} ({c.region}): no own-update rates, "
                         f"the replay did not simulate both {c.ratio_mask} and "
                         f"{c.predictive_mask} at this δ (replay them with --update-masks "
                         f"and {threshold_option(c.field, c.delta)}); the `{ACTUAL}` and "
                         f"`{NONE}` rates are computed from the stored columns at this δ")
    return [*notes, *layout.notes]


def threshold_option(field: str, value: float) -> str:
    """The replay option that sets Thresholds ``field`` (:data:`masks.FLAGGED_THRESHOLDS`
    have a flag of their own, every other is ``--mask-param FIELD=VALUE``).

    >>> threshold_option("delta_kl", 0.2), threshold_option("icepop_low", 0.5)
    ('--delta-kl 0.2', '--mask-param icepop_low=0.5')
    """
    if field in FLAGGED_THRESHOLDS:
        return f"--{field.replace('_', '-')} {value:g}"
    return f"--mask-param {field}={value:g}"


def _notes(info: RunInfo, health: dict[str, Any], unmeasured: int) -> list[str]:
    """What the report could not show, and why; data-quality warnings."""
    notes = list(info.notes)
    if not info.has_updates:
        notes.append(f"{info.source}: no simulated update (updates/v1), so unsafe-keep and "
                     "corrective rates, sign accuracy and seed wins are empty; out-of-region "
                     f"and disagreement counts are shown. To get them, {REPLAY_HINT}")
    for pair in mask_pairs(list(MASK_SPECS)):
        missing = [f"keep_{m}" for m in (pair.base, pair.other) if m not in info.masks]
        if pair.family is not None and missing:
            notes.append(f"no {pair.label} comparison ({pair.family}/{pair.estimator}): "
                         f"the run lacks {', '.join(missing)}")
    if not info.has_exact:
        notes.append("estimator accuracy needs kl_exact/dkl_exact: a replay with a behavior "
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


def combine_by_step(reports: dict[int, Report]) -> Report:
    """One report of per-step reports: every frame gains a leading ``step`` column, notes
    are prefixed by their step (run-wide notes once)."""
    first = next(iter(reports.values()))
    frames = {key: _by_step(reports, key) for key in section_keys()}
    registered = {key: frames.pop(key) for key in list(frames) if key in REGISTERED}
    shared = set.intersection(*(set(r.notes) for r in reports.values()))
    notes = [n for n in first.notes if n in shared] + [
        f"step {step}: {n}" for step, r in reports.items() for n in r.notes if n not in shared]
    warned = [w for w in first.warnings if all(w in r.warnings for r in reports.values())]
    warned += [ReportWarning(w.code, f"step {step}: {w.message}") for step, r in reports.items()
               for w in r.warnings if w not in warned]
    return Report(info=first.info, notes=tuple(notes), confidence=first.confidence,
                  by="step", warnings=tuple(warned), section_notes=first.section_notes,
                  verdicts=tuple(dataclasses.replace(v, step=step) for step, r in
                                 reports.items() for v in r.verdicts),
                  section_frames=registered, **frames)


def _by_step(reports: dict[int, Report], key: str) -> pl.DataFrame:
    """Section ``key`` of every per-step report under a leading ``step`` column."""
    parts = [getattr(r, key).with_columns(pl.lit(step, pl.Int64).alias("step"))
             .select("step", pl.exclude("step"))
             for step, r in reports.items() if getattr(r, key).width]
    return pl.concat(parts, how="diagonal_relaxed") if parts else pl.DataFrame()
