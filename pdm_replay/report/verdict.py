"""The report's verdict: a few plain sentences per comparison, from its own numbers.

Every format (:mod:`.render`: table, Markdown, JSON's ``verdicts[].verdict``, HTML) and the
dashboard's Overview open with these sentences. They are produced by these rules, and
only from the headline's rows (:mod:`.headline`) and the per-seed counts
(``seed_rates``), so every number a verdict states is a number of the report's tables:

1. **Unconfounded basis first.** The verdict rests on ``own`` (each mask under its own
   simulated update): each side's kept disagreement tokens are measured under the update
   that kept them. Without ``own`` rates it rests on ``none`` (every token kept: both
   sides' tokens trained on alike), or on ``actual`` when the trainer's mask is neither
   side of the pair.
2. **A basis with rates** is stated as ratio vs predictive pooled unsafe-keep rate, the
   kept disagreement tokens measured per side (Σ over seeds), and ratio − predictive with
   its sample-clustered bootstrap interval. The comparison is **resolved** when that
   interval excludes 0 (the lower side keeps fewer unsafe tokens); otherwise it is "no
   resolved difference".
3. **``actual`` is confounded** when the trainer's mask (manifest ``trainer_mask``) is one
   side of the pair: under the trainer's real step that side's kept disagreement tokens
   were trained on, and the other side's are tokens the trainer dropped (no gradient of
   their own), so the difference mixes the direction criterion with whether the token was
   trained on. It is stated after the unconfounded basis, labeled so, and never resolves
   the comparison.
4. **Seeds.** With independent seeds (disjoint samples) and at least
   :data:`~.legend.MIN_SEEDS` compared seeds, the sign-test and Wilcoxon p-values are
   quoted; with overlapping seeds: no p-values (the clustered interval stays valid); with
   fewer seeds: too few for a sign test to reach 0.05.
5. **When nothing is resolved**, the tokens per side that would resolve the paper's
   :data:`PAPER_DIFF` (2.7 pp) at :data:`POWER` power and the report's confidence, from
   the observed pooled rates p_r, p_p of the resting basis (two-proportion normal
   approximation): ``n = (z_{1−α/2} + z_{power})² · (p_r(1−p_r) + p_p(1−p_p)) / d²``.
   It treats tokens as independent; tokens of one sample are correlated, so it is a lower
   bound.
6. **A run without updates** (``masks`` output) has decisions and divergences but no ΔD:
   its verdict gives the counts and says that a replay measures the rest.

Examples
--------
>>> import polars as pl
>>> row = {"basis": "own", "pair": "a vs b", "delta": 0.15, "region": "kl > 0.15",
...        "ratio_mask": "a",
...        "predictive_mask": "b", "unsafe_ratio_pooled": 0.3, "unsafe_predictive_pooled": 0.28,
...        "unsafe_diff_pooled": 0.02, "ci_low": -0.01, "ci_high": 0.05,
...        "seeds_compared": 8, "seeds_independent": True, "sign_test_p": 0.7,
...        "wilcoxon_p": 0.5, "n_seeds": 8, "out_of_region_per_seed": 10.0,
...        "disagreement_per_seed": 4.0}
>>> counts = pl.DataFrame({"basis": ["own"], "pair": ["a vs b"], "delta": [0.15],
...                        "n_measured_ratio": [300], "n_measured_predictive": [280]})
>>> v = verdicts(pl.DataFrame([row]), counts, kind="replay")[0]
>>> v.resolved, v.basis, v.tokens_needed_per_side
(False, 'own', 4432)
>>> v.sentences[0]
'a vs b (out of region: kl > 0.15), each mask under its own update (unconfounded): unsafe keeps ratio 30.0% vs predictive 28.0% (300 / 280 kept disagreement tokens), ratio − predictive +2.0 pp, 95% CI [-1.0, +5.0]: the interval includes 0, no resolved difference.'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import polars as pl

from pdm_replay.names import ACTUAL, NONE, OWN
from pdm_replay.report.legend import MIN_SEEDS

# The paper's headline gap: seed-mean unsafe keeps 36.9% (ratio) vs 34.2% (predictive).
PAPER_DIFF = 0.027
POWER = 0.8  # the conventional power of a sample-size estimate
BASIS_WORDS = {OWN: "each mask under its own update",
               NONE: f"under `{NONE}` (every token kept)",
               ACTUAL: "under the trainer's actual update"}
NUMBER_KEYS = ("unsafe_ratio_pooled", "unsafe_predictive_pooled", "unsafe_diff_pooled",
               "ci_low", "ci_high", "seeds_compared", "seeds_independent", "sign_test_p",
               "wilcoxon_p")


@dataclass(frozen=True)
class Verdict:
    """One comparison's verdict: its ``sentences`` and the numbers they state
    (``numbers[basis]``: the headline row's :data:`NUMBER_KEYS` plus ``n_ratio`` /
    ``n_predictive``, kept disagreement tokens measured per side)."""

    pair: str
    delta: float
    sentences: tuple[str, ...]
    basis: str | None  # the basis the verdict rests on (rule 1); None: no rates
    resolved: bool
    confounded_side: str | None  # "ratio" | "predictive": the trainer's mask (rule 3)
    tokens_needed_per_side: int | None  # rule 5
    numbers: dict[str, dict[str, Any]] = field(default_factory=dict)
    step: int | None = None

    @property
    def text(self) -> str:
        return " ".join(self.sentences)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; ``verdict`` is the sentences as one paragraph."""
        out = {"pair": self.pair, "delta": self.delta, "verdict": self.text,
               "sentences": list(self.sentences), "basis": self.basis,
               "resolved": self.resolved, "confounded_side": self.confounded_side,
               "tokens_needed_per_side": self.tokens_needed_per_side,
               "paper_difference": PAPER_DIFF, "numbers": self.numbers}
        return out if self.step is None else {"step": self.step, **out}


def pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1%}"


def pp(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:+.1f}"


def tokens_needed(p_ratio: float, p_predictive: float, *, diff: float = PAPER_DIFF,
                  confidence: float = 0.95, power: float = POWER) -> int:
    """Rule 5: kept disagreement tokens per side to resolve ``diff`` (module docstring).

    >>> tokens_needed(0.369, 0.342)
    4930
    """
    z = NormalDist().inv_cdf
    var = p_ratio * (1 - p_ratio) + p_predictive * (1 - p_predictive)
    return math.ceil((z(1 - (1 - confidence) / 2) + z(power)) ** 2 * var / diff ** 2)


def _name(r: dict[str, Any]) -> str:
    """The pair and its out-of-region test (a band reads as a band, not as one δ)."""
    return f"{r['pair']} (out of region: {r['region']})"


def _has_rates(r: dict[str, Any]) -> bool:
    return r["unsafe_ratio_pooled"] is not None and r["unsafe_predictive_pooled"] is not None


def _excludes_zero(r: dict[str, Any]) -> bool:
    lo, hi = r["ci_low"], r["ci_high"]
    return lo is not None and hi is not None and (lo > 0 or hi < 0)


def _rate_sentence(r: dict[str, Any], n: dict[str, int], label: str,
                   confidence: float, *, judge: bool = True) -> str:
    """Rule 2: one basis's rates, difference and interval."""
    text = (f"{label}: unsafe keeps ratio "
            f"{pct(r['unsafe_ratio_pooled'])} vs predictive "
            f"{pct(r['unsafe_predictive_pooled'])} ({n['n_ratio']:,} / "
            f"{n['n_predictive']:,} kept disagreement tokens), ratio − predictive "
            f"{pp(r['unsafe_diff_pooled'])} pp, {confidence:.0%} CI [{pp(r['ci_low'])}, "
            f"{pp(r['ci_high'])}]")
    if not judge:
        return text + "."
    if _excludes_zero(r):
        lower = "predictive" if r["ci_low"] > 0 else "ratio"
        return text + f": the interval excludes 0, the {lower} mask keeps fewer unsafe tokens."
    return text + ": the interval includes 0, no resolved difference."


def _neither(trainer_mask: str | None) -> str:
    """An ``actual`` basis the trainer's mask is no side of (rule 3 does not apply)."""
    if trainer_mask is None:
        return " (the run does not record the trainer's mask)."
    return (f" (the trainer's mask {trainer_mask} is neither side; the tokens it dropped "
            "may still fall on either side).")


def _seed_sentence(r: dict[str, Any]) -> str:
    """Rule 4."""
    n = r["seeds_compared"] or 0
    if not r["seeds_independent"]:
        return ("The seeds share samples, so they are not independent: no p-values, only the "
                "sample-clustered interval.")
    if n < MIN_SEEDS:
        return (f"Only {n} compared seed{'s' * (n != 1)}: too few for a sign test to reach "
                f"0.05 (it needs ≥ {MIN_SEEDS}).")
    return (f"Over {n} independent seeds: sign test p = {r['sign_test_p']:.3g}, Wilcoxon p = "
            f"{r['wilcoxon_p']:.3g}.")


def _confounded_sentence(r: dict[str, Any], n: dict[str, int], side: str, mask: str,
                         confidence: float) -> str:
    """Rule 3."""
    other = "predictive" if side == "ratio" else "ratio"
    return (_rate_sentence(r, n, "under the trainer's actual update (confounded)", confidence,
                           judge=False)[:-1]
            + f". Confounded: the trainer's mask was {mask}, the {side} side, so the {side} "
            f"side's kept tokens were trained on and the {other} side's are tokens the "
            "trainer dropped; the difference mixes the direction criterion with whether a "
            "token was trained on, so it does not decide the comparison.")


def _power_sentence(r: dict[str, Any], n: dict[str, int], confidence: float) -> tuple[str, int]:
    """Rule 5: the sentence and the tokens per side."""
    need = tokens_needed(r["unsafe_ratio_pooled"], r["unsafe_predictive_pooled"],
                         confidence=confidence)
    have = min(n["n_ratio"], n["n_predictive"])
    scale = f", about {need / have:.0f}× as many" if have else ""
    return (f"To resolve the paper's {100 * PAPER_DIFF:.1f} pp at {POWER:.0%} power would "
            f"take about {need:,} kept disagreement tokens per side (this run: "
            f"{n['n_ratio']:,} / {n['n_predictive']:,}{scale}; from the observed rates, "
            "tokens taken as independent, so a lower bound)."), need


def _counts(seed_rates: pl.DataFrame, keys: list[str]) -> dict[tuple, dict[str, int]]:
    """Kept disagreement tokens measured per side, Σ over seeds, per (step,) basis, pair, δ."""
    if not seed_rates.height or "n_measured_ratio" not in seed_rates.columns:
        return {}
    sums = seed_rates.group_by(keys).agg(pl.col("n_measured_ratio").fill_null(0).sum(),
                                         pl.col("n_measured_predictive").fill_null(0).sum())
    return {tuple(r[k] for k in keys): {"n_ratio": int(r["n_measured_ratio"]),
                                        "n_predictive": int(r["n_measured_predictive"])}
            for r in sums.to_dicts()}


def _rest_basis(rows: dict[str, dict[str, Any]], confounded: str | None) -> str | None:
    """Rule 1: own, else none, else an unconfounded actual; the first with both rates."""
    for basis in (OWN, NONE, ACTUAL):
        if basis in rows and _has_rates(rows[basis]) and (basis != ACTUAL or not confounded):
            return basis
    return None


def _log_only(rows: dict[str, dict[str, Any]], kind: str) -> str:
    """Rule 6 (and a replay that measured no ΔD for this comparison)."""
    r = next(iter(rows.values()))
    why = ("this is `masks` output: it has every decision and divergence but no ΔD"
           if kind == "masks" else "no update measured ΔD for this comparison")
    counts = (f"{r['out_of_region_per_seed']:,.0f} tokens out of region and "
              f"{r['disagreement_per_seed']:,.0f} disagreement tokens in the log"
              if kind == "masks" else
              f"{r['out_of_region_per_seed']:,.1f} tokens out of region and "
              f"{r['disagreement_per_seed']:,.1f} disagreement tokens per seed")
    return (f"{_name(r)}: {counts}; "
            f"{why}, so no unsafe-keep rate: run `pdm-replay replay` with the training "
            "checkpoint to measure which mask keeps fewer unsafe tokens.")


def comparison_verdict(rows: dict[str, dict[str, Any]], counts: dict[str, dict[str, int]],
                       *, kind: str, trainer_mask: str | None = None,
                       confidence: float = 0.95) -> Verdict:
    """The :class:`Verdict` of one comparison from its headline ``rows`` (by basis) and
    ``counts`` (by basis: ``n_ratio`` / ``n_predictive``), by the module's rules."""
    first = next(iter(rows.values()))
    side = ("ratio" if trainer_mask == first["ratio_mask"] else "predictive"
            if trainer_mask == first["predictive_mask"] else None)
    rest = _rest_basis(rows, side)
    zero = {"n_ratio": 0, "n_predictive": 0}
    rated = [b for b in (OWN, ACTUAL, NONE) if b in rows and _has_rates(rows[b])]
    numbers = {b: {**{k: rows[b][k] for k in NUMBER_KEYS}, **counts.get(b, zero)}
               for b in rated}
    base = dict(pair=first["pair"], delta=first["delta"], confounded_side=side,
                numbers=numbers, step=first.get("step"))
    if not rated:
        return Verdict(sentences=(_log_only(rows, kind),), basis=None, resolved=False,
                       tokens_needed_per_side=None, **base)
    out, need = [], None
    resolved = rest is not None and _excludes_zero(rows[rest])
    if rest is not None:
        label = BASIS_WORDS[rest] + " (unconfounded)"
        out += [_name(first) + ", " + _rate_sentence(rows[rest], numbers[rest], label,
                                                     confidence),
                _seed_sentence(rows[rest])]
    if rest is not None and not resolved:
        text, need = _power_sentence(rows[rest], numbers[rest], confidence)
        out.append(text)
    if ACTUAL in rated and rest != ACTUAL:
        text = (_confounded_sentence(rows[ACTUAL], numbers[ACTUAL], side,
                                     trainer_mask or "", confidence) if side else
                _rate_sentence(rows[ACTUAL], numbers[ACTUAL], BASIS_WORDS[ACTUAL],
                               confidence, judge=False)[:-1] + _neither(trainer_mask))
        out.append(text[0].upper() + text[1:] if rest is not None else _name(first) + ", "
                   + text)
    if rest is None:
        out += ["No unconfounded basis has rates (replay both masks with --update-masks).",
                _seed_sentence(rows[ACTUAL])]
    return Verdict(sentences=tuple(out), basis=rest, resolved=resolved,
                   tokens_needed_per_side=need, **base)


def verdicts(headline: pl.DataFrame, seed_rates: pl.DataFrame, *, kind: str,
             trainer_mask: str | None = None, confidence: float = 0.95) -> list[Verdict]:
    """One :class:`Verdict` per comparison of ``headline`` (per step too, when it has a
    ``step`` column), in its order; ``trainer_mask``: the manifest's ``trainer_mask``."""
    step = ["step"] if "step" in headline.columns else []
    counts = _counts(seed_rates, [*step, "basis", "pair", "delta"])
    groups: dict[tuple, dict[str, dict[str, Any]]] = {}
    for r in headline.to_dicts():
        groups.setdefault(tuple(r[k] for k in (*step, "pair", "delta")), {})[r["basis"]] = r
    out = []
    for key, rows in groups.items():
        mine = {b: counts[(*key[:-2], b, *key[-2:])] for b in rows
                if (*key[:-2], b, *key[-2:]) in counts}
        out.append(comparison_verdict(rows, mine, kind=kind, trainer_mask=trainer_mask,
                                      confidence=confidence))
    return out


def trainer_mask_of(manifest: dict[str, Any] | None) -> str | None:
    """The mask the trainer used (manifest ``trainer_mask.mask``), if the run records it."""
    trainer = (manifest or {}).get("trainer_mask")
    return trainer.get("mask") if isinstance(trainer, dict) else None
