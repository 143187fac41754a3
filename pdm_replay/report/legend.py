"""What the report's numbers mean, what data they cover, and what to distrust.

The one place the report's terms are defined: every format (:mod:`.render`: table,
Markdown, JSON, HTML) and the dashboard print :func:`legend` (the core terms and each
report section's, :mod:`.sections`), a :class:`Coverage` line
(samples and tokens replayed out of the log's, seeds, the update each number uses) and the
:class:`ReportWarning` list of :func:`report_warnings` (too few tokens or seeds to compare,
overlapping seeds, µ mismatch, partial runs). JSON carries the same as fields.

Examples
--------
>>> from pdm_replay.testing.synthetic_run import example_run
>>> from pdm_replay.report.db import connect
>>> with connect(example_run()) as db:
...     c = run_coverage(db)
>>> c.n_samples, c.n_seeds, c.bases
(96, 3, ('own', 'none'))
>>> coverage_line(c).split(" (")[0]
'replay: 96 samples, 6,000 tokens over 3 seeds'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from pdm_replay.names import ACTUAL, NONE, OWN
from pdm_replay.report.db import ReportDB
from pdm_replay.report.section_catalog import legend_terms

# (key, text): one line per quantity, the paper's name in quotes where it has one; the
# registered report sections' terms (report.sections) follow the rates' terms: legend()
CORE_LEGEND: tuple[tuple[str, str], ...] = (
    ("out of region", "tokens outside the trust region (top-K KL/TV > δ, SPEC §3); only "
                      "they can be masked by a divergence mask"),
    ("disagreement", "an out-of-region token the ratio and the predictive mask decide "
                     "differently (one keeps it, the other drops it)"),
    ("unsafe keep", "the paper's \"unsafe keep\": a kept disagreement token whose divergence "
                    "grew under the update (ΔD > 0); lower is better"),
    ("corrective keep", "the paper's \"corrective keep\": a kept disagreement token whose "
                        "divergence shrank (ΔD ≤ 0); equals 100% − unsafe keep"),
    ("pooled", "Σ unsafe / Σ kept over every seed: every token weighs the same"),
    ("seed mean", "the mean of the per-seed rates: every seed weighs the same (how the "
                  "paper's 34.2% / 36.9% read)"),
    ("win / loss / tie / empty", "per seed: predictive unsafe-keep rate lower (win), higher "
                                 "(loss), equal (tie) than ratio, or a mask kept no "
                                 "disagreement token (empty: counted, never dropped)"),
    (f"basis {ACTUAL}", "ΔD after the trainer's real step (replay --next-checkpoint)"),
    (f"basis {OWN}", "ΔD after each mask's own simulated one-step update"),
    (f"basis {NONE}", f"ΔD after the simulated one-step update of `{NONE}` (every token "
                     "kept)"),
    ("interval", "percentile bootstrap of ratio − predictive unsafe keep that resamples "
                 "samples (all their tokens together), B draws"),
    ("p-values", "sign test (wins vs losses) and Wilcoxon signed-rank (per-seed "
                 "differences), two-sided, over compared seeds; only when seeds are "
                 "independent"),
    ("verdict", "the plain sentences the report opens with, one paragraph per comparison, "
                "written by the rules of pdm_replay/report/verdict.py from these tables"),
    ("agg / uniform", "the two top-K estimators of the slope Ḋ (SPEC §4): agg treats the "
                      "unlogged tail as one atom (π_tail, µ_tail); uniform spreads it over "
                      "the n − m unlogged tokens. exact: the full-vocabulary Ḋ from the "
                      "reloaded behavior model"),
    ("sign accuracy", "the share of tokens whose predicted direction sign(Â)·(r − 1) (ratio) "
                      "or sign(Â)·Ḋ (predictive agg / uniform / exact) equals sign(ΔD) under "
                      "the update; a zero on either side counts as a miss"),
    ("away / toward / uncertain", "sign certificates: the logged support bounds the "
                                  "full-vocabulary Ḋ_kl in [dkl_lo, dkl_hi]; away (toward): "
                                  "sign(Â)·Ḋ > 0 (< 0) over the whole interval, whatever the "
                                  "tail held; uncertain: the interval straddles 0"),
    ("n_tokens / n_seeds", "log health: loss tokens read, and seeds (masks output: the whole "
                           "log is one)"),
    ("n_mass_overflow / mass_overflow_fraction", "log health: tokens whose logged top-K µ mass "
                                                 "exceeds 1 (µ_tail clamped to 0), count and "
                                                 "share"),
    ("n_nonfinite", "log health: tokens with a non-finite ratio, kl_topk or tv_topk (never "
                    "out of region)"),
    ("n_zero_advantage", "log health: tokens with Â = 0 (every mask keeps them; no direction)"),
    ("n_exact", "log health: tokens with the exact full-vocabulary columns "
                "(--behavior-checkpoint)"),
    ("n_update_rows", "log health: updates/v1 rows (one per token and simulated update)"),
    ("recompute_deviation_max / recompute_deviation_mean",
     "log health: max and mean |Δ log π(k)| between the replay's recomputed π and the log's "
     "train_logprobs (nats; a mean above 0.05: a warning)"),
    ("kind / has_updates / thresholds_source", "log health: replay or masks output, whether "
                                               "ΔD was measured, where the thresholds were "
                                               "read from"),
)
RATES_END = "p-values"  # the last term of the rates; the report sections' terms follow


def legend() -> tuple[tuple[str, str], ...]:
    """Every legend line: the core terms, the registered report sections' after the
    rates' (:data:`RATES_END`)."""
    at = [term for term, _ in CORE_LEGEND].index(RATES_END) + 1
    return (*CORE_LEGEND[:at], *legend_terms(), *CORE_LEGEND[at:])


LEGEND = legend()  # the built-in sections' (a section registered later: legend())
LEGEND_TEXT = dict(LEGEND)

# A rate over n tokens has standard error √(p(1−p)/n): 9.1 pp at p = 0.5 and n = 30, larger
# than the differences between masks the paper reports, so fewer tokens cannot rank them.
MIN_TOKENS = 30
# The smallest two-sided sign-test p over n seeds is 2·0.5ⁿ: 0.0625 at n = 5, 0.031 at 6.
MIN_SEEDS = 6
# One rounding of the logged log-prob explains any gap up to u·|log µ|; more than 1% of
# tokens beyond it means the reloaded behavior model is not the engine's.
MIN_WITHIN_ROUNDING = 0.99

# Mean |Δ log π(k)| (nats) between the replay's recomputed π and the log's train_logprobs
# above which the checkpoint is not the policy that scored the log: a float32 recompute of
# the same policy differs by ~1e-6 (the shipped sample: mean 5e-7, max 4e-5), a wrong step
# or temperature by tenths of a nat.
DEVIATION_WARN = 0.05

BASIS_LINE = {ACTUAL: f"{ACTUAL} (the trainer's real step)",
              OWN: f"{OWN} (each mask's own simulated update)",
              NONE: f"{NONE} (every token kept)"}


@dataclass(frozen=True)
class Coverage:
    """What the report's numbers are computed over."""

    kind: str  # "replay" | "masks"
    n_samples: int  # samples in the tokens
    n_tokens: int
    n_seeds: int
    log_samples: int | None  # samples in the rollout log (manifest log_rows), if known
    status: str | None  # manifest status ("complete", "running", "failed")
    bases: tuple[str, ...]  # the updates ΔD is measured under, print order
    own_updates: tuple[str, ...]  # the simulated updates the `own` basis reads


@dataclass(frozen=True)
class ReportWarning:
    """One data-quality warning: a stable ``code`` and the sentence shown."""

    code: str  # few_tokens | few_seeds | seeds_overlap | behavior_mismatch | partial_run
    #            | recompute_mismatch | no_updates
    message: str
    threshold: float | None = None  # the limit crossed (MIN_TOKENS, ...), where there is one


def run_coverage(db: ReportDB, *, health: pl.DataFrame | None = None,
                 by_seed: pl.DataFrame | None = None) -> Coverage:
    """The :class:`Coverage` of ``db``'s run; ``health`` (``log_health``) and ``by_seed``
    (``alignment_by_seed``) are read from ``db`` unless a caller that has them passes them."""
    health_row = (db.named("log_health") if health is None else health).row(0, named=True)
    manifest = db.info.manifest or {}
    heads = db.named("alignment_by_seed") if by_seed is None else by_seed
    own = sorted({u for u in heads.filter(pl.col("basis") == OWN)["update_mask"].to_list()
                  if u is not None}) if heads.height else []
    log_rows = manifest.get("log_rows")
    return Coverage(kind=db.info.kind, n_samples=int(db.named("n_samples")["n"][0]),
                    n_tokens=int(health_row["n_tokens"]),
                    n_seeds=int(health_row["n_seeds"] or 0),
                    log_samples=int(log_rows) if log_rows is not None else None,
                    status=manifest.get("status"),
                    bases=tuple(b for b in (ACTUAL, OWN, NONE)
                                if b in set(heads["basis"].to_list())) if heads.height else (),
                    own_updates=tuple(own))


def coverage_line(c: Coverage) -> str:
    """One sentence: what was replayed out of the log, and which update each number uses."""
    of_log = (f" of the log's {c.log_samples:,}" if c.log_samples is not None
              else " (the whole log)" if c.kind == "masks" else "")
    text = (f"{c.kind}: {c.n_samples:,} samples{of_log}, {c.n_tokens:,} tokens over "
            f"{c.n_seeds} seed{'s' * (c.n_seeds != 1)}"
            + (" (`masks` output has no seeds: the whole log is one)" if c.kind == "masks"
               else ""))
    if c.kind == "replay" and c.log_samples is None:
        text += " (the manifest does not record the log's size)"
    text += ("; out-of-region and disagreement counts need no update (π before the step)")
    if c.bases and c.kind == "replay":
        used = [BASIS_LINE[b] + (f": {', '.join(c.own_updates)}" if b == OWN
                                 and c.own_updates else "") for b in c.bases]
        text += "; ΔD and every rate under " + ", ".join(used)
    return text


def report_warnings(db: ReportDB, seed_rates: pl.DataFrame, headline: pl.DataFrame,
                    behavior_fidelity: pl.DataFrame, coverage: Coverage) -> list[ReportWarning]:
    """Every warning of the run, in the order: partial run, overlap, µ, tokens, seeds."""
    out = _partial(coverage)
    if coverage.kind == "replay" and not db.seeds_independent():
        shared = db.shared_samples() or (db.info.manifest or {}).get(
            "seed_overlap", {}).get("samples_in_several_seeds")
        out.append(ReportWarning("seeds_overlap", (
            f"seeds overlap: {shared} samples are in several seeds (replay --allow-overlap, "
            "or a replay from before disjoint seeds), so seeds are not independent: "
            "sign-test and Wilcoxon p-values are not shown; the intervals resample samples "
            "(clustered), which stays valid")))
    out += _recompute(db.info.recompute_deviation) + _behavior(behavior_fidelity)
    if coverage.kind == "masks":
        return out + [ReportWarning("no_updates", (
            "this is `pdm-replay masks` output: it has every mask's decisions and the "
            "divergences, but no ΔD (no simulated update), so no unsafe-keep rate, seed "
            "outcome or p-value; run `pdm-replay replay` on the log with the training "
            "checkpoint to measure them"))]
    return out + _few_tokens(seed_rates) + _few_seeds(headline)


def _recompute(dev: dict[str, Any] | None) -> list[ReportWarning]:
    """The replay's recomputed π vs the log's train log-probs (manifest
    ``recompute_deviation``), beyond :data:`DEVIATION_WARN`."""
    if not dev or dev.get("mean") is None or dev["mean"] <= DEVIATION_WARN:
        return []
    tokens = f" over {dev['tokens']:,} tokens" if dev.get("tokens") else ""
    return [ReportWarning("recompute_mismatch", (
        f"the replay's recomputed π does not reproduce the log's train_logprobs: mean "
        f"|Δ log π(k)| {dev['mean']:.3g} nats, max {dev['max']:.3g}{tokens} (expected ≤ "
        f"{DEVIATION_WARN}): the checkpoint is not the policy that scored this log (step, "
        "temperature or dtype), so ΔD and every rate are measured from another policy"),
        DEVIATION_WARN)]


def _partial(c: Coverage) -> list[ReportWarning]:
    out = []
    if c.status not in (None, "complete"):
        out.append(ReportWarning("partial_run", (
            f"the replay's manifest says status {c.status}: only finished seeds are "
            "reported; continue it with `pdm-replay replay ... --resume`")))
    if c.log_samples and c.n_samples < c.log_samples:
        out.append(ReportWarning("partial_run", (
            f"the replay covers {c.n_samples:,} of the log's {c.log_samples:,} samples "
            f"({c.n_samples / c.log_samples:.0%}): counts differ from `pdm-replay masks` on "
            "the whole log; more --seeds or a larger --batch-size cover more")))
    return out


def _behavior(fidelity: pl.DataFrame) -> list[ReportWarning]:
    rows = fidelity.filter(pl.col("scope") == "all") if "scope" in fidelity.columns else fidelity
    if not rows.height or rows["within_one_rounding"][0] is None:
        return []
    share = float(rows["within_one_rounding"][0])
    if share >= MIN_WITHIN_ROUNDING:
        return []
    return [ReportWarning("behavior_mismatch", (
        f"µ mismatch: only {share:.1%} of tokens' logged µ are within one rounding of the "
        f"reloaded behavior model (expected ≥ {MIN_WITHIN_ROUNDING:.0%}): the behavior "
        "checkpoint or --behavior-dtype is not what the engine ran; estimator accuracy is "
        "measured against the reloaded µ"), MIN_WITHIN_ROUNDING)]


def _few_tokens(seed_rates: pl.DataFrame) -> list[ReportWarning]:
    if not seed_rates.height or "n_measured_ratio" not in seed_rates.columns:
        return []
    keys = [k for k in ("step", "basis", "pair", "delta") if k in seed_rates.columns]
    sums = seed_rates.group_by(keys, maintain_order=True).agg(
        pl.col("n_measured_ratio").sum(), pl.col("n_measured_predictive").sum())
    small = sums.filter(pl.min_horizontal("n_measured_ratio", "n_measured_predictive")
                        < MIN_TOKENS)
    if not small.height:
        return []
    names = ", ".join(_key(r) + f" ({r['n_measured_ratio']} / {r['n_measured_predictive']})"
                      for r in small.to_dicts())
    return [ReportWarning("few_tokens", (
        f"too few tokens to compare: fewer than {MIN_TOKENS} kept disagreement tokens "
        f"(ratio / predictive, all seeds) in {names}; a rate over n tokens has standard "
        f"error √(p(1−p)/n), 9 pp at n = {MIN_TOKENS}, so these rates cannot rank the "
        "masks: replay more --seeds or a larger --batch-size"), MIN_TOKENS)]


def _few_seeds(headline: pl.DataFrame) -> list[ReportWarning]:
    if not headline.height or "seeds_compared" not in headline.columns:
        return []
    rated = headline.filter(pl.col("unsafe_ratio_pooled").is_not_null()
                            | pl.col("unsafe_predictive_pooled").is_not_null())
    n = rated["seeds_compared"].max() if rated.height else None
    if n is None or n >= MIN_SEEDS:
        return []
    return [ReportWarning("few_seeds", (
        f"at most {n} compared seed{'s' * (n != 1)}: the two-sided sign test cannot go "
        f"below 2·0.5^n = {2 * 0.5 ** n:.3g} (it needs ≥ {MIN_SEEDS} seeds to reach 0.05); "
        "replay more --seeds"), MIN_SEEDS)]


def _key(r: dict[str, Any]) -> str:
    step = f"step {r['step']} " if "step" in r else ""
    return f"{step}{r['basis']} {r['pair']} δ = {r['delta']:g}"
